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
//! Most deployments still carry the rows in the response itself, at a place
//! the engine chose (vLLM's and prime-rl's `choices[i].routed_experts`, for
//! one; [`places::all`] lists every place, SPEC section 1a): either
//! *compact*, an object
//! `{"data": <base64 rows>, "shape": [seq, layers, topk], "start", "dtype"}`,
//! or *npy*, the base64 of a NumPy `.npy` file. An inline value is one segment
//! held in memory, so it is stitched by the same rule
//! ([`merge_routed_experts_in_json`]).
//!
//! A router calls [`merge_routed_experts_for_pd`], which stitches both kinds at
//! once, atomically, and [`prefill_has_routed_experts`] to refuse streaming
//! requests that would need stitching.
//!
//! # What a router calls
//!
//! - [`merge_routed_experts_for_pd`] on parsed responses, or
//!   [`bytes::merge_routed_experts_for_pd`] on their bodies as bytes: every
//!   kind of rows at once, atomically. [`merge_routed_payload_in_json`] and
//!   [`merge_routed_experts_in_json`] (and their [`bytes`] twins) stitch one
//!   kind. These are the upstream router's names, so pd-stitch is a drop-in.
//! - [`prefill_has_routed_experts`]: whether the prefill has rows to stitch.
//! - [`Stitcher`], for other fields than the default ones ([`DEFAULT_FIELDS`])
//!   or strict mode: [`Stitcher::merge`], [`Stitcher::merge_bytes`],
//!   [`Stitcher::merge_bytes_with`] (into memory the caller allocates) and
//!   [`Stitcher::merge_bytes_in`] (in place in a [`bytes::Buffer`] its owner
//!   resizes), each told what to stitch by a [`Stitch`].
//! - [`Error`], with [`Error::kind`] to classify it ([`ErrorKind`]),
//!   [`Error::location`] to say where it is ([`Location`]) and
//!   [`Error::detail`] to read what it holds ([`ErrorDetail`]).
//!
//! # Layout of the crate
//!
//! - [`algebra`]: the pure model, with no JSON and no I/O: dtypes, the
//!   position interval `Rows`, `Segment`, and the merge rule (`cut`,
//!   `Cuts::clip`, `merge_segments`), and the layout rule of strict mode.
//! - The entry points above map responses to the algebra and back through one
//!   plan of the merge, planning every change before making any; [`bytes`]
//!   reads and writes raw JSON text, changing only the stitched values.
//! - [`Error`]: what went wrong, and where ([`ErrorDetail`]); [`Form`],
//!   [`Base64Error`] and [`NpyError`] say more about inline rows.
//!
//! Inside, the files stand in layers, each importing only from its own or
//! those below, and the folders name them: `algebra/`; `codec/` (base64,
//! `.npy`, merged text); `error/`; `response/`, a response as read, and
//! the patches a merge writes into it; `format/`, the kinds of rows, in
//! layers of its own: at the bottom what a format is (the trait, what a
//! place of rows is, [`Stitch`]), then what formats share (the generic
//! inline rows at a holder and a key, strict mode), then the formats, one
//! file each, and on top the table that lists them (`format/mod.rs`),
//! which every reader of rows asks;
//! `merge/`, the one plan, which runs every format and collects its
//! patches; the adapters that apply the patches to a `serde_json::Value`
//! and to [`bytes`], knowing no kind of rows; [`Stitcher`]; [`stream`];
//! this root; and the verifiers on top. `scripts/layering.py` checks the
//! order; the README's "Layout" places every file.
//!
//! # Cargo features
//!
//! None by default. A router depends on the merge alone:
//!
//! ```toml
//! pd-stitch = "0.4"
//! ```
//!
//! That build compiles no file reader (CI checks that it links nothing of
//! `std::fs`) and depends on `serde_json`, `thiserror`, `base64-simd` and
//! `memchr` (which `serde_json` depends on too) only.
//!
//! - `verify`: the verifiers, which read files: `gather` (rows back from
//!   files or inline values, only inside allowed directories, and `check`),
//!   `compare` (two responses' rows position by position, as a report and a
//!   heatmap) and `sim` (colocated servers and 1P1D deployments of vLLM,
//!   SGLang and Dynamo simulated over one model, and multi-turn episodes).
//! - `testing`: `pd_stitch::testing`, generators of P/D pairs of every
//!   engine's wire form with their colocated truth and `verify_stitched`,
//!   for a router's own tests; enables `verify`.
//!
//! The `pd-stitch` command (`merge`, `check`, `gather`, `compare`, `probe`,
//! `simulate`) is the crate `pd-stitch-cli`, built on this one's public API
//! with `verify`: `cargo install pd-stitch-cli`.
//!
//! # Guarantees
//!
//! Every JSON entry point is total and atomic: no input makes it panic, every
//! arithmetic step on a number from a response is checked, and when it returns
//! an error the decode response is exactly as it was. `docs/SPEC.md` states the
//! rules and the laws the merged output obeys, each with the property test that
//! checks it.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod algebra;
pub mod bytes;
mod codec;
#[cfg(feature = "verify")]
pub mod compare;
pub mod episode;
mod error;
mod format;
#[cfg(feature = "verify")]
pub mod gather;
mod merge;
pub mod reading;
mod response;
pub mod sglang;
#[cfg(feature = "verify")]
pub mod sim;
mod stitcher;
pub mod stream;
#[cfg(feature = "testing")]
pub mod testing;

pub use codec::{Base64Error, Form, NpyError};
pub use error::{Error, ErrorDetail, ErrorKind, Location, Side, Step};
// The README's examples run as doc tests, so they cannot go stale.
// The README's Rust examples use the `testing` feature.
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use response::fields::{DEFAULT_FIELDS, ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS};
/// The table of where each engine's rows sit in a response: every
/// [`Place`](places::Place) ([`all`](places::all)), a key of a choice, of a
/// member object of a choice, or of a member object of the response, and
/// what it holds (rows of a kind, or a count that places them), each
/// format's places in the order the merge runs the formats (SPEC section
/// 1a). Everything in the crate that finds, reads, checks or locates rows
/// reads these places; a program that looks for rows itself (the command's
/// `probe`, the Python binding, the fuzz oracle) asks the same table rather
/// than spelling the keys again. It grows with the engines' conventions,
/// and its shape may change in a minor version (README, "Stability").
pub mod places {
    pub use crate::format::places::{Holder, Holds, Place, RowsKind};
    pub use crate::format::{every_place as all, keys_of, object_holders};
}
pub use format::stitch::Stitch;
pub use stitcher::{
    merge_routed_experts_for_pd, merge_routed_experts_in_json, merge_routed_payload_in_json,
    prefill_has_routed_experts, Stitcher,
};
