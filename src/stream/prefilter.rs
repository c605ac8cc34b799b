//! The prefilter: which bytes may belong to an event that carries rows,
//! found without parsing (module doc of [`super`]).

use crate::format::by_handle::PAYLOAD;
use crate::response::fields::ROUTED_EXPERTS;

/// The prefilter: where in `bytes` the first needle that may mark rows
/// starts (`bytes.len()` when none): a `routed_experts` that is not a null
/// member, a `payload`, or a `\u`.
///
/// Each needle is found by a byte of its own, rare in JSON events: one
/// `memchr2` scan for the `x` of `routed_experts` and the `y` of `payload`
/// (a vLLM token chunk holds two `x`, one of them its
/// `"routed_experts":null`, and no `y`), each hit checked in place, then a
/// `memchr` scan for the `\` of `\u` up to the first of those found. Three
/// `memmem` searches, the `routed_experts` one restarted at every token
/// chunk, cost more instructions (callgrind, `examples/stream_count.rs`;
/// docs/PERFORMANCE.md).
///
/// The needles are found in the order of those bytes, not of their starts:
/// the start returned may follow another needle's start, but that needle
/// then ends after it (its byte comes later), so every event that ends at or
/// before the returned point holds no needle whole, which is all the callers
/// rely on; and a needle not whole in `bytes` is not counted (its event
/// goes on past `bytes`, and is judged whole).
pub(super) fn next_suspect(bytes: &[u8]) -> usize {
    const X: usize = 8;
    const Y: usize = 2;
    debug_assert_eq!(ROUTED_EXPERTS.as_bytes()[X], b'x');
    debug_assert_eq!(PAYLOAD.as_bytes()[Y], b'y');
    let first = memchr::memchr2_iter(b'x', b'y', bytes)
        .find_map(|at| {
            if bytes[at] == b'x' {
                let start = at.checked_sub(X)?;
                let rest = bytes[start..].strip_prefix(ROUTED_EXPERTS.as_bytes())?;
                (!null_member(rest)).then_some(start)
            } else {
                let start = at.checked_sub(Y)?;
                bytes[start..]
                    .starts_with(PAYLOAD.as_bytes())
                    .then_some(start)
            }
        })
        .unwrap_or(bytes.len());
    memchr::memchr_iter(b'\\', &bytes[..first])
        .find(|&at| bytes.get(at + 1) == Some(&b'u'))
        .unwrap_or(first)
}

/// Whether `bytes` may be (part of) an event that carries rows: every key
/// that marks rows is `routed_experts` or `payload` spelled out, or has an
/// escape; and a `routed_experts` that ends a string followed by `:` and
/// `null` (spaces and tabs around the colon) is a member whose value is
/// null, which is no rows (vLLM writes `"routed_experts":null` on every
/// token chunk).
pub(super) fn may_carry_rows(bytes: &[u8]) -> bool {
    next_suspect(bytes) < bytes.len()
}

/// Whether `rest`, which follows a `routed_experts`, starts with `"`, `:`
/// and `null`, with spaces and tabs around the colon: that string ended
/// there (its quote is not escaped: the byte before it is `s`), is a key,
/// and its value is null. Line ends are not skipped: in an event's bytes
/// they end a line, and what follows is another line's.
pub(super) fn null_member(rest: &[u8]) -> bool {
    if rest.starts_with(b"\":null") || rest.starts_with(b"\": null") {
        return true;
    }
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let Some(rest) = rest.strip_prefix(b"\"") else {
        return false;
    };
    let rest = &rest[rest.iter().take_while(|b| blank(b)).count()..];
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    let rest = &rest[rest.iter().take_while(|b| blank(b)).count()..];
    rest.starts_with(b"null")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_null_routed_experts_members_are_passed_unparsed() {
        for none in [
            &b"data: {\"routed_experts\":null}"[..],
            b"data: {\"routed_experts\" \t:  null, \"routed_experts\":null}",
            b"data: [DONE]",
        ] {
            assert!(!may_carry_rows(none), "{}", String::from_utf8_lossy(none));
        }
        for some in [
            &b"data: {\"routed_experts\":\"AAAA\"}"[..],
            b"data: {\"routed_experts\":null, \"routed_experts\": \"AA\"}",
            b"data: {\"routed_experts\"\n:null}",
            b"data: {\"routed_experts\"",
            b"data: {\"x\": \"routed_experts\", \"y\": 1}",
            b"data: {\"payload\": []}",
            b"data: {\"\\u0070ayload\": []}",
        ] {
            assert!(may_carry_rows(some), "{}", String::from_utf8_lossy(some));
        }
    }

    /// The needles of `bytes` as the prefilter defines them, found the
    /// plain way (every start tried): (start, end) of each `payload`, `\u`
    /// and `routed_experts` that is not a null member.
    fn needles(bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        for start in 0..bytes.len() {
            let rest = &bytes[start..];
            for needle in [&b"payload"[..], b"\\u", ROUTED_EXPERTS.as_bytes()] {
                if let Some(after) = rest.strip_prefix(needle) {
                    if needle != ROUTED_EXPERTS.as_bytes() || !null_member(after) {
                        found.push((start, start + needle.len()));
                    }
                }
            }
        }
        found
    }

    proptest::proptest! {
        /// `next_suspect` (one memchr3 scan, needles found by a byte of
        /// their own) returns a needle's start, or the length when there is
        /// none, and no needle ends at or before it; `may_carry_rows` is
        /// whether there is a needle.
        #[test]
        fn the_prefilter_finds_what_a_plain_search_finds(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "routed_experts", "routed_e", "xperts", "\"", ":", " ", "\t", "null", "nul",
                "payload", "pay", "load", "\\u", "\\", "u", "x", "y", "\n", "a",
            ]), 0..24)
        ) {
            let bytes = pieces.concat().into_bytes();
            let found = needles(&bytes);
            let s = next_suspect(&bytes);
            proptest::prop_assert_eq!(may_carry_rows(&bytes), !found.is_empty());
            proptest::prop_assert!(found.iter().all(|&(_, end)| end > s));
            proptest::prop_assert!(s == bytes.len() || found.iter().any(|&(start, _)| start == s));
        }
    }
}
