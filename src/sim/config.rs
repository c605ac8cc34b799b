//! What to simulate, and the merge under test.

use std::path::PathBuf;

use serde_json::Value;

use crate::error::Error;
use crate::{Stitch, Stitcher};

use super::engine::Engine;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// The engine whose deployments answer.
    pub engine: Engine,
    /// How many requests.
    pub requests: usize,
    /// The seed every request is drawn from.
    pub seed: u64,
    /// Where the files go; payloads name them relative to it.
    pub dir: PathBuf,
    /// How many requests run at once (vLLM and Dynamo; SGLang's run one at
    /// a time).
    pub concurrency: usize,
}

/// A merge function under test: the library's ([`library_merge`]), or one
/// a test breaks on purpose. It is given the stitcher a router of the
/// request's engine would hold (with SGLang's row shape, or without it
/// where the run asks what the rows alone determine).
pub type MergeFn = dyn Fn(&Stitcher, &Value, &mut Value) -> Result<bool, Error> + Sync;

/// The library's merge: `stitcher.merge(prefill, decode, Stitch::ForPd)`.
///
/// # Errors
///
/// The merge's.
pub fn library_merge(
    stitcher: &Stitcher,
    prefill: &Value,
    decode: &mut Value,
) -> Result<bool, Error> {
    stitcher.merge(prefill, decode, Stitch::ForPd)
}
