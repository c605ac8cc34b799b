//! `pd-stitch check`: what is wrong with a response's rows, if anything.

use std::path::PathBuf;
use std::process::ExitCode;

use pd_stitch::gather::{self, Store};

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
}

/// One response as it always was; several one after the other, each under a
/// `== FILE` line, with progress, exit status 1 when any is wrong or cannot
/// be read (said on stderr, and the others still checked).
pub fn run(args: CheckArgs, quiet: bool) -> Result<ExitCode, String> {
    check(&args.responses, &confined(&args.root, &args.allow)?, quiet)
}

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
