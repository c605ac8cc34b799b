//! Bounded-exhaustive checking (the small-scope hypothesis): every by-handle
//! layout and every inline compact pair within a small scope, each checked
//! against every law that applies, with a reference model written here from
//! per-position maps (no interval arithmetic).
//!
//! By handle: segments `(pos, rows)` with `pos, rows` in `0..=3`; 0-2
//! `routed_experts` segments on the prefill; 0-2 on the decode with a
//! pass-through item absent or at any index; a second decode choice that is
//! absent, `payload: null`, or a fixed segment; `uint8` rows of width 1 and
//! `uint16` rows of width 2. Every segment has its own file, so a (file, byte address) names
//! exactly one row of one side.
//!
//! Every by-handle case is also merged strictly: the answer must be the
//! plain merge's when every merged choice reads in position order, else
//! `ErrorDetail::Layout` at the first choice that does not, naming the segments a
//! position-by-position reading finds.
//!
//! Inline compact: prefill `start` and `seq` in `0..=3`, decode `start` and
//! `seq` in `0..=4`, every pair of `uint8`/`uint16`, widths 1 and 2.
//!
//! Every 8th by-handle case (220,000 of them) and every inline compact pair
//! also goes through the bytes entry point, which must give the `Value`
//! result (B1, B4).

use std::collections::{BTreeMap, BTreeSet};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::{
    bytes, merge_routed_experts_in_json, merge_routed_payload_in_json, Error, ErrorDetail,
    ErrorKind,
};
use serde_json::{json, Value};

const OFFSET: u64 = 5;

fn seg(file: &str, pos: u64, rows: u64, dtype: &str, width: u64) -> Value {
    json!({"field": "routed_experts", "file": file, "offset": OFFSET, "pos": pos, "rows": rows,
           "dtype": dtype, "shape": [width]})
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap()
}

fn routed(v: &Value) -> bool {
    v["field"] == "routed_experts"
}

/// Position -> every (file, byte address) a payload's routed segments give it.
fn rows_of(payload: &[Value], row_bytes: u64) -> BTreeMap<u64, Vec<(String, u64)>> {
    let mut map: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for s in payload.iter().filter(|s| routed(s)) {
        for i in 0..num(s, "rows") {
            let address = num(s, "offset") + i * row_bytes;
            map.entry(num(s, "pos") + i)
                .or_default()
                .push((s["file"].as_str().unwrap().to_owned(), address));
        }
    }
    map
}

/// B1 and B4 on one case: the bytes entry point gives the `Value` result
/// (`result`, `after`) on the same responses as compact text.
fn same_through_bytes(
    prefill: &Value,
    before: &Value,
    result: &Result<bool, Error>,
    after: &Value,
    merge: fn(&[u8], &mut Vec<u8>) -> Result<bool, Error>,
) -> Result<(), String> {
    let ptext = serde_json::to_vec(prefill).unwrap();
    let dtext = serde_json::to_vec(before).unwrap();
    let mut out = dtext.clone();
    let got = merge(&ptext, &mut out);
    if got != *result {
        return Err(format!("bytes: {got:?}, Value: {result:?}"));
    }
    let same = if got == Ok(true) {
        serde_json::from_slice::<Value>(&out).ok().as_ref() == Some(after)
    } else {
        out == dtext
    };
    if same {
        Ok(())
    } else {
        Err("bytes: the output differs from the Value path's".into())
    }
}

fn disjoint(map: &BTreeMap<u64, Vec<(String, u64)>>) -> bool {
    map.values().all(|v| v.len() == 1)
}

