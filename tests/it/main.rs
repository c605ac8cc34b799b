//! The integration tests of pd-stitch, built as one test binary: one module
//! per concern, named as `docs/SPEC.md` and `docs/VERIFICATION.md` cite them
//! (`rules::rule_1_*`, `laws::l8_*`, ...), sharing the generators and the
//! naive reference model in `support`. Run one module with
//! `cargo test --all-features --test it rules::`. Each module needs the
//! features it is gated by here; `cargo test` with none runs the rest. The
//! tests that run the `pd-stitch` command are the command's crate's
//! (`cli/tests/it`).
//!
//! One binary instead of one per file: the support code is compiled once and
//! the crate's dev-dependencies are linked once. Everything below still runs in parallel
//! threads of one process, so a test that needs process-wide state keeps it
//! per thread (the counting allocator of `in_place`) or per file name
//! (the scratch directories, each prefixed by its module).

mod support;

mod algebra;
#[cfg(feature = "testing")]
mod bytes;
#[cfg(feature = "verify")]
mod compare;
#[cfg(all(unix, feature = "verify"))]
mod confinement;
mod defaults;
mod docs_references;
mod dynamo;
#[cfg(feature = "verify")]
mod engine_episodes;
mod episode;
mod exhaustive;
mod in_place;
mod inline;
mod laws;
#[cfg(feature = "verify")]
mod places;
mod readme_layout;
mod resources;
#[cfg(feature = "testing")]
mod router_http;
#[cfg(feature = "testing")]
mod router_testing;
#[cfg(feature = "verify")]
mod rows_check;
mod rules;
mod sglang;
#[cfg(feature = "verify")]
mod sim;
mod spec_table;
mod stability;
#[cfg(feature = "testing")]
mod stream;
#[cfg(feature = "testing")]
mod stream_late;
mod strict;
mod totality;
#[cfg(feature = "verify")]
mod vllm;
