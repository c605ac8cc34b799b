//! What to simulate, and the forms rows travel in.

use std::path::PathBuf;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// How many requests.
    pub requests: usize,
    /// The seed every request is drawn from.
    pub seed: u64,
    /// Where the files go; payloads name them relative to it.
    pub dir: PathBuf,
    /// How many requests run at once.
    pub concurrency: usize,
}

/// The three forms rows travel in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `payload` segments pointing into files.
    ByHandle,
    /// Inline compact `routed_experts`.
    Compact,
    /// Inline `.npy` `routed_experts`.
    Npy,
}

impl Mode {
    /// All three, in report order.
    pub const ALL: [Mode; 3] = [Mode::ByHandle, Mode::Compact, Mode::Npy];

    /// The name used in reports and file names.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ByHandle => "by-handle",
            Mode::Compact => "inline compact",
            Mode::Npy => "inline npy",
        }
    }

    pub(super) fn file_stem(self) -> &'static str {
        match self {
            Mode::ByHandle => "by-handle",
            Mode::Compact => "compact",
            Mode::Npy => "npy",
        }
    }
}
