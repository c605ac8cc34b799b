//! The checks the fuzz targets (`fuzz_targets/`) share.
//!
//! **Input format.** `prefill JSON, one NUL byte (0x00), decode JSON`. A JSON
//! text never holds a raw NUL (not as whitespace, and inside strings control
//! characters must be escaped), so splitting at the first NUL is unambiguous.
//! Inputs without a NUL, or with a half that is not JSON, are skipped: the
//! merge takes `serde_json::Value`s, so bytes that do not parse never reach it.
//!
//! **What is asserted** holds for *any* input, by docs/SPEC.md; every message
//! names the rule or law. A panic here is either a crate bug or a wrong check,
//! so each check is stated only as strongly as the spec states it.
//!
//! - No panic inside the merge (R9, N6, L10): libFuzzer reports it.
//! - Anything but `Ok(true)` leaves the decode exactly as it was (R8, N6, P2,
//!   L6, L10).
//! - On `Ok(true)`:
//!   - only `choices[i].payload` (by handle) and `choices[i].routed_experts`
//!     (inline) may change; every other key is untouched (R7);
//!   - the prefill had rows of a kind the entry point merges (R1, N2);
//!   - by handle: every stitched segment on both sides was valid (R2), and per
//!     decode choice L7 (the prefill's segments first, verbatim), L5 (other
//!     items pass through in order), L9 (each decode segment dropped, clipped
//!     or kept exactly as R5 says), L2 (coverage) and L1 (disjointness);
//!   - inline compact: start, shape, dtype and the decoded rows themselves:
//!     the prefill's, then the decode's from the cut, zero-extended when
//!     widened (N3, N5, I1);
//!   - inline npy: a version 1.0 file, header padded to 64 bytes, whose data is
//!     the prefill's data (possibly widened) followed by a tail of the
//!     decode's data (N4, N5). The `.npy` header dict is not parsed here, so
//!     the position of the cut inside the decode's data is not checked.
//!
//! The arithmetic here is in `u128`, so it cannot overflow where the crate's
//! checked `u64` arithmetic refuses an input.

#![forbid(unsafe_code)]

pub mod episode;

use base64::Engine as _;
use pd_stitch::places::{self, Holder, Holds, Place, RowsKind};
use serde_json::{Map, Value};

/// A public JSON entry point of pd-stitch.
pub type Merge = fn(&Value, &mut Value) -> Result<bool, pd_stitch::Error>;

/// Which kinds of rows an entry point merges.
#[derive(Clone, Copy, Debug)]
pub struct Kinds {
    pub by_handle: bool,
    pub inline: bool,
    /// SGLang's rows (SPEC section 10).
    pub sglang: bool,
}

impl Kinds {
    pub const BY_HANDLE: Kinds = Kinds {
        by_handle: true,
        inline: false,
        sglang: false,
    };
    pub const INLINE: Kinds = Kinds {
        by_handle: false,
        inline: true,
        sglang: false,
    };
    /// What `merge_routed_experts_for_pd` stitches: every kind.
    pub const BOTH: Kinds = Kinds {
        by_handle: true,
        inline: true,
        sglang: true,
    };
}

/// The payload fields the free entry points stitch: the library's defaults,
/// `routed_experts` and `routed_expert_weights`. Each is stitched at its own
/// cut, so the by-handle laws are checked field by field.
const STITCHED: &[&str] = pd_stitch::DEFAULT_FIELDS;

/// `(prefill, decode)` from a fuzz input, or `None` when it is not two JSON
/// texts separated by a NUL.
pub fn split(data: &[u8]) -> Option<(Value, Value)> {
    let nul = data.iter().position(|&b| b == 0)?;
    let prefill = serde_json::from_slice(&data[..nul]).ok()?;
    let decode = serde_json::from_slice(&data[nul + 1..]).ok()?;
    Some((prefill, decode))
}

/// Run `merge` on the input and assert the spec's laws on the outcome.
pub fn check(data: &[u8], merge: Merge, kinds: Kinds) {
    check_by(data, &merge, kinds);
}

/// [`check`] of any merge, a closure included (the tests' broken merges).
fn check_by(
    data: &[u8],
    merge: &dyn Fn(&Value, &mut Value) -> Result<bool, pd_stitch::Error>,
    kinds: Kinds,
) {
    let Some((prefill, decode)) = split(data) else {
        return;
    };
    let mut merged = decode.clone();
    let result = merge(&prefill, &mut merged);
    if !matches!(result, Ok(true)) {
        assert!(
            merged == decode,
            "R8/L10: the merge returned {result:?} but changed the decode"
        );
        return;
    }
    assert!(
        strip(&merged, kinds) == strip(&decode, kinds),
        "R7: the merge changed more than the choices' rows"
    );
    let has_rows = rows_places().any(|place| {
        checks(kinds, place)
            && match place.holds {
                Holds::Rows(RowsKind::ByHandle) => !prefill_segments(&prefill, place).is_empty(),
                Holds::Rows(RowsKind::Inline) => prefill_inline(&prefill, place).is_some(),
                _ => false,
            }
    }) || (kinds.sglang && !sglang_slots(&prefill).is_empty());
    assert!(
        has_rows,
        "R1/N2/Q1/D2: Ok(true) from a prefill without rows to merge"
    );
    if kinds.sglang {
        check_sglang(&prefill, &decode, &merged);
    }
    let empty = Value::Object(Map::new());
    let or_empty = |v: Option<&Value>| v.cloned().unwrap_or_else(|| empty.clone());
    for place in rows_places().filter(|place| checks(kinds, place)) {
        let Holder::Member(member) = place.holder else {
            continue;
        };
        // D2: rows the response holds (Dynamo's nvext) are checked as a
        // choice's are, in the object that holds them.
        if place.holds == Holds::Rows(RowsKind::Inline) {
            let p = prefill_inline(&prefill, place);
            let (d, m) = (or_empty(decode.get(member)), or_empty(merged.get(member)));
            check_inline(p, &d, &m, place.key, member);
        }
    }
    // Without a `choices` array there is nothing else the merge may write
    // to, and `strip` has shown the decode unchanged.
    let (Some(before), Some(after)) = (choices(&decode), choices(&merged)) else {
        return;
    };
    for place in rows_places().filter(|place| checks(kinds, place)) {
        for (i, (d, m)) in before.iter().zip(after).enumerate() {
            // The object of the choice that holds the place: the choice,
            // or an object of it.
            let (d, m, at) = match place.holder {
                Holder::Choice => (d.clone(), m.clone(), format!("choices[{i}]")),
                Holder::ChoiceMember(member) => (
                    or_empty(d.get(member)),
                    or_empty(m.get(member)),
                    format!("choices[{i}].{member}"),
                ),
                Holder::Member(_) => continue,
            };
            match place.holds {
                Holds::Rows(RowsKind::ByHandle) => {
                    check_by_handle(&prefill_segments(&prefill, place), &d, &m, place.key, &at);
                }
                Holds::Rows(RowsKind::Inline) => {
                    check_inline(prefill_inline(&prefill, place), &d, &m, place.key, &at);
                }
                _ => {}
            }
        }
    }
}

// ------------------------------------------------------------------ places

/// Every place of pd-stitch's table that holds rows: where the laws are
/// checked, so that a place added to the table is checked with no line
/// here.
fn rows_places() -> impl Iterator<Item = &'static Place> {
    places::all().filter(|place| matches!(place.holds, Holds::Rows(_)))
}

/// Whether the entry point of `kinds` merges the rows of `place`.
fn checks(kinds: Kinds, place: &Place) -> bool {
    match place.holds {
        Holds::Rows(RowsKind::ByHandle) => kinds.by_handle,
        Holds::Rows(RowsKind::Inline) => kinds.inline,
        Holds::Rows(RowsKind::Sglang) => kinds.sglang,
        _ => false,
    }
}

/// The object that holds `place` in `response`: of its first choice for a
/// choice's place (the prefill's rows are its first choice's, SPEC R10).
fn first_holder<'a>(response: &'a Value, place: &Place) -> Option<&'a Value> {
    match place.holder {
        Holder::Choice => prefill_choice(response),
        Holder::ChoiceMember(member) => prefill_choice(response)?.get(member),
        Holder::Member(member) => response.get(member),
    }
}

