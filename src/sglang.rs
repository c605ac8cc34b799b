//! SGLang's rows, as a router and a verifier name them: where they sit
//! ([`Api`]), and, with the `verify` feature, how to read one response's rows
//! ([`read_rows`]), the model of the engine ([`model`]) and the simulated run
//! over it ([`sim`]). The merge of SGLang's rows is one of the crate's
//! formats (`src/format/sglang/`), reached through the entry points every
//! engine shares.

pub use crate::format::sglang::Api;
#[cfg(feature = "verify")]
pub use crate::format::sglang::{read_rows, SglangRows};
#[cfg(feature = "verify")]
pub use crate::sim::sglang::{model, run as sim};
