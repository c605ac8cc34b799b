//! Bytes in, bytes out: the entry points for a router that holds responses as
//! raw JSON bytes.
//!
//! (Work in progress: this first version parses both sides into
//! [`serde_json::Value`], merges and serializes the decode again. It fixes
//! the API; the version that touches only the stitched values replaces it.)

use serde_json::Value;

use crate::error::{Error, Side};
use crate::stitcher::Stitcher;

/// [`merge_routed_experts_for_pd`](crate::merge_routed_experts_for_pd) on raw
/// JSON bytes: `decode` is rewritten in place on `Ok(true)`, untouched
/// otherwise.
///
/// # Errors
///
/// [`Error::Json`] when either side is not valid JSON, else the errors of the
/// `Value` function.
pub fn merge_routed_experts_for_pd(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    Stitcher::new().merge_bytes_for_pd(prefill, decode)
}

/// [`merge_routed_payload_in_json`](crate::merge_routed_payload_in_json) on
/// raw JSON bytes.
///
/// # Errors
///
/// As [`merge_routed_experts_for_pd`].
pub fn merge_routed_payload_in_json(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    Stitcher::new().merge_bytes_payload(prefill, decode)
}

/// [`merge_routed_experts_in_json`](crate::merge_routed_experts_in_json) on
/// raw JSON bytes.
///
/// # Errors
///
/// As [`merge_routed_experts_for_pd`].
pub fn merge_routed_experts_in_json(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    Stitcher::new().merge_bytes_inline(prefill, decode)
}

/// [`prefill_has_routed_experts`](crate::prefill_has_routed_experts) on raw
/// JSON bytes.
///
/// # Errors
///
/// [`Error::Json`] when `prefill` is not valid JSON.
pub fn prefill_has_routed_experts(prefill: &[u8]) -> Result<bool, Error> {
    Stitcher::new().prefill_bytes_has_routed_experts(prefill)
}

pub(crate) fn parse(side: Side, bytes: &[u8]) -> Result<Value, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::Json {
        side,
        offset: offset_of(bytes, err.line(), err.column()),
        message: err.to_string(),
    })
}

fn offset_of(bytes: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(i) => start += i + 1,
            None => break,
        }
    }
    (start + column.saturating_sub(1)).min(bytes.len())
}

pub(crate) fn via_value(
    prefill: &[u8],
    decode: &mut Vec<u8>,
    merge: impl FnOnce(&Value, &mut Value) -> Result<bool, Error>,
) -> Result<bool, Error> {
    let p = parse(Side::Prefill, prefill)?;
    let mut d = parse(Side::Decode, decode)?;
    if merge(&p, &mut d)? {
        *decode = serde_json::to_vec(&d).unwrap_or_default();
        Ok(true)
    } else {
        Ok(false)
    }
}
