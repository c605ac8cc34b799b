//! Fuzz `pd_stitch::merge_routed_payload_in_json`: the input is the prefill's JSON, a NUL
//! byte, and the decode's JSON; `pd_stitch_fuzz::check` runs the merge and
//! asserts what the spec promises for any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pd_stitch_fuzz::{check, Kinds};

fuzz_target!(|data: &[u8]| check(
    data,
    pd_stitch::merge_routed_payload_in_json,
    Kinds::BY_HANDLE
));
