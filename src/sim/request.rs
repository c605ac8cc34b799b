//! One simulated request: what is drawn for it, and the true rows of every
//! position (the rows a colocated server computes), and the wrong ones a
//! decode instance computes for the prompt.

use crate::algebra::Dtype;

use super::rng::{mix, splits, top_k_row, Rng};

/// One simulated request, drawn from a seed and an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its index in the run.
    pub index: usize,
    /// Prompt length `P` (at least 1).
    pub prompt: u64,
    /// Completion length `C` (at least 1).
    pub completion: u64,
    /// Number of choices (1-4).
    pub choices: usize,
    /// `uint8`, or `uint16` when expert ids exceed 255.
    pub dtype: Dtype,
    /// Row shape `[layers, topk]`.
    pub shape: [u64; 2],
    /// Experts per layer: ids are below this.
    pub experts: u64,
    /// Where the chunked prefill split the prompt (positions inside it).
    pub prefill_splits: Vec<u64>,
    /// Per choice, where preemptions split the decode's rows (offsets inside
    /// them).
    pub preemptions: Vec<Vec<u64>>,
    /// Rows each preemption re-emits (0-2): the decode's segment after a
    /// preemption starts this many positions before the previous one ended,
    /// recomputed, and the previous segment's copy of them is stale (the
    /// trainer's reader takes the later one).
    pub reemit: u64,
    /// Where the by-handle and compact rows of the prompt start: vLLM omits
    /// a known prompt prefix on request (`routed_experts_prompt_start`).
    /// 0 (nothing omitted) unless set; at most `P - 1`.
    pub prompt_start: u64,
    pub(crate) seed: u64,
}

impl Request {
    /// The request `index` of a run seeded with `seed`.
    pub fn draw(seed: u64, index: usize) -> Request {
        let seed = mix(seed ^ mix(index as u64 + 1));
        let mut rng = Rng(seed);
        let prompt = rng.range(1, 160);
        let completion = rng.range(1, 96);
        let choices = rng.range(1, 4) as usize;
        let wide = rng.next() % 2 == 0;
        let shape = match rng.next() % 4 {
            0 => [4, 2],
            1 => [8, 4],
            2 => [16, 8],
            _ => [48, 8],
        };
        let prefill_splits = splits(&mut rng, prompt, 2);
        let preemptions = (0..choices)
            .map(|_| splits(&mut rng, completion, 3))
            .collect();
        Request {
            index,
            prompt,
            completion,
            choices,
            dtype: if wide { Dtype::Uint16 } else { Dtype::Uint8 },
            shape,
            experts: if wide { 512 } else { 256 },
            prefill_splits,
            preemptions,
            reemit: rng.next() % 3,
            prompt_start: 0,
            seed,
        }
    }

    /// The request with the prompt's first `start` rows omitted (clamped to
    /// `P - 1`, so the decode's first row stays inside).
    #[must_use]
    pub fn omitting(mut self, start: u64) -> Request {
        self.prompt_start = start.min(self.prompt - 1);
        self
    }

    /// The request with `rows` re-emitted at each preemption.
    #[must_use]
    pub fn reemitting(mut self, rows: u64) -> Request {
        self.reemit = rows;
        self
    }

    /// The true routing weights of `position` for `choice`, float32
    /// `[layers, topk]`, little-endian; `wrong` for what a decode instance
    /// computes for a prompt position.
    pub(super) fn weight_row(&self, choice: usize, position: u64, wrong: bool) -> Vec<u8> {
        let who = if position < self.prompt {
            0
        } else {
            choice as u64 + 1
        };
        let mut rng = Rng(mix(self.seed ^ mix(who << 40 ^ position ^ 0x5eed)));
        (0..self.shape[0] * self.shape[1])
            .flat_map(|_| {
                let w = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                (if wrong { w + 0.5 } else { w }).to_le_bytes()
            })
            .collect()
    }

