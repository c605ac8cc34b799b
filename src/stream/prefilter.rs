//! The prefilter: which bytes may belong to an event that carries rows,
//! found without parsing (module doc of [`super`]).
//!
//! Its needles are the table's (`crate::format`): every key that holds
//! rows at some place, and `\u` (a key may be escaped); and, while a stream
//! counts its tokens, every key of a choice's counts (`token_ids`). So a
//! format added to the table is looked for here with no line of this file.

use crate::format::{CHOICE_COUNT_KEYS, ROWS_KEYS};

/// The bytes of keys, rarest first in the engines' token events: letters
/// and `_`, as counted over the events without rows of the saved streams
/// (`tests/fixtures/engines/*/**.sse`, 29,052 bytes: `z` none, `y` 36, `j`
/// 37, ... `n` 1,736, `e` 2,153). A key is found by its rarest byte, so
/// that the scan stops at few bytes that are not the key's start:
/// `routed_experts` by its `x`, which a vLLM token chunk holds twice (in
/// `index` and in its `"routed_experts":null`), `payload` by its `y`, which
/// it does not hold.
const RARE_FIRST: &[u8] = b"zyjqwvxbfhkmgpcr_diuaosltne";

/// The most keys the prefilter looks for: more fail the build.
const MAX: usize = 16;

/// The table's needles, made in a constant: the scan and the checks below
/// are compiled for the table's keys, as they were when they were spelled
/// by hand (callgrind counts the same instructions).
const TABLE: Needles = Needles::new(ROWS_KEYS.as_slice());

/// A key the prefilter looks for, found by one byte of it.
#[derive(Clone, Copy, Debug)]
struct Needle {
    key: &'static [u8],
    /// Where in `key` the byte it is found by first is.
    at: usize,
}

impl Needle {
    /// The byte it is found by.
    const fn byte(&self) -> u8 {
        self.key[self.at]
    }
}

/// The needles, and the bytes that find them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Needles {
    needles: [Needle; MAX],
    len: usize,
    /// The bytes the scan looks for, each once: `scan[..bytes]`.
    scan: [u8; MAX],
    bytes: usize,
}

