//! What the deployments answer for a request in a wire form: a colocated
//! server, and the prefill and decode instances of a 1P1D pair.

use serde_json::Value;

/// The responses of one request in one wire form: colocated, and the 1P1D
/// pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Responses {
    /// What a colocated server answers.
    pub colocated: Value,
    /// What the prefill instance answers.
    pub prefill: Value,
    /// What the decode instance answers, before any merge.
    pub decode: Value,
}
