//! Fuzz SGLang's convention (SPEC section 10) on structured pairs: the input
//! chooses the counts, the ids of each side, the row shape (or none), the
//! slot and a batch; `pd_stitch_fuzz::check_sglang_pair` holds the `Value`
//! and the bytes merge to a reference written from Q4 literally.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pd_stitch_fuzz::check_sglang_pair(data));