/// The response with what a merge may change removed from every choice.
fn strip(response: &Value, kinds: Kinds) -> Value {
    let mut response = response.clone();
    if kinds.sglang {
        for path in sglang_paths(&response) {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            if let Some(rows) = pointer_mut(&mut response, &path) {
                *rows = Value::Null;
            }
        }
    }
    for place in rows_places().filter(|place| checks(kinds, place)) {
        if place.holds == Holds::Rows(RowsKind::Sglang) {
            continue; // by its paths, above
        }
        match place.holder {
            Holder::Member(member) => {
                if let Some(rows) = pointer_mut(&mut response, &[member, place.key]) {
                    *rows = Value::Null;
                }
            }
            Holder::Choice | Holder::ChoiceMember(_) => {
                let choices = response.get_mut("choices").and_then(Value::as_array_mut);
                for choice in choices.into_iter().flatten() {
                    let holder = match place.holder {
                        Holder::ChoiceMember(member) => choice.get_mut(member),
                        _ => Some(choice),
                    };
                    if let Some(holder) = holder.and_then(Value::as_object_mut) {
                        holder.remove(place.key);
                    }
                }
            }
        }
    }
    response
}

// ------------------------------------------------------------------ SGLang

/// Where SGLang's rows may be in an item, by path from it: each SGLang
/// place of the table (`meta_info.routed_experts`, `sglext.routed_experts`,
/// `choices[0].sgl_ext.routed_experts` today).
fn sglang_item_paths() -> Vec<(Holder, Vec<String>)> {
    rows_places()
        .filter(|place| place.holds == Holds::Rows(RowsKind::Sglang))
        .map(|place| {
            let mut path: Vec<String> = match place.holder {
                Holder::Choice => vec!["choices".into(), "0".into()],
                Holder::ChoiceMember(member) => vec!["choices".into(), "0".into(), member.into()],
                Holder::Member(member) => vec![member.into()],
            };
            path.push(place.key.into());
            (place.holder, path)
        })
        .collect()
}

/// Every SGLang rows value a merge may write, by path from the root: the
/// slots of an object; of an array (a `/generate` batch), each element's
/// slots in an object that counts its own rows (`meta_info`: an output of a
/// batch carries its rows where it counts them).
fn sglang_paths(response: &Value) -> Vec<Vec<String>> {
    match response {
        Value::Array(items) => {
            let counted: Vec<Vec<String>> = sglang_item_paths()
                .into_iter()
                .filter(|(holder, _)| {
                    places::all().any(|p| p.holder == *holder && p.holds == Holds::Count)
                })
                .map(|(_, path)| path)
                .collect();
            (0..items.len())
                .flat_map(|i| {
                    counted.iter().map(move |path| {
                        let mut full = vec![i.to_string()];
                        full.extend(path.iter().cloned());
                        full
                    })
                })
                .collect()
        }
        Value::Object(_) => sglang_item_paths()
            .into_iter()
            .map(|(_, path)| path)
            .collect(),
        _ => Vec::new(),
    }
}

fn lookup<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, step| match v {
        Value::Array(items) => items.get(step.parse::<usize>().ok()?),
        Value::Object(map) => map.get(step),
        _ => None,
    })
}

fn pointer_mut<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |v, step| match v {
        Value::Array(items) => items.get_mut(step.parse::<usize>().ok()?),
        Value::Object(map) => map.get_mut(*step),
        _ => None,
    })
}

/// The prefill's SGLang slots with rows (present and not null).
fn sglang_slots(prefill: &Value) -> Vec<Vec<String>> {
    sglang_paths(prefill)
        .into_iter()
        .filter(|p| lookup(prefill, p).is_some_and(|v| !v.is_null()))
        .collect()
}

/// Q6 on a merge that succeeded: every slot the prefill has rows in has
/// merged rows in the decode that are the prefill's bytes followed by a
/// tail of the decode's bytes (the cut is not checked: placing it needs the
/// row width); every other rows value is the decode's. (`strip` already
/// showed nothing else changed, the arrays' other elements included.)
fn check_sglang(prefill: &Value, decode: &Value, merged: &Value) {
    let has = sglang_slots(prefill);
    for path in sglang_paths(decode) {
        let (d, m) = (lookup(decode, &path), lookup(merged, &path));
        if !has.contains(&path) {
            assert!(
                d == m,
                "Q1: rows the prefill has none of changed at {path:?}"
            );
            continue;
        }
        let text = |v: Option<&Value>, what: &str| {
            let text = v
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("Q2: {what} rows at {path:?} merged but not a string"));
            base64(text, what)
        };
        let (p, d, m) = (
            text(lookup(prefill, &path), "prefill"),
            text(d, "decode"),
            text(m, "merged"),
        );
        assert!(
            m.len() % 4 == 0,
            "Q2: merged rows of {} bytes at {path:?}",
            m.len()
        );
        assert!(
            m.len() >= p.len() && m[..p.len()] == p[..],
            "Q6: merged rows at {path:?} do not start with the prefill's"
        );
        let tail = &m[p.len()..];
        assert!(
            tail.len() <= d.len() && d.ends_with(tail),
            "Q6: merged rows at {path:?} do not end with a tail of the decode's"
        );
    }
}

fn choices(response: &Value) -> Option<&Vec<Value>> {
    response.get("choices")?.as_array()
}

/// The prefill's choice 0, read leniently (SPEC §6.1): anything missing or of
/// another type means no rows.
fn prefill_choice(prefill: &Value) -> Option<&Value> {
    choices(prefill)?.first()
}

/// The prefill's stitched segments at the by-handle `place` (R10: of its
/// first choice only).
fn prefill_segments<'a>(prefill: &'a Value, place: &Place) -> Vec<&'a Value> {
    first_holder(prefill, place)
        .and_then(|holder| holder.get(place.key))
        .and_then(Value::as_array)
        .map(|items| items.iter().filter(|x| is_stitched(x)).collect())
        .unwrap_or_default()
}

/// The prefill's inline rows at `place` (N1: present and not null): its
/// first choice's, or the response's (Dynamo's `nvext`, SPEC section 4b).
fn prefill_inline<'a>(prefill: &'a Value, place: &Place) -> Option<&'a Value> {
    first_holder(prefill, place)?
        .get(place.key)
        .filter(|v| !v.is_null())
}

fn is_stitched(item: &Value) -> bool {
    field_of(item).is_some_and(|field| STITCHED.contains(&field))
}

fn field_of(item: &Value) -> Option<&str> {
    item.get("field").and_then(Value::as_str)
}

// ---------------------------------------------------------------- by handle

/// A stitched segment's numbers, widened to `u128`.
#[derive(Clone, Copy, Debug)]
struct Seg {
    pos: u128,
    end: u128,
    offset: u128,
    row_bytes: u128,
}

/// The numbers of a stitched segment of a merge that succeeded: R2 says each
/// was validated, so a segment that does not read is a bug.
fn seg(item: &Value) -> Seg {
    let int = |key: &str| {
        item.get(key)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("R2: accepted a segment whose {key} is not a u64: {item}"))
    };
    let (pos, rows, offset) = (int("pos"), int("rows"), int("offset"));
    let itemsize = item
        .get("dtype")
        .and_then(Value::as_str)
        .and_then(itemsize)
        .unwrap_or_else(|| panic!("R2: accepted a segment without a supported dtype: {item}"));
    let dims: Option<Vec<u64>> = item
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|shape| shape.iter().map(Value::as_u64).collect());
    let dims =
        dims.unwrap_or_else(|| panic!("R2: accepted a segment whose shape is not u64s: {item}"));
    let row_bytes = row_bytes(itemsize, &dims)
        .unwrap_or_else(|| panic!("R2: accepted a segment whose row_bytes overflows: {item}"));
    let (pos, rows, offset) = (u128::from(pos), u128::from(rows), u128::from(offset));
    // Cannot overflow u128: each factor is below 2^64.
    let byte_end = offset + rows * row_bytes;
    assert!(
        pos + rows <= u128::from(u64::MAX) && byte_end <= u128::from(u64::MAX),
        "R2: accepted a segment whose end or byte end overflows u64: {item}"
    );
    Seg {
        pos,
        end: pos + rows,
        offset,
        row_bytes,
    }
}

