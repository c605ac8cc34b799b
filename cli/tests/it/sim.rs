//! The README's heatmap of a broken merge, drawn by `pd-stitch compare` on
//! a simulated run. The simulator's own tests are the library's
//! (`tests/it/sim.rs`).

use std::process::Command;

use pd_stitch::sim::{run, Config, Engine, Request};
use pd_stitch::{Error, Stitcher};
use serde_json::Value;

use crate::support;

/// Makes the README's heatmap of a broken merge (`docs/compare_cut_one_early.svg`):
/// a simulated run whose merge cuts one position early, kept in
/// `target/compare-demo`, compared with `pd-stitch compare` on its first
/// request of one choice with rows of 48 layers. Run by hand:
/// `cargo test -p pd-stitch-cli --test it -- --ignored sim::write_the_readme_heatmap --nocapture`.
#[test]
#[ignore = "writes docs/compare_cut_one_early.svg; run by hand"]
fn write_the_readme_heatmap() {
    let index = (0..1000)
        .find(|&i| {
            let r = Request::draw(1, i);
            r.choices() == 1
                && r.row_shape() == [48, 8]
                && (40..=100).contains(&r.prompt_len())
                && r.completion_len() >= 40
        })
        .unwrap();
    let dir = crate::repo("target/compare-demo");
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config {
        engine: Engine::Vllm,
        requests: index + 1,
        seed: 1,
        dir: dir.clone(),
        concurrency: 2,
    };
    let broken = |_: &Stitcher, p: &Value, d: &mut Value| -> Result<bool, Error> {
        pd_stitch::merge_routed_experts_for_pd(&support::cut_one_early(p), d)
    };
    run(&config, &broken, &|_, _| {}).unwrap();
    let folder = format!("target/compare-demo/req-{index:04}");
    let out = Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
        .current_dir(crate::REPO)
        .args([
            "compare",
            &format!("{folder}/by-handle.merged.json"),
            &format!("{folder}/colocated.json"),
            "--root-a",
            "target/compare-demo",
            "--root-b",
            "target/compare-demo",
            "--svg",
            "docs/compare_cut_one_early.svg",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    println!("request {index}\n{}", String::from_utf8_lossy(&out.stdout));
}
