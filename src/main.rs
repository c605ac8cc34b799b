//! `pd-stitch`: merge, check, gather and compare P/D responses, simulate a
//! P/D deployment to show the stitched rows are right, and print shell
//! completions.
//!
//! Results go to stdout; an error is one line on stderr and a non-zero exit.

#![forbid(unsafe_code)]

use std::fs;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use clap::{CommandFactory, Parser, Subcommand};
use pd_stitch::compare;
use pd_stitch::gather::{self, Source, Store};
use pd_stitch::sim::{self, Config};
use pd_stitch::{Error, Side, Stitcher, ROUTED_EXPERTS};
use serde_json::Value;

/// Stitch prefill and decode responses of P/D-disaggregated serving, and check
/// the routed-experts rows they point at.
#[derive(Parser)]
#[command(name = "pd-stitch", version, about)]
struct Cli {
    /// Show no progress on stderr (it shows only on a terminal anyway).
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Merge a prefill and a decode response as a router does
    /// (merge_routed_experts_for_pd, on the bytes) and print the merged decode
    /// response: the decode's text with only the stitched values changed.
    #[command(
        after_help = "Example:\n  pd-stitch merge examples/seed/prefill.json examples/seed/decode.json -o merged.json"
    )]
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
    #[command(after_help = "Example:\n  pd-stitch check merged.json --root examples/seed")]
    Check {
        /// The response (JSON); several are checked one after the other.
        #[arg(required = true, value_name = "RESPONSE")]
        responses: Vec<PathBuf>,
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
    #[command(
        after_help = "Example:\n  pd-stitch gather merged.json --choice 1 --root examples/seed --npy rows.npy"
    )]
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
    /// Compare two responses' rows position by position (a P/D deployment's
    /// against a colocated server's): rows equal, equal as sets of experts,
    /// per layer and per region, where they first differ, and positions one
    /// side covers only. Exit status 0 when all equal, 1 when anything
    /// differs, 2 on an error.
    #[command(
        after_help = "Example:\n  pd-stitch compare merged.json examples/seed/decode.json --root-a examples/seed --root-b examples/seed --svg map.svg"
    )]
    Compare {
        /// Response A (JSON).
        #[arg(required_unless_present = "dirs")]
        a: Option<PathBuf>,
        /// Response B (JSON).
        #[arg(required_unless_present = "dirs")]
        b: Option<PathBuf>,
        /// Compare the same-named .json files of two directories instead, one
        /// summary line per file and totals.
        #[arg(long, num_args = 2, value_names = ["A_DIR", "B_DIR"], conflicts_with_all = ["a", "b", "svg"])]
        dirs: Option<Vec<PathBuf>>,
        /// Only this choice (default: every choice).
        #[arg(long)]
        choice: Option<usize>,
        /// The field.
        #[arg(long, default_value = ROUTED_EXPERTS)]
        field: String,
        /// Resolve A's relative file names against this directory.
        #[arg(long, value_name = "DIR", default_value = ".")]
        root_a: PathBuf,
        /// Resolve B's relative file names against this directory.
        #[arg(long, value_name = "DIR", default_value = ".")]
        root_b: PathBuf,
        /// Also read files under this directory (repeatable).
        #[arg(long, value_name = "DIR")]
        allow: Vec<PathBuf>,
        /// The prompt length (default: usage.prompt_tokens, else the end of a
        /// merged response's prefill segments).
        #[arg(long, value_name = "N")]
        prompt_len: Option<u64>,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Write a heatmap of positions by layers here.
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<PathBuf>,
    },
    /// Print the shell completion script of pd-stitch on stdout.
    #[command(
        after_help = "Example:\n  pd-stitch completions bash > ~/.local/share/bash-completion/completions/pd-stitch"
    )]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Simulate a colocated server and a 1P1D deployment over the same truth,
    /// stitch every request in every form, and check the rows bitwise.
    #[command(after_help = "Example:\n  pd-stitch simulate --requests 40 --seed 7")]
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
    let cli = Cli::parse();
    match run(cli.command, cli.quiet) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command, quiet: bool) -> Result<ExitCode, String> {
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
            responses,
            root,
            allow,
        } => check(&responses, &confined(&root, &allow)?, quiet),
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
        } => simulate(requests, seed, dir, concurrency, quiet),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "pd-stitch", &mut out);
            std::io::stdout()
                .write_all(&out)
                .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Compare {
            a,
            b,
            dirs,
            choice,
            field,
            root_a,
            root_b,
            allow,
            prompt_len,
            json,
            svg,
        } => {
            let options = compare::Options {
                choice,
                field,
                prompt_len,
                ..compare::Options::default()
            };
            let stores = (|| Ok::<_, String>([store(&root_a, &allow)?, store(&root_b, &allow)?]))();
            let code = match (stores, dirs, a, b) {
                (Err(message), ..) => {
                    eprintln!("error: {message}");
                    COMPARE_ERROR
                }
                (Ok(stores), Some(dirs), _, _) => {
                    compare_dirs(&dirs, &stores, &options, json, quiet)
                }
                (Ok(stores), None, Some(a), Some(b)) => {
                    compare_files(&a, &b, &stores, &options, json, svg.as_deref())
                }
                // clap requires A and B without --dirs.
                (Ok(_), None, _, _) => COMPARE_ERROR,
            };
            Ok(ExitCode::from(code))
        }
    }
}