/// `itemsize * prod(dims)` when it fits in `u64`; a zero dimension makes 0
/// whatever the others are.
fn row_bytes(itemsize: usize, dims: &[u64]) -> Option<u128> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter()
        .try_fold(itemsize as u128, |acc, &d| acc.checked_mul(u128::from(d)))
        .filter(|&b| b <= u128::from(u64::MAX))
}

fn itemsize(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "bool" | "int8" | "uint8" => 1,
        "int16" | "uint16" | "float16" | "bfloat16" => 2,
        "int32" | "uint32" | "float32" => 4,
        "int64" | "uint64" | "float64" => 8,
        _ => return None,
    })
}

/// What R5 makes of a decode segment at the cut: dropped, kept or clipped.
fn fate(item: &Value, cut: u128) -> Option<Value> {
    let s = seg(item);
    if s.end <= cut {
        return None;
    }
    if s.pos >= cut {
        return Some(item.clone());
    }
    let as_u64 = |x: u128| Value::from(u64::try_from(x).expect("below an end checked by seg"));
    let mut clipped = item.clone();
    clipped["pos"] = as_u64(cut);
    clipped["rows"] = as_u64(s.end - cut);
    clipped["offset"] = as_u64(s.offset + (cut - s.pos) * s.row_bytes);
    Some(clipped)
}

/// The by-handle laws on the object `d` of one decode choice that holds
/// the payload `key` (the choice itself, today), merged into `m`; `i`
/// names the object in messages.
fn check_by_handle(prefill: &[&Value], d: &Value, m: &Value, key: &str, i: &str) {
    if prefill.is_empty() {
        // R1 (nothing on either side) or R4 (an error): the payload stays.
        assert!(
            d.get(key) == m.get(key),
            "R1/R4: {i}.{key} changed with no prefill segment"
        );
        return;
    }
    assert!(d.is_object(), "R6: accepted {i} that is not an object");
    let before: &[Value] = match d.get(key) {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(other) => panic!("R6: accepted {i}.{key} = {other}"),
    };
    let after = m
        .get(key)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("R5: {i} has no {key} array after the merge"));

    // L7: the prefill's stitched segments first, as they are, in order.
    assert!(
        after.len() >= prefill.len() && after.iter().zip(prefill).all(|(a, b)| a == *b),
        "L7: {i}.{key} does not start with the prefill's segments"
    );
    // L5: the other items are the decode's, unchanged and in order.
    let others = |items: &[Value]| -> Vec<Value> {
        items.iter().filter(|x| !is_stitched(x)).cloned().collect()
    };
    assert!(
        others(after) == others(before),
        "L5: {i}'s non-stitched items changed"
    );
    for field in STITCHED {
        let of = |items: &[Value]| -> Vec<Value> {
            items
                .iter()
                .filter(|x| field_of(x) == Some(field))
                .cloned()
                .collect()
        };
        let mine: Vec<&Value> = prefill
            .iter()
            .copied()
            .filter(|x| field_of(x) == Some(field))
            .collect();
        // Its segments after the prefill's (L7 holds them first).
        let merged = of(&after[prefill.len()..]);
        if mine.is_empty() {
            // Nothing of this field to stitch: the decode's segments of it
            // stay as they were.
            assert!(
                merged == of(before),
                "R1: {i}'s {field} segments changed with no prefill segment of it"
            );
            continue;
        }
        check_field(&mine, &of(before), &merged, field, i);
    }
}

/// L9, L2 and L1 for one stitched field: `prefill` its prefill segments,
/// `before` the decode's segments of it, `after` the merged ones after the
/// prefill's.
fn check_field(prefill: &[&Value], before: &[Value], after: &[Value], field: &str, i: &str) {
    let p: Vec<Seg> = prefill.iter().map(|x| seg(x)).collect();
    let cut = p.iter().map(|s| s.end).max().expect("not empty");

    // L9: after the prefix, the decode's segments each as R5 says.
    let want: Vec<Value> = before.iter().filter_map(|x| fate(x, cut)).collect();
    assert!(
        after == want,
        "L9: {i}'s decode {field} segments are not dropped/clipped/kept at cut {cut}"
    );

    // L2: coverage(M) = coverage(P) ∪ (coverage(D) ∩ [cut, ∞)).
    let dsegs: Vec<Seg> = before.iter().map(seg).collect();
    let msegs: Vec<Seg> = p.iter().copied().chain(after.iter().map(seg)).collect();
    let expected = union(
        p.iter()
            .map(|s| (s.pos, s.end))
            .chain(dsegs.iter().map(|s| (s.pos.max(cut), s.end))),
    );
    assert!(
        union(msegs.iter().map(|s| (s.pos, s.end))) == expected,
        "L2: {i}'s {field} coverage is not the prefill's plus the decode's from cut {cut}"
    );
    // L1: disjoint sides make a disjoint merge.
    if disjoint(&p) && disjoint(&dsegs) {
        assert!(
            disjoint(&msegs),
            "L1: {i}'s merged {field} segments overlap"
        );
    }
}

/// The union of half-open intervals, as sorted, disjoint, non-touching
/// intervals (so two equal sets give equal vectors). Empty ones vanish.
fn union(intervals: impl Iterator<Item = (u128, u128)>) -> Vec<(u128, u128)> {
    let mut sorted: Vec<_> = intervals.filter(|(a, b)| a < b).collect();
    sorted.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::new();
    for (a, b) in sorted {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Whether no position lies in two segments. Sorted by start, the non-empty
/// intervals are pairwise disjoint exactly when each neighbour pair is.
fn disjoint(segs: &[Seg]) -> bool {
    let mut sorted: Vec<_> = segs
        .iter()
        .filter(|s| s.pos < s.end)
        .map(|s| (s.pos, s.end))
        .collect();
    sorted.sort_unstable();
    sorted.windows(2).all(|w| w[1].0 >= w[0].1)
}

// ------------------------------------------------------------------- inline

/// The inline laws on the object `d` that holds the rows `key` (a decode
/// choice, or the response's object for rows it holds) merged into `m`;
/// `at` names the object in messages.
fn check_inline(prefill: Option<&Value>, d: &Value, m: &Value, key: &str, at: &str) {
    let Some(p) = prefill else {
        // N2: no prefill rows, so no decode rows either (or an error).
        assert!(
            d.get(key) == m.get(key),
            "N2: {at}.{key} changed with no prefill rows"
        );
        return;
    };
    let dr = d
        .get(key)
        .filter(|v| !v.is_null())
        .unwrap_or_else(|| panic!("N2: accepted {at} without rows"));
    let mr = m
        .get(key)
        .unwrap_or_else(|| panic!("N3: {at} lost its rows"));
    match (p, dr) {
        (Value::Object(p), Value::Object(dr)) => check_compact(p, dr, mr, at),
        (Value::String(p), Value::String(dr)) => check_npy(p, dr, mr, at),
        _ => panic!("N2: accepted rows of mixed or unknown forms in {at}"),
    }
}

fn base64(text: &str, what: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|e| panic!("N3: {what} is not canonical padded base64 ({e})"))
}

/// Compact rows, as validated by a merge that succeeded (N3).
struct Compact<'a> {
    bytes: Vec<u8>,
    start: u128,
    seq: u128,
    row: [u64; 2],
    dtype: &'a str,
    itemsize: usize,
    row_bytes: u128,
}

