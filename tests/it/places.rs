//! `pd_stitch::places::all()`, the one table of where rows sit, walked: for
//! each place that holds rows, a pair is built from the place itself, by
//! its kind (inline rows at its holder and key, a payload at its holder and
//! key, SGLang's rows with their counts where the table puts them), so that
//! a place added to the table is walked with no line here. Each pair goes
//! through every path that finds, reads, checks or locates rows: a router's
//! first question (whether the prefill has rows, both paths), the `Value`
//! merge, the bytes merge (whose scanner must record the place), the stream
//! (whose prefilter and slots must find it), and the verifiers (`gather`'s
//! one reader and `gather_from`, `check`, `compare`), which must read the
//! rows where the table puts them. `scripts/new_format.sh` adds a format at
//! a new key and runs this walk.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::compare::{compare, Options};
use pd_stitch::gather::{check_with, choice_rows, gather_from, Store};
use pd_stitch::places::{self, Holder, Holds, Place, RowsKind};
use pd_stitch::stream::StreamStitcher;
use pd_stitch::{Stitch, Stitcher, ROUTED_EXPERTS};
use serde_json::{json, Value};

/// A pair at one place, its merge, and the rows each reader must read.
struct Walk {
    prefill: Value,
    decode: Value,
    merged: Value,
    /// The merged response's rows: the first position, and each row's
    /// bytes in position order.
    merged_rows: (u64, Vec<Vec<u8>>),
    /// The decode's rows, the same way.
    decode_rows: (u64, Vec<Vec<u8>>),
    /// Where rows by handle are read from.
    store: Store,
}

/// `{"choices": [{"index": 0}]}`, a response of one choice and no rows.
fn response() -> Value {
    json!({"choices": [{"index": 0}]})
}

/// Sets `value` at `key` of the object `holder` names in `response`
/// (its first choice, an object of it, or an object of the response).
fn put(response: &mut Value, holder: Holder, key: &str, value: Value) {
    let object = match holder {
        Holder::Choice => &mut response["choices"][0],
        Holder::ChoiceMember(member) => &mut response["choices"][0][member],
        Holder::Member(member) => &mut response[member],
    };
    object[key] = value;
}

/// A response with `value` at `place`.
fn with(place: &Place, value: Value) -> Value {
    let mut out = response();
    put(&mut out, place.holder, place.key, value);
    out
}

/// Inline compact rows of `1 x 3` bytes each, from position 0.
fn compact(rows: &[[u8; 3]]) -> Value {
    let bytes: Vec<u8> = rows.concat();
    json!({"data": STANDARD.encode(bytes), "shape": [rows.len(), 1, 3], "start": 0,
        "dtype": "uint8"})
}

/// SGLang's ids as it writes them: base64 of little-endian int32.
fn ids(ids: &[i32]) -> Value {
    STANDARD
        .encode(ids.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>())
        .into()
}

