//! Criterion benchmarks of the JSON entry points on pre-parsed responses,
//! each beside a straightforward baseline of the same rules and beside
//! `serde_json::from_slice` of the same decode response (what a router
//! already pays). The decode response is cloned outside the timed region
//! (`iter_batched`). Compare figures within one run only: docs/PERFORMANCE.md
//! reports them as ratios.

mod common;

use base64::Engine;
use common::baseline;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use serde_json::Value;
use std::time::Duration;

type Merge = fn(&Value, &mut Value) -> Result<bool, String>;

fn library_by_handle(p: &Value, d: &mut Value) -> Result<bool, String> {
    pd_stitch::merge_routed_payload_in_json(p, d).map_err(|e| e.to_string())
}

fn library_for_pd(p: &Value, d: &mut Value) -> Result<bool, String> {
    pd_stitch::merge_routed_experts_for_pd(p, d).map_err(|e| e.to_string())
}

fn library_inline(p: &Value, d: &mut Value) -> Result<bool, String> {
    pd_stitch::merge_routed_experts_in_json(p, d).map_err(|e| e.to_string())
}

/// Benchmarks the library and the baseline on one input, after checking that
/// they agree on it, and the parse of the decode response.
fn bench_pair(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    input: &(Value, Value),
    library: Merge,
    base: Merge,
) {
    let (prefill, decode) = input;
    let (mut a, mut b) = (decode.clone(), decode.clone());
    assert_eq!(library(prefill, &mut a), Ok(true), "{id}");
    assert_eq!(base(prefill, &mut b), Ok(true), "{id}");
    assert!(a == b, "{id}: the baseline disagrees with the library");
    drop((a, b));
    for (name, merge) in [("merge", library), ("baseline", base)] {
        group.bench_with_input(BenchmarkId::new(name, id), decode, |bench, decode| {
            // The merged response is returned, so that dropping it is not timed.
            bench.iter_batched(
                || decode.clone(),
                |mut d| {
                    let stitched = merge(prefill, &mut d);
                    (d, stitched)
                },
                BatchSize::PerIteration,
            )
        });
    }
    let bytes = serde_json::to_vec(decode).expect("serializable");
    group.bench_with_input(BenchmarkId::new("parse", id), &bytes, |bench, bytes| {
        bench.iter(|| serde_json::from_slice::<Value>(bytes).expect("valid JSON"))
    });
}

fn by_handle(c: &mut Criterion) {
    let mut group = c.benchmark_group("by_handle");
    for choices in [1, 8, 64] {
        for segments in [2, 32, 256] {
            let input = common::by_handle(choices, segments);
            bench_pair(
                &mut group,
                &format!("{choices}x{segments}"),
                &input,
                library_by_handle,
                baseline::by_handle,
            );
        }
    }
    group.finish();
}

/// What strict mode costs: the by-handle merge with and without
/// `Stitcher::strict`, on the same inputs in the same run, a fresh clone of
/// the decode per iteration. 8 x 32 is the size the target (at most 10% over
/// the plain merge) is stated for; 1 x 2 and 64 x 256 bracket it.
fn strict(c: &mut Criterion) {
    let mut group = c.benchmark_group("strict");
    let quick =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let sizes: &[(usize, u64)] = if quick {
        &[(8, 32)]
    } else {
        &[(1, 2), (8, 32), (64, 256)]
    };
    let plain = pd_stitch::Stitcher::new();
    let strict = pd_stitch::Stitcher::new().strict();
    for &(choices, segments) in sizes {
        let (prefill, decode) = common::by_handle(choices, segments);
        let id = format!("{choices}x{segments}");
        let (mut a, mut b) = (decode.clone(), decode.clone());
        assert_eq!(
            plain.merge(&prefill, &mut a, pd_stitch::Stitch::ByHandle),
            Ok(true)
        );
        assert_eq!(
            strict.merge(&prefill, &mut b, pd_stitch::Stitch::ByHandle),
            Ok(true)
        );
        assert!(a == b, "{id}: strict disagrees with the plain merge");
        for (name, stitcher) in [("plain", &plain), ("strict", &strict)] {
            group.bench_with_input(BenchmarkId::new(name, &id), &decode, |bench, decode| {
                bench.iter_batched(
                    || decode.clone(),
                    |mut d| {
                        let stitched =
                            stitcher.merge(&prefill, &mut d, pd_stitch::Stitch::ByHandle);
                        (d, stitched)
                    },
                    BatchSize::PerIteration,
                )
            });
        }
    }
    group.finish();
}