fn compact<'a>(rows: &'a Map<String, Value>, what: &str) -> Compact<'a> {
    let data = rows.get("data").and_then(Value::as_str);
    let bytes = base64(
        data.unwrap_or_else(|| panic!("N3: {what} has no data")),
        what,
    );
    let shape: Option<Vec<u64>> = rows
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().map(Value::as_u64).collect());
    let Some(&[seq, layers, topk]) = shape.as_deref() else {
        panic!("N3: {what} has no shape of 3 u64s");
    };
    let start = rows.get("start").and_then(Value::as_u64);
    let start = start.unwrap_or_else(|| panic!("N3: {what} has no u64 start"));
    let dtype = match rows.get("dtype") {
        None => "uint8",
        Some(v) => v.as_str().unwrap_or_else(|| panic!("N3: {what}'s dtype")),
    };
    let itemsize = itemsize(dtype).unwrap_or_else(|| panic!("N3: {what}'s dtype {dtype}"));
    let row_bytes = row_bytes(itemsize, &[layers, topk])
        .unwrap_or_else(|| panic!("N3: {what}'s row size overflows"));
    assert!(
        u128::from(start) + u128::from(seq) <= u128::from(u64::MAX),
        "N3: {what}'s end overflows"
    );
    assert!(
        bytes.len() as u128 == u128::from(seq) * row_bytes,
        "N3: {what}'s data is not seq rows long"
    );
    Compact {
        bytes,
        start: start.into(),
        seq: seq.into(),
        row: [layers, topk],
        dtype,
        itemsize,
        row_bytes,
    }
}

/// The merged dtype (N5): equal dtypes as they are, differing unsigned
/// integers the wider.
fn merged_dtype<'a>(p: &'a str, d: &'a str) -> &'a str {
    const UNSIGNED: [&str; 4] = ["uint8", "uint16", "uint32", "uint64"];
    if p == d {
        return p;
    }
    let rank = |t: &str| UNSIGNED.iter().position(|u| *u == t);
    match (rank(p), rank(d)) {
        (Some(a), Some(b)) => UNSIGNED[a.max(b)],
        _ => panic!("N5: accepted dtypes {p} and {d}"),
    }
}

/// Little-endian elements of `from` bytes zero-extended to `to` bytes.
fn widen(bytes: &[u8], from: usize, to: usize) -> Vec<u8> {
    if from == to {
        return bytes.to_vec();
    }
    let mut out = Vec::with_capacity(bytes.len() / from * to);
    for element in bytes.chunks(from) {
        out.extend_from_slice(element);
        out.resize(out.len() + (to - from), 0);
    }
    out
}

fn check_compact(p: &Map<String, Value>, d: &Map<String, Value>, m: &Value, at: &str) {
    let p = compact(p, "the prefill's rows");
    let d_keys = d;
    let d = compact(d, &format!("{at}'s rows"));
    let m = m
        .as_object()
        .unwrap_or_else(|| panic!("N3: {at}'s merged rows are not compact"));

    let cut = p.start + p.seq;
    let d_end = d.start + d.seq;
    assert!(
        d.start <= cut && cut <= d_end,
        "N3: accepted {at}'s rows [{}, {d_end}) that miss the cut {cut}",
        d.start
    );
    assert!(
        p.row == d.row,
        "N3: accepted row shapes {:?} and {:?}",
        p.row,
        d.row
    );
    let dtype = merged_dtype(p.dtype, d.dtype);
    let size = itemsize(dtype).expect("a known dtype");

    let seq = p.seq + (d_end - cut);
    let shape = [seq, p.row[0].into(), p.row[1].into()]
        .map(|x: u128| Value::from(u64::try_from(x).expect("at most the decode's end")));
    assert!(
        m.get("start").and_then(Value::as_u64).map(u128::from) == Some(p.start),
        "N3: {at}'s merged start is not the prefill's"
    );
    assert!(
        m.get("shape") == Some(&Value::from(shape.to_vec())),
        "N3: {at}'s merged shape is not [{seq}, {}, {}]",
        p.row[0],
        p.row[1]
    );
    assert!(
        m.get("dtype") == Some(&Value::from(dtype)),
        "N3/N5: {at}'s merged dtype is not {dtype}"
    );
    // I1: the prefill's rows, then the decode's from the cut, widened.
    let skip = usize::try_from((cut - d.start) * d.row_bytes).expect("within d.bytes");
    let mut want = widen(&p.bytes, p.itemsize, size);
    want.extend(widen(&d.bytes[skip..], d.itemsize, size));
    let data = m.get("data").and_then(Value::as_str);
    let data = data.unwrap_or_else(|| panic!("N3: {at}'s merged rows have no data"));
    assert!(
        base64(data, "the merged rows") == want,
        "I1: {at}'s merged rows are not the prefill's then the decode's from {cut}"
    );
    // N3: the decode object's other keys are kept.
    for (key, value) in d_keys {
        if !["data", "shape", "start", "dtype"].contains(&key.as_str()) {
            assert!(
                m.get(key) == Some(value),
                "N3: {at}'s rows lost their key {key}"
            );
        }
    }
}

/// Where an `.npy` file's data begins, with its major version; `None` when it
/// is not an `.npy` file of version 1, 2 or 3.
fn npy_data(file: &[u8]) -> Option<(u8, usize)> {
    if !file.starts_with(b"\x93NUMPY") || file.len() < 10 {
        return None;
    }
    let major = file[6];
    let (len, at): (usize, usize) = match major {
        1 => (usize::from(u16::from_le_bytes([file[8], file[9]])), 10),
        2 | 3 => {
            let len = u32::from_le_bytes(file.get(8..12)?.try_into().ok()?);
            (usize::try_from(len).ok()?, 12)
        }
        _ => return None,
    };
    let data = at.checked_add(len)?;
    (data <= file.len()).then_some((major, data))
}

fn check_npy(p: &str, d: &str, m: &Value, at: &str) {
    let (p, d) = (
        base64(p, "the prefill's npy"),
        base64(d, "the decode's npy"),
    );
    let m = m
        .as_str()
        .unwrap_or_else(|| panic!("N4: {at}'s merged rows are not npy text"));
    let m = base64(m, "the merged npy");
    let file = |bytes: &[u8], what: &str| {
        npy_data(bytes).unwrap_or_else(|| panic!("N4: {what} is not an .npy file"))
    };
    let (_, p_at) = file(&p, "the prefill's rows");
    let (_, d_at) = file(&d, "the decode's rows");
    let (major, m_at) = file(&m, "the merged rows");
    // N4: version 1.0, the header padded to a multiple of 64 and ending in a
    // newline, as NumPy writes it.
    assert!(
        major == 1 && m[7] == 0 && m_at % 64 == 0 && m[m_at - 1] == b'\n',
        "N4: {at}'s merged npy header is not a padded version 1.0 header"
    );
    // N4/N5: the prefill's data, widened by some factor (itemsize `s` to
    // `s * w`), then a tail of the decode's data.
    let (p, d, m) = (&p[p_at..], &d[d_at..], &m[m_at..]);
    let ok = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2)]
        .iter()
        .any(|&(s, w)| {
            if p.len() % s != 0 {
                return false;
            }
            let head = widen(p, s, s * w);
            m.starts_with(&head) && d.ends_with(&m[head.len()..])
        });
    assert!(
        ok,
        "N4: {at}'s merged npy data is not the prefill's then a tail of the decode's"
    );
}

// -------------------------------------------------------------------- bytes

/// A bytes entry point of pd-stitch (`pd_stitch::bytes`).
pub type BytesMerge = fn(&[u8], &mut Vec<u8>) -> Result<bool, pd_stitch::Error>;

