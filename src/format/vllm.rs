//! vLLM's and prime-rl's inline rows: each choice's `routed_experts`,
//! compact or a `.npy`, a `.npy` placed from its end by the response's
//! token counts when it carries them (vLLM 0.32, SPEC sections 4 and 4a).
//! Read and merged as every inline convention is (`inline.rs`).

use super::inline::InlinePlace;
use super::places::Holder;
use crate::response::fields::ROUTED_EXPERTS;

/// `choices[i].routed_experts`.
pub(crate) struct Vllm;

impl InlinePlace for Vllm {
    const HOLDER: Holder = Holder::Choice;
    const KEY: &'static str = ROUTED_EXPERTS;
}