/// The pair at `place`, built from its kind and where it sits.
fn walk(place: &Place) -> Walk {
    let Holds::Rows(kind) = place.holds else {
        panic!("{place:?} holds no rows");
    };
    let rows = |rows: &[[u8; 3]]| rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
    match kind {
        // Inline rows: the decode answers from 0, its first row not the
        // one a stitched response holds.
        RowsKind::Inline => Walk {
            prefill: with(place, compact(&[[1, 2, 3]])),
            decode: with(place, compact(&[[0, 0, 0], [4, 5, 6]])),
            merged: with(place, compact(&[[1, 2, 3], [4, 5, 6]])),
            merged_rows: (0, rows(&[[1, 2, 3], [4, 5, 6]])),
            decode_rows: (0, rows(&[[0, 0, 0], [4, 5, 6]])),
            store: Store::memory(),
        },
        // Segments of one byte a row in two files: the prefill's rows
        // [0, 2) in `p`, the decode's [2, 5) in `d`.
        RowsKind::ByHandle => {
            let segment = |file: &str, pos: u64, rows: u64| {
                json!({"field": ROUTED_EXPERTS, "file": file, "offset": 0, "pos": pos,
                    "rows": rows, "dtype": "uint8", "shape": [1]})
            };
            let mut store = Store::memory();
            store.write("p", vec![1, 2]).unwrap();
            store.write("d", vec![7, 8, 9]).unwrap();
            Walk {
                prefill: with(place, json!([segment("p", 0, 2)])),
                decode: with(place, json!([segment("d", 2, 3)])),
                merged: with(place, json!([segment("p", 0, 2), segment("d", 2, 3)])),
                merged_rows: (0, vec![vec![1], vec![2], vec![7], vec![8], vec![9]]),
                decode_rows: (2, vec![vec![7], vec![8], vec![9]]),
                store,
            }
        }
        // SGLang's ids, one a row, placed by the counts: 2 prompt tokens,
        // 1 generated (rows [0, 2)) and 3 (rows [0, 4)). The counts sit in
        // the rows' own object when the table puts counts there, else in
        // the response's object that holds counts and no rows.
        RowsKind::Sglang => {
            let counts = counts_holder(place.holder);
            let side = |completion: u64, rows: &[i32]| {
                let mut out = with(place, ids(rows));
                put(&mut out, counts, "prompt_tokens", json!(2));
                put(&mut out, counts, "completion_tokens", json!(completion));
                out
            };
            let le = |ids: &[i32]| ids.iter().map(|i| i.to_le_bytes().to_vec()).collect();
            Walk {
                prefill: side(1, &[10, 11]),
                decode: side(3, &[0, 0, 12, 13]),
                merged: side(3, &[10, 11, 12, 13]),
                merged_rows: (0, le(&[10, 11, 12, 13])),
                decode_rows: (0, le(&[0, 0, 12, 13])),
                store: Store::memory(),
            }
        }
    }
}

/// Where the table puts the counts of rows that `holder` holds: in the
/// holder itself when some place there is a count, else in the response's
/// object whose places are all counts.
fn counts_holder(holder: Holder) -> Holder {
    let at = |h: Holder| places::all().filter(move |p| p.holder == h);
    if at(holder).any(|p| p.holds == Holds::Count) {
        return holder;
    }
    places::all()
        .map(|p| p.holder)
        .find(|h| matches!(h, Holder::Member(_)) && at(*h).all(|p| p.holds == Holds::Count))
        .unwrap_or_else(|| panic!("no object of counts for {holder:?}"))
}

/// The row of position `x` of rows written as the walk writes them.
fn at(rows: &(u64, Vec<Vec<u8>>), x: u64) -> Option<&Vec<u8>> {
    rows.1.get(usize::try_from(x.checked_sub(rows.0)?).ok()?)
}

/// The rows a reader read, as the walk writes them.
fn read(rows: &pd_stitch::gather::Gathered) -> (u64, Vec<Vec<u8>>) {
    let positions = rows.positions();
    let each = (positions.start()..positions.end())
        .map(|x| rows.row(x).unwrap().to_vec())
        .collect();
    (positions.start(), each)
}

