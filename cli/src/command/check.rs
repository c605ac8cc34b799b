//! `pd-stitch check`: what is wrong with a response's rows, if anything.

use std::path::PathBuf;
use std::process::ExitCode;

use pd_stitch::gather::{self, RowsCheck, Store};

use super::progress::Progress;
use super::{confined, read_json};

// What `check` takes; the command's help is on `Command::Check`.
#[derive(clap::Args)]
pub struct CheckArgs {
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
    /// SGLang's row shape, LAYERSxTOP_K (e.g. 48x8): places SGLang's rows
    /// (meta_info, sglext, sgl_ext), which carry no shape, so that their
    /// coverage can be checked.
    #[arg(long, value_name = "LxK", value_parser = super::row_shape)]
    row_shape: Option<(u64, u64)>,
    /// The model's expert count: ids at or beyond it are wrong rows.
    #[arg(long, value_name = "N")]
    experts: Option<u64>,
    /// The model's config.json, for its expert count (num_experts,
    /// n_routed_experts or num_local_experts) when --experts is not given.
    #[arg(long, value_name = "config.json")]
    config: Option<PathBuf>,
}

/// One response as it always was; several one after the other, each under a
/// `== FILE` line, with progress, exit status 1 when any is wrong or cannot
/// be read (said on stderr, and the others still checked).
pub fn run(args: CheckArgs, quiet: bool) -> Result<ExitCode, String> {
    let store = confined(&args.root, &args.allow)?;
    let rows = RowsCheck::experts(super::experts(args.experts, args.config.as_deref())?);
    check(&args.responses, &store, args.row_shape, rows, quiet)
}

/// The layout report of one response, and the rows check of its rows (the
/// choices the layout check found unreadable are its to report).
fn check_one(
    value: &serde_json::Value,
    store: &Store,
    row_shape: Option<(u64, u64)>,
    rows: RowsCheck,
) -> (String, bool) {
    let report = gather::check_with(value, store, row_shape);
    let findings = gather::check_response_rows(value, store, row_shape, rows);
    let text = format!("{report}{}", super::rows_problems(&findings, ""));
    (text, report.is_ok() && findings.is_clean())
}

fn check(
    responses: &[PathBuf],
    store: &Store,
    row_shape: Option<(u64, u64)>,
    rows: RowsCheck,
    quiet: bool,
) -> Result<ExitCode, String> {
    if let [response] = responses {
        let (report, ok) = check_one(&read_json(response)?, store, row_shape, rows);
        print!("{report}");
        return Ok(if ok {
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
                let (report, ok) = check_one(&value, store, row_shape, rows);
                all_ok &= ok;
                progress.say(&format!("== {}\n{}", response.display(), report.trim_end()));
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
