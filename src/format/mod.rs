//! The kinds of rows, one file each.
//!
//! - [`by_handle`]: `choices[i].payload`, segments pointing into shared files;
//! - [`inline`]: vLLM's and prime-rl's `choices[i].routed_experts`, compact
//!   or a `.npy`;
//! - [`end_anchored`]: vLLM 0.32's convention, a `.npy` placed from its end
//!   by the response's token counts;
//! - [`sglang`]: SGLang's flat `int32` ids, with their position solver.

pub(crate) mod by_handle;
pub(crate) mod end_anchored;
pub(crate) mod inline;
pub(crate) mod sglang;
