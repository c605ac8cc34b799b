//! A P/D deployment and a colocated server, simulated on the local disk.
//!
//! For each request the simulator draws a prompt length, a completion length,
//! 1-4 choices, a row shape and a dtype (`uint8`, or `uint16` when expert ids
//! exceed 255), then computes the true routed experts of every position. From
//! that one truth it writes what three deployments would answer:
//!
//! - a **colocated** server: every row of every choice, `[0, P + C - 1)`;
//! - the **prefill** instance of a 1P1D pair: the prompt's rows `[0, P)`, as
//!   a chunked prefill writes them (1-3 segments);
//! - the **decode** instance: each choice's rows from its first forward,
//!   `[P - 1, P + C - 1)`, split where preemptions happened, its row for the
//!   last prompt position deliberately wrong (a decode instance does not know
//!   the prompt's routing), and, in the npy form, wrong rows for the whole
//!   prompt.
//!
//! Each in three forms: by handle (real files, end-anchored segments, with
//! `sampling_mask` segments beside them), inline compact and inline npy. It
//! stitches every pair with a merge function (the library's, or a broken one
//! in tests), gathers the rows back with [`gather`](crate::gather::gather()),
//! and compares them bitwise with the truth and across forms.
//!
//! In each request's folder (`req-NNNN/`) it leaves the merged response of
//! each form (`by-handle.merged.json`, `compact.merged.json`,
//! `npy.merged.json`) and the colocated server's own response
//! (`colocated.json`, rows by handle in `colocated.bin`), so that
//! `pd-stitch compare` has a real baseline to check them against. File names
//! in payloads are relative to the run's directory. Every response carries
//! `usage.prompt_tokens`, as servers report it.

mod config;
mod request;
mod responses;
pub(crate) mod rng;
mod run;
pub(crate) mod sglang;
mod summary;

pub use config::{Config, Mode};
pub use request::Request;
pub use responses::Responses;
pub use run::{run, trainer_mismatches, trainer_mismatches_in, MergeFn};
pub use summary::{ModeSummary, Summary};
