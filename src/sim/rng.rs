//! The crate's one source of random numbers, SplitMix64, and the split
//! points the simulator draws from it. The simulators (`sim`,
//! `sglang::model`) and the test generators (`testing::stream`) all draw
//! from here, so that one test pins the generator they share.

/// SplitMix64's increment of its state: the golden gamma.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64: small, fast, and good enough to draw test data from.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// Uniform-ish in `[lo, hi]`.
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// SplitMix64's output from state `z`: the state stepped once, then mixed
/// ([`Rng::next`] from `Rng(z)`, without keeping the state).
pub(crate) fn splitmix(z: u64) -> u64 {
    mix(z.wrapping_add(GAMMA))
}

/// SplitMix64's finalizer: the bits of `z` mixed, without the step.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A row of `layers` x `top_k` expert ids below `experts`, as a router's
/// top-k gives them: distinct within each layer (an id `draw` gives that the
/// layer already holds is drawn again; when `experts < top_k` cannot allow
/// that, ids repeat). The rows check (`gather::check_rows`) refuses a layer
/// that names an expert twice, so the simulators draw none.
pub(crate) fn top_k_row(
    layers: u64,
    top_k: u64,
    experts: u64,
    mut draw: impl FnMut() -> u64,
) -> Vec<u64> {
    let experts = experts.max(1);
    let distinct = top_k <= experts;
    let mut row = Vec::with_capacity(usize::try_from(layers * top_k).unwrap_or(0));
    for _ in 0..layers {
        let from = row.len();
        for _ in 0..top_k {
            let mut id = draw() % experts;
            while distinct && row[from..].contains(&id) {
                id = draw() % experts;
            }
            row.push(id);
        }
    }
    row
}

/// Up to `most` distinct split points strictly inside `(0, len)`, sorted.
pub(super) fn splits(rng: &mut Rng, len: u64, most: u64) -> Vec<u64> {
    if len < 2 {
        return Vec::new();
    }
    let mut points: Vec<u64> = (0..rng.range(0, most))
        .map(|_| rng.range(1, len - 1))
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// SplitMix64 against its published outputs, and the bounds its draws
/// promise.
#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of top-k ids are distinct in each layer, below the expert
    /// count, and spread over it; with fewer experts than top_k, ids repeat
    /// rather than loop forever.
    #[test]
    fn top_k_rows_are_distinct_in_each_layer() {
        let mut rng = Rng(7);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let row = top_k_row(6, 8, 16, || rng.next());
            assert_eq!(row.len(), 48);
            for layer in row.chunks(8) {
                let set: std::collections::BTreeSet<_> = layer.iter().collect();
                assert_eq!(set.len(), 8, "{layer:?}");
                assert!(layer.iter().all(|&id| id < 16));
            }
            seen.extend(row);
        }
        assert_eq!(seen.len(), 16);
        let mut rng = Rng(7);
        let tight = top_k_row(2, 4, 2, || rng.next());
        assert_eq!(tight.len(), 8);
        assert!(tight.iter().all(|&id| id < 2));
    }

    /// SplitMix64 (Steele, Lea and Flood; Vigna's `splitmix64.c`): the first
    /// outputs from state 0, and from state 1234567 as in the reference's
    /// test vectors.
    #[test]
    fn rng_is_splitmix64() {
        let mut rng = Rng(0);
        let got: Vec<u64> = (0..3).map(|_| rng.next()).collect();
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        let mut rng = Rng(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821
            ]
        );
    }

    /// `splitmix(z)` is the output `Rng(z)` draws first, without the state.
    #[test]
    fn splitmix_is_the_first_draw_from_a_state() {
        for z in [0, 1, 1_234_567, u64::MAX] {
            assert_eq!(splitmix(z), Rng(z).next(), "{z}");
        }
        assert_eq!(splitmix(0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn range_stays_within_its_bounds_and_reaches_both() {
        let mut rng = Rng(7);
        for (lo, hi) in [(1, 1), (0, 1), (1, 4), (1, 160), (5, 6)] {
            let draws: Vec<u64> = (0..2000).map(|_| rng.range(lo, hi)).collect();
            assert!(draws.iter().all(|x| (lo..=hi).contains(x)), "{lo}..={hi}");
            assert_eq!(draws.iter().min(), Some(&lo), "{lo}..={hi}");
            assert_eq!(draws.iter().max(), Some(&hi), "{lo}..={hi}");
        }
    }

    #[test]
    fn splits_are_distinct_sorted_points_inside() {
        let mut rng = Rng(11);
        for len in [0, 1] {
            assert!(splits(&mut rng, len, 3).is_empty());
        }
        for (len, most) in [(2, 2), (3, 3), (40, 3), (160, 2)] {
            let mut counts = vec![0; most as usize + 1];
            for _ in 0..500 {
                let points = splits(&mut rng, len, most);
                assert!(points.len() as u64 <= most, "{points:?}");
                assert!(points.windows(2).all(|w| w[0] < w[1]), "{points:?}");
                assert!(points.iter().all(|&p| 0 < p && p < len), "{points:?}");
                counts[points.len()] += 1;
            }
            // Every count up to `most` the interior allows occurs.
            let possible = most.min(len - 1) as usize;
            assert!(
                counts[..=possible].iter().all(|&n| n > 0),
                "{len}: {counts:?}"
            );
        }
    }
}
