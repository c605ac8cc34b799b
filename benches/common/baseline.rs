//! A straightforward implementation of the same merge rules, as a yardstick
//! (for the inputs of these benchmarks: `routed_experts` only, 48 x 8 rows):
//! it clones the segment arrays for every choice, decodes all base64 fully
//! with the `base64` crate, and re-encodes everything. It is correct on the
//! inputs the benchmarks use (the benchmark checks that it agrees with the
//! library), but validates far less and is not meant for anything else.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

fn u(v: &Value) -> Result<u64, String> {
    v.as_u64().ok_or_else(|| format!("not an integer: {v}"))
}

fn itemsize(dtype: &str) -> Result<u64, String> {
    Ok(match dtype {
        "bool" | "int8" | "uint8" => 1,
        "int16" | "uint16" | "float16" | "bfloat16" => 2,
        "int32" | "uint32" | "float32" => 4,
        "int64" | "uint64" | "float64" => 8,
        other => return Err(format!("dtype {other}")),
    })
}

fn row_bytes(seg: &Value) -> Result<u64, String> {
    let mut n = itemsize(seg["dtype"].as_str().ok_or("dtype")?)?;
    for d in seg["shape"].as_array().ok_or("shape")? {
        n = n.checked_mul(u(d)?).ok_or("overflow")?;
    }
    Ok(n)
}

