//! Fuzz `pd_stitch::bytes::merge_routed_experts_for_pd`: the input is the
//! prefill's bytes, a NUL byte, and the decode's bytes, JSON or not;
//! `pd_stitch_fuzz::check_bytes` holds the bytes function to the `Value`
//! function `pd_stitch::merge_routed_experts_for_pd` (SPEC B1-B4).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pd_stitch_fuzz::check_bytes;

fuzz_target!(|data: &[u8]| check_bytes(
    data,
    pd_stitch::bytes::merge_routed_experts_for_pd,
    pd_stitch::merge_routed_experts_for_pd
));