#[test]
fn every_place_of_the_table_is_walked_through_every_path() {
    let stitcher = Stitcher::new().row_shape(1, 1);
    let row_shape = Some((1, 1));
    let mut walked = 0;
    for place in places::all().filter(|p| matches!(p.holds, Holds::Rows(_))) {
        let Walk {
            prefill,
            decode,
            merged,
            merged_rows,
            decode_rows,
            store,
        } = walk(place);
        // A router asks first whether the prefill has rows to stitch.
        let prefill_bytes = serde_json::to_vec(&prefill).unwrap();
        assert!(stitcher.prefill_has_routed_experts(&prefill), "{place:?}");
        assert!(pd_stitch::prefill_has_routed_experts(&prefill), "{place:?}");
        assert_eq!(
            stitcher.prefill_bytes_has_routed_experts(&prefill_bytes),
            Ok(true),
            "{place:?}"
        );
        assert_eq!(
            pd_stitch::bytes::prefill_has_routed_experts(&prefill_bytes),
            Ok(true),
            "{place:?}"
        );
        // The `Value` path.
        let mut by_value = decode.clone();
        assert_eq!(
            stitcher.merge(&prefill, &mut by_value, Stitch::ForPd),
            Ok(true),
            "{place:?}"
        );
        assert_eq!(by_value, merged, "{place:?}");
        // The bytes path, whose scanner must record the place.
        let mut by_bytes = serde_json::to_vec(&decode).unwrap();
        assert_eq!(
            stitcher.merge_bytes(&prefill_bytes, &mut by_bytes, Stitch::ForPd),
            Ok(true),
            "{place:?}"
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&by_bytes).unwrap(),
            merged,
            "{place:?}"
        );
        // The stream, whose prefilter and slots must find it.
        let event = [
            b"data: ",
            &serde_json::to_vec(&decode).unwrap()[..],
            b"\n\n",
        ]
        .concat();
        let mut stream = StreamStitcher::new(stitcher.clone(), prefill_bytes).unwrap();
        let mut out = Vec::new();
        stream.feed(&event, &mut out).unwrap();
        stream.finish(&mut out).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&[b"data: ", &by_bytes[..], b"\n\n"].concat()),
            "{place:?}: the stream"
        );
        // The verifiers read the rows where the table puts them: the one
        // reader, ...
        let gathered = choice_rows(&merged, 0, &store, row_shape)
            .unwrap_or_else(|e| panic!("{place:?}: choice_rows read no rows: {e}"));
        assert_eq!(read(&gathered), merged_rows, "{place:?}: choice_rows");
        let gathered = choice_rows(&decode, 0, &store, row_shape).unwrap();
        assert_eq!(read(&gathered), decode_rows, "{place:?}: choice_rows");
        // ... gather's own, for the kinds it reads without a row shape, ...
        if place.holds != Holds::Rows(RowsKind::Sglang) {
            let gathered = gather_from(&merged, 0, ROUTED_EXPERTS, &store)
                .unwrap_or_else(|e| panic!("{place:?}: gather read no rows: {e}"));
            assert_eq!(read(&gathered), merged_rows, "{place:?}: gather");
        }
        // ... check, ...
        let report = check_with(&merged, &store, row_shape);
        assert!(report.is_ok(), "{place:?}: {report}");
        let [field] = &report.fields[..] else {
            panic!(
                "{place:?}: check read {} fields: {report}",
                report.fields.len()
            );
        };
        let (start, rows) = &merged_rows;
        assert_eq!(
            field
                .coverage
                .iter()
                .map(|r| (r.start(), r.end()))
                .collect::<Vec<_>>(),
            [(*start, start + rows.len() as u64)],
            "{place:?}: check"
        );
        // ... and compare, position by position.
        let options = Options {
            row_shape,
            ..Options::default()
        };
        let report = compare(&merged, &store, &decode, &store, &options)
            .unwrap_or_else(|e| panic!("{place:?}: compare read no rows: {e}"));
        let both: Vec<u64> = (0..16)
            .filter(|&x| at(&merged_rows, x).is_some() && at(&decode_rows, x).is_some())
            .collect();
        let equal = both
            .iter()
            .filter(|&&x| at(&merged_rows, x) == at(&decode_rows, x))
            .count() as u64;
        assert_eq!(
            (report.choices[0].compared, report.choices[0].equal_rows),
            (both.len() as u64, equal),
            "{place:?}: compare read the merged and the decode's rows"
        );
        walked += 1;
    }
    // Today's six places, at least.
    assert!(walked >= 6, "{walked}");
}

/// The walk's pairs are built where the table says: each rows value sits
/// at its place's holder and key, and SGLang's counts where the table puts
/// them (`meta_info` counts its own rows, `usage` the OpenAI slots').
#[test]
fn the_walk_builds_each_pair_at_its_place() {
    let inline = Place {
        holder: Holder::Member("nvext"),
        key: "routed_experts",
        holds: Holds::Rows(RowsKind::Inline),
    };
    let pair = walk(&inline);
    assert_eq!(pair.prefill["nvext"]["routed_experts"]["data"], "AQID");
    assert_eq!(
        counts_holder(Holder::Member("meta_info")),
        Holder::Member("meta_info")
    );
    assert_eq!(
        counts_holder(Holder::Member("sglext")),
        Holder::Member("usage")
    );
    assert_eq!(
        counts_holder(Holder::ChoiceMember("sgl_ext")),
        Holder::Member("usage")
    );
    let sgl_ext = Place {
        holder: Holder::ChoiceMember("sgl_ext"),
        key: "routed_experts",
        holds: Holds::Rows(RowsKind::Sglang),
    };
    let pair = walk(&sgl_ext);
    assert_eq!(
        pair.decode["choices"][0]["sgl_ext"]["routed_experts"],
        ids(&[0, 0, 12, 13])
    );
    assert_eq!(pair.decode["usage"]["completion_tokens"], 3);
}
