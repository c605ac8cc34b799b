//! Peak memory of the inline merges, beside the baseline: how much the
//! resident set grows while one merge runs, as a multiple of the merged
//! output's size. Linux only: it resets the peak with /proc/self/clear_refs
//! and reads VmHWM from /proc/self/status, so no allocator hook (and no
//! unsafe code) is needed.
//!
//! `cargo bench --bench memory` prints the table; with `--test` (as CI runs
//! it) it runs the smallest case only.

mod common;

use common::baseline;
use serde_json::Value;

type Merge = fn(&Value, &mut Value) -> Result<bool, String>;

/// (VmRSS, VmHWM) in bytes.
fn rss() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// How much the resident set grew at its peak while `merge` ran, and the
/// size of the merged rows' text.
fn peak_growth(input: &(Value, Value), merge: Merge) -> Option<(u64, u64)> {
    let (prefill, decode) = input;
    let mut d = decode.clone();
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    let (before, _) = rss()?;
    merge(prefill, &mut d).ok()?;
    let (_, peak) = rss()?;
    let out = &d["choices"][0]["routed_experts"];
    let text = out.get("data").unwrap_or(out).as_str()?.len() as u64;
    Some((peak.saturating_sub(before), text))
}

fn library(p: &Value, d: &mut Value) -> Result<bool, String> {
    pd_stitch::merge_routed_experts_in_json(p, d).map_err(|e| e.to_string())
}

fn main() {
    // Test mode as criterion reads it: `--test`, or no `--bench` (that is,
    // `cargo test --benches`, as CI runs them).
    let test_mode =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if test_mode {
        &[1024]
    } else {
        &[32 * 1024, 128 * 1024]
    };
    println!(
        "{:<34}{:>14}{:>14}{:>14}{:>12}",
        "case", "output MB", "merge MB", "baseline MB", "merge/out"
    );
    for &positions in sizes {
        for (form, make, base) in [
            (
                "compact",
                common::compact as fn(usize, usize, usize, usize) -> (Value, Value),
                baseline::compact as Merge,
            ),
            ("npy", common::npy, baseline::npy_merge),
        ] {
            for (dtypes, p, d) in [("u8", 1, 1), ("u16", 2, 2), ("u8_u16", 1, 2)] {
                let input = make(positions, p, d, 1);
                let (Some((ours, text)), Some((theirs, _))) =
                    (peak_growth(&input, library), peak_growth(&input, base))
                else {
                    println!("peak RSS cannot be measured here (needs Linux /proc)");
                    return;
                };
                let mb = |b: u64| b as f64 / 1e6;
                println!(
                    "{:<34}{:>14.1}{:>14.1}{:>14.1}{:>12.2}",
                    format!("{form}/{}k/{dtypes}/n1", positions / 1024),
                    mb(text),
                    mb(ours),
                    mb(theirs),
                    ours as f64 / text.max(1) as f64
                );
            }
        }
    }
}
