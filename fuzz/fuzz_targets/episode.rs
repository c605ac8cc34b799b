//! Fuzz the episode (SPEC section 12): arbitrary turns (tokens, starts,
//! rows in every form the crate reads, raw or as responses, one piece or a
//! P/D pair) pushed into a `pd_stitch::episode::Episode`;
//! `pd_stitch_fuzz::episode::check_episode` says what must hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pd_stitch_fuzz::episode::check_episode(data));
