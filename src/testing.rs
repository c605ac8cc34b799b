//! Verification for routers' own tests (feature `testing`).
//!
//! A router's response path picks the prefill's choice 0, copies fields
//! around, retries, maybe streams; its CI should show that the rows it
//! delivers are still the right ones. This module gives it the generators,
//! the truth and the checker this crate uses on itself, over every
//! engine's wire form the simulator writes ([`crate::sim::Wire`]):
//!
//! - [`cases`]: a proptest strategy of P/D response pairs as real 1P1D
//!   deployments write them (vLLM by handle with an in-memory file store,
//!   inline compact and counted `.npy`; SGLang's `/generate`, batches among
//!   them, `sglext` and `sgl_ext`, both decode conventions; Dynamo's token
//!   API and `nvext`), with [`Knobs`] for the forms, lengths, choices,
//!   dtypes, row shapes, preemptions, prefix omission and hostile extras,
//!   each with its colocated truth;
//! - [`verify_stitched`]: checks a merged decode response against the case:
//!   every choice's (or SGLang output's) rows, read back, equal the truth
//!   bitwise; by handle, the prefill's segments come first and unchanged,
//!   other payload items pass through, and segments come in position order
//!   (a trainer concatenates them in payload order); a row no engine
//!   produces (an expert twice in a layer, an id past the model's experts,
//!   a row of zeros: the rows check, [`crate::gather::check_rows`]) is named
//!   as such. A failure names the choice, the first wrong position, the
//!   segment or slot it came from, and what was expected;
//! - [`stream`]: the same cases' decodes as event streams, and
//!   `verify_streamed`;
//! - [`fixture`]: committed response pairs (the seed example and error cases).
//!
//! ```
//! use pd_stitch::testing::{cases, verify_stitched, Knobs};
//! use pd_stitch::{Stitch, Stitcher};
//! use proptest::prelude::*;
//!
//! // The router's response path under test. It knows its model's row
//! // shape, which SGLang's rows need.
//! fn respond(stitcher: &Stitcher, prefill: &serde_json::Value, decode: serde_json::Value) -> serde_json::Value {
//!     let mut decode = decode;
//!     stitcher.merge(prefill, &mut decode, Stitch::ForPd).expect("stitchable");
//!     decode
//! }
//!
//! proptest!(|(case in cases(Knobs::default()))| {
//!     let (layers, top_k) = case.row_shape();
//!     let merged = respond(&Stitcher::new().row_shape(layers, top_k), &case.prefill, case.decode.clone());
//!     verify_stitched(&case, &merged)?;
//! });
//! ```

mod case;
mod fixture;
pub mod stream;
mod verify;

pub use case::{cases, Case, Knobs, WORN_SLOTS};
pub use fixture::{fixture, Fixture, FIXTURES};
pub use verify::{verify_stitched, Mismatch};