    /// The sampling mask of the sampled token at `position` (in
    /// `[P, P + C)`) for `choice`: its kept ids (int32) and their sampler
    /// logprobs (float32), 0-6 of them.
    pub(super) fn mask_row(&self, choice: usize, position: u64) -> (Vec<i32>, Vec<f32>) {
        let mut rng = Rng(mix(
            self.seed ^ mix((choice as u64 + 1) << 40 ^ position ^ 0x3a5c)
        ));
        let count = rng.next() % 7;
        let ids = (0..count).map(|_| (rng.next() % 32_000) as i32).collect();
        let logprobs = (0..count)
            .map(|_| -((rng.next() >> 40) as f32 / (1u64 << 20) as f32))
            .collect();
        (ids, logprobs)
    }

    /// Positions with rows in the end: `[0, P + C - 1)`.
    pub fn rows(&self) -> u64 {
        self.prompt + self.completion - 1
    }

    pub(super) fn row_bytes(&self) -> usize {
        (self.shape[0] * self.shape[1] * self.dtype.itemsize()) as usize
    }

    /// The true row of `position` for `choice`: the prompt's rows are the same
    /// for every choice, the completion's differ.
    pub(super) fn truth_row(&self, choice: usize, position: u64) -> Vec<u8> {
        let who = if position < self.prompt {
            0
        } else {
            choice as u64 + 1
        };
        let mut rng = Rng(mix(self.seed ^ mix(who << 40 ^ position)));
        // Distinct in each layer, as a router's top-k is.
        top_k_row(self.shape[0], self.shape[1], self.experts, || rng.next())
            .into_iter()
            .flat_map(|id| {
                id.to_le_bytes()
                    .into_iter()
                    .take(self.dtype.itemsize() as usize)
            })
            .collect()
    }

    /// What a decode instance computes for a prompt position: not the truth.
    pub(super) fn wrong_row(&self, choice: usize, position: u64) -> Vec<u8> {
        let mut row = self.truth_row(choice, position);
        let size = self.dtype.itemsize() as usize;
        for element in row.chunks_exact_mut(size) {
            let mut id = [0u8; 8];
            id[..size].copy_from_slice(element);
            let wrong = (u64::from_le_bytes(id) + 1) % self.experts;
            element.copy_from_slice(&wrong.to_le_bytes()[..size]);
        }
        row
    }

    /// The true rows of `choice`, back to back: `[0, P + C - 1)`.
    pub fn truth(&self, choice: usize) -> Vec<u8> {
        (0..self.rows())
            .flat_map(|x| self.truth_row(choice, x))
            .collect()
    }
}

