//! What stitching costs on a real request path: the example router
//! (`examples/pd_router.rs`) in front of mock backends (`examples/mock_backend.rs`)
//! on loopback, at concurrency 32, with stitching on and off (the same router
//! with the merge call skipped), measured side by side: rounds alternate
//! between the two routers so that a noisy neighbour hits both alike.
//!
//! Everything runs in this one process on the machine's cores: the client,
//! the router and both backends. The backends answer from a warm cache (the
//! simulator's answers, in the three forms in turn), so the time is the
//! router's: two HTTP calls, the prefill's parse (for its
//! `kv_transfer_params`) and, stitching on, the bytes merge of the decode's
//! body; stitching off, the decode's body passes through unread.
//!
//! `cargo bench --bench router_load` prints requests/s and p50/p99 latency
//! for each; in test mode (`-- --test`, or `cargo test --benches` as CI runs
//! it) it sends a few requests only.

#[allow(dead_code)]
#[path = "../examples/mock_backend.rs"]
mod mock_backend;
#[allow(dead_code)]
#[path = "../examples/pd_router.rs"]
mod pd_router;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mock_backend::{Deployment, Forms, Mock, Role};
use pd_stitch::sim::Wire;
use serde_json::json;

const CONCURRENCY: usize = 32;
/// Distinct requests: the backends' cache holds them all after the warm-up.
const WORKING_SET: usize = 256;

/// Latencies and busy time of one router over all its rounds.
#[derive(Default)]
struct Tally {
    /// Every request's latency; sorted once all rounds are in.
    latencies: Vec<Duration>,
    busy: Duration,
    /// Response body bytes, summed: a stitched inline answer is larger than
    /// the decode's own, which is part of what stitching costs.
    bytes: usize,
}

impl Tally {
    fn mean_kib(&self) -> f64 {
        self.bytes as f64 / self.latencies.len().max(1) as f64 / 1024.0
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.busy.as_secs_f64()
    }

    /// The nearest-rank percentile `p` (0-100), once `latencies` is sorted.
    fn percentile(&self, p: usize) -> Duration {
        let rank = (self.latencies.len() * p).div_ceil(100).max(1);
        self.latencies.get(rank - 1).copied().unwrap_or_default()
    }
}

async fn start_router(prefill: &str, decode: &str, stitch: bool) -> String {
    let config = pd_router::Config {
        prefill: prefill.to_owned(),
        decode: decode.to_owned(),
        timeout: Duration::from_secs(30),
        stitch,
        strict: false,
        row_shape: None,
        bootstrap_port: 8998,
        decode_start: true,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(pd_router::serve(
        listener,
        pd_router::app(config).expect("client"),
    ));
    format!("http://{addr}/inference/v1/generate")
}

async fn start_mock(mock: Mock) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(mock_backend::serve(
        listener,
        mock_backend::app(Arc::new(mock)),
    ));
    format!("http://{addr}")
}

/// Sends `requests` requests to `url` from `CONCURRENCY` workers; returns
/// each one's latency, the round's wall time and the bytes received.
async fn round(
    client: &reqwest::Client,
    url: &str,
    requests: usize,
    first: usize,
) -> (Vec<Duration>, Duration, usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(requests)));
    let bytes = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, url, next) = (client.clone(), url.to_owned(), next.clone());
            let (latencies, bytes) = (latencies.clone(), bytes.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        break;
                    }
                    let body = json!({"request_id": (first + i) % WORKING_SET, "token_ids": [1, 2, 3],
                                      "sampling_params": {"max_tokens": 64}});
                    let sent = Instant::now();
                    let response = client.post(&url).body(body.to_string()).send().await.expect("answer");
                    assert!(response.status().is_success(), "status {}", response.status());
                    let body = response.bytes().await.expect("body");
                    assert!(!body.is_empty());
                    bytes.fetch_add(body.len(), Ordering::Relaxed);
                    latencies.lock().expect("lock").push(sent.elapsed());
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker");
    }
    let elapsed = started.elapsed();
    let latencies = std::mem::take(&mut *latencies.lock().expect("lock"));
    assert_eq!(latencies.len(), requests, "requests lost");
    (latencies, elapsed, bytes.load(Ordering::Relaxed))
}