/// Run the bytes entry point `bytes` on the input's two halves, as raw bytes,
/// and hold it to the `Value` entry point `value` (SPEC B1-B4).
///
/// Unlike [`check`], every input with a NUL is used, parsed or not: what the
/// bytes function does with text that is not JSON is part of its contract.
/// The `Value` function's own laws are the other targets' business; here it
/// is the oracle.
pub fn check_bytes(data: &[u8], bytes: BytesMerge, value: Merge) {
    let Some(nul) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (prefill, decode) = (&data[..nul], &data[nul + 1..]);
    let mut out = decode.to_vec();
    let result = bytes(prefill, &mut out);
    // B4: anything but Ok(true) leaves the decode's bytes as they were.
    if !matches!(result, Ok(true)) {
        assert!(
            out == decode,
            "B4: the bytes merge returned {result:?} but changed the decode's bytes"
        );
    }
    let parsed_p = serde_json::from_slice::<Value>(prefill);
    let parsed_d = serde_json::from_slice::<Value>(decode);
    let (p, d) = match (parsed_p, parsed_d) {
        (Ok(p), Ok(d)) => (p, d),
        (p, d) => {
            // B3: text serde_json refuses is refused as ErrorDetail::Json, naming
            // the side that does not parse (either one when both do not).
            let Err(pd_stitch::ErrorDetail::Json { side, .. }) =
                result.as_ref().map_err(pd_stitch::Error::detail)
            else {
                panic!("B3: a side is not JSON but the bytes merge returned {result:?}");
            };
            let want = match (p.is_ok(), d.is_ok()) {
                (false, true) => Some(pd_stitch::Side::Prefill),
                (true, false) => Some(pd_stitch::Side::Decode),
                _ => None,
            };
            assert!(
                want.is_none_or(|w| w == *side),
                "B3: ErrorDetail::Json names the {side} response, but only the other does not parse"
            );
            return;
        }
    };
    // B1: the same answer as the Value function on the parsed sides.
    let mut merged = d;
    let expected = value(&p, &mut merged);
    match (&result, &expected) {
        (Ok(a), Ok(b)) => assert!(a == b, "B1: bytes gave Ok({a}), Value gave Ok({b})"),
        (Err(a), Err(b)) => assert!(
            std::mem::discriminant(a.detail()) == std::mem::discriminant(b.detail())
                && a.location() == b.location(),
            "B1: bytes gave error {a:?}, Value gave {b:?}"
        ),
        _ => panic!("B1: bytes gave {result:?}, Value gave {expected:?}"),
    }
    // B1: on Ok(true), the new bytes are the Value function's decode.
    if matches!(result, Ok(true)) {
        let reread = serde_json::from_slice::<Value>(&out);
        assert!(
            reread.as_ref().is_ok_and(|v| *v == merged),
            "B1: the merged decode bytes do not parse to the Value merge's decode ({reread:?})"
        );
    }
}

/// The checks pass on the seeds with the real merges, and fire on merges
/// broken on purpose: `cargo +nightly test` in fuzz/ (no libFuzzer needed).
/// `pd_stitch::stream` on `prefill NUL stream` (the whole input the stream
/// when it has no NUL, with a prefill without rows):
///
/// - SL1: fed whole, fed in chunks whose sizes the stream's bytes choose, and
///   fed a byte at a time, the output and the result's kind are the same;
/// - SL2: a stream with no key of the table that holds rows
///   (`routed_experts`, `payload`, ...) and no `\u` in it comes out byte for
///   byte as it went in, and without error;
/// - SL4: after an error, every further call is refused;
/// - SL5: given the prefill late, after as many chunks as the stream's first
///   byte says, the output and the result's kind are the same.
pub fn check_stream(data: &[u8]) {
    use pd_stitch::stream::StreamStitcher;
    use pd_stitch::{ErrorKind, Stitcher};

    let (prefill, stream) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (&br#"{"choices": [{}]}"#[..], data),
    };
    let Ok(mut whole) = StreamStitcher::new(Stitcher::new(), prefill) else {
        assert!(
            serde_json::from_slice::<Value>(prefill).is_err(),
            "a JSON prefill was refused"
        );
        return;
    };
    let run = |stitcher: &mut StreamStitcher, chunks: &mut dyn Iterator<Item = &[u8]>| {
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(err) = stitcher.feed(chunk, &mut out) {
                return (out, Err(err.kind()));
            }
        }
        let result = stitcher.finish(&mut out).map_err(|e| e.kind());
        (out, result)
    };
    let (out, result) = run(&mut whole, &mut std::iter::once(stream));
    if result.is_err() {
        let again = whole.feed(
            b"data: x

",
            &mut Vec::new(),
        );
        assert_eq!(
            again.map_err(|e| e.kind()),
            Err(ErrorKind::StreamClosed),
            "SL4: fed after an error"
        );
    }
    // Chunk sizes from the stream's own bytes.
    let mut sizes = stream.iter().map(|&b| usize::from(b % 17) + 1).cycle();
    let mut at = 0;
    let mut chunks = std::iter::from_fn(|| {
        if at >= stream.len() {
            return None;
        }
        let end = (at + sizes.next().unwrap_or(1)).min(stream.len());
        let chunk = &stream[at..end];
        at = end;
        Some(chunk)
    });
    let mut chunked = StreamStitcher::new(Stitcher::new(), prefill).expect("accepted once");
    assert_eq!(
        run(&mut chunked, &mut chunks),
        (out.clone(), result),
        "SL1: chunks"
    );
    let mut bytewise = StreamStitcher::new(Stitcher::new(), prefill).expect("accepted once");
    assert_eq!(
        run(&mut bytewise, &mut stream.chunks(1)),
        (out.clone(), result),
        "SL1: bytes"
    );
    // SL5: the prefill given late, after a number of chunks of 7 bytes
    // that the stream's first byte chooses: the same bytes, the same end.
    let pieces: Vec<&[u8]> = stream.chunks(7).collect();
    let at = stream.first().map_or(0, |&b| usize::from(b)) % (pieces.len() + 1);
    let mut late = StreamStitcher::awaiting_prefill(Stitcher::new());
    let mut late_out = Vec::new();
    let mut fed = || {
        for (k, piece) in pieces.iter().enumerate() {
            if k == at {
                late.give_prefill(prefill, &mut late_out)?;
            }
            late.feed(piece, &mut late_out)?;
        }
        if at == pieces.len() {
            late.give_prefill(prefill, &mut late_out)?;
        }
        late.finish(&mut late_out)
    };
    let late_result = fed().map_err(|e| e.kind());
    assert_eq!(
        (late_out, late_result),
        (out.clone(), result),
        "SL5: the prefill given after {at} chunks"
    );
    // The keys of the table that hold rows, and `\u`.
    let find = |needle: &[u8]| stream.windows(needle.len()).any(|w| w == needle);
    let keyed = rows_places().any(|place| find(place.key.as_bytes()));
    if !keyed && !find(b"\\u") {
        assert_eq!(result, Ok(()), "SL2: a stream without rows keys failed");
        assert_eq!(out, stream, "SL2: a stream without rows keys changed");
    }
}

// ------------------------------------------------- SGLang, structured pairs

