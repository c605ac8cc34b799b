//! The crate's one source of random numbers: SplitMix64 (Steele, Lea and
//! Flood; Vigna's `splitmix64.c`). The simulator's model hashes token
//! prefixes with it, its requests and the test generators draw from it, so
//! that one test pins the generator they all share.

/// SplitMix64's increment of its state: the golden gamma.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64: small, fast, and good enough to draw test data from. Its
/// state steps by the golden gamma and each output is the state mixed.
///
/// ```
/// use pd_stitch::sim::SplitMix64;
///
/// let mut rng = SplitMix64::new(0);
/// assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
/// assert!((1..=6).contains(&rng.range(1, 6)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator whose state is `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next output.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// Uniform-ish in `[lo, hi]` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi.saturating_sub(lo).saturating_add(1);
        lo + self.next_u64() % span
    }

    /// Uniform-ish in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True one time in `one_in` (always when `one_in` is 0 or 1).
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// SplitMix64's output from state `z`: the state stepped once, then mixed
/// ([`SplitMix64::next_u64`] from `SplitMix64::new(z)`, without keeping the
/// state). The model's rolling hash of a token prefix steps with it.
pub fn splitmix(z: u64) -> u64 {
    mix(z.wrapping_add(GAMMA))
}

/// SplitMix64's finalizer: the bits of `z` mixed, without the step.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 against its published outputs, and the bounds its draws
/// promise.
#[cfg(test)]
mod tests {
    use super::*;

    /// The first outputs from state 0, and from state 1234567 as in the
    /// reference's test vectors.
    #[test]
    fn it_is_splitmix64() {
        let mut rng = SplitMix64::new(0);
        let got: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        let mut rng = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
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

    /// `splitmix(z)` is the output `SplitMix64::new(z)` draws first, and
    /// `mix` of the state stepped once: from 0, `mix` of one, two and three
    /// steps of the golden gamma are the first three outputs.
    #[test]
    fn splitmix_is_the_first_draw_from_a_state() {
        for z in [0, 1, 1_234_567, u64::MAX] {
            assert_eq!(splitmix(z), SplitMix64::new(z).next_u64(), "{z}");
        }
        let got = [GAMMA, GAMMA.wrapping_mul(2), GAMMA.wrapping_mul(3)].map(mix);
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }

    #[test]
    fn range_stays_within_its_bounds_and_reaches_both() {
        let mut rng = SplitMix64::new(7);
        for (lo, hi) in [(1, 1), (0, 1), (1, 4), (1, 160), (5, 6)] {
            let draws: Vec<u64> = (0..2000).map(|_| rng.range(lo, hi)).collect();
            assert!(draws.iter().all(|x| (lo..=hi).contains(x)), "{lo}..={hi}");
            assert_eq!(draws.iter().min(), Some(&lo), "{lo}..={hi}");
            assert_eq!(draws.iter().max(), Some(&hi), "{lo}..={hi}");
        }
        assert_eq!(rng.range(9, 3), 9);
        assert!((0..=u64::MAX).contains(&rng.range(0, u64::MAX)));
    }

    #[test]
    fn below_and_chance_draw_within_their_ranges_at_their_rates() {
        let mut rng = SplitMix64::new(7);
        let mut hits = [0usize; 5];
        for _ in 0..10_000 {
            let k = rng.below(5) as usize;
            assert!(k < 5, "{k}");
            hits[k] += 1;
        }
        assert!(
            hits.iter().all(|&h| (1_600..=2_400).contains(&h)),
            "{hits:?}"
        );
        assert_eq!(rng.below(0), 0);
        let yes = (0..10_000).filter(|_| rng.chance(4)).count();
        assert!((2_000..=3_000).contains(&yes), "{yes}");
        assert!(rng.chance(1) && rng.chance(0));
    }
}
