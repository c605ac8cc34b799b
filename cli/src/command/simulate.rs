//! `pd-stitch simulate`: an engine's colocated server and 1P1D deployment
//! over one model, every request stitched in every wire form and checked
//! bitwise; with `--turns`, multi-turn episodes through every engine's
//! forms, assembled and checked against the model's full-context forward.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use pd_stitch::sim::{self, Config, Engine, EpisodeConfig};

use super::progress::Progress;

// What `simulate` takes; the command's help is on `Command::Simulate`.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// How many requests (with --turns, episodes; default 160, with
    /// --turns 40).
    #[arg(long)]
    requests: Option<usize>,
    /// The seed of the run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the files here (default: a temporary directory, removed after).
    #[arg(long, value_name = "DIR", conflicts_with = "turns")]
    dir: Option<PathBuf>,
    /// How many requests (episodes) to run at once; SGLang's run one at a
    /// time, in order, their decodes' slot pools kept across them.
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// The engine whose responses are simulated: vllm (by handle, inline
    /// compact and npy), sglang (meta_info, sglext and sgl_ext rows, both
    /// decode conventions) or dynamo (token API, nvext). Default: vllm;
    /// with --turns, every engine.
    #[arg(long, value_parser = engine())]
    engine: Option<Engine>,
    /// Multi-turn episodes of this many turns (each turn's prompt the one
    /// before's prompt, its completion and new tokens), through every wire
    /// form, each assembled and checked against the model's full-context
    /// forward: equal but at the planted decode flips.
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u64).range(1..))]
    turns: Option<u64>,
    /// With --turns: later turns ask their rows from their common prefix
    /// with the turn before, less one (delta requests).
    #[arg(long, requires = "turns")]
    delta: bool,
    /// With --turns: plant the off-by-one trainers ship, delta turns asked
    /// from the common prefix itself; the check must find it (boundary).
    #[arg(long, requires = "turns")]
    off_by_one: bool,
}

/// The engines' names, parsed into the library's [`Engine`].
fn engine() -> impl TypedValueParser<Value = Engine> {
    PossibleValuesParser::new(Engine::ALL.map(Engine::name)).try_map(|s| s.parse::<Engine>())
}

pub fn run(args: SimulateArgs, quiet: bool) -> Result<ExitCode, String> {
    if let Some(turns) = args.turns {
        return episodes(&args, turns, quiet);
    }
    let SimulateArgs {
        requests,
        seed,
        dir,
        concurrency,
        engine,
        ..
    } = args;
    let requests = requests.unwrap_or(160);
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

/// `simulate --turns T`: episodes through every wire form of the engines.
fn episodes(args: &SimulateArgs, turns: u64, quiet: bool) -> Result<ExitCode, String> {
    let episodes = args.requests.unwrap_or(40);
    let config = EpisodeConfig {
        engines: args
            .engine
            .map_or(Engine::ALL.to_vec(), |engine| vec![engine]),
        episodes,
        turns: usize::try_from(turns).map_err(|e| format!("--turns {turns}: {e}"))?,
        seed: args.seed,
        delta: args.delta,
        late_start: args.off_by_one,
        concurrency: args.concurrency,
    };
    let bar = Progress::new("episodes", episodes, quiet);
    let progress = |done: usize, _total: usize| bar.set(done);
    let started = Instant::now();
    let result = sim::run_episodes(&config, &progress);
    bar.finish();
    let summary = result.map_err(|e| e.to_string())?;
    println!("{summary}");
    println!(
        "seed {}, concurrency {}, {:.2} s",
        args.seed,
        args.concurrency,
        started.elapsed().as_secs_f64()
    );
    for mismatch in summary.mismatches.iter().take(20) {
        eprintln!("mismatch: {mismatch}");
    }
    Ok(if summary.all_right() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
