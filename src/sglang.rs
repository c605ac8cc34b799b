//! SGLang's rows, as a router and a verifier name them: which API answered
//! ([`Api`], where its rows and their counts sit), and, with the `verify`
//! feature, one response's rows read back at the positions their counts
//! give ([`read_rows`]). The merge of SGLang's rows is one of the crate's
//! formats (`src/format/sglang/`), reached through the entry points every
//! engine shares; the simulator writes SGLang's answers among the other
//! engines' (`pd_stitch::sim`).

pub use crate::format::sglang::Api;
#[cfg(feature = "verify")]
pub use crate::format::sglang::{read_rows, SglangRows};
