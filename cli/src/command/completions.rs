//! `pd-stitch completions`: the command's shell completion script.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::Cli;

// What `completions` takes; the command's help is on `Command::Completions`.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> Result<ExitCode, String> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "pd-stitch", &mut out);
    std::io::stdout()
        .write_all(&out)
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
