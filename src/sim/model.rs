//! The simulated model: what routing a token prefix gets, and the tokens it
//! generates.
//!
//! The row of position `x` is a function of the tokens `0..=x` alone: a
//! rolling SplitMix64 hash of them ([`Prefix`]) seeds the draw of its
//! expert ids. So two requests that share a token prefix share its rows,
//! and a multi-turn episode (turn `t + 1`'s prompt is turn `t`'s prompt,
//! its completion and new tokens) is one sequence of rows, whichever turn
//! computed them: the model a full-context forward is checked against.
//! What the engines' instances answer around it (a decode's wrong rows for
//! prompt positions, its flips, stale slots) is built from these rows by
//! the writers.

use super::splitmix::{splitmix, SplitMix64};

/// The vocabulary the model's tokens are drawn from (the engines' fixtures'
/// model has 512).
pub const VOCAB: u64 = 512;

/// Salts that keep the draws from one prefix apart: its row, its next
/// token, its routing weights and its sampling mask.
const ROW: u64 = 0x0e0e_5eed;
const TOKEN: u64 = 0x7040_c3e5;
const WEIGHTS: u64 = 0x5eed;
const MASK: u64 = 0x3a5c;

/// One model: its seed (its weights, as it were) and its rows' geometry,
/// `layers` x `top_k` expert ids below `experts`.
///
/// ```
/// use pd_stitch::sim::Model;
///
/// let model = Model { seed: 7, layers: 2, top_k: 4, experts: 64 };
/// let rows = model.forward(&[5, 6, 7]);
/// // A prefix's rows do not depend on what follows it.
/// assert_eq!(model.forward(&[5, 6]), rows[..2]);
/// assert_eq!(rows[2].len(), 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Model {
    /// The seed every row and token is drawn from.
    pub seed: u64,
    /// Layers.
    pub layers: u64,
    /// Experts per token.
    pub top_k: u64,
    /// Experts per layer: ids are below this.
    pub experts: u64,
}

/// The rolling hash of a token prefix: the empty prefix is the model's
/// seed, and each token steps it by SplitMix64. The row of position `x` is
/// drawn from the prefix of the tokens `0..=x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix(u64);

impl Prefix {
    /// The prefix with `token` after it.
    #[must_use]
    pub fn then(self, token: u64) -> Prefix {
        Prefix(splitmix(self.0 ^ token))
    }
}

impl Model {
    /// Ids per row.
    pub fn width(&self) -> u64 {
        self.layers.saturating_mul(self.top_k)
    }

    /// The empty prefix.
    pub fn empty(&self) -> Prefix {
        Prefix(self.seed)
    }

    /// The prefix of each position of `tokens`: `tokens[0..=x]` for `x` in
    /// `[0, len)`.
    pub fn prefixes(&self, tokens: &[u64]) -> Vec<Prefix> {
        let mut prefix = self.empty();
        tokens
            .iter()
            .map(|&token| {
                prefix = prefix.then(token);
                prefix
            })
            .collect()
    }

    /// The row a forward computes for the last position of `prefix`: a
    /// prefill's, and a decode's where it does not flip.
    pub fn row(&self, prefix: Prefix) -> Vec<u64> {
        let mut rng = SplitMix64::new(prefix.0 ^ ROW);
        top_k_row(self.layers, self.top_k, self.experts, || rng.next_u64())
    }

    /// The forward of `tokens` as one prompt: the row of every position,
    /// `[0, len)`.
    pub fn forward(&self, tokens: &[u64]) -> Vec<Vec<u64>> {
        self.prefixes(tokens)
            .into_iter()
            .map(|prefix| self.row(prefix))
            .collect()
    }

    /// What a decode computes where it flips (another batch than a
    /// prefill's, another kernel): `row` with its first layer's first
    /// expert moved to the next one that layer does not hold, so the row is
    /// still one a router gives (each layer's ids distinct); a layer that
    /// holds every expert has its first two swapped.
    pub fn flipped(&self, row: &[u64]) -> Vec<u64> {
        let mut out = row.to_vec();
        let top_k = usize::try_from(self.top_k).unwrap_or(0).min(out.len());
        if top_k == 0 {
            return out;
        }
        let experts = self.experts.max(1);
        let layer = &row[..top_k];
        let free = (1..experts)
            .map(|k| (row[0] + k) % experts)
            .find(|id| !layer.contains(id));
        match free {
            Some(id) => out[0] = id,
            // Every expert in the layer already: the top-k order changes.
            None if top_k > 1 => out.swap(0, 1),
            None => {}
        }
        out
    }

