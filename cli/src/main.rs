//! `pd-stitch`: merge, check, gather and compare P/D responses, assemble a
//! multi-turn episode's rows, probe live endpoints, simulate a
//! P/D deployment to show the stitched rows are right, and print shell
//! completions.
//!
//! Results go to stdout; an error is one line on stderr and a non-zero exit.

#![forbid(unsafe_code)]

mod command;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Merge(command::merge::MergeArgs),
    /// Check a response's rows: coverage, gaps, overlaps, dtype and shape
    /// agreement, order, and that every segment's bytes exist in its file.
    #[command(after_help = "Example:\n  pd-stitch check merged.json --root examples/seed")]
    Check(command::check::CheckArgs),
    /// Reconstruct one choice's rows of a field, in position order, from the
    /// files (by handle) or the inline value.
    #[command(
        after_help = "Example:\n  pd-stitch gather merged.json --choice 1 --root examples/seed --npy rows.npy"
    )]
    Gather(command::gather::GatherArgs),
    /// Compare two responses' rows position by position (a P/D deployment's
    /// against a colocated server's): rows equal, equal as sets of experts,
    /// per layer and per region, where they first differ, and positions one
    /// side covers only. Exit status 0 when all equal, 1 when anything
    /// differs, 2 on an error.
    #[command(
        after_help = "Example:\n  pd-stitch compare merged.json examples/seed/decode.json --root-a examples/seed --root-b examples/seed --svg map.svg"
    )]
    Compare(command::compare::CompareArgs),
    /// Assemble a multi-turn episode's rows from its turns' responses (a
    /// JSONL, one turn a line, as pd_stitch.assemble_episode takes them):
    /// rows placed from each turn's token counts and the start it asked
    /// for, joined by their common token prefix, one row a position by one
    /// rule. Prints a table of the turns (or --json), writes the rows with
    /// --npy.
    #[command(
        after_help = "Example:\n  pd-stitch episode examples/episode/turns.jsonl --root examples/episode --npy episode.npy"
    )]
    Episode(command::episode::EpisodeArgs),
    /// Send the same requests to a colocated server and to a P/D deployment
    /// (its router), and compare the answers' tokens and rows position by
    /// position: each difference classified (boundary, whole rows,
    /// scattered, missing, diverged tokens), each side's rows checked for
    /// rows no engine produces. Exit status 0 when all equal, 1 on a
    /// difference or a wrong row, 2 when a request failed.
    #[command(
        after_help = "Example:\n  pd-stitch probe --colocated http://127.0.0.1:8000 --pd http://127.0.0.1:8010 --requests 80 --turns 2 --concurrency 10 --stream both"
    )]
    Probe(command::probe::ProbeArgs),
    /// Print the shell completion script of pd-stitch on stdout.
    #[command(
        after_help = "Example:\n  pd-stitch completions bash > ~/.local/share/bash-completion/completions/pd-stitch"
    )]
    Completions(command::completions::CompletionsArgs),
    /// Simulate a colocated server and a 1P1D deployment over the same truth,
    /// stitch every request in every form, and check the rows bitwise; with
    /// --turns, multi-turn episodes checked against the full-context forward.
    #[command(after_help = "Example:\n  pd-stitch simulate --requests 40 --seed 7")]
    Simulate(command::simulate::SimulateArgs),
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
        Command::Merge(args) => command::merge::run(args),
        Command::Check(args) => command::check::run(args, quiet),
        Command::Gather(args) => command::gather::run(args),
        Command::Compare(args) => command::compare::run(args, quiet),
        Command::Episode(args) => command::episode::run(args),
        Command::Probe(args) => command::probe::run(args, quiet),
        Command::Completions(args) => command::completions::run(args),
        Command::Simulate(args) => command::simulate::run(args, quiet),
    }
}