/// Exit status of `compare` on an error (1 means "differs").
const COMPARE_ERROR: u8 = 2;

/// The store one side of `compare` reads through: only inside `root` and
/// the allowed directories.
fn store(root: &Path, allow: &[PathBuf]) -> Result<gather::Store, String> {
    confined(root, allow)
}

/// The comparison of two response files.
fn compare_pair(
    a: &Path,
    b: &Path,
    stores: &[gather::Store; 2],
    options: &compare::Options,
) -> Result<compare::Report, String> {
    let (va, vb) = (read_json(a)?, read_json(b)?);
    compare::compare(&va, &stores[0], &vb, &stores[1], options).map_err(|e| e.to_string())
}

fn compare_files(
    a: &Path,
    b: &Path,
    stores: &[gather::Store; 2],
    options: &compare::Options,
    json: bool,
    svg: Option<&Path>,
) -> u8 {
    let report = match compare_pair(a, b, stores, options) {
        Ok(report) => report,
        Err(message) => {
            eprintln!("error: {message}");
            return COMPARE_ERROR;
        }
    };
    if let Some(out) = svg {
        if let Err(e) = fs::write(out, report.to_svg()) {
            eprintln!("error: {}: {e}", out.display());
            return COMPARE_ERROR;
        }
    }
    if json {
        println!("{}", report.to_json());
    } else {
        println!("A: {}\nB: {}", a.display(), b.display());
        println!("{report}");
    }
    u8::from(!report.all_equal())
}

/// The `.json` files of `dir`, by name.
fn json_files(dir: &Path) -> Result<Vec<String>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && entry.path().is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Compares the same-named `.json` files of two directories: one line per
/// file and totals (or one JSON object), exit status the worst of all.
fn compare_dirs(
    dirs: &[PathBuf],
    stores: &[gather::Store; 2],
    options: &compare::Options,
    json: bool,
    quiet: bool,
) -> u8 {
    let [dir_a, dir_b] = dirs else {
        return COMPARE_ERROR;
    };
    let (names_a, names_b) = match (json_files(dir_a), json_files(dir_b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(message), _) | (_, Err(message)) => {
            eprintln!("error: {message}");
            return COMPARE_ERROR;
        }
    };
    let mut names: Vec<&String> = names_a.iter().chain(&names_b).collect();
    names.sort();
    names.dedup();
    let mut worst = 0u8;
    let mut totals = (0u64, 0u64, 0u64, 0u64);
    let (mut equal_files, mut errors) = (0usize, 0usize);
    let mut entries = Vec::new();
    if !json {
        println!(
            "{:<32}  {:>9}  {:>20}  {:>20}  {:>8}  status",
            "file", "compared", "equal rows", "equal sets", "one side"
        );
    }
    let progress = Progress::new("files", names.len(), quiet);
    for (done, name) in names.iter().enumerate() {
        progress.set(done);
        // A response one directory lacks is a difference, not an error.
        let missing = match (names_a.contains(name), names_b.contains(name)) {
            (true, true) => None,
            (false, _) => Some(dir_a),
            (_, false) => Some(dir_b),
        };
        if let Some(dir) = missing {
            worst = worst.max(1);
            let message = format!("missing in {}", dir.display());
            if json {
                entries.push(
                    serde_json::json!({"file": name, "all_equal": false, "missing": message}),
                );
            } else {
                progress.say(&format!("{name:<32}  {message}"));
            }
            continue;
        }
        match compare_pair(&dir_a.join(name), &dir_b.join(name), stores, options) {
            Ok(report) => {
                let (compared, equal, sets, one_side) = report.totals();
                totals = (
                    totals.0 + compared,
                    totals.1 + equal,
                    totals.2 + sets,
                    totals.3 + one_side,
                );
                let same = report.all_equal();
                equal_files += usize::from(same);
                worst = worst.max(u8::from(!same));
                if json {
                    let mut entry = report.to_json();
                    entry["file"] = Value::String((*name).clone());
                    entries.push(entry);
                } else {
                    progress.say(&format!(
                        "{name:<32}  {compared:>9}  {:>20}  {:>20}  {one_side:>8}  {}",
                        compare::fraction(equal, compared),
                        compare::fraction(sets, compared),
                        if same { "equal" } else { "DIFFERENT" }
                    ));
                }
            }
            Err(message) => {
                errors += 1;
                worst = COMPARE_ERROR;
                if json {
                    entries.push(serde_json::json!({"file": name, "error": message}));
                } else {
                    progress.say(&format!("{name:<32}  error: {message}"));
                }
            }
        }
    }
    progress.finish();
    if json {
        println!(
            "{}",
            serde_json::json!({"all_equal": worst == 0, "files": entries})
        );
    } else {
        println!(
            "total: {} file(s), {equal_files} equal, {} different or missing, {errors} error(s); rows equal {}, equal sets {}, {} position(s) on one side only",
            names.len(),
            names.len() - equal_files - errors,
            compare::fraction(totals.1, totals.0),
            compare::fraction(totals.2, totals.0),
            totals.3
        );
    }
    worst
}

