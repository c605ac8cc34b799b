//! Dynamo's rows on its OpenAI API: the response's `nvext.routed_experts`
//! (SPEC section 4b).
//!
//! NVIDIA Dynamo's frontend (1.6.1, `tests/fixtures/engines/dynamo`) answers
//! `/v1/completions` asked with `"nvext": {"extra_fields":
//! ["routed_experts"]}` with one compact object at the response's
//! `nvext.routed_experts`: `{"data", "shape": [rows, layers, topk], "start",
//! "dtype"}`, the inline format's compact rows, covering `[start, start +
//! rows)`. A stream carries it in its last event. The OpenAI API takes no
//! start, so a decode answers from 0; where its prompt rows are the ones it
//! computed or not, the stitched rows are the prefill's below the prefill's
//! end and the decode's from there, as for any inline rows.
//!
//! So the rows are read and merged as every inline convention's are
//! (`inline.rs`); what is this convention's own is only where they sit,
//! once per response rather than per choice.

use super::inline::InlinePlace;
use super::places::Holder;
use crate::response::fields::ROUTED_EXPERTS;

/// `nvext.routed_experts`.
pub(crate) struct Nvext;

impl InlinePlace for Nvext {
    const HOLDER: Holder = Holder::Member("nvext");
    const KEY: &'static str = ROUTED_EXPERTS;
}
