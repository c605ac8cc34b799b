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
//! decode's bytes; `inline` and `npy`: the same on an inline pair, compact
//! or `.npy`, whose second argument is the choices and third the decode's
//! positions (uint8 rows, the prefill half as long); `parse`: one
//! `serde_json::from_slice` of the decode; `memcpy`: one copy of the
//! decode's bytes), choices, segments, N. Only the
//! functions named `timed_*` are meant to be counted (`--toggle-collect`):
//! the clones and the drops are not.
//!
//! Two timing modes, not for callgrind: `ratio` (N merges of each kind per
//! round, medians over 15 rounds, as ratios to one parse) and `value_time`
//! (the `Value` merge on 16 bulk clones per round, over N rounds: the
//! minimum and the median per merge; on a shared machine the minimum is the
//! round least disturbed, which is what comparing two builds needs).

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

/// The time per merge of `n` `Value` merges, each on its own clone of
/// `decode`, all made before the clock starts (the clones are dropped after
/// it stops).
fn value_round(prefill: &Value, decode: &Value, n: usize) -> f64 {
    let mut values: Vec<Value> = (0..n).map(|_| decode.clone()).collect();
    let clock = std::time::Instant::now();
    for v in &mut values {
        black_box(timed_value(prefill, v));
    }
    let per_merge = clock.elapsed().as_secs_f64() / n as f64;
    drop(values);
    per_merge
}

/// The median over 15 rounds of the time of one of each (N of each per
/// round, on clones made before the round's clock starts), as a ratio to one
/// parse: a quick look between criterion runs.
fn ratios(prefill: &Value, decode: &Value, p: &[u8], d: &[u8], n: usize) {
    use std::time::Instant;
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..15 {
        times[0].push(value_round(prefill, decode, n));
        let mut bodies: Vec<Vec<u8>> = (0..n).map(|_| d.to_vec()).collect();
        let clock = Instant::now();
        for b in &mut bodies {
            black_box(timed_bytes(p, b));
        }
        times[1].push(clock.elapsed().as_secs_f64() / n as f64);
        drop(bodies);
        let clock = Instant::now();
        let parsed: Vec<Value> = (0..n).map(|_| timed_parse(d)).collect();
        times[2].push(clock.elapsed().as_secs_f64() / n as f64);
        drop(parsed);
        let mut into: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; d.len()]).collect();
        let clock = Instant::now();
        for i in &mut into {
            timed_memcpy(black_box(d), i);
        }
        times[3].push(clock.elapsed().as_secs_f64() / n as f64);
        black_box(&into);
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let [value, bytes, parse, memcpy] = times.each_mut().map(median);
    println!(
        "parse {:.1} us; value merge {:.2} us, {:.4}x parse; bytes merge {:.3}x parse ({:.2}x memcpy); memcpy {:.3}x parse",
        parse * 1e6,
        value * 1e6,
        value / parse,
        bytes / parse,
        bytes / memcpy,
        memcpy / parse
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("value", String::as_str);
    let arg = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (choices, segments, n) = (arg(2, 8) as usize, arg(3, 32), arg(4, 100) as usize);
    let (prefill, mut decode) = match what {
        "inline" => common::compact(segments as usize, 1, 1, choices),
        "npy" => common::npy(segments as usize, 1, 1, choices),
        _ => common::by_handle(choices, segments),
    };
    if std::env::var_os("LONG_TEXT").is_some() {
        // Each choice with a completion's text of 4,096 characters (what a
        // text completion carries beside its token ids), one in eight
        // lines escaped: what memchr2 in the scanner is measured on.
        let line = format!(
            "{}\n",
            "the quick brown fox jumps over the lazy dog; ".repeat(3)
        );
        let text: String = line
            .repeat(4096 / line.len() + 1)
            .chars()
            .take(4096)
            .collect();
        for choice in decode["choices"].as_array_mut().into_iter().flatten() {
            choice["text"] = Value::from(text.clone());
        }
    }
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
        "bytes" | "inline" | "npy" => {
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
        "value_time" => {
            // Per-merge time of the Value merge on bulk clones: the minimum
            // and the median over N rounds of 16 (the minimum is the round
            // least disturbed by other work on a shared machine).
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                times.push(value_round(&prefill, &decode, 16));
            }
            times.sort_by(f64::total_cmp);
            println!(
                "value merge on bulk clones: min {:.2} us, median {:.2} us",
                times[0] * 1e6,
                times[n / 2] * 1e6
            );
            return;
        }
        "ratio" => {
            ratios(&prefill, &decode, &p, &d, n);
            return;
        }
        other => {
            eprintln!(
                "unknown: {other} (value, bytes, inline, npy, parse, memcpy, ratio, value_time)"
            );
            std::process::exit(2);
        }
    }
    assert_eq!(ok, n, "every merge stitched");
    println!(
        "{what} {choices}x{segments}: {n} done, decode {} bytes",
        d.len()
    );
}