impl Needles {
    /// The needles of `keys`, each found by its rarest byte ([`RARE_FIRST`];
    /// a key with none of those by its first byte). An empty key is never
    /// found.
    pub(super) const fn new(keys: &[&'static [u8]]) -> Needles {
        let mut found = Needles {
            needles: [Needle { key: b"", at: 0 }; MAX],
            len: 0,
            scan: [0; MAX],
            bytes: 0,
        };
        let mut k = 0;
        while k < keys.len() {
            let key = keys[k];
            k += 1;
            if key.is_empty() {
                continue;
            }
            let mut at = 0;
            let mut i = 1;
            while i < key.len() {
                if rank(key[i]) < rank(key[at]) {
                    at = i;
                }
                i += 1;
            }
            assert!(
                found.len < MAX,
                "more keys than the prefilter's MAX: raise it"
            );
            found.needles[found.len] = Needle { key, at };
            found.len += 1;
            let byte = key[at];
            let mut b = 0;
            while b < found.bytes && found.scan[b] != byte {
                b += 1;
            }
            if b == found.bytes {
                found.scan[found.bytes] = byte;
                found.bytes += 1;
            }
        }
        found
    }

    /// Where in `bytes` the first needle that may mark rows starts
    /// (`bytes.len()` when none): a key that holds rows and is not a member
    /// whose value is null, or a `\u`.
    ///
    /// Each key is found by a byte of its own, rare in JSON events: one
    /// `memchr2` scan (for today's table: the `x` of `routed_experts` and
    /// the `y` of `payload`; `memchr`, `memchr3`, or a scan per three bytes
    /// when the table's keys need other counts of bytes), each hit checked
    /// in place, then a `memchr` scan for the `\` of `\u` up to the first
    /// of those found. A `memmem` search per key, the `routed_experts` one
    /// restarted at every token chunk, costs more instructions (callgrind,
    /// `examples/stream_count.rs`; docs/PERFORMANCE.md).
    ///
    /// The needles are found in the order of those bytes, not of their
    /// starts: the start returned may follow another needle's start, but
    /// that needle then ends after it (its byte comes later), so every event
    /// that ends at or before the returned point holds no needle whole,
    /// which is all the callers rely on; and a needle not whole in `bytes` is
    /// not counted (its event goes on past `bytes`, and is judged whole).
    #[inline(always)]
    pub(super) fn next_suspect(&self, bytes: &[u8]) -> usize {
        let mut first = bytes.len();
        let mut g = 0;
        while g < self.bytes {
            let found = match self.scan.get(g..self.bytes.min(g + 3)) {
                Some(&[a]) => self.first_key(memchr::memchr_iter(a, bytes), bytes),
                Some(&[a, b]) => self.first_key(memchr::memchr2_iter(a, b, bytes), bytes),
                Some(&[a, b, c]) => self.first_key(memchr::memchr3_iter(a, b, c, bytes), bytes),
                _ => None,
            };
            if let Some(start) = found {
                first = first.min(start);
            }
            g += 3;
        }
        memchr::memchr_iter(b'\\', &bytes[..first])
            .find(|&at| bytes.get(at + 1) == Some(&b'u'))
            .unwrap_or(first)
    }

    /// The start of the first key, in the order of `hits` (where the bytes
    /// that find keys are), that is not a member whose value is null.
    #[inline(always)]
    fn first_key(&self, mut hits: impl Iterator<Item = usize>, bytes: &[u8]) -> Option<usize> {
        hits.find_map(|hit| {
            let byte = bytes[hit];
            let mut k = 0;
            while k < self.len {
                let needle = &self.needles[k];
                k += 1;
                if needle.byte() != byte {
                    continue;
                }
                let Some(start) = hit.checked_sub(needle.at) else {
                    continue;
                };
                if let Some(rest) = bytes[start..].strip_prefix(needle.key) {
                    if !null_member(rest) {
                        return Some(start);
                    }
                }
            }
            None
        })
    }
}

/// Where `byte` stands in [`RARE_FIRST`] (its length when it is not there).
const fn rank(byte: u8) -> usize {
    let mut r = 0;
    while r < RARE_FIRST.len() && RARE_FIRST[r] != byte {
        r += 1;
    }
    r
}

/// [`Needles::next_suspect`] of the table's needles.
pub(super) fn next_suspect(bytes: &[u8]) -> usize {
    TABLE.next_suspect(bytes)
}

/// Where in `bytes` the first key of a choice's counts (`token_ids`)
/// starts (`bytes.len()` when none): while a stream counts its tokens, an
/// event that holds one is read for its count.
pub(super) fn next_count(bytes: &[u8]) -> usize {
    CHOICE_COUNT_KEYS
        .as_slice()
        .iter()
        .filter_map(|key| memchr::memmem::find(bytes, key))
        .min()
        .unwrap_or(bytes.len())
}

/// Whether `bytes` may be (part of) an event that carries rows: every key
/// that marks rows is a key of the table spelled out, or has an escape;
/// and such a key that ends a string followed by `:` and `null` (spaces
/// and tabs around the colon) is a member whose value is null, which is no
/// rows (vLLM writes `"routed_experts":null` on every token chunk).
pub(super) fn may_carry_rows(bytes: &[u8]) -> bool {
    next_suspect(bytes) < bytes.len()
}

/// Whether `rest`, which follows a key, starts with `"`, `:` and `null`,
/// with spaces and tabs around the colon: that string ended there (its
/// quote is not escaped: the byte before it is the key's last, a letter),
/// is a key, and its value is null. Line ends are not skipped: in an
/// event's bytes they end a line, and what follows is another line's.
#[inline(always)]
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
    fn only_null_rows_members_are_passed_unparsed() {
        for none in [
            &b"data: {\"routed_experts\":null}"[..],
            b"data: {\"routed_experts\" \t:  null, \"routed_experts\":null}",
            b"data: {\"payload\": null}",
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

    /// Today's table is scanned for the bytes it was scanned for when the
    /// needles were spelled by hand, so the scan costs what it cost: the
    /// `x` of `routed_experts`, the `y` of `payload`, in one `memchr2`.
    #[test]
    fn today_s_keys_are_found_by_their_rarest_bytes() {
        let by = |key: &[u8]| {
            let needles = &TABLE.needles[..TABLE.len];
            needles.iter().find(|n| n.key == key).unwrap().byte()
        };
        assert_eq!(by(b"routed_experts"), b'x');
        assert_eq!(by(b"payload"), b'y');
        assert_eq!(next_count(b"{\"index\": 0, \"token_ids\": [1]}"), 14);
        assert_eq!(next_count(b"{\"index\": 0}"), 12);
    }

    /// The needles of `bytes` as the prefilter defines them for `keys`,
    /// found the plain way (every start tried): (start, end) of each key
    /// that is not a null member, and of each `\u`.
    fn plain(keys: &[&[u8]], bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        for start in 0..bytes.len() {
            let rest = &bytes[start..];
            if rest.starts_with(b"\\u") {
                found.push((start, start + 2));
            }
            for key in keys.iter().filter(|k| !k.is_empty()) {
                if let Some(after) = rest.strip_prefix(*key) {
                    if !null_member(after) {
                        found.push((start, start + key.len()));
                    }
                }
            }
        }
        found
    }

    /// Keys as a table might give them: today's, keys sharing the bytes
    /// they are found by, and more bytes than one scan takes.
    const KEY_SETS: &[&[&str]] = &[
        &["routed_experts", "payload"],
        &["routed_experts", "payload", "moe_routing"],
        &["xa", "xb", "ax", "payload"],
        &["zz", "y", "jq", "w1", "v", "9"],
        &["", "routed_e"],
    ];

    proptest::proptest! {
        /// `next_suspect` (scans for the bytes that find the keys, each
        /// hit checked in place) returns a needle's start, or the length
        /// when there is none, and no needle ends at or before it;
        /// `may_carry_rows` is whether there is a needle.
        #[test]
        fn the_prefilter_finds_what_a_plain_search_finds(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "routed_experts", "routed_e", "xperts", "\"", ":", " ", "\t", "null", "nul",
                "payload", "pay", "load", "\\u", "\\", "u", "x", "y", "\n", "a",
                "moe_routing", "moe_", "xa", "xb", "ax", "zz", "z", "jq", "w1", "v", "9",
            ]), 0..24)
        ) {
            let bytes = pieces.concat().into_bytes();
            let found = plain(ROWS_KEYS.as_slice(), &bytes);
            let s = next_suspect(&bytes);
            proptest::prop_assert_eq!(may_carry_rows(&bytes), !found.is_empty());
            proptest::prop_assert!(found.iter().all(|&(_, end)| end > s));
            proptest::prop_assert!(s == bytes.len() || found.iter().any(|&(start, _)| start == s));
            for keys in KEY_SETS {
                let keys: Vec<&'static [u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                let needles = Needles::new(&keys);
                let found = plain(&keys, &bytes);
                let s = needles.next_suspect(&bytes);
                proptest::prop_assert!(found.iter().all(|&(_, end)| end > s), "{:?}", keys);
                proptest::prop_assert!(
                    s == bytes.len() || found.iter().any(|&(start, _)| start == s),
                    "{:?}", keys
                );
                proptest::prop_assert_eq!(s < bytes.len(), !found.is_empty(), "{:?}", keys);
            }
        }
    }
}