/// Checks one by-handle case; returns a description of the first broken law.
fn check_by_handle(
    prefill_segs: &[(u64, u64)],
    decode_segs: &[(u64, u64)],
    pass_at: Option<usize>,
    second: u8,
    dtype: &str,
    width: u64,
    through_bytes: bool,
) -> Result<(), String> {
    let row_bytes = width * if dtype == "uint8" { 1 } else { 2 };
    let prefill_payload: Vec<Value> = prefill_segs
        .iter()
        .enumerate()
        .map(|(i, &(p, r))| seg(&format!("p{i}"), p, r, dtype, width))
        .collect();
    let mut decode_payload: Vec<Value> = decode_segs
        .iter()
        .enumerate()
        .map(|(i, &(p, r))| seg(&format!("d{i}"), p, r, dtype, width))
        .collect();
    if let Some(at) = pass_at {
        decode_payload.insert(at, json!({"field": "sampling_mask", "file": "m", "pos": 1}));
    }
    let second_choice = match second {
        0 => json!({"index": 1}),
        1 => json!({"index": 1, "payload": null}),
        _ => json!({"index": 1, "payload": [seg("e0", 2, 2, dtype, width)]}),
    };
    let prefill = json!({"choices": [{"payload": prefill_payload}]});
    let before = json!({"choices": [{"index": 0, "payload": decode_payload}, second_choice]});
    let mut after = before.clone();
    let result = merge_routed_payload_in_json(&prefill, &mut after);
    if through_bytes {
        same_through_bytes(
            &prefill,
            &before,
            &result,
            &after,
            bytes::merge_routed_payload_in_json,
        )?;
    }

    // The layout rule looks at positions only (one dtype and shape per case
    // here), so the width adds nothing: strict runs on the uint8 half.
    if dtype == "uint8" {
        check_strict(&prefill, &before, &result, &after)?;
    }

    let decode_has = !decode_segs.is_empty() || second == 2;
    if prefill_segs.is_empty() {
        // L6 and R4: nothing to merge, or decode rows without prefill rows.
        return match (decode_has, result.as_ref().map_err(Error::kind)) {
            (false, Ok(false)) | (true, Err(ErrorKind::MissingPrefillField)) if after == before => {
                Ok(())
            }
            _ => Err(format!(
                "no prefill segment: got {result:?}, decode changed: {}",
                after != before
            )),
        };
    }
    if result != Ok(true) {
        return Err(format!("expected Ok(true), got {result:?}"));
    }
    let cut = prefill_segs.iter().map(|&(p, r)| p + r).max().unwrap();
    let prefill_rows = rows_of(&prefill_payload, row_bytes);
    for (c, choice) in after["choices"].as_array().unwrap().iter().enumerate() {
        let merged = choice["payload"].as_array().unwrap();
        let original = before["choices"][c]["payload"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // L7: the prefill's segments first, as they are.
        if merged[..prefill_payload.len()] != prefill_payload[..] {
            return Err(format!("choice {c}: prefix differs"));
        }
        // L5: other items through, in order.
        let others = |v: &[Value]| v.iter().filter(|s| !routed(s)).cloned().collect::<Vec<_>>();
        if others(merged) != others(&original) {
            return Err(format!("choice {c}: pass-through items differ"));
        }
        // L9: each decode segment dropped, clipped or kept as rule 5 says.
        let mut expected = Vec::new();
        for s in original.iter().filter(|s| routed(s)) {
            let (p, r) = (num(s, "pos"), num(s, "rows"));
            if p + r <= cut {
                continue;
            }
            let mut s = s.clone();
            if p < cut {
                s["pos"] = json!(cut);
                s["rows"] = json!(p + r - cut);
                s["offset"] = json!(OFFSET + (cut - p) * row_bytes);
            }
            expected.push(s);
        }
        let got: Vec<Value> = merged[prefill_payload.len()..]
            .iter()
            .filter(|s| routed(s))
            .cloned()
            .collect();
        if got != expected {
            return Err(format!(
                "choice {c}: decode segments {got:?}, expected {expected:?}"
            ));
        }
        // L2: coverage, position by position.
        let decode_rows = rows_of(&original, row_bytes);
        let merged_rows = rows_of(merged, row_bytes);
        let mut cover: BTreeSet<u64> = prefill_rows.keys().copied().collect();
        cover.extend(decode_rows.keys().copied().filter(|&x| x >= cut));
        if merged_rows.keys().copied().collect::<BTreeSet<_>>() != cover {
            return Err(format!("choice {c}: coverage differs"));
        }
        // L1 and L3, when each side's segments are disjoint.
        if disjoint(&prefill_rows) && disjoint(&decode_rows) {
            if !disjoint(&merged_rows) {
                return Err(format!("choice {c}: merged segments overlap"));
            }
            for (x, got) in &merged_rows {
                let want = prefill_rows.get(x).or_else(|| decode_rows.get(x)).unwrap();
                if got != want {
                    return Err(format!(
                        "choice {c} position {x}: rows from {got:?}, expected {want:?}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Where the trainer (SPEC 5a: the last segment covering a position is the
/// one read) reads `payload`'s routed segments otherwise than written: the
/// first position between the first and the last covered that nothing
/// covers, as `(segment read before it, segment read after it)`, payload
/// indices. (One dtype and one width here, so only gaps can misread.)
fn first_misread(payload: &[Value]) -> Option<(usize, usize)> {
    let mut reader: BTreeMap<u64, usize> = BTreeMap::new();
    for (j, s) in payload.iter().enumerate().filter(|(_, s)| routed(s)) {
        for x in num(s, "pos")..num(s, "pos") + num(s, "rows") {
            reader.insert(x, j);
        }
    }
    let (&lo, _) = reader.first_key_value()?;
    let (&hi, _) = reader.last_key_value()?;
    let x = (lo..=hi).find(|x| !reader.contains_key(x))?;
    let next = (x..=hi).find(|y| reader.contains_key(y))?;
    Some((reader[&(x - 1)], reader[&next]))
}

/// Strict mode on the same case: the plain merge's answer when the trainer reads every merged
/// choice as written (or nothing was merged), else
/// `ErrorDetail::Layout` at the first choice that does not, naming the two
/// segments the reading finds, with the decode untouched.
fn check_strict(
    prefill: &Value,
    before: &Value,
    plain: &Result<bool, Error>,
    plain_after: &Value,
) -> Result<(), String> {
    let mut after = before.clone();
    let strict =
        pd_stitch::Stitcher::new()
            .strict()
            .merge(prefill, &mut after, pd_stitch::Stitch::ByHandle);
    let misread = match plain {
        Ok(true) => plain_after["choices"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .find_map(|(c, choice)| {
                first_misread(choice["payload"].as_array().unwrap()).map(|pair| (c, pair))
            }),
        _ => None,
    };
    match (misread, strict.as_ref().map_err(Error::detail)) {
        (None, _) if strict == *plain && &after == plain_after => Ok(()),
        (Some((c, (a, b))), Err(ErrorDetail::Layout { at, problem, .. }))
            if after == *before
                && at.to_string() == format!("decode choices[{c}].payload")
                && problem.segments() == (a, b) =>
        {
            Ok(())
        }
        (misread, _) => Err(format!(
            "strict: got {strict:?}, the reading finds {misread:?}; decode changed: {}",
            after != *before
        )),
    }
}

#[test]
fn every_small_by_handle_layout_obeys_every_law() {
    const BYTES_STRIDE: u64 = 8;
    let one: Vec<(u64, u64)> = (0..=3).flat_map(|p| (0..=3).map(move |r| (p, r))).collect();
    let mut layouts: Vec<Vec<(u64, u64)>> = vec![vec![]];
    layouts.extend(one.iter().map(|&s| vec![s]));
    layouts.extend(
        one.iter()
            .flat_map(|&a| one.iter().map(move |&b| vec![a, b])),
    );
    let mut cases = 0u64;
    let mut failures = Vec::new();
    // Both dtypes and both widths, as rows of 1 and 4 bytes.
    for (dtype, width) in [("uint8", 1), ("uint16", 2)] {
        for prefill in &layouts {
            for decode in &layouts {
                for pass_at in std::iter::once(None).chain((0..=decode.len()).map(Some)) {
                    for second in 0..3 {
                        cases += 1;
                        // The bytes path on a fixed sample (every 8th case):
                        // all of them would double the sweep's CI time.
                        let through_bytes = cases % BYTES_STRIDE == 0;
                        if let Err(e) = check_by_handle(
                            prefill,
                            decode,
                            pass_at,
                            second,
                            dtype,
                            width,
                            through_bytes,
                        ) {
                            if failures.len() < 5 {
                                failures.push(format!("prefill {prefill:?} decode {decode:?} pass {pass_at:?} second {second} {dtype}x{width}: {e}"));
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    println!("by handle: {cases} cases checked");
    assert_eq!(cases, 2 * 273 * (2 + 16 * 3 + 256 * 4) * 3);
}

fn compact(start: u64, seq: u64, dtype: &str, width: u64, base: u64) -> (Value, Vec<u64>) {
    let size = if dtype == "uint8" { 1 } else { 2 };
    let values: Vec<u64> = (0..seq * width).map(|i| base + i).collect();
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|v| v.to_le_bytes()[..size].to_vec())
        .collect();
    (
        json!({"data": STANDARD.encode(bytes), "shape": [seq, 1, width], "start": start, "dtype": dtype}),
        values,
    )
}

#[test]
fn every_small_inline_compact_pair_obeys_every_law() {
    let mut cases = 0u64;
    for width in 1..=2u64 {
        for (pd, dd) in [
            ("uint8", "uint8"),
            ("uint8", "uint16"),
            ("uint16", "uint8"),
            ("uint16", "uint16"),
        ] {
            for (ps, pn) in (0..=3).flat_map(|s| (0..=3).map(move |n| (s, n))) {
                for (ds, dn) in (0..=4).flat_map(|s| (0..=4).map(move |n| (s, n))) {
                    cases += 1;
                    let (p, pv) = compact(ps, pn, pd, width, 10);
                    let (d, dv) = compact(ds, dn, dd, width, 100);
                    let prefill = json!({"choices": [{"routed_experts": p}]});
                    let before = json!({"choices": [{"routed_experts": d}]});
                    let mut after = before.clone();
                    let result = merge_routed_experts_in_json(&prefill, &mut after);
                    if let Err(e) = same_through_bytes(
                        &prefill,
                        &before,
                        &result,
                        &after,
                        bytes::merge_routed_experts_in_json,
                    ) {
                        panic!("{ps},{pn} {ds},{dn} {pd}/{dd} x{width}: {e}");
                    }
                    let cut = ps + pn;
                    if !(ds <= cut && cut <= ds + dn) {
                        assert_eq!(
                            result.map_err(|e| e.kind()),
                            Err(ErrorKind::Coverage),
                            "{ps},{pn} {ds},{dn}"
                        );
                        assert_eq!(after, before);
                        continue;
                    }
                    assert_eq!(result, Ok(true));
                    let out = &after["choices"][0]["routed_experts"];
                    let dtype = if pd == "uint16" || dd == "uint16" {
                        "uint16"
                    } else {
                        "uint8"
                    };
                    assert_eq!(out["dtype"], dtype);
                    assert_eq!(out["start"], ps);
                    assert_eq!(out["shape"], json!([ds + dn - ps, 1, width]));
                    // Per position: the prefill's row below the cut, the decode's from it.
                    let mut expected = Vec::new();
                    for x in ps..ds + dn {
                        let (values, at) = if x < cut {
                            (&pv, x - ps)
                        } else {
                            (&dv, x - ds)
                        };
                        expected.extend_from_slice(
                            &values[(at * width) as usize..((at + 1) * width) as usize],
                        );
                    }
                    let bytes = STANDARD.decode(out["data"].as_str().unwrap()).unwrap();
                    let size = if dtype == "uint8" { 1 } else { 2 };
                    let got: Vec<u64> = bytes
                        .chunks(size)
                        .map(|c| c.iter().rev().fold(0, |a, &b| a << 8 | u64::from(b)))
                        .collect();
                    assert_eq!(got, expected, "{ps},{pn} {ds},{dn} {pd}/{dd} x{width}");
                }
            }
        }
    }
    println!("inline compact: {cases} cases checked");
    assert_eq!(cases, 2 * 4 * 16 * 25);
}

/// SGLang's rows (SPEC section 10, Q4-Q6): every pair within a small
/// scope (prompt 1-4 tokens, the prefill reporting 1-2 generated, the
/// decode 1-5; 0-12 prefill ids and 0-16 decode ids; no row shape, or
/// widths 1-3), through the `Value` and the bytes path, against a reference
/// written here from Q4 literally: a reading is a width (the given one, or
/// any) under which each side's rows start in `[0, prompt]`, the decode's
/// at the prefill's start or the prompt's end, covering the cut. One merged
/// output over all readings: merged to it; none or several: an error, and
/// the decode untouched.
#[test]
fn every_small_sglang_pair_obeys_every_law() {
    use pd_stitch::{Stitch, Stitcher};
    let b64 = |ids: &[i32]| {
        STANDARD.encode(
            ids.iter()
                .flat_map(|i| i.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
    };
    let out = |p: u64, c: u64, ids: &[i32]| json!({"text": "", "meta_info": {"prompt_tokens": p, "completion_tokens": c, "routed_experts": b64(ids)}});
    let mut cases = 0u64;
    let mut merged_count = 0u64;
    for prompt in 1..=4u64 {
        for c_p in 1..=2u64 {
            for c_d in 1..=5u64 {
                for i_p in 0..=12u64 {
                    for i_d in 0..=16u64 {
                        for shape in [None, Some(1u64), Some(2), Some(3)] {
                            cases += 1;
                            let (cut, e_d) = (prompt + c_p - 1, prompt + c_d - 1);
                            // The reference: every reading's kept ids.
                            let widths: Vec<u64> = match shape {
                                Some(w) => vec![w],
                                None => (1..=64).collect(),
                            };
                            let mut kept = std::collections::BTreeSet::new();
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
                            let pv: Vec<i32> = (0..i_p as i32).map(|i| 10 + i).collect();
                            let dv: Vec<i32> = (0..i_d as i32).map(|i| -100 - i).collect();
                            let prefill = out(prompt, c_p, &pv);
                            let before = out(prompt, c_d, &dv);
                            let stitcher = match shape {
                                Some(w) => Stitcher::new().row_shape(1, w),
                                None => Stitcher::new(),
                            };
                            let mut after = before.clone();
                            let result = stitcher.merge(&prefill, &mut after, Stitch::ForPd);
                            // B1, B4 through the bytes path.
                            let (ptext, dtext) = (
                                serde_json::to_vec(&prefill).unwrap(),
                                serde_json::to_vec(&before).unwrap(),
                            );
                            let mut bytes_out = dtext.clone();
                            let got = stitcher.merge_bytes(&ptext, &mut bytes_out, Stitch::ForPd);
                            let label =
                                format!("P {prompt} Cp {c_p} Cd {c_d} ids {i_p}/{i_d} w {shape:?}");
                            assert_eq!(got, result, "{label}");
                            if kept.len() == 1 {
                                let t = *kept.iter().next().unwrap() as usize;
                                assert_eq!(result, Ok(true), "{label}");
                                let mut expected = pv.clone();
                                expected.extend_from_slice(&dv[dv.len() - t..]);
                                assert_eq!(
                                    after["meta_info"]["routed_experts"],
                                    b64(&expected),
                                    "{label}"
                                );
                                assert_eq!(
                                    serde_json::from_slice::<Value>(&bytes_out).unwrap(),
                                    after,
                                    "{label}"
                                );
                                merged_count += 1;
                            } else {
                                let err = result.expect_err(&label);
                                assert!(
                                    matches!(
                                        err.kind(),
                                        pd_stitch::ErrorKind::Positions
                                            | pd_stitch::ErrorKind::Coverage
                                    ),
                                    "{label}: {err}"
                                );
                                if shape.is_none() {
                                    let ambiguous = matches!(
                                        err.detail(),
                                        ErrorDetail::Positions {
                                            problem:
                                                pd_stitch::algebra::PositionProblem::Ambiguous { .. },
                                            ..
                                        }
                                    );
                                    assert_eq!(ambiguous, kept.len() > 1, "{label}: {err}");
                                }
                                assert_eq!(after, before, "{label}");
                                assert_eq!(bytes_out, dtext, "{label}");
                            }
                        }
                    }
                }
            }
        }
    }
    println!("sglang: {cases} cases checked, {merged_count} merged");
    assert_eq!(cases, 4 * 2 * 5 * 13 * 17 * 4);
    assert!(merged_count > 1000, "{merged_count}");
}
