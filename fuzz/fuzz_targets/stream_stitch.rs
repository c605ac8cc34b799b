//! Fuzz `pd_stitch::stream::StreamStitcher`: the input is the prefill's
//! bytes, a NUL byte, and the decode's stream; the stream's own bytes also
//! choose where it is cut into chunks. `pd_stitch_fuzz::check_stream` holds
//! it to SPEC SL1, SL2 (for streams that cannot carry rows), SL4 and no
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pd_stitch_fuzz::check_stream;

fuzz_target!(|data: &[u8]| check_stream(data));