fn main() {
    // Test mode as criterion reads it: `--test`, or no `--bench` (that is,
    // `cargo test --benches`, as CI runs them).
    let test_mode =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let (rounds, per_round) = if test_mode { (1, 64) } else { (10, 1000) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "router_load: per form, {rounds} round(s) of {per_round} requests per router, concurrency {CONCURRENCY}{}",
        if test_mode { " (test mode: figures not meaningful)" } else { "" }
    );
    println!(
        "{:<16}{:<15}{:>12}{:>12}{:>12}{:>14}",
        "form", "router", "requests/s", "p50", "p99", "KiB/response"
    );
    let forms = [
        ("by-handle", Forms::One(Wire::ByHandle)),
        ("inline compact", Forms::One(Wire::Compact)),
        ("inline npy", Forms::One(Wire::Npy)),
        ("mixed", Forms::Mixed),
    ];
    for (form, forms) in forms {
        let ([on, off], merge) = runtime.block_on(measure(forms, rounds, per_round));
        for (name, tally) in [("stitching on", &on), ("stitching off", &off)] {
            println!(
                "{form:<16}{name:<15}{:>12.0}{:>12.2?}{:>12.2?}{:>14.1}",
                tally.per_second(),
                tally.percentile(50),
                tally.percentile(99),
                tally.mean_kib()
            );
        }
        println!(
            "{form:<16}{:<15}{:>11.3}x{:>11.3}x{:>11.3}x",
            "on/off",
            on.per_second() / off.per_second(),
            on.percentile(50).as_secs_f64() / off.percentile(50).as_secs_f64(),
            on.percentile(99).as_secs_f64() / off.percentile(99).as_secs_f64()
        );
        // The machine's time per stitched request, all cores counted: what
        // the merge alone is a share of.
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let per_request = cores / on.per_second();
        println!(
            "{form:<16}{:<15}{:>11.1}us per request, {:.1}% of the machine's time per stitched request",
            "merge alone",
            merge.as_secs_f64() * 1e6,
            100.0 * merge.as_secs_f64() / per_request
        );
    }
}

/// Both routers in front of one pair of mocks answering in `forms`,
/// measured in alternating rounds: `[on, off]`, and the mean time of the
/// library's merge alone on the same responses.
async fn measure(forms: Forms, rounds: usize, per_round: usize) -> ([Tally; 2], Duration) {
    let dir = std::env::temp_dir().join(format!("pd-stitch-router-load-{}", std::process::id()));
    let deployment = Arc::new(Deployment::new(1, forms, dir.clone()));
    let prefill = start_mock(Mock::new(deployment.clone(), Role::Prefill)).await;
    let decode = start_mock(Mock::new(deployment.clone(), Role::Decode)).await;
    let routers = [
        start_router(&prefill, &decode, true).await,
        start_router(&prefill, &decode, false).await,
    ];
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(CONCURRENCY)
        .build()
        .expect("client");
    // Warm up: every request of the working set drawn and cached, every
    // connection pool filled.
    for url in &routers {
        round(&client, url, WORKING_SET.min(per_round), 0).await;
    }
    let mut tallies = [Tally::default(), Tally::default()];
    for r in 0..rounds {
        // Alternate which router goes first.
        for k in 0..2 {
            let which = (r + k) % 2;
            let (latencies, elapsed, bytes) =
                round(&client, &routers[which], per_round, r * per_round).await;
            tallies[which].latencies.extend(latencies);
            tallies[which].busy += elapsed;
            tallies[which].bytes += bytes;
        }
    }
    // The merge alone, on the responses the backends served, the decode
    // cloned outside the timed region.
    let mut merging = Duration::ZERO;
    let mut merges = 0u32;
    for _ in 0..rounds {
        for index in 0..WORKING_SET.min(per_round) {
            let answers = deployment.answers(index).expect("cached");
            // The bodies as the router holds them.
            let prefill = serde_json::to_vec(&answers.prefill).expect("JSON");
            let mut decode = serde_json::to_vec(&answers.decode).expect("JSON");
            let started = Instant::now();
            let merged = pd_stitch::bytes::merge_routed_experts_for_pd(&prefill, &mut decode);
            merging += started.elapsed();
            assert_eq!(merged.ok(), Some(true));
            std::hint::black_box(decode);
            merges += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for tally in &mut tallies {
        tally.latencies.sort_unstable();
    }
    (tallies, merging / merges.max(1))
}
