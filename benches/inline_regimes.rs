//! Inline merges in the two regimes a benchmark can put them in, side by
//! side in one run, through both entry points, beside one `base64`-crate
//! encode of the merged rows (what any merge that re-encodes must at least
//! pay):
//!
//! - **fresh**: what a router sees. Every merge gets a decode cloned before
//!   it, and nothing a merge returns is freed until the sample ends, so no
//!   merge finds memory that an earlier one freed: any memory it needs
//!   beyond the decode's own comes from the kernel, page faults included.
//! - **warm**: each merge's result is freed before the next clone, so the
//!   allocator hands the next merge memory already mapped. Criterion's
//!   `iter_batched` measures this regime.
//!
//! Then the scaling of the fresh bytes merge from 1k to 128k positions, as
//! the exponent of a least-squares fit of log time on log size.
//!
//! `cargo bench --bench inline_regimes` prints the table docs/PERFORMANCE.md
//! quotes. Under `cargo test --benches` (no `--bench`) every case runs once
//! at a small size: it still builds and the two entry points still agree.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

/// This process's minor page faults so far (`/proc/self/stat`, field 10);
/// 0 where there is no such file.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The command name (field 2) may hold spaces: count after it.
            let rest = stat.rsplit_once(')')?.1;
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Median of `samples` timings of `merge` on fresh clones of `decode`.
fn time<T: Clone, R>(
    decode: &T,
    samples: usize,
    fresh: bool,
    merge: impl FnMut(&mut T) -> R,
) -> Duration {
    time_and_faults(decode, samples, fresh, merge).0
}

/// [`time`], and the median of the page faults each merge took.
fn time_and_faults<T: Clone, R>(
    decode: &T,
    samples: usize,
    fresh: bool,
    mut merge: impl FnMut(&mut T) -> R,
) -> (Duration, u64) {
    let mut times = Vec::with_capacity(samples);
    let mut faults = Vec::with_capacity(samples);
    let mut kept = Vec::new();
    for _ in 0..samples {
        let mut d = decode.clone();
        let before = minor_faults();
        let start = Instant::now();
        let r = merge(&mut d);
        times.push(start.elapsed());
        faults.push(minor_faults().saturating_sub(before));
        if fresh {
            kept.push((d, r));
        } else {
            drop((d, r));
        }
    }
    drop(kept);
    times.sort();
    faults.sort();
    (times[times.len() / 2], faults[faults.len() / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

type Make = fn(usize, usize, usize, usize) -> (Value, Value);

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let (positions, samples) = if quick { (1024, 1) } else { (32 * 1024, 15) };
    let cases: [(&str, Make, usize, usize, usize); 7] = [
        // name, pair, prefill and decode itemsize, merged rows
        (
            "compact, start 0, u8",
            common::compact_from_zero,
            1,
            1,
            positions,
        ),
        (
            "compact, start 0, u8 -> u16",
            common::compact_from_zero,
            1,
            2,
            positions,
        ),
        ("npy, u8", common::npy, 1, 1, positions),
        ("npy, u8 -> u16", common::npy, 1, 2, positions),
        (
            "compact, start at the cut - 1, u8",
            common::compact,
            1,
            1,
            positions / 2 + positions - 1,
        ),
        (
            "compact, start at the cut - 1, u8 -> u16",
            common::compact,
            1,
            2,
            positions / 2 + positions - 1,
        ),
        (
            "compact, start 0, u16 -> u8 (wider prefill)",
            common::compact_from_zero,
            2,
            1,
            positions,
        ),
    ];
    println!(
        "inline merges, prompt {}k / decode {}k rows of 48 x 8, median of {samples}, ms (ratio to one base64-crate encode of the merged rows, warm)",
        positions / 2048,
        positions / 1024
    );
    println!("| case | encode | bytes, fresh | bytes, warm | Value, fresh | Value, warm | page faults per merge, fresh (bytes / Value) |");
    println!("|---|---|---|---|---|---|---|");
    for (name, make, p, d, rows) in cases {
        let (prefill, decode) = make(positions, p, d, 1);
        let pb = serde_json::to_vec(&prefill).expect("JSON");
        let db = serde_json::to_vec(&decode).expect("JSON");
        // The two entry points agree before they are timed.
        let mut out = db.clone();
        assert_eq!(
            pd_stitch::bytes::merge_routed_experts_for_pd(&pb, &mut out),
            Ok(true),
            "{name}"
        );
        let mut v = decode.clone();
        assert_eq!(
            pd_stitch::merge_routed_experts_for_pd(&prefill, &mut v),
            Ok(true),
            "{name}"
        );
        assert!(
            serde_json::from_slice::<Value>(&out).expect("JSON") == v,
            "{name}"
        );

        // The yardstick in the warm regime, which favours it: its output
        // lands in memory already mapped.
        let merged = common::rows(rows, p.max(d), 3);
        let encode = time(&merged, samples, false, |m| {
            base64::engine::general_purpose::STANDARD.encode(&*m)
        });
        let bytes = |fresh| {
            time_and_faults(&db, samples, fresh, |d| {
                pd_stitch::bytes::merge_routed_experts_for_pd(&pb, d)
            })
        };
        let value = |fresh| {
            time_and_faults(&decode, samples, fresh, |d| {
                pd_stitch::merge_routed_experts_for_pd(&prefill, d)
            })
        };
        let cell = |(t, _): (Duration, u64)| format!("{:.2} ({:.2}x)", ms(t), ms(t) / ms(encode));
        let (bytes_fresh, value_fresh) = (bytes(true), value(true));
        println!(
            "| {name} | {:.2} | {} | {} | {} | {} | {} / {} |",
            ms(encode),
            cell(bytes_fresh),
            cell(bytes(false)),
            cell(value_fresh),
            cell(value(false)),
            bytes_fresh.1,
            value_fresh.1,
        );
    }

    // Scaling, fresh regime, bytes path.
    let sizes: &[usize] = if quick {
        &[1024, 2048]
    } else {
        &[1024, 4096, 16384, 65536, 131072]
    };
    for (name, make) in [
        ("npy, u8", common::npy as Make),
        ("compact, start at the cut - 1, u8", common::compact),
    ] {
        let mut points = Vec::new();
        for &n in sizes {
            let (prefill, decode) = make(n, 1, 1, 1);
            let pb = serde_json::to_vec(&prefill).expect("JSON");
            let db = serde_json::to_vec(&decode).expect("JSON");
            let t = time(&db, samples.max(3), true, |d| {
                pd_stitch::bytes::merge_routed_experts_for_pd(&pb, d)
            });
            points.push(((n as f64).ln(), ms(t).ln()));
            println!("scaling, {name}: {n} positions, {:.3} ms", ms(t));
        }
        let k = points.len() as f64;
        let (sx, sy) = points
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / k, sy / k);
        let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
            (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
        });
        println!("scaling, {name}: exponent {:.3}", sxy / sxx);
    }
}
