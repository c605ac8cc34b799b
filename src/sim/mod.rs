//! Deployments of vLLM, SGLang and Dynamo simulated over one model.
//!
//! **One model of the truth** ([`Model`]): the row of position `x` of a
//! request is drawn from a rolling SplitMix64 hash of its tokens `0..=x`
//! (each layer's expert ids distinct), so two requests that share a token
//! prefix share its rows, and a multi-turn episode is simulated by the
//! same model as a single request. A [`Request`] is its tokens (a prompt,
//! and each choice's completion, which the model generates), the start it
//! asks rows from, and what happened to it on the way: chunked-prefill
//! splits, preemptions (re-emitting rows), and a decode's flips (positions
//! where a decode, in another batch than a prefill, computes another row).
//!
//! **The engines' wire forms as writers over it** ([`Wire`], [`answer`]):
//! what a colocated server, a prefill instance and a decode instance of a
//! 1P1D pair answer ([`Responses`]) by handle (with the files), inline
//! compact and as vLLM 0.32's counted `.npy`; through SGLang's `/generate`
//! (batches too), `sglext` and `sgl_ext`, its decode full-length (prompt
//! rows read from its [`SlotPool`]: zeros, then stale rows of earlier
//! requests) or suffix-only; and through Dynamo's token API and its OpenAI
//! API's `nvext`. A decode's rows for prompt positions are what its engine
//! answers there: vLLM's by handle and compact its own wrong row for the
//! last prompt position, Dynamo's its wrong prompt rows, SGLang's its
//! slots'.
//!
//! **Runs.** [`run`] stitches every request of an [`Engine`]'s run with a
//! merge function (the library's, or a broken one in tests), reads the rows
//! back and compares them bitwise with the truth ([`Summary`]); in each
//! request's folder (`req-NNNN/`) it leaves the merged response of each
//! form and the colocated server's own response (`colocated.json`), so
//! that `pd-stitch compare` has a real baseline. [`run_episodes`] makes
//! multi-turn episodes of every engine's forms, with and without delta
//! requests, assembles them with [`crate::episode`] and checks them
//! against the model's full-context forward ([`EpisodeSummary`]).

mod answer;
mod check;
mod config;
mod dynamo;
mod engine;
mod episodes;
mod files;
mod model;
mod request;
mod responses;
mod runner;
mod sglang;
mod slot_pool;
mod splitmix;
mod summary;
mod vllm;

pub use answer::answer;
pub use check::{sglang_draw, trainer_mismatches, trainer_mismatches_in};
pub use config::{library_merge, Config, MergeFn};
pub use engine::{Engine, Wire};
pub use episodes::{run_episodes, EpisodeConfig, EpisodeSummary, WireEpisodes};
pub use model::{Model, Prefix, VOCAB};
pub use request::{encode, Request};
pub use responses::Responses;
pub use runner::run;
pub use sglang::{colocated_answer, decode_answer, encode_ids, prefill_answer};
pub use slot_pool::{SlotPool, POOL_SLOTS};
pub use splitmix::{mix, splitmix, SplitMix64};
pub use summary::{ModeSummary, PromptRows, Summary, WithoutRowShape};
