//! N runs of one stream-stitcher workload, each on inputs and stitchers
//! made before any run starts: the program to count instructions per run
//! with callgrind (deterministic where timings on a shared machine are not),
//! only the functions named `timed_*` counted (`--toggle-collect`):
//!
//! ```sh
//! scripts/callgrind_stream.sh tokens 10   # 20,000 token events, 16 KiB chunks
//! ```
//!
//! Workloads: `tokens` (20,000 vLLM token events, 2.8 MB without rows, fed
//! in 16 KiB chunks), `copy` (the same bytes copied in the same chunks: the
//! floor), `rows` and `rows_merge` (the inline rows event of 1,536 x 48 x 8,
//! fed as one chunk; the bytes merge of its data), `handle` and
//! `handle_merge` (the 8 x 32 by-handle decode as one event; its bytes
//! merge), `sglang` and `sglang_merge` (SGLang's finished `/generate` event
//! of 1,536 x 48 x 8 int32 ids, full-length; its bytes merge with the row
//! shape). A run of `rows`, `handle` or `sglang` appends into a buffer that already
//! has the room (a router's reused buffer).

#[path = "../benches/common/mod.rs"]
mod common;

use std::hint::black_box;

use common::stream;
use pd_stitch::stream::StreamStitcher;
use pd_stitch::{Stitch, Stitcher};

#[inline(never)]
fn timed_feed(s: &mut StreamStitcher, input: &[u8], chunk: usize, out: &mut Vec<u8>) {
    for piece in input.chunks(chunk) {
        s.feed(piece, out).unwrap();
    }
    s.finish(out).unwrap();
}

#[inline(never)]
fn timed_copy(input: &[u8], chunk: usize, out: &mut Vec<u8>) {
    for piece in input.chunks(chunk) {
        out.extend_from_slice(piece);
    }
}

#[inline(never)]
fn timed_merge(stitcher: &Stitcher, prefill: &[u8], decode: &mut Vec<u8>) -> bool {
    stitcher
        .merge_bytes(prefill, decode, Stitch::ForPd)
        .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("tokens", String::as_str);
    let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(10);
    let (prefill, data) = match what {
        "handle" | "handle_merge" => stream::by_handle_pair(),
        "sglang" | "sglang_merge" => stream::sglang_pair(),
        _ => (stream::inline_prefill(), stream::inline_rows_data()),
    };
    let stitcher = match what {
        "sglang" | "sglang_merge" => Stitcher::new().row_shape(48, 8),
        _ => Stitcher::new(),
    };
    match what {
        "tokens" | "copy" => {
            let input = stream::tokens(20_000);
            let mut outs: Vec<Vec<u8>> = (0..n).map(|_| Vec::with_capacity(input.len())).collect();
            let mut stitchers: Vec<StreamStitcher> = (0..n)
                .map(|_| StreamStitcher::new(Stitcher::new(), &prefill[..]).unwrap())
                .collect();
            for (s, out) in stitchers.iter_mut().zip(&mut outs) {
                if what == "tokens" {
                    timed_feed(s, &input, 16 * 1024, out);
                } else {
                    timed_copy(&input, 16 * 1024, out);
                }
                assert_eq!(out.len(), input.len());
            }
            black_box(&outs);
        }
        "rows" | "handle" | "sglang" => {
            let event = stream::event(&data);
            let mut outs: Vec<Vec<u8>> = (0..n)
                .map(|_| Vec::with_capacity(2 * event.len()))
                .collect();
            let mut stitchers: Vec<StreamStitcher> = (0..n)
                .map(|_| StreamStitcher::new(stitcher.clone(), &prefill[..]).unwrap())
                .collect();
            for (s, out) in stitchers.iter_mut().zip(&mut outs) {
                timed_feed(s, &event, event.len(), out);
                assert_ne!(out[..], event[..]);
            }
            black_box(&outs);
        }
        "rows_merge" | "handle_merge" | "sglang_merge" => {
            let mut decodes: Vec<Vec<u8>> = (0..n).map(|_| data.clone()).collect();
            for d in &mut decodes {
                assert!(timed_merge(&stitcher, &prefill, d));
            }
            black_box(&decodes);
        }
        other => panic!("unknown workload {other}"),
    }
}