/// The inline forms: positions {1k, 32k, 128k} (prompt half of that), 48 x 8
/// rows of uint8, uint16, and a uint8 prefill with a uint16 decode; n {1, 8}.
fn inline(
    c: &mut Criterion,
    form: &str,
    make: fn(usize, usize, usize, usize) -> (Value, Value),
    base: Merge,
) {
    let mut group = c.benchmark_group(format!("inline_{form}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    // In test mode (`cargo bench -- --test` or `cargo test --benches`) every benchmark
    // runs once to show it still builds and agrees with the baseline; the
    // smallest size is enough for that.
    // Test mode as criterion reads it: `--test`, or no `--bench` (that is,
    // `cargo test --benches`, as CI runs them).
    let quick =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick {
        &[1024]
    } else {
        &[1024, 32 * 1024, 128 * 1024]
    };
    for &positions in sizes {
        for (dtypes, p, d) in [("u8", 1, 1), ("u16", 2, 2), ("u8_u16", 1, 2)] {
            for n in [1, 8] {
                let input = make(positions, p, d, n);
                // Throughput: bytes of merged rows written.
                group.throughput(Throughput::Bytes(
                    ((positions + positions / 2 - 1) * 384 * d * n) as u64,
                ));
                bench_pair(
                    &mut group,
                    &format!("{}k/{dtypes}/n{n}", positions / 1024),
                    &input,
                    library_inline,
                    base,
                );
            }
        }
    }
    group.finish();
}

fn inline_compact(c: &mut Criterion) {
    inline(c, "compact", common::compact, baseline::compact);
}

fn inline_npy(c: &mut Criterion) {
    inline(c, "npy", common::npy, baseline::npy_merge);
}

/// The work a re-encoding merge cannot avoid: one plain `base64`-crate encode
/// of the merged rows of the target case (prompt 16k rows, decode 32k rows,
/// uint8, n = 1), beside the merge of that case.
fn yardstick(c: &mut Criterion) {
    let mut group = c.benchmark_group("target_16k_32k_u8");
    group.sample_size(20);
    let (prefill, decode) = common::compact(32 * 1024, 1, 1, 1);
    let merged = common::rows(16 * 1024 + 32 * 1024 - 1, 1, 3);
    group.bench_function("base64_crate_encode", |b| {
        b.iter(|| base64::engine::general_purpose::STANDARD.encode(&merged))
    });
    group.bench_function("merge", |b| {
        b.iter_batched(
            || decode.clone(),
            |mut d| {
                let stitched = pd_stitch::merge_routed_experts_in_json(&prefill, &mut d);
                (d, stitched)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// How many clones of the decode the bulk-clone regime makes before its
/// clock starts (as the independent harness of issue 26 does): each merge
/// reads a tree made a while ago, evicted from the cache by the clones made
/// after it, as a router's tree parsed when the response arrived.
const BULK: usize = 16;

/// The `Value` by-handle merge on clones made in bulk before the clock
/// starts, `BULK` at a time, merged in the order they were made.
fn value_merge_bulk(b: &mut criterion::Bencher<'_>, prefill: &Value, decode: &Value) {
    b.iter_custom(|iters| {
        let mut total = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(BULK as u64);
            let mut clones: Vec<Value> = (0..n).map(|_| decode.clone()).collect();
            let clock = std::time::Instant::now();
            for clone in &mut clones {
                std::hint::black_box(pd_stitch::merge_routed_payload_in_json(prefill, clone))
                    .expect("merges");
            }
            total += clock.elapsed();
            drop(clones);
            left -= n;
        }
        total
    })
}

/// The bytes entry points (issues 12 and 26), bytes in and bytes out, each
/// decode cloned before its merge (a router gets a fresh body every time),
/// beside what a router pays otherwise: the Value path and the upstream-style
/// baseline, each as parse both, merge, serialize the decode; one
/// `serde_json` parse of the decode; one `memcpy` of it; for inline rows,
/// one `base64`-crate encode of the merged rows; and, by handle, the `Value`
/// merge alone, warm (a fresh clone per iteration, `iter_batched`) and on
/// clones made in bulk before the clock (`value_merge_bulk`).
fn bytes_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("bytes");
    group.sample_size(20);
    let quick =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let positions = if quick { 1024 } else { 32 * 1024 };
    /// Name, (prefill, decode), merged rows (inline), the upstream-style merge.
    type Case = (String, (Value, Value), Option<usize>, Merge);
    let sizes: &[(usize, u64)] = if quick {
        &[(1, 2), (8, 32)]
    } else {
        &[(1, 2), (8, 32), (64, 256)]
    };
    let mut cases: Vec<Case> = sizes
        .iter()
        .map(|&(choices, segments)| {
            (
                format!("by_handle_{choices}x{segments}"),
                common::by_handle(choices, segments),
                None,
                baseline::by_handle as Merge,
            )
        })
        .collect();
    cases.push((
        "compact_16k_32k_u8".to_owned(),
        common::compact(positions, 1, 1, 1),
        Some(positions / 2 + positions - 1),
        baseline::compact,
    ));
    cases.push((
        "npy_16k_32k_u8".to_owned(),
        common::npy(positions, 1, 1, 1),
        Some(positions),
        baseline::npy_merge,
    ));
    for (id, (prefill, decode), merged_rows, upstream) in cases {
        let id = id.as_str();
        let p = serde_json::to_vec(&prefill).expect("serializable");
        let d = serde_json::to_vec(&decode).expect("serializable");
        // The two paths agree before they are timed.
        let mut out = d.clone();
        assert_eq!(
            pd_stitch::bytes::merge_routed_experts_for_pd(&p, &mut out),
            Ok(true)
        );
        // The reference reads the same text (serde_json's float reading does
        // not round-trip every f64 it writes).
        let mut v: Value = serde_json::from_slice(&d).expect("JSON");
        assert_eq!(
            pd_stitch::merge_routed_experts_for_pd(&prefill, &mut v),
            Ok(true)
        );
        assert!(
            serde_json::from_slice::<Value>(&out).expect("JSON") == v,
            "{id}"
        );
        group.bench_function(BenchmarkId::new("bytes_merge", id), |b| {
            b.iter_batched(
                || d.clone(),
                |mut d| {
                    let stitched = pd_stitch::bytes::merge_routed_experts_for_pd(&p, &mut d);
                    (d, stitched)
                },
                BatchSize::PerIteration,
            )
        });
        // The Value path and the upstream-style merge
        // (benches/common/baseline.rs) on the same bytes, as a router runs
        // them: parse both, merge, serialize.
        for (name, merge) in [
            ("value_round_trip", library_for_pd as Merge),
            ("upstream_round_trip", upstream),
        ] {
            group.bench_function(BenchmarkId::new(name, id), |b| {
                b.iter_batched(
                    || d.clone(),
                    |d| {
                        let prefill: Value = serde_json::from_slice(&p).expect("JSON");
                        let mut decode: Value = serde_json::from_slice(&d).expect("JSON");
                        let stitched = merge(&prefill, &mut decode);
                        (serde_json::to_vec(&decode).expect("serializable"), stitched)
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        group.bench_function(BenchmarkId::new("parse", id), |b| {
            b.iter(|| serde_json::from_slice::<Value>(&d).expect("valid JSON"))
        });
        // One copy of the decode's bytes into a buffer of its size, made
        // (and written once) before the clock.
        group.bench_function(BenchmarkId::new("memcpy", id), |b| {
            b.iter_batched(
                || vec![1u8; d.len()],
                |mut into| {
                    into.copy_from_slice(std::hint::black_box(&d));
                    into
                },
                BatchSize::PerIteration,
            )
        });
        if merged_rows.is_none() {
            group.bench_function(BenchmarkId::new("value_merge_warm", id), |b| {
                b.iter_batched(
                    || decode.clone(),
                    |mut d| {
                        let stitched = pd_stitch::merge_routed_payload_in_json(&prefill, &mut d);
                        (d, stitched)
                    },
                    BatchSize::PerIteration,
                )
            });
            group.bench_function(BenchmarkId::new("value_merge_bulk", id), |b| {
                value_merge_bulk(b, &prefill, &decode)
            });
        }
        if let Some(rows) = merged_rows {
            let merged = common::rows(rows, 1, 3);
            group.bench_function(BenchmarkId::new("base64_crate_encode", id), |b| {
                b.iter(|| base64::engine::general_purpose::STANDARD.encode(&merged))
            });
        }
    }
    group.finish();
}

// The bytes group first: a filtered run (`-- bytes/`) still builds the
// inputs of every group it passes, and the inline groups' are large.
criterion_group!(
    benches,
    bytes_path,
    by_handle,
    inline_compact,
    inline_npy,
    yardstick,
    strict
);
criterion_main!(benches);