/// `pd-stitch check`: one response as it always was; several one after the
/// other, each under a `== FILE` line, with progress, exit status 1 when any
/// is wrong or cannot be read (said on stderr, and the others still checked).
fn check(responses: &[PathBuf], store: &Store, quiet: bool) -> Result<ExitCode, String> {
    if let [response] = responses {
        let report = gather::check_from(&read_json(response)?, store);
        print!("{report}");
        return Ok(if report.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let progress = Progress::new("files", responses.len(), quiet);
    let mut all_ok = true;
    for (done, response) in responses.iter().enumerate() {
        progress.set(done);
        match read_json(response) {
            Ok(value) => {
                let report = gather::check_from(&value, store);
                all_ok &= report.is_ok();
                progress.say(&format!(
                    "== {}\n{}",
                    response.display(),
                    report.to_string().trim_end()
                ));
            }
            Err(message) => {
                all_ok = false;
                progress.clear();
                eprintln!("error: {message}");
            }
        }
    }
    progress.finish();
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

// ----------------------------------------------------------------------------
// Progress, shared by simulate, check over many files and compare --dirs.
// ----------------------------------------------------------------------------

/// Progress of a long run on stderr: items done of the total, a bar, the
/// rate and the time left. Drawn only when stderr is a terminal and
/// `--quiet` was not given, so that scripts and CI logs get nothing extra;
/// redrawn at most ten times a second, from any thread.
struct Progress {
    what: &'static str,
    total: usize,
    started: Instant,
    /// When the line was last drawn; `None` when progress is not shown.
    drawn: Option<Mutex<Option<Instant>>>,
}

impl Progress {
    fn new(what: &'static str, total: usize, quiet: bool) -> Progress {
        let shown = !quiet && std::io::stderr().is_terminal();
        Progress {
            what,
            total,
            started: Instant::now(),
            drawn: shown.then(|| Mutex::new(None)),
        }
    }

    /// `done` items are finished.
    fn set(&self, done: usize) {
        let Some(drawn) = &self.drawn else {
            return;
        };
        let Ok(mut last) = drawn.lock() else {
            return;
        };
        let now = Instant::now();
        if done < self.total && last.is_some_and(|t| now.duration_since(t).as_millis() < 100) {
            return;
        }
        *last = Some(now);
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let filled = (done * 30).checked_div(self.total).unwrap_or(30).min(30);
        let rate = if elapsed > 0.0 {
            done as f64 / elapsed
        } else {
            0.0
        };
        let left = if done > 0 && done < self.total {
            format!(
                ", {:.0} s left",
                (self.total - done) as f64 * elapsed / done as f64
            )
        } else {
            String::new()
        };
        // A failed write to stderr is no reason to stop the work.
        let _ = write!(
            std::io::stderr(),
            "\r[{}{}] {done}/{} {}, {rate:.1}/s{left}\x1b[K",
            "#".repeat(filled),
            ".".repeat(30 - filled),
            self.total,
            self.what,
        );
    }

    /// Erases the progress line, so that what comes next starts clean.
    fn clear(&self) {
        if self.drawn.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }

    /// Prints `line` on stdout, with the progress line out of its way.
    fn say(&self, line: &str) {
        self.clear();
        println!("{line}");
    }

    /// Draws the final count and ends the line.
    fn finish(&self) {
        if self.drawn.is_some() {
            self.set(self.total);
            let _ = writeln!(std::io::stderr());
        }
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

fn read_bytes(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Stitches the two files' texts on the bytes path: the output is the decode's
/// text with only the stitched values changed (re-indented with `--pretty`).
fn merge(
    stitcher: &Stitcher,
    prefill: &Path,
    decode: &Path,
    output: Option<PathBuf>,
    pretty: bool,
) -> Result<ExitCode, String> {
    let prefill_text = read_bytes(prefill)?;
    let mut text = read_bytes(decode)?;
    stitcher
        .merge_bytes(&prefill_text, &mut text, pd_stitch::Stitch::ForPd)
        .map_err(|e| match e {
            Error::Json {
                side,
                offset,
                message,
                ..
            } => {
                let path = if side == Side::Prefill {
                    prefill
                } else {
                    decode
                };
                format!("{}: not JSON: {message} at byte {offset}", path.display())
            }
            other => other.to_string(),
        })?;
    if pretty {
        let value: Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
        text = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
        text.push(b'\n');
    }
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
    quiet: bool,
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
