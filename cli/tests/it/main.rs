//! The tests of the `pd-stitch` command, built as one test binary: each runs
//! the built command (`CARGO_BIN_EXE_pd-stitch`) from the repository's root,
//! on the root's committed examples and fixtures, as the README runs it. The
//! library's own tests are the root's `tests/it`, whose generators
//! (`support`) these share; `probe` runs the root's mock backends and
//! example router. Run one module with
//! `cargo test -p pd-stitch-cli --test it probe::`.

#[path = "../../../tests/it/support/mod.rs"]
mod support;

#[allow(dead_code)] // the example's `main` and what only it uses
#[path = "../../../examples/mock_backend.rs"]
mod mock_backend;
#[allow(dead_code)]
#[path = "../../../examples/pd_router.rs"]
mod pd_router;

mod cli;
mod episode;
mod probe;
mod rows_check;
mod sim;

use std::path::{Path, PathBuf};

/// The repository's root: the working directory of every run of the command.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// `path` of the repository (an absolute `path` stays as it is).
fn repo(path: impl AsRef<Path>) -> PathBuf {
    Path::new(REPO).join(path)
}
