//! The names of the stitched fields.
//!
//! These sit below every adapter (the `Value` and the bytes entry points, the
//! readers in [`gather`](crate::gather)) so that none of them has to import
//! another to learn what a field is called.

/// The field of the routed experts: rows of shape `(layers, topk)` expert ids.
/// Inline rows (`choices[i].routed_experts`) are always this field.
pub const ROUTED_EXPERTS: &str = "routed_experts";
