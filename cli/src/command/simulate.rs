//! `pd-stitch simulate`: a colocated server and a 1P1D deployment over the
//! same truth, every request stitched in every form and checked bitwise.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use pd_stitch::sim::{self, Config};
use serde_json::Value;

use super::progress::Progress;

// What `simulate` takes; the command's help is on `Command::Simulate`.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// How many requests.
    #[arg(long, default_value_t = 160)]
    requests: usize,
    /// The seed of the run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the files here (default: a temporary directory, removed after).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// How many requests to run at once.
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// The engine whose responses are simulated: vllm (by handle, inline
    /// compact and npy) or sglang (meta_info/sglext rows, both decode
    /// conventions).
    #[arg(long, value_enum, default_value = "vllm")]
    engine: Engine,
}

/// The engines `simulate` writes responses of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// vLLM's forms: by handle, inline compact, inline npy.
    Vllm,
    /// SGLang's rows: meta_info, sglext and sgl_ext.
    Sglang,
}

pub fn run(args: SimulateArgs, quiet: bool) -> Result<ExitCode, String> {
    let SimulateArgs {
        requests,
        seed,
        dir,
        concurrency,
        engine,
    } = args;
    if engine == Engine::Sglang {
        return simulate_sglang(requests, seed, dir);
    }
    let keep = dir.is_some();
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("pd-stitch-sim-{}-{seed}", std::process::id()))
    });
    let config = Config {
        requests,
        seed,
        dir: dir.clone(),
        concurrency,
    };
    let bar = Progress::new("requests", requests, quiet);
    let progress = |done: usize, _total: usize| bar.set(done);
    let started = Instant::now();
    let merge = |p: &Value, d: &mut Value| pd_stitch::merge_routed_experts_for_pd(p, d);
    let result = sim::run(&config, &merge, &progress);
    bar.finish();
    if !keep {
        let _ = fs::remove_dir_all(&dir);
    }
    let summary = result.map_err(|e| format!("{}: {e}", dir.display()))?;
    println!("{summary}");
    println!(
        "seed {seed}, concurrency {concurrency}, {:.2} s, files {}",
        started.elapsed().as_secs_f64(),
        if keep {
            dir.display().to_string()
        } else {
            "removed".to_owned()
        }
    );
    for mismatch in summary.mismatches.iter().take(20) {
        eprintln!("mismatch: {mismatch}");
    }
    Ok(if summary.all_equal() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `simulate --engine sglang`: both decode conventions of every request,
/// stitched with and without the row shape, checked bitwise.
fn simulate_sglang(requests: usize, seed: u64, dir: Option<PathBuf>) -> Result<ExitCode, String> {
    let started = Instant::now();
    let summary = pd_stitch::sglang::sim::run(
        requests,
        seed,
        dir.as_deref(),
        &pd_stitch::sglang::sim::library_merge,
    )
    .map_err(|e| e.to_string())?;
    println!("{summary}");
    println!(
        "seed {seed}, {:.2} s, files {}",
        started.elapsed().as_secs_f64(),
        dir.map_or_else(|| "not kept".to_owned(), |d| d.display().to_string())
    );
    for mismatch in summary.mismatches.iter().take(20) {
        eprintln!("mismatch: {mismatch}");
    }
    Ok(if summary.all_equal() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