/// The draws and the truth against the bounds they promise.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_cover_every_parameter_within_its_range() {
        let requests: Vec<Request> = (0..600).map(|i| Request::draw(3, i)).collect();
        let seen = |f: &dyn Fn(&Request) -> u64| {
            let values: Vec<u64> = requests.iter().map(f).collect();
            (values.iter().copied().min(), values.iter().copied().max())
        };
        assert_eq!(seen(&|r| r.prompt), (Some(1), Some(160)));
        assert_eq!(seen(&|r| r.completion), (Some(1), Some(96)));
        assert_eq!(seen(&|r| r.choices as u64), (Some(1), Some(4)));
        for shape in [[4, 2], [8, 4], [16, 8], [48, 8]] {
            assert!(requests.iter().any(|r| r.shape == shape), "{shape:?}");
        }
        for r in &requests {
            assert_eq!(r.index, requests.iter().position(|q| q == r).unwrap());
            let experts = match r.dtype {
                Dtype::Uint8 => 256,
                Dtype::Uint16 => 512,
                other => panic!("{other:?}"),
            };
            assert_eq!(r.experts, experts);
            assert!(r.prefill_splits.len() <= 2);
            assert!(r.prefill_splits.iter().all(|&s| 0 < s && s < r.prompt));
            assert_eq!(r.preemptions.len(), r.choices);
            for p in &r.preemptions {
                assert!(p.len() <= 3 && p.iter().all(|&s| 0 < s && s < r.completion));
            }
        }
        assert!(requests.iter().any(|r| r.dtype == Dtype::Uint8));
        assert!(requests.iter().any(|r| r.dtype == Dtype::Uint16));
        // Distinct indexes and seeds draw distinct requests.
        assert_ne!(Request::draw(3, 0), Request::draw(3, 1));
        assert_ne!(Request::draw(3, 0), Request::draw(4, 0));
    }

    /// A seed is mixed into each request's stream without losing bits: no
    /// two seeds draw the same request at an index, not even a seed made of
    /// bits the index's own mixing already has (`seed | mix(..)` would make
    /// `mix(i + 1)` and 0 draw alike).
    #[test]
    fn distinct_seeds_draw_distinct_requests_at_every_index() {
        for index in 0..16 {
            let seeds = [0, 1, mix(index as u64 + 1), u64::MAX];
            for (a, &s) in seeds.iter().enumerate() {
                for &t in &seeds[a + 1..] {
                    assert_ne!(
                        Request::draw(s, index).seed,
                        Request::draw(t, index).seed,
                        "seeds {s} and {t} at {index}"
                    );
                }
            }
        }
    }

    /// The elements of a row, little-endian, as numbers.
    fn ids(request: &Request, row: &[u8]) -> Vec<u64> {
        row.chunks(request.dtype.itemsize() as usize)
            .map(|e| e.iter().rev().fold(0, |acc, &b| acc << 8 | u64::from(b)))
            .collect()
    }

    #[test]
    pub(super) fn truth_rows_are_shared_by_the_prompt_and_wrong_rows_differ_everywhere() {
        for index in 0..8 {
            let r = Request::draw(5, index);
            let elements = (r.shape[0] * r.shape[1]) as usize;
            let mut wide = false;
            for x in 0..r.rows() {
                let truth = r.truth_row(0, x);
                assert_eq!(truth.len(), r.row_bytes());
                let t = ids(&r, &truth);
                assert_eq!(t.len(), elements);
                assert!(t.iter().all(|&id| id < r.experts));
                for layer in t.chunks(r.shape[1] as usize) {
                    let set: std::collections::BTreeSet<_> = layer.iter().collect();
                    assert_eq!(set.len(), layer.len(), "an expert twice at {x}: {layer:?}");
                }
                wide |= t.iter().any(|&id| id > 255);
                let wrong = ids(&r, &r.wrong_row(0, x));
                for (a, b) in t.iter().zip(&wrong) {
                    assert_eq!(*b, (a + 1) % r.experts);
                }
                for c in 1..r.choices {
                    let other = r.truth_row(c, x);
                    if x < r.prompt {
                        assert_eq!(other, truth, "prompt rows are one for all choices");
                    } else {
                        assert_ne!(other, truth, "choice {c}, position {x}");
                    }
                }
            }
            assert_eq!(wide, r.dtype == Dtype::Uint16, "{r:?}");
            let all: Vec<u8> = (0..r.rows()).flat_map(|x| r.truth_row(0, x)).collect();
            assert_eq!(r.truth(0), all);
        }
    }

    /// Rows differ by position and by choice after the prompt whatever the
    /// seed, even one with every bit set or none.
    #[test]
    fn rows_differ_by_position_and_choice_for_any_seed() {
        for seed in [0, u64::MAX, Request::draw(9, 0).seed] {
            let r = Request {
                seed,
                choices: 2,
                prompt: 2,
                completion: 3,
                ..Request::draw(9, 0)
            };
            assert_ne!(r.truth_row(0, 0), r.truth_row(0, 1), "seed {seed}");
            assert_ne!(r.truth_row(0, 2), r.truth_row(1, 2), "seed {seed}");
            assert_ne!(r.truth_row(0, 2), r.truth_row(0, 3), "seed {seed}");
        }
    }
}