    /// A row that is not the truth, every id moved to the next expert: what
    /// the simulator's vLLM decode answers for a prompt position it holds
    /// no routing of, and a re-emitted row's stale copy.
    pub fn wrong(&self, row: &[u64]) -> Vec<u64> {
        let experts = self.experts.max(1);
        row.iter().map(|id| (id + 1) % experts).collect()
    }

    /// The routing weights of `prefix`'s row, float32 `[layers, top_k]`;
    /// `wrong` (each 0.5 more) where the row is [`wrong`](Model::wrong).
    pub fn weights(&self, prefix: Prefix, wrong: bool) -> Vec<f32> {
        let mut rng = SplitMix64::new(prefix.0 ^ WEIGHTS);
        (0..self.width())
            .map(|_| {
                let w = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
                if wrong {
                    w + 0.5
                } else {
                    w
                }
            })
            .collect()
    }

    /// The sampling mask of the token sampled at `prefix`'s position: its
    /// kept ids (int32) and their sampler logprobs (float32), 0-6 of them.
    pub fn mask(&self, prefix: Prefix) -> (Vec<i32>, Vec<f32>) {
        let mut rng = SplitMix64::new(prefix.0 ^ MASK);
        let count = rng.below(7);
        let ids = (0..count)
            .map(|_| i32::try_from(rng.below(32_000)).unwrap_or(0))
            .collect();
        let logprobs = (0..count)
            .map(|_| -((rng.next_u64() >> 40) as f32 / (1u64 << 20) as f32))
            .collect();
        (ids, logprobs)
    }

    /// The `n` tokens choice `choice` generates after `prompt`: each a
    /// function of the prefix before it (greedy), the first offset by the
    /// choice so that the choices of one request differ from their first
    /// token on (as sampling `n` of them does).
    pub fn complete(&self, prompt: &[u64], choice: usize, n: u64) -> Vec<u64> {
        let mut prefix = self
            .prefixes(prompt)
            .last()
            .copied()
            .unwrap_or(self.empty());
        (0..n)
            .map(|k| {
                let offset = if k == 0 { choice as u64 } else { 0 };
                let token = (splitmix(prefix.0 ^ TOKEN) % VOCAB + offset) % VOCAB;
                prefix = prefix.then(token);
                token
            })
            .collect()
    }
}