/// One structured SGLang pair from fuzz bytes, merged through the `Value`
/// and the bytes path and held to a reference written from Q4 literally
/// (widths searched up to 128, more than any input here has ids): a pair
/// whose readings all keep the same decode ids merges to the prefill's ids
/// followed by those; any other is an error that changes nothing.
pub fn check_sglang_pair(data: &[u8]) {
    use pd_stitch::{Stitch, Stitcher};
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let shape = byte(0);
    let slot = byte(1) % 3;
    let batch = slot == 0 && byte(1) & 0x80 != 0;
    let items = if batch {
        1 + usize::from(byte(2) % 3)
    } else {
        1
    };
    let stitcher = match shape % 5 {
        0 => Stitcher::new(),
        n => Stitcher::new().row_shape(u64::from(n - 1), u64::from(1 + shape / 5 % 3)),
    };
    let width = match shape % 5 {
        0 => None,
        n => Some(u64::from(n - 1) * u64::from(1 + shape / 5 % 3)),
    };
    let b64 = |ids: &[i32]| {
        base64::engine::general_purpose::STANDARD.encode(
            ids.iter()
                .flat_map(|i| i.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
    };
    let output = |p: u64, c: u64, ids: &[i32]| -> Value {
        let rows = Value::String(b64(ids));
        match slot {
            0 => {
                serde_json::json!({"text": "x", "meta_info": {"prompt_tokens": p, "completion_tokens": c, "routed_experts": rows}})
            }
            1 => {
                serde_json::json!({"choices": [{"index": 0}], "usage": {"prompt_tokens": p, "completion_tokens": c}, "sglext": {"routed_experts": rows}})
            }
            _ => {
                serde_json::json!({"choices": [{"index": 0, "sgl_ext": {"routed_experts": rows}}], "usage": {"prompt_tokens": p, "completion_tokens": c}})
            }
        }
    };
    let (mut prefill, mut decode, mut expected) = (Vec::new(), Vec::new(), Vec::new());
    let mut all_merge = true;
    for item in 0..items {
        let at = 3 + 5 * item;
        let prompt = u64::from(byte(at) % 17);
        let c_p = u64::from(byte(at + 1) % 4);
        let c_d = u64::from(byte(at + 2) % 25);
        let i_p = u64::from(byte(at + 3) % 65);
        let i_d = u64::from(byte(at + 4) % 97);
        let pv: Vec<i32> = (0..i_p as i32).map(|i| 1 + i).collect();
        let dv: Vec<i32> = (0..i_d as i32).map(|i| -1 - i).collect();
        let mut kept = std::collections::BTreeSet::new();
        if prompt + c_p > 0 && prompt + c_d > 0 && width != Some(0) {
            let (cut, e_d) = (prompt + c_p - 1, prompt + c_d - 1);
            let widths: Vec<u64> = width.map_or_else(|| (1..=128).collect(), |w| vec![w]);
            for w in widths {
                if i_p % w != 0 || i_d % w != 0 || i_p / w > cut || i_d / w > e_d {
                    continue;
                }
                let (s_p, s_d) = (cut - i_p / w, e_d - i_d / w);
                if s_p <= prompt
                    && s_d <= prompt
                    && (s_d == s_p || s_d == prompt)
                    && s_d <= cut
                    && cut <= e_d
                {
                    kept.insert(w * (e_d - cut));
                }
            }
        }
        prefill.push(output(prompt, c_p, &pv));
        decode.push(output(prompt, c_d, &dv));
        if kept.len() == 1 {
            let t = *kept.iter().next().unwrap_or(&0) as usize;
            let mut ids = pv.clone();
            ids.extend_from_slice(&dv[dv.len() - t..]);
            expected.push(output(prompt, c_d, &ids));
        } else {
            all_merge = false;
            expected.push(Value::Null);
        }
    }
    let side = |items: Vec<Value>| {
        if batch {
            Value::Array(items)
        } else {
            items.into_iter().next().unwrap_or(Value::Null)
        }
    };
    let (prefill, decode, expected) = (side(prefill), side(decode), side(expected));
    let mut merged = decode.clone();
    let result = stitcher.merge(&prefill, &mut merged, Stitch::ForPd);
    let (ptext, dtext) = (
        serde_json::to_vec(&prefill).unwrap_or_default(),
        serde_json::to_vec(&decode).unwrap_or_default(),
    );
    let mut out = dtext.clone();
    let got = stitcher.merge_bytes(&ptext, &mut out, Stitch::ForPd);
    assert!(got == result, "B1: bytes {got:?}, Value {result:?}");
    if all_merge {
        assert!(
            result == Ok(true),
            "Q4/Q5: a determined pair was refused: {result:?}"
        );
        assert!(
            merged == expected,
            "Q6: merged {merged} but the reference is {expected}"
        );
        assert!(
            serde_json::from_slice::<Value>(&out).ok() == Some(merged),
            "B1: the bytes output parses to another value"
        );
    } else {
        let kind = result.as_ref().err().map(pd_stitch::Error::kind);
        assert!(
            matches!(
                kind,
                Some(pd_stitch::ErrorKind::Positions | pd_stitch::ErrorKind::Coverage)
            ),
            "Q4/Q5: an undetermined pair gave {result:?}"
        );
        assert!(merged == decode, "Q7: an error changed the decode");
        assert!(out == dtext, "Q7/B4: an error changed the decode's bytes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// The field of the routed experts: of the segments the broken merges
    /// touch, and of the inline rows they shorten.
    const FIELD: &str = "routed_experts";

    /// Dynamo's OpenAI API: compact rows once per response, at
    /// `nvext.routed_experts` (SPEC section 4b).
    const NVEXT: &str = "nvext";

    /// The by-handle place of the table (`choices[i].payload`).
    fn by_handle() -> &'static Place {
        rows_places()
            .find(|place| place.holds == Holds::Rows(RowsKind::ByHandle))
            .expect("the table has a by-handle place")
    }

    const TARGETS: [(&str, Merge, Kinds); 3] = [
        (
            "merge_routed_payload_in_json",
            pd_stitch::merge_routed_payload_in_json,
            Kinds::BY_HANDLE,
        ),
        (
            "merge_routed_experts_in_json",
            pd_stitch::merge_routed_experts_in_json,
            Kinds::INLINE,
        ),
        (
            "merge_routed_experts_for_pd",
            pd_stitch::merge_routed_experts_for_pd,
            Kinds::BOTH,
        ),
    ];

    fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("seeds")
            .join(target);
        let mut seeds: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
            .collect();
        seeds.sort();
        seeds
    }

    #[test]
    fn seeds_pass_and_most_merge() {
        for (target, merge, kinds) in TARGETS {
            let mut merged = 0;
            for (name, data) in seeds(target) {
                check(&data, merge, kinds);
                let (prefill, mut decode) = split(&data).expect(&name);
                merged += usize::from(merge(&prefill, &mut decode) == Ok(true));
            }
            assert!(merged >= 6, "{target}: only {merged} seeds merge");
        }
    }

    /// Whether `check` panics on some seed of `target` with `merge`.
    fn fires(target: &str, merge: Merge, kinds: Kinds) -> bool {
        seeds(target)
            .iter()
            .any(|(_, data)| catch_unwind(AssertUnwindSafe(|| check(data, merge, kinds))).is_err())
    }

    /// The by-handle merge, then `edit` on every stitched segment after the
    /// prefill's prefix, in every choice.
    fn by_handle_then(
        p: &Value,
        d: &mut Value,
        edit: fn(&mut Value),
    ) -> Result<bool, pd_stitch::Error> {
        let result = pd_stitch::merge_routed_payload_in_json(p, d);
        let prefix = prefill_segments(p, by_handle()).len();
        for choice in d["choices"].as_array_mut().into_iter().flatten() {
            let items = choice["payload"].as_array_mut().into_iter().flatten();
            items.skip(prefix).filter(|x| is_stitched(x)).for_each(edit);
        }
        result
    }

    #[test]
    fn broken_merges_are_caught() {
        let handle = "merge_routed_payload_in_json";
        // An error that leaves a change behind (R8).
        let dirty: Merge = |p, d| {
            pd_stitch::merge_routed_payload_in_json(p, d)?;
            let mut orphan = serde_json::json!({"choices": [{"payload": [{"field": FIELD}]}]});
            pd_stitch::merge_routed_payload_in_json(&Value::Null, &mut orphan)
        };
        assert!(fires(handle, dirty, Kinds::BY_HANDLE));
        // The prefill's segments in reverse order (L7).
        let reversed: Merge = |p, d| {
            let result = pd_stitch::merge_routed_payload_in_json(p, d);
            for choice in d["choices"].as_array_mut().into_iter().flatten() {
                if let Some(items) = choice["payload"].as_array_mut() {
                    items.reverse();
                }
            }
            result
        };
        assert!(fires(handle, reversed, Kinds::BY_HANDLE));
        // A decode segment's offset moved by a byte (L9 alone).
        let moved: Merge = |p, d| {
            by_handle_then(p, d, |x| {
                x["offset"] = Value::from(x["offset"].as_u64().unwrap() + 1)
            })
        };
        assert!(fires(handle, moved, Kinds::BY_HANDLE));
        // A decode segment one row longer (L2, L9).
        let longer: Merge = |p, d| {
            by_handle_then(p, d, |x| {
                x["rows"] = Value::from(x["rows"].as_u64().unwrap() + 1)
            })
        };
        assert!(fires(handle, longer, Kinds::BY_HANDLE));
        // Inline rows one byte short (I1).
        let short: Merge = |p, d| {
            let result = pd_stitch::merge_routed_experts_in_json(p, d);
            let merged = result == Ok(true);
            for choice in d["choices"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .filter(|_| merged)
            {
                if let Some(rows) = choice.get_mut(FIELD).and_then(Value::as_object_mut) {
                    let mut bytes = base64(rows["data"].as_str().unwrap(), "test");
                    bytes.pop();
                    rows["data"] = base64::engine::general_purpose::STANDARD
                        .encode(bytes)
                        .into();
                }
            }
            result
        };
        assert!(fires("merge_routed_experts_in_json", short, Kinds::INLINE));
    }

    /// Dynamo's rows at `nvext.routed_experts` (SPEC section 4b): its saved
    /// pairs pass, by both inline entry points, and a merge that leaves
    /// them one byte short, or not stitched at all, is caught.
    #[test]
    fn nvext_rows_are_held_to_the_inline_laws() {
        for (target, merge, kinds) in &TARGETS[1..] {
            let openai: Vec<_> = seeds(target)
                .into_iter()
                .filter(|(name, _)| name.contains("engine-dynamo") && name.contains("openai"))
                .collect();
            assert_eq!(openai.len(), 4, "{target}");
            for (name, data) in &openai {
                check(data, *merge, *kinds);
                let (prefill, mut decode) = split(data).expect(name);
                assert_eq!(merge(&prefill, &mut decode), Ok(true), "{name}");
            }
        }
        let short: Merge = |p, d| {
            let result = pd_stitch::merge_routed_experts_for_pd(p, d);
            if let Some(rows) = d.pointer_mut("/nvext/routed_experts/data") {
                let mut bytes = base64(rows.as_str().unwrap(), "test");
                bytes.pop();
                *rows = base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .into();
            }
            result
        };
        assert!(fires("merge_routed_experts_for_pd", short, Kinds::BOTH));
        // Ok(true), the choices' rows stitched, the response's left as sent.
        let unstitched: Merge = |p, d| {
            let sent = d.get(NVEXT).cloned();
            let result = pd_stitch::merge_routed_experts_for_pd(p, d);
            if let (Some(sent), Some(object)) = (sent, d.as_object_mut()) {
                object.insert(NVEXT.into(), sent);
            }
            result
        };
        assert!(fires(
            "merge_routed_experts_for_pd",
            unstitched,
            Kinds::BOTH
        ));
    }

    const BYTES: &str = "bytes_merge_for_pd";

    /// A real `ErrorDetail::Coverage` (the variants are non_exhaustive: not built
    /// by hand) at a place no seed's is: the third choice's rows.
    fn coverage_elsewhere() -> pd_stitch::Error {
        let rows = |start: u64| serde_json::json!({"data": "AQID", "shape": [1, 1, 3], "start": start, "dtype": "uint8"});
        let prefill = serde_json::json!({"choices": [{"routed_experts": rows(0)}]});
        let mut decode = serde_json::json!({"choices": [
            {"routed_experts": rows(0)}, {"routed_experts": rows(0)}, {"routed_experts": rows(7)}]});
        pd_stitch::merge_routed_experts_in_json(&prefill, &mut decode).unwrap_err()
    }

    /// Whether `check_bytes` panics on some seed of the bytes target with
    /// `bytes` held to the real `Value` function.
    fn bytes_fires(bytes: BytesMerge) -> bool {
        seeds(BYTES).iter().any(|(_, data)| {
            catch_unwind(AssertUnwindSafe(|| {
                check_bytes(data, bytes, pd_stitch::merge_routed_experts_for_pd)
            }))
            .is_err()
        })
    }

    /// The bytes target's seeds pass, and reach every outcome: merges, no-ops,
    /// errors of the merge and refusals of text that is not JSON.
    /// A break confined to `routed_expert_weights` segments: the oracle
    /// once checked `routed_experts` alone and took the weights for items a
    /// merge must not touch, so the simulator's seeds with weights failed L5
    /// and a merge that broke only the weights passed.
    #[test]
    fn weights_are_held_to_the_laws_at_their_own_cut() {
        let handle = "merge_routed_payload_in_json";
        let with_weights = |data: &Vec<u8>| {
            split(data).is_some_and(|(p, _)| {
                prefill_segments(&p, by_handle())
                    .iter()
                    .any(|x| field_of(x) == Some("routed_expert_weights"))
            })
        };
        assert!(
            seeds(handle).iter().any(|(_, data)| with_weights(data)),
            "no seed of {handle} carries routed_expert_weights segments"
        );
        let weights_only: Merge = |p, d| {
            let result = pd_stitch::merge_routed_payload_in_json(p, d);
            let prefix = prefill_segments(p, by_handle()).len();
            for choice in d["choices"].as_array_mut().into_iter().flatten() {
                let items = choice["payload"].as_array_mut().into_iter().flatten();
                items
                    .skip(prefix)
                    .filter(|x| field_of(x) == Some("routed_expert_weights"))
                    .for_each(|x| x["offset"] = Value::from(x["offset"].as_u64().unwrap() + 1));
            }
            result
        };
        assert!(fires(handle, weights_only, Kinds::BY_HANDLE));
    }

    #[test]
    fn bytes_seeds_pass_and_reach_every_outcome() {
        let [mut json, mut err, mut noop, mut merged] = [0; 4];
        for (name, data) in seeds(BYTES) {
            check_bytes(
                &data,
                pd_stitch::bytes::merge_routed_experts_for_pd,
                pd_stitch::merge_routed_experts_for_pd,
            );
            let nul = data.iter().position(|&b| b == 0).expect(&name);
            let mut decode = data[nul + 1..].to_vec();
            match pd_stitch::bytes::merge_routed_experts_for_pd(&data[..nul], &mut decode) {
                Err(e) if e.kind() == pd_stitch::ErrorKind::Json => json += 1,
                Err(_) => err += 1,
                Ok(false) => noop += 1,
                Ok(true) => merged += 1,
            }
        }
        assert!(
            json >= 3 && err >= 1 && noop >= 1 && merged >= 6,
            "{json} Json, {err} other Err, {noop} Ok(false), {merged} Ok(true)"
        );
    }

    /// Each of B1, B3 and B4 fires on a bytes merge broken the way it forbids.
    #[test]
    fn broken_bytes_merges_are_caught() {
        // The real one passes, so what follows is about the breaks.
        assert!(!bytes_fires(pd_stitch::bytes::merge_routed_experts_for_pd));
        // B4: an error that leaves the decode's bytes changed (trailing
        // whitespace, which a Value comparison would not even see).
        assert!(bytes_fires(|p, d| {
            let result = pd_stitch::bytes::merge_routed_experts_for_pd(p, d);
            if result.is_err() {
                d.push(b' ');
            }
            result
        }));
        // B1: Ok(false) where the Value function merges.
        assert!(bytes_fires(|p, d| {
            let mut scratch = d.clone();
            pd_stitch::bytes::merge_routed_experts_for_pd(p, &mut scratch).map(|_| false)
        }));
        // B1: the same variant at another place (the side flipped).
        assert!(bytes_fires(|p, d| {
            pd_stitch::bytes::merge_routed_experts_for_pd(p, d).map_err(|e| match e.kind() {
                pd_stitch::ErrorKind::Coverage => coverage_elsewhere(),
                _ => e,
            })
        }));
        // B1: merged bytes that say something else (a key added to the decode).
        assert!(bytes_fires(|p, d| {
            let result = pd_stitch::bytes::merge_routed_experts_for_pd(p, d);
            if result == Ok(true) {
                let at = d.iter().position(|&b| b == b'{').unwrap();
                d.splice(at + 1..at + 1, *b"\"merged\":1,");
            }
            result
        }));
        // B3: text that is not JSON accepted (trailing garbage cut off).
        assert!(bytes_fires(|p, d| {
            let end = |s: &[u8]| {
                s.iter()
                    .rposition(|&b| b == b'}')
                    .map_or(s.len(), |i| i + 1)
            };
            let mut trimmed = d[..end(d)].to_vec();
            let result = pd_stitch::bytes::merge_routed_experts_for_pd(&p[..end(p)], &mut trimmed);
            if result == Ok(true) {
                *d = trimmed;
            }
            result
        }));
        // B3: ErrorDetail::Json naming the wrong side.
        assert!(bytes_fires(|p, d| {
            pd_stitch::bytes::merge_routed_experts_for_pd(p, d).map_err(|e| match e.kind() {
                pd_stitch::ErrorKind::Json => {
                    // The variants are non_exhaustive: a real Json error of the decode.
                    pd_stitch::bytes::parse(pd_stitch::Side::Decode, b"{").unwrap_err()
                }
                _ => e,
            })
        }));
    }

    /// L2 and L1 are checked with these two; L9 being exact makes them
    /// redundant on a right merge, so they get their own small test.
    #[test]
    fn union_and_disjoint() {
        let iv = [(3, 5), (0, 2), (2, 3), (7, 7), (9, 10)];
        assert_eq!(union(iv.into_iter()), [(0, 5), (9, 10)]);
        let segs = |iv: &[(u128, u128)]| -> Vec<Seg> {
            iv.iter()
                .map(|&(pos, end)| Seg {
                    pos,
                    end,
                    offset: 0,
                    row_bytes: 0,
                })
                .collect()
        };
        assert!(disjoint(&segs(&[(2, 4), (0, 2), (1, 1)])));
        assert!(!disjoint(&segs(&[(0, 3), (5, 6), (2, 4)])));
        assert!(!disjoint(&segs(&[(0, 9), (3, 4), (5, 6)])));
    }

    /// How deep a corpus reaches: `cargo +nightly test -- --ignored
    /// --nocapture` in fuzz/ prints, per target, how many inputs of
    /// fuzz/corpus/<target> are skipped (not two JSON texts), fail, are no-ops,
    /// or merge.
    #[test]
    #[ignore = "reads the local working corpus"]
    fn corpus_outcomes() {
        for (target, merge, _) in TARGETS {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("corpus")
                .join(target);
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let [mut skipped, mut err, mut noop, mut merged] = [0; 4];
            for entry in entries {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                match split(&data).map(|(p, mut d)| merge(&p, &mut d)) {
                    None => skipped += 1,
                    Some(Err(_)) => err += 1,
                    Some(Ok(false)) => noop += 1,
                    Some(Ok(true)) => merged += 1,
                }
            }
            println!("{target}: {skipped} skipped, {err} Err, {noop} Ok(false), {merged} Ok(true)");
        }
    }
    /// The SGLang target's seeds pass, and a deterministic sweep of
    /// structured inputs (SplitMix64) passes too: the checks run without
    /// libFuzzer, on stable.
    #[test]
    fn sglang_seeds_and_a_sweep_pass() {
        let seeds = seeds("sglang_merge");
        assert!(seeds.len() >= 9);
        for (_, data) in &seeds {
            check_sglang_pair(data);
        }
        let mut state = 0x5eed_u64;
        for _ in 0..50_000 {
            let mut data = [0u8; 18];
            for chunk in data.chunks_mut(8) {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                let z = (z ^ (z >> 31)).to_le_bytes();
                let n = chunk.len();
                chunk.copy_from_slice(&z[..n]);
            }
            check_sglang_pair(&data);
        }
    }

    /// `check` catches a for-pd merge that writes SGLang rows other than
    /// the prefill's followed by a tail of the decode's.
    #[test]
    fn sglang_checks_bite() {
        fn wrong(p: &Value, d: &mut Value) -> Result<bool, pd_stitch::Error> {
            let r = pd_stitch::merge_routed_experts_for_pd(p, d);
            if r == Ok(true) {
                if let Some(rows) = d.pointer_mut("/meta_info/routed_experts") {
                    *rows = Value::String("AAAAAA==".into());
                }
            }
            r
        }
        let fired = seeds("merge_routed_experts_for_pd")
            .iter()
            .any(|(_, data)| {
                catch_unwind(AssertUnwindSafe(|| check(data, wrong, Kinds::BOTH))).is_err()
            });
        assert!(fired);
    }

    /// A pair at `place`, built from the place by its kind, as fuzz input
    /// (`prefill NUL decode`): inline compact rows, or a payload, at its
    /// holder and key; SGLang's ids with their counts where the table puts
    /// them (3 prompt tokens; 3 ids, then 5: one width reads them).
    fn pair_at(place: &Place) -> Vec<u8> {
        let put = |value: Value| {
            let mut out = serde_json::json!({"choices": [{"index": 0}]});
            let holder = match place.holder {
                Holder::Choice => &mut out["choices"][0],
                Holder::ChoiceMember(member) => &mut out["choices"][0][member],
                Holder::Member(member) => &mut out[member],
            };
            holder[place.key] = value;
            out
        };
        let (prefill, decode) = match place.holds {
            Holds::Rows(RowsKind::Inline) => {
                let rows = |data: &str, n: u64| serde_json::json!({"data": data, "shape": [n, 1, 3], "start": 0, "dtype": "uint8"});
                (put(rows("AQID", 1)), put(rows("AAAABAUG", 2)))
            }
            Holds::Rows(RowsKind::ByHandle) => {
                let segment = |file: &str, pos: u64, rows: u64| {
                    serde_json::json!({"field": FIELD, "file": file, "offset": 0, "pos": pos,
                        "rows": rows, "dtype": "uint8", "shape": [1]})
                };
                (
                    put(serde_json::json!([segment("p", 0, 2)])),
                    put(serde_json::json!([segment("d", 2, 3)])),
                )
            }
            _ => {
                // The counts in the rows' object when the table counts
                // there, else in the response's object of counts alone.
                let counted =
                    |h: Holder| places::all().any(|p| p.holder == h && p.holds == Holds::Count);
                let counts = if counted(place.holder) {
                    place.holder
                } else {
                    places::all()
                        .map(|p| p.holder)
                        .find(|h| {
                            matches!(h, Holder::Member(_))
                                && places::all()
                                    .filter(|p| p.holder == *h)
                                    .all(|p| p.holds == Holds::Count)
                        })
                        .expect("an object of counts")
                };
                let side = |completion: u64, ids: &[i32]| {
                    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
                    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
                    let mut out = put(text.into());
                    let Holder::Member(member) = counts else {
                        panic!("counts of {place:?} in a choice");
                    };
                    out[member]["prompt_tokens"] = 3.into();
                    out[member]["completion_tokens"] = completion.into();
                    out
                };
                (side(1, &[10, 11, 12]), side(3, &[0, 0, 0, 20, 21]))
            }
        };
        let mut data = serde_json::to_vec(&prefill).unwrap();
        data.push(0);
        data.extend(serde_json::to_vec(&decode).unwrap());
        data
    }

    /// The value at `place` of `response`'s first choice (or of the
    /// response, for rows it holds).
    fn at_place<'a>(response: &'a mut Value, place: &Place) -> Option<&'a mut Value> {
        let holder = match place.holder {
            Holder::Choice => response.get_mut("choices")?.get_mut(0)?,
            Holder::ChoiceMember(member) => {
                response.get_mut("choices")?.get_mut(0)?.get_mut(member)?
            }
            Holder::Member(member) => response.get_mut(member)?,
        };
        holder.get_mut(place.key)
    }

    /// Every place of the table that holds rows is held to its laws: a pair
    /// built at the place passes the checks under the entry points that
    /// merge its kind, and a merge that leaves the rows there as the decode
    /// sent them, returning `Ok(true)`, is caught. A place added to the
    /// table is checked with no line here.
    #[test]
    fn every_place_of_the_table_is_held_to_its_laws() {
        let mut walked = 0;
        // The crate's table itself, not the oracle's reading of it: a place
        // the oracle left out is then a change it does not expect (R7).
        for place in places::all().filter(|place| matches!(place.holds, Holds::Rows(_))) {
            let data = pair_at(place);
            let (prefill, decode) = split(&data).expect("two JSON texts");
            for (target, merge, kinds) in TARGETS {
                if !checks(kinds, place) {
                    continue;
                }
                check(&data, merge, kinds);
                let mut merged = decode.clone();
                assert_eq!(merge(&prefill, &mut merged), Ok(true), "{target} {place:?}");
                let unstitched = |p: &Value, d: &mut Value| {
                    let sent = at_place(d, place).map(|v| v.clone());
                    let result = merge(p, d);
                    if let (Some(sent), Some(rows)) = (sent, at_place(d, place)) {
                        *rows = sent;
                    }
                    result
                };
                let fired =
                    catch_unwind(AssertUnwindSafe(|| check_by(&data, &unstitched, kinds))).is_err();
                assert!(fired, "{target}: rows left unstitched at {place:?} pass");
            }
            walked += 1;
        }
        assert!(walked >= 6, "{walked}");
    }
}
