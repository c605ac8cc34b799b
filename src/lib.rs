//! Stitch the prefill and decode responses of prefill/decode (P/D)
//! disaggregated LLM serving, so that an RL trainer of a mixture-of-experts
//! model sees the routed experts of every token.
//!
//! # The problem
//!
//! To replay routing, an RL trainer needs, for every token position of a
//! rollout (prompt and completion), the *row* of expert ids the inference
//! server routed that token to: an array of shape `(layers, topk)`. Under P/D
//! disaggregation one request is served by two instances. The **prefill**
//! instance runs the prompt and computes its rows; the **decode** instance
//! pulls the KV cache and generates, computing rows from its first forward,
//! which is the last prompt position. So the two responses overlap by (at
//! least) one position, and the decode's rows for prompt positions are not
//! the ones the prompt was really routed with. A router stitches the two into
//! one response: the prefill's rows for the prompt, the decode's after it.
//!
//! # Rows by handle
//!
//! A response can carry rows *by handle*: `choices[i].payload` is a list of
//! segments such as
//!
//! ```json
//! {"field": "routed_experts", "file": "/shm/x.bin", "offset": 4096,
//!  "pos": 17, "rows": 5, "dtype": "uint8", "shape": [48, 8]}
//! ```
//!
//! meaning: the rows of positions `[17, 22)` lie in `/shm/x.bin` from byte
//! 4096 on, back to back, each `1 * 48 * 8 = 384` bytes. The merge never reads
//! the files: it only rewrites the segment list. The prefill's segments are
//! kept as they are; the decode's are clipped at the *cut*, the first position
//! the prefill did not cover ([`merge_routed_payload_in_json`]).
//!
//! ```
//! use pd_stitch::{merge_routed_payload_in_json, prefill_has_routed_experts};
//! use serde_json::json;
//!
//! let prefill = json!({"choices": [{"payload": [
//!     {"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3,
//!      "dtype": "uint16", "shape": [2, 4]}]}]});
//! let mut decode = json!({"choices": [{"payload": [
//!     {"field": "routed_experts", "file": "d.bin", "offset": 0, "pos": 2, "rows": 3,
//!      "dtype": "uint16", "shape": [2, 4]}]}]});
//!
//! assert!(prefill_has_routed_experts(&prefill));
//! assert!(merge_routed_payload_in_json(&prefill, &mut decode)?);
//! // Positions [0, 3) from the prefill, [3, 5) from the decode, 16 bytes into d.bin.
//! assert_eq!(decode["choices"][0]["payload"][1]["pos"], 3);
//! assert_eq!(decode["choices"][0]["payload"][1]["offset"], 16);
//! # Ok::<(), pd_stitch::Error>(())
//! ```
//!
//! # Rows inline
//!
//! Most deployments still carry the rows in the response itself, in
//! `choices[i].routed_experts`: either *compact*, an object
//! `{"data": <base64 rows>, "shape": [seq, layers, topk], "start", "dtype"}`,
//! or *npy*, the base64 of a NumPy `.npy` file. An inline value is one segment
//! held in memory, so it is stitched by the same rule
//! ([`merge_routed_experts_in_json`]).
//!
//! A router calls [`merge_routed_experts_for_pd`], which stitches both kinds at
//! once, atomically, and [`prefill_has_routed_experts`] to refuse streaming
//! requests that would need stitching.
//!
//! # Layout of the crate
//!
//! - [`algebra`]: the pure model, with no JSON and no I/O: [`Dtype`], the
//!   position interval [`Rows`], [`Segment`], and the merge rule ([`cut`],
//!   [`Cuts::clip`], [`merge_segments`]).
//! - The JSON entry points: [`merge_routed_experts_for_pd`],
//!   [`merge_routed_payload_in_json`], [`merge_routed_experts_in_json`],
//!   [`prefill_has_routed_experts`], and [`Stitcher`] for more stitched
//!   fields. They map responses to the algebra and back, planning every change
//!   before making any.
//! - [`inline`]: the inline forms ([`Form`]) and what can be wrong with them
//!   ([`Base64Error`], [`NpyError`]).
//! - [`Error`]: what went wrong, and where ([`Location`]).
//! - [`bytes`]: the same entry points on raw JSON bytes, changing only the
//!   stitched values of the decode's text.
//! - [`DEFAULT_FIELDS`]: what the default entry points stitch,
//!   `routed_experts` and `routed_expert_weights`; [`Stitcher::strict`] also
//!   refuses merged layouts a trainer would misread
//!   ([`algebra::check_layout`]).
//! - [`gather`]: reading rows back from files or inline values, to verify,
//!   only inside allowed directories.
//! - [`compare`]: two responses' rows position by position (a P/D deployment
//!   against a colocated one), as a typed report and a heatmap.
//! - `sim` (features `cli` or `testing`): a colocated server and a 1P1D
//!   deployment simulated over one truth.
//! - `testing` (feature `testing`): generators, the truth and
//!   `verify_stitched` for routers' own tests.
//!
//! # Guarantees
//!
//! Every JSON entry point is total and atomic: no input makes it panic, every
//! arithmetic step on a number from a response is checked, and when it returns
//! an error the decode response is exactly as it was. `docs/SPEC.md` states the
//! rules and the laws the merged output obeys, each with the property test that
//! checks it.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod algebra;
pub mod bytes;
pub mod compare;
mod error;
mod fields;
pub mod gather;
mod handle;
pub mod inline;
mod json;
mod merge;
mod response;
#[cfg(any(feature = "cli", feature = "testing"))]
pub mod sim;
mod splice;
mod stitcher;
mod strict;
#[cfg(feature = "testing")]
pub mod testing;
mod view;

pub use algebra::{
    cut, merge_segments, row_bytes, Cuts, Dtype, MissingField, Overflow, Rows, Segment,
    UnknownDtype,
};
pub use error::{Error, ErrorKind, Location, Side, Step};
pub use inline::{Base64Error, Form, NpyError};
// The README's examples run as doc tests, so they cannot go stale.
// The README's Rust examples use the `testing` feature.
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use fields::{DEFAULT_FIELDS, ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS};
pub use stitcher::{
    merge_routed_experts_for_pd, merge_routed_experts_in_json, merge_routed_payload_in_json,
    prefill_has_routed_experts, Stitch, Stitcher,
};
