//! Dtype widening: little-endian unsigned elements zero-extended to a wider
//! size, as a `uint8` prompt's rows are merged with a `uint16` completion's.

/// Zero-extends little-endian unsigned elements of `narrow` bytes to `wide`.
pub(crate) fn widen(raw: &[u8], narrow: usize, wide: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + raw.len() / narrow.max(1) * wide, 0);
    if let Some(dst) = out.get_mut(start..) {
        widen_into(raw, narrow, wide, dst);
    }
}

/// [`widen`] into `out`, which is `raw.len() / narrow * wide` long and zeroed
/// where the high bytes go.
pub(crate) fn widen_into(raw: &[u8], narrow: usize, wide: usize, out: &mut [u8]) {
    match (narrow, wide) {
        (1, 2) => widen_to::<1, 2>(raw, out),
        (1, 4) => widen_to::<1, 4>(raw, out),
        (1, 8) => widen_to::<1, 8>(raw, out),
        (2, 4) => widen_to::<2, 4>(raw, out),
        (2, 8) => widen_to::<2, 8>(raw, out),
        (4, 8) => widen_to::<4, 8>(raw, out),
        _ => {}
    }
}

/// [`widen`] for fixed sizes, so that each element is a few fixed moves.
fn widen_to<const N: usize, const W: usize>(raw: &[u8], out: &mut [u8]) {
    for (d, s) in out.chunks_exact_mut(W).zip(raw.chunks_exact(N)) {
        let (Some(d), Some(s)) = (d.first_chunk_mut::<N>(), s.first_chunk::<N>()) else {
            continue;
        };
        *d = *s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zero extension of little-endian elements, for every pair of unsigned
    /// sizes: the value is kept, the new high bytes are zero.
    #[test]
    fn widen_keeps_values_for_every_pair_of_sizes() {
        let values: [u64; 4] = [0, 1, 0x7f, 0xdead_beef_0102_0304];
        for (narrow, wide) in [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 8)] {
            let mask = u64::MAX >> (64 - 8 * narrow);
            let raw: Vec<u8> = values
                .iter()
                .flat_map(|v| v.to_le_bytes()[..narrow].to_vec())
                .collect();
            let expected: Vec<u8> = values
                .iter()
                .flat_map(|v| (v & mask).to_le_bytes()[..wide].to_vec())
                .collect();
            let mut out = vec![0xaa];
            widen(&raw, narrow, wide, &mut out);
            assert_eq!(out[0], 0xaa);
            assert_eq!(out[1..], expected, "{narrow} -> {wide}");
        }
    }
}
