//! `pd-stitch simulate`: an engine's colocated server and 1P1D deployment
//! over one model, every request stitched in every wire form and checked
//! bitwise.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use pd_stitch::sim::{self, Config, Engine};

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
    /// How many requests to run at once; SGLang's run one at a time, in
    /// order, their decodes' slot pools kept across them.
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// The engine whose responses are simulated: vllm (by handle, inline
    /// compact and npy), sglang (meta_info, sglext and sgl_ext rows, both
    /// decode conventions) or dynamo (token API, nvext). Default: vllm.
    #[arg(long, value_parser = engine())]
    engine: Option<Engine>,
}

/// The engines' names, parsed into the library's [`Engine`].
fn engine() -> impl TypedValueParser<Value = Engine> {
    PossibleValuesParser::new(Engine::ALL.map(Engine::name)).try_map(|s| s.parse::<Engine>())
}

pub fn run(args: SimulateArgs, quiet: bool) -> Result<ExitCode, String> {
    let SimulateArgs {
        requests,
        seed,
        dir,
        concurrency,
        engine,
        ..
    } = args;
    let keep = dir.is_some();
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("pd-stitch-sim-{}-{seed}", std::process::id()))
    });
    let engine = engine.unwrap_or(Engine::Vllm);
    let config = Config {
        engine,
        requests,
        seed,
        dir: dir.clone(),
        concurrency,
    };
    let bar = Progress::new("requests", requests, quiet);
    let progress = |done: usize, _total: usize| bar.set(done);
    let started = Instant::now();
    let result = sim::run(&config, &sim::library_merge, &progress);
    bar.finish();
    if !keep {
        let _ = fs::remove_dir_all(&dir);
    }
    let summary = result.map_err(|e| format!("{}: {e}", dir.display()))?;
    println!("{summary}");
    let order = if engine == Engine::Sglang {
        "in order".to_owned()
    } else {
        format!("concurrency {concurrency}")
    };
    println!(
        "seed {seed}, {order}, {:.2} s, files {}",
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
