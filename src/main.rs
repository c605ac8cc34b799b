//! `pd-stitch`: merge, check and gather P/D responses, and simulate a P/D
//! deployment to show the stitched rows are right.
//!
//! Results go to stdout; an error is one line on stderr and a non-zero exit.

#![forbid(unsafe_code)]

use std::fs;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use pd_stitch::gather::{self, Source, Store};
use pd_stitch::sim::{self, Config};
use pd_stitch::{Stitcher, ROUTED_EXPERTS};
use serde_json::Value;

/// Stitch prefill and decode responses of P/D-disaggregated serving, and check
/// the routed-experts rows they point at.
#[derive(Parser)]
#[command(name = "pd-stitch", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Merge a prefill and a decode response as a router does
    /// (merge_routed_experts_for_pd) and print the merged decode response.
    Merge {
        /// The prefill instance's response (JSON).
        prefill: PathBuf,
        /// The decode instance's response (JSON).
        decode: PathBuf,
        /// Stitch this payload field too (besides the defaults, routed_experts and
        /// routed_expert_weights); repeatable.
        #[arg(long = "field", value_name = "NAME")]
        fields: Vec<String>,
        /// Refuse a merged layout a trainer would misread (gaps, overlaps,
        /// segments out of position order, mixed row shapes or dtype kinds).
        #[arg(long)]
        strict: bool,
        /// Write the merged response here instead of stdout.
        #[arg(short, long, value_name = "OUT")]
        output: Option<PathBuf>,
        /// Indent the output.
        #[arg(long)]
        pretty: bool,
    },
    /// Check a response's rows: coverage, gaps, overlaps, dtype and shape
    /// agreement, order, and that every segment's bytes exist in its file.
    Check {
        /// The response (JSON).
        response: PathBuf,
        /// Resolve relative file names against this directory; only files
        /// inside it (or an --allow directory) are read.
        #[arg(long, value_name = "DIR", default_value = ".")]
        root: PathBuf,
        /// Also read files inside this directory (symlinks resolved);
        /// repeatable.
        #[arg(long = "allow", value_name = "DIR")]
        allow: Vec<PathBuf>,
    },
    /// Reconstruct one choice's rows of a field, in position order, from the
    /// files (by handle) or the inline value.
    Gather {
        /// The response (JSON).
        response: PathBuf,
        /// The choice.
        #[arg(long)]
        choice: usize,
        /// The field.
        #[arg(long, default_value = ROUTED_EXPERTS)]
        field: String,
        /// Resolve relative file names against this directory; only files
        /// inside it (or an --allow directory) are read.
        #[arg(long, value_name = "DIR", default_value = ".")]
        root: PathBuf,
        /// Also read files inside this directory (symlinks resolved);
        /// repeatable.
        #[arg(long = "allow", value_name = "DIR")]
        allow: Vec<PathBuf>,
        /// Write the rows as a .npy file instead of printing a summary.
        #[arg(long, value_name = "OUT.npy")]
        npy: Option<PathBuf>,
    },
    /// Simulate a colocated server and a 1P1D deployment over the same truth,
    /// stitch every request in every form, and check the rows bitwise.
    Simulate {
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
    },
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Merge {
            prefill,
            decode,
            fields,
            strict,
            output,
            pretty,
        } => {
            let stitcher = fields.into_iter().fold(Stitcher::new(), Stitcher::field);
            let stitcher = if strict { stitcher.strict() } else { stitcher };
            merge(&stitcher, &prefill, &decode, output, pretty)
        }
        Command::Check {
            response,
            root,
            allow,
        } => {
            let store = confined(&root, &allow)?;
            let report = gather::check_from(&read_json(&response)?, &store);
            print!("{report}");
            Ok(if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Gather {
            response,
            choice,
            field,
            root,
            allow,
            npy,
        } => {
            let store = confined(&root, &allow)?;
            let rows = gather::gather_from(&read_json(&response)?, choice, &field, &store)
                .map_err(|e| e.to_string())?;
            match npy {
                Some(out) => {
                    let file = rows.to_npy().map_err(|e| e.to_string())?;
                    fs::write(&out, file).map_err(|e| format!("{}: {e}", out.display()))?;
                }
                None => {
                    let source = match rows.source() {
                        Source::Files => "files".to_owned(),
                        Source::Inline(form) => format!("inline {form}"),
                    };
                    println!("choice     {choice}");
                    println!("field      {field}");
                    println!("source     {source}");
                    println!("positions  {}", rows.positions());
                    println!("dtype      {}", rows.dtype());
                    println!("shape      {:?}", rows.shape());
                    println!(
                        "checksum   {:016x} (FNV-1a 64 of the data)",
                        rows.checksum()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Simulate {
            requests,
            seed,
            dir,
            concurrency,
        } => simulate(requests, seed, dir, concurrency),
    }
}

/// The store that reads only inside `root` and the `allow` directories.
fn confined(root: &Path, allow: &[PathBuf]) -> Result<Store, String> {
    Store::confined(root, allow).map_err(|e| {
        // Name the directory that failed to resolve.
        let bad = std::iter::once(root)
            .chain(allow.iter().map(PathBuf::as_path))
            .find(|dir| dir.canonicalize().is_err())
            .unwrap_or(root);
        format!("{}: {e}", bad.display())
    })
}

fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}

fn merge(
    stitcher: &Stitcher,
    prefill: &Path,
    decode: &Path,
    output: Option<PathBuf>,
    pretty: bool,
) -> Result<ExitCode, String> {
    let prefill = read_json(prefill)?;
    let mut decode = read_json(decode)?;
    stitcher
        .merge_routed_experts_for_pd(&prefill, &mut decode)
        .map_err(|e| e.to_string())?;
    let mut text = if pretty {
        serde_json::to_vec_pretty(&decode)
    } else {
        serde_json::to_vec(&decode)
    }
    .map_err(|e| e.to_string())?;
    text.push(b'\n');
    match output {
        Some(out) => fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?,
        None => std::io::stdout()
            .write_all(&text)
            .map_err(|e| e.to_string())?,
    }
    Ok(ExitCode::SUCCESS)
}

fn simulate(
    requests: usize,
    seed: u64,
    dir: Option<PathBuf>,
    concurrency: usize,
) -> Result<ExitCode, String> {
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
    let bar = std::io::stderr().is_terminal() && requests >= 20;
    let progress = |done: usize, total: usize| {
        if bar && (done % 4 == 0 || done == total) {
            let filled = done * 40 / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total}",
                "#".repeat(filled),
                ".".repeat(40 - filled)
            );
            if done == total {
                eprintln!();
            }
        }
    };
    let started = Instant::now();
    let merge = |p: &Value, d: &mut Value| pd_stitch::merge_routed_experts_for_pd(p, d);
    let result = sim::run(&config, &merge, &progress);
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