/// A row of `layers` x `top_k` expert ids below `experts`, as a router's
/// top-k gives them: distinct within each layer (an id `draw` gives that the
/// layer already holds is drawn again; when `experts < top_k` cannot allow
/// that, ids repeat). The rows check (`gather::check_rows`) refuses a layer
/// that names an expert twice, so the model draws none.
fn top_k_row(layers: u64, top_k: u64, experts: u64, mut draw: impl FnMut() -> u64) -> Vec<u64> {
    let experts = experts.max(1);
    let distinct = top_k <= experts;
    let mut row = Vec::with_capacity(usize::try_from(layers * top_k).unwrap_or(0).min(1 << 16));
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

/// The model against the properties its rows must have for a wrong row to
/// show: ids in range and distinct per layer, differing by position, by
/// prefix and by seed; a prefix's rows independent of what follows.
#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: Model = Model {
        seed: 7,
        layers: 6,
        top_k: 8,
        experts: 16,
    };

    /// Rows of top-k ids are distinct in each layer, below the expert
    /// count, and spread over it; with fewer experts than top_k, ids repeat
    /// rather than loop forever.
    #[test]
    fn top_k_rows_are_distinct_in_each_layer() {
        let mut rng = SplitMix64::new(7);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let row = top_k_row(6, 8, 16, || rng.next_u64());
            assert_eq!(row.len(), 48);
            for layer in row.chunks(8) {
                let set: std::collections::BTreeSet<_> = layer.iter().collect();
                assert_eq!(set.len(), 8, "{layer:?}");
                assert!(layer.iter().all(|&id| id < 16));
            }
            seen.extend(row);
        }
        assert_eq!(seen.len(), 16);
        let tight = top_k_row(2, 4, 2, || rng.next_u64());
        assert_eq!(tight.len(), 8);
        assert!(tight.iter().all(|&id| id < 2));
    }

    /// The row of a position is that of its prefix: equal for two sequences
    /// sharing it, different after they part, different from position to
    /// position, and different under another seed, whatever the seed.
    #[test]
    fn rows_are_a_function_of_the_prefix() {
        for seed in [0, u64::MAX, 0x5c1a_5eed] {
            let model = Model { seed, ..MODEL };
            let a = model.forward(&[1, 2, 3, 4, 5]);
            let b = model.forward(&[1, 2, 3, 9, 5]);
            assert_eq!(a[..3], b[..3], "seed {seed}");
            assert_ne!(a[3], b[3], "seed {seed}");
            assert_ne!(a[4], b[4], "seed {seed}: a later position differs too");
            for x in 1..a.len() {
                assert_ne!(a[x - 1], a[x], "seed {seed} at {x}");
            }
            // Ids spread over the experts: 704 drawn from 256 reach all but
            // a few of them.
            let long = Model {
                experts: 256,
                top_k: 4,
                layers: 4,
                ..model
            };
            let tokens: Vec<u64> = (0..44).collect();
            let ids: std::collections::BTreeSet<u64> =
                long.forward(&tokens).into_iter().flatten().collect();
            assert!(ids.len() > 200, "seed {seed}: {}", ids.len());
            let other = Model {
                seed: seed ^ 1,
                ..MODEL
            };
            assert_ne!(other.forward(&[1, 2])[1], a[1], "seed {seed}");
            for row in &a {
                for layer in row.chunks(8) {
                    let set: std::collections::BTreeSet<_> = layer.iter().collect();
                    assert_eq!(set.len(), 8, "{row:?}");
                }
            }
        }
    }

    /// A flip changes one id of the first layer, to an expert that layer
    /// does not hold; a wrong row moves every id by one.
    #[test]
    fn flips_change_one_id_and_wrong_rows_every_id() {
        for row in MODEL.forward(&[3, 1, 4, 1, 5, 9, 2, 6]) {
            let flipped = MODEL.flipped(&row);
            let changed: Vec<usize> = (0..row.len()).filter(|&k| row[k] != flipped[k]).collect();
            assert_eq!(changed, [0], "{row:?} -> {flipped:?}");
            let layer: std::collections::BTreeSet<_> = flipped[..8].iter().collect();
            assert_eq!(layer.len(), 8, "{flipped:?}");
            let wrong = MODEL.wrong(&row);
            for (a, b) in row.iter().zip(&wrong) {
                assert_eq!(*b, (a + 1) % 16);
            }
        }
        // Every expert taken: the id moves anyway, the row still differs.
        let full = Model {
            top_k: 2,
            experts: 2,
            ..MODEL
        };
        assert_ne!(full.flipped(&[0, 1]), [0, 1]);
        assert_eq!(Model { top_k: 0, ..MODEL }.flipped(&[]), Vec::<u64>::new());
    }

    /// Choices part at their first token; each token is a function of the
    /// prefix before it; ids stay below the vocabulary.
    #[test]
    fn completions_part_at_the_first_token_and_follow_the_prefix() {
        let prompt = [10, 20, 30];
        let firsts: Vec<u64> = (0..4).map(|c| MODEL.complete(&prompt, c, 1)[0]).collect();
        let distinct: std::collections::BTreeSet<_> = firsts.iter().collect();
        assert_eq!(distinct.len(), 4, "{firsts:?}");
        let long = MODEL.complete(&prompt, 2, 12);
        assert_eq!(long[..5], MODEL.complete(&prompt, 2, 5));
        assert!(long.iter().all(|&t| t < VOCAB));
        // Greedy after the first token: the continuation of a prefix is the
        // same whoever asks for it.
        let mut extended = prompt.to_vec();
        extended.push(long[0]);
        assert_eq!(MODEL.complete(&extended, 0, 11), long[1..]);
    }

    #[test]
    fn weights_and_masks_are_drawn_from_the_prefix() {
        let p = MODEL.prefixes(&[1, 2]);
        assert_eq!(MODEL.weights(p[1], false).len(), 48);
        assert_ne!(MODEL.weights(p[0], false), MODEL.weights(p[1], false));
        let right = MODEL.weights(p[1], false);
        let wrong = MODEL.weights(p[1], true);
        for (a, b) in right.iter().zip(&wrong) {
            assert!((b - a - 0.5).abs() < 1e-6 && (0.0..1.0).contains(a));
        }
        let counts: std::collections::BTreeSet<usize> = (0..200u64)
            .map(|t| MODEL.mask(MODEL.empty().then(t)).0.len())
            .collect();
        assert_eq!(counts, (0..7).collect());
    }
}
