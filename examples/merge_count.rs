//! N merges of one by-handle pair, each on its own clone of the decode made
//! before any merge runs (a tree or body a router received a while ago, not
//! one just cloned into cache): the program to count instructions and cache
//! misses per merge with callgrind, which is deterministic where timings on a
//! shared machine are not.
//!
//! ```sh
//! cargo build --release --example merge_count
//! valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \
//!     --toggle-collect='*merge_count::timed*' \
//!     target/release/examples/merge_count value 8 32 100
//! callgrind_annotate callgrind.out.<pid> | head   # totals / 100 = per merge
//! ```
//!
//! Arguments: what (`value`: `merge_routed_payload_in_json` on a
//! `serde_json::Value`; `bytes`: `bytes::merge_routed_experts_for_pd` on the
//! decode's bytes; `parse`: one `serde_json::from_slice` of the decode;
//! `memcpy`: one copy of the decode's bytes), choices, segments, N. Only the
//! functions named `timed_*` are meant to be counted (`--toggle-collect`):
//! the clones and the drops are not.

#[path = "../benches/common/mod.rs"]
mod common;

use std::hint::black_box;

use serde_json::Value;

#[inline(never)]
fn timed_value(prefill: &Value, decode: &mut Value) -> bool {
    pd_stitch::merge_routed_payload_in_json(prefill, decode) == Ok(true)
}

#[inline(never)]
fn timed_bytes(prefill: &[u8], decode: &mut Vec<u8>) -> bool {
    pd_stitch::bytes::merge_routed_experts_for_pd(prefill, decode) == Ok(true)
}

#[inline(never)]
fn timed_parse(decode: &[u8]) -> Value {
    serde_json::from_slice(decode).unwrap_or(Value::Null)
}

#[inline(never)]
fn timed_memcpy(decode: &[u8], into: &mut [u8]) {
    into.copy_from_slice(decode);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("value", String::as_str);
    let arg = |i: usize, default: u64| {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (choices, segments, n) = (arg(2, 8) as usize, arg(3, 32), arg(4, 100) as usize);
    let (prefill, decode) = common::by_handle(choices, segments);
    let p = serde_json::to_vec(&prefill).expect("serializable");
    let d = serde_json::to_vec(&decode).expect("serializable");
    let mut ok = 0;
    match what {
        "value" => {
            let mut clones: Vec<Value> = (0..n).map(|_| decode.clone()).collect();
            for clone in &mut clones {
                ok += usize::from(timed_value(&prefill, clone));
            }
            black_box(&clones);
        }
        "bytes" => {
            let mut clones: Vec<Vec<u8>> = (0..n).map(|_| d.clone()).collect();
            for clone in &mut clones {
                ok += usize::from(timed_bytes(&p, clone));
            }
            black_box(&clones);
        }
        "parse" => {
            let parsed: Vec<Value> = (0..n).map(|_| timed_parse(&d)).collect();
            ok = parsed.iter().filter(|v| !v.is_null()).count();
        }
        "memcpy" => {
            let mut into = vec![0u8; d.len()];
            for _ in 0..n {
                timed_memcpy(black_box(&d), &mut into);
                ok += 1;
            }
            black_box(&into);
        }
        other => {
            eprintln!("unknown: {other} (value, bytes, parse, memcpy)");
            std::process::exit(2);
        }
    }
    assert_eq!(ok, n, "every merge stitched");
    println!("{what} {choices}x{segments}: {n} done, decode {} bytes", d.len());
}
