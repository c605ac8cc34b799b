//! The names of the stitched fields, and the set stitched by default.
//!
//! These sit below every adapter (the `Value` and the bytes entry points, the
//! readers in [`gather`](crate::gather)) so that none of them has to import
//! another to learn what a field is called.

/// The field of the routed experts: rows of shape `(layers, topk)` expert ids.
/// Inline rows (`choices[i].routed_experts`) are always this field.
pub const ROUTED_EXPERTS: &str = "routed_experts";

/// The field of the routing weights: rows of shape `(layers, topk)`, the
/// router's weight of each chosen expert. The forward pass produces it for
/// every position, prompt included, exactly as it does `routed_experts`, so a
/// P/D merge must stitch it the same way.
pub const ROUTED_EXPERT_WEIGHTS: &str = "routed_expert_weights";

/// The fields every default entry point stitches: `routed_experts` and
/// `routed_expert_weights`, as the upstream router does. A field left out of
/// the stitched set is passed through, so the decode's rows for prompt
/// positions would be kept and the prompt's own rows lost.
pub const DEFAULT_FIELDS: &[&str] = &[ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS];