/// By handle: the rules of `merge_routed_payload_in_json`, done plainly.
pub fn by_handle(prefill: &Value, decode: &mut Value) -> Result<bool, String> {
    let prefill_payload: Vec<Value> = prefill["choices"][0]["payload"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let stitched = |s: &Value| s["field"] == "routed_experts";
    let mut cut = None;
    for s in prefill_payload.iter().filter(|s| stitched(s)) {
        let end = u(&s["pos"])?
            .checked_add(u(&s["rows"])?)
            .ok_or("overflow")?;
        row_bytes(s)?;
        cut = Some(cut.map_or(end, |c: u64| c.max(end)));
    }
    let Some(cut) = cut else { return Ok(false) };
    let choices = decode["choices"].as_array().cloned().ok_or("choices")?;
    let mut merged_choices = Vec::new();
    for mut choice in choices {
        let payload: Vec<Value> = choice["payload"].as_array().cloned().unwrap_or_default();
        let mut merged: Vec<Value> = prefill_payload
            .iter()
            .filter(|s| stitched(s))
            .cloned()
            .collect();
        for seg in payload {
            if !stitched(&seg) {
                merged.push(seg.clone());
                continue;
            }
            let (pos, rows, offset, rb) = (
                u(&seg["pos"])?,
                u(&seg["rows"])?,
                u(&seg["offset"])?,
                row_bytes(&seg)?,
            );
            let end = pos.checked_add(rows).ok_or("overflow")?;
            if end <= cut {
                continue;
            }
            let mut seg = seg.clone();
            if pos < cut {
                seg["offset"] = json!(offset + (cut - pos) * rb);
                seg["rows"] = json!(end - cut);
                seg["pos"] = json!(cut);
            }
            merged.push(seg);
        }
        choice["payload"] = Value::Array(merged);
        merged_choices.push(choice);
    }
    decode["choices"] = Value::Array(merged_choices);
    Ok(true)
}

fn widen(bytes: &[u8], from: usize, to: usize) -> Vec<u8> {
    if from == to {
        return bytes.to_vec();
    }
    let mut out = Vec::new();
    for e in bytes.chunks(from) {
        out.extend_from_slice(e);
        out.extend(std::iter::repeat_n(0, to - from));
    }
    out
}

/// Inline compact: decode everything, concatenate, re-encode.
pub fn compact(prefill: &Value, decode: &mut Value) -> Result<bool, String> {
    let p = &prefill["choices"][0]["routed_experts"];
    let p_bytes = STANDARD
        .decode(p["data"].as_str().ok_or("data")?)
        .map_err(|e| e.to_string())?;
    let p_dtype = p["dtype"].as_str().unwrap_or("uint8");
    let (p_start, p_seq) = (u(&p["start"])?, u(&p["shape"][0])?);
    let cut = p_start + p_seq;
    for choice in decode["choices"].as_array_mut().ok_or("choices")? {
        let d = &mut choice["routed_experts"];
        let d_bytes = STANDARD
            .decode(d["data"].as_str().ok_or("data")?)
            .map_err(|e| e.to_string())?;
        let d_dtype = d["dtype"].as_str().unwrap_or("uint8").to_owned();
        let (d_start, d_seq) = (u(&d["start"])?, u(&d["shape"][0])?);
        if d_start > cut || d_start + d_seq < cut {
            return Err("gap".into());
        }
        let (pi, di) = (itemsize(p_dtype)? as usize, itemsize(&d_dtype)? as usize);
        let out = pi.max(di);
        let row = d_bytes.len() / d_seq.max(1) as usize;
        let skip = (cut - d_start) as usize * row;
        let mut merged = widen(&p_bytes, pi, out);
        merged.extend(widen(&d_bytes[skip..], di, out));
        let rows = d_start + d_seq - p_start;
        d["data"] = json!(STANDARD.encode(&merged));
        d["shape"][0] = json!(rows);
        d["start"] = json!(p_start);
        d["dtype"] = json!(if out == pi {
            p_dtype.to_owned()
        } else {
            d_dtype
        });
    }
    Ok(true)
}

/// Reads a version 1.0 `.npy` file plainly: (descr, rows, data).
fn npy(file: &[u8]) -> Result<(String, u64, &[u8]), String> {
    let len = u16::from_le_bytes([file[8], file[9]]) as usize;
    let header = std::str::from_utf8(&file[10..10 + len]).map_err(|e| e.to_string())?;
    let descr = header
        .split("'descr': '")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .ok_or("descr")?;
    let rows = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .ok_or("shape")?
        .trim()
        .parse()
        .map_err(|_| "rows")?;
    Ok((descr.to_owned(), rows, &file[10 + len..]))
}

/// Inline npy: decode both files fully, concatenate, write a new file, encode.
pub fn npy_merge(prefill: &Value, decode: &mut Value) -> Result<bool, String> {
    let p_file = STANDARD
        .decode(
            prefill["choices"][0]["routed_experts"]
                .as_str()
                .ok_or("npy")?,
        )
        .map_err(|e| e.to_string())?;
    let (p_descr, p_rows, p_data) = npy(&p_file)?;
    for choice in decode["choices"].as_array_mut().ok_or("choices")? {
        let d = &mut choice["routed_experts"];
        let d_file = STANDARD
            .decode(d.as_str().ok_or("npy")?)
            .map_err(|e| e.to_string())?;
        let (d_descr, d_rows, d_data) = npy(&d_file)?;
        let (pi, di) = (
            p_descr[2..].parse::<usize>().map_err(|_| "descr")?,
            d_descr[2..].parse::<usize>().map_err(|_| "descr")?,
        );
        let row = d_data.len() / d_rows.max(1) as usize;
        let mut data = widen(p_data, pi, di);
        data.extend_from_slice(&d_data[p_rows as usize * row..]);
        // NumPy leaves room for the first axis to grow to 21 digits.
        let growth = " ".repeat(21 - d_rows.to_string().len());
        let dict = format!("{{'descr': '{d_descr}', 'fortran_order': False, 'shape': ({d_rows}, 48, 8), }}{growth}");
        let padded = (10 + dict.len() + 1).div_ceil(64) * 64 - 10;
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(padded as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.resize(10 + padded - 1, b' ');
        out.push(b'\n');
        out.extend_from_slice(&data);
        *d = json!(STANDARD.encode(&out));
    }
    Ok(true)
}
