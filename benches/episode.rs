//! Assembling an episode beside one copy of its output, in one run (issue
//! 43: within 3x).
//!
//! The workload: 32 delta turns of a linear episode reaching 131,072
//! positions (4,096 new a turn, 64 of them generated, each turn asked from
//! its common prefix minus one), rows of 48 x 8 uint8: 48 MiB of rows. Each
//! run is given fresh turns, cloned before the clock starts
//! (`iter_batched`), and pushes them all and finishes. Beside it, one copy of
//! a buffer the size of the output's rows into a new allocation (the least
//! a trainer assembling rows it must own pays: the page faults of a fresh
//! 48 MiB are most of it). Both outputs are dropped after the clock stops.
//!
//! With `--bench`, a summary follows: the two interleaved, round by round,
//! and the median of their ratios, which a loaded machine disturbs less
//! than figures from separate runs; and, for scale, the ratio to a copy
//! into a buffer already allocated and touched (memory bandwidth alone). Under `cargo test --benches` each runs
//! once on 32 turns reaching 4,096 positions.

use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use pd_stitch::algebra::Dtype;
use pd_stitch::episode::{Assembled, Episode, RowPiece, Turn};
use std::hint::black_box;
use std::time::{Duration, Instant};

const TURNS: usize = 32;
const GENERATED: usize = 64;
const ROW: usize = 48 * 8;

/// The turns: turn `k`'s tokens are the first `(k + 1) * new` of one
/// sequence, its last `GENERATED` generated; turn 0 is a full response,
/// every other a delta from `L - 1`.
fn turns(new: usize) -> Vec<Turn> {
    let tokens: Vec<u64> = (0..(TURNS * new) as u64)
        .map(|i| i.wrapping_mul(2_654_435_761) % 151_000)
        .collect();
    (0..TURNS)
        .map(|k| {
            let length = (k + 1) * new;
            let prompt = tokens[..length - GENERATED].to_vec();
            let turn = Turn::new(prompt, tokens[length - GENERATED..length].to_vec());
            let (turn, rows) = if k == 0 {
                (turn, new - 1)
            } else {
                (turn.with_start((k * new - 1) as u64), new)
            };
            let bytes = (0..rows * ROW)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(k as u8))
                .collect();
            turn.with_piece(RowPiece::whole(Dtype::Uint8, vec![48, 8], bytes))
        })
        .collect()
}

fn assemble(turns: Vec<Turn>) -> Assembled {
    let mut episode = Episode::default();
    for turn in turns {
        episode.push(turn).expect("a valid turn");
    }
    episode.finish().expect("a turn")
}

fn test_mode() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// New positions a turn: 4,096 (131,072 in all), or 128 in test mode.
fn new_per_turn() -> usize {
    if test_mode() {
        128
    } else {
        4096
    }
}

fn bench(c: &mut Criterion) {
    let new = new_per_turn();
    let turns = turns(new);
    let output = vec![7u8; TURNS * new * ROW];
    assert_eq!(assemble(turns.clone()).rows().len(), output.len());
    let mut group = c.benchmark_group("episode");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Bytes(output.len() as u64));
    group.bench_function("assemble_32_delta_turns", |b| {
        b.iter_batched(|| turns.clone(), assemble, BatchSize::PerIteration)
    });
    group.bench_function("copy_of_the_output_rows", |b| {
        b.iter_batched(|| (), |()| output.to_vec(), BatchSize::PerIteration)
    });
    group.finish();
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The two interleaved, 15 rounds: medians of each time and of the ratio
/// within a round.
fn summary() {
    let new = new_per_turn();
    let turns = turns(new);
    let output = vec![7u8; TURNS * new * ROW];
    let (mut episode, mut copy, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut warm, mut warm_ratio) = (Vec::new(), Vec::new());
    let mut touched = vec![0u8; output.len()];
    for _ in 0..15 {
        let fresh = turns.clone();
        let clock = Instant::now();
        let assembled = assemble(fresh);
        let spent = clock.elapsed().as_secs_f64();
        drop(black_box(assembled));
        let clock = Instant::now();
        let copied = output.to_vec();
        let copied_in = clock.elapsed().as_secs_f64();
        drop(black_box(copied));
        let clock = Instant::now();
        touched.copy_from_slice(&output);
        let warm_in = clock.elapsed().as_secs_f64();
        black_box(&touched);
        episode.push(spent);
        copy.push(copied_in);
        ratio.push(spent / copied_in);
        warm.push(warm_in);
        warm_ratio.push(spent / warm_in);
    }
    println!(
        "episode: 32 delta turns to {} positions of 48 x 8 uint8 ({} MiB of rows): {:.2} ms; \
         one copy of the output rows into a new allocation: {:.2} ms, ratio {:.2}x; into a \
         buffer already touched: {:.2} ms, ratio {:.2}x (medians of 15 interleaved rounds)",
        TURNS * new,
        output.len() >> 20,
        median(episode) * 1e3,
        median(copy) * 1e3,
        median(ratio),
        median(warm) * 1e3,
        median(warm_ratio)
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !test_mode() {
        summary();
    }
}
