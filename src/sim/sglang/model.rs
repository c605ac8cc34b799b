//! What SGLang answers, modelled over one truth: a colocated server, and a
//! 1P1D pair whose decode follows either convention (SPEC section 10, F2,
//! F6). The simulator and `pd_stitch::testing` write their SGLang responses
//! with it.

use serde_json::{json, Value};

use crate::algebra::Convention;
use crate::format::inline::encode_base64;
use crate::format::sglang::{META_INFO, SGLEXT, SGL_EXT};
use crate::response::fields::ROUTED_EXPERTS;

pub use crate::format::sglang::Api;

/// The rows' geometry and the expert ids they draw from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Layers.
    pub layers: u64,
    /// Experts per token.
    pub top_k: u64,
    /// Experts per layer: ids are below this.
    pub experts: u64,
}

impl Shape {
    /// Ids per row.
    pub fn width(self) -> u64 {
        self.layers * self.top_k
    }
}

/// One request of an SGLang deployment: its lengths, where its rows start,
/// how the decode answers, and the seed of its truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Draw {
    /// Prompt tokens `P` (at least 1).
    pub prompt: u64,
    /// Generated tokens `C` (at least 1): rows end at `P + C - 1`.
    pub completion: u64,
    /// `routed_experts_start_len`, in `[0, P]`.
    pub start: u64,
    /// How the decode's rows start.
    pub convention: Convention,
    /// The truth's seed.
    pub seed: u64,
}

/// SplitMix64's output from state `z` (the crate's one generator,
/// `sim::rng`): the truth's ids, and the simulator's draws.
pub(super) use crate::sim::rng::splitmix as mix;

impl Draw {
    /// Where the rows end.
    pub fn end(&self) -> u64 {
        self.prompt + self.completion - 1
    }

    /// The true ids of position `x`.
    pub fn truth_row(&self, shape: Shape, x: u64) -> Vec<i32> {
        // Distinct in each layer, as a router's top-k is: the k-th draw of
        // the position's stream.
        let mut k = 0u64;
        let draw = || {
            k += 1;
            mix(self.seed ^ mix(x << 24 ^ k))
        };
        crate::sim::rng::top_k_row(shape.layers, shape.top_k, shape.experts, draw)
            .into_iter()
            .map(|id| i32::try_from(id).unwrap_or(0))
            .collect()
    }

    /// The true ids of positions `[from, to)`, back to back.
    pub fn truth(&self, shape: Shape, from: u64, to: u64) -> Vec<i32> {
        (from..to).flat_map(|x| self.truth_row(shape, x)).collect()
    }

    /// A colocated server's ids: `[start, end)`.
    pub fn colocated(&self, shape: Shape) -> Vec<i32> {
        self.truth(shape, self.start, self.end())
    }

    /// The prefill's ids: `[start, P)`, which it computed.
    pub fn prefill(&self, shape: Shape) -> Vec<i32> {
        self.truth(shape, self.start, self.prompt)
    }

    /// Where the decode's rows start: the `routed_experts_start_len` it
    /// was sent (`start`) when full-length, the prompt's end when
    /// suffix-only.
    pub fn decode_start(&self) -> u64 {
        match self.convention {
            Convention::FullLength => self.start,
            Convention::SuffixOnly => self.prompt,
        }
    }
}

/// Where a decode's slot was last written from: a position of an earlier
/// request (its truth's seed), whose true row the slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Written {
    seed: u64,
    position: u64,
}

/// An SGLang decode's routed-experts host buffer (SPEC F10): one row per
/// KV-cache token slot, all zeros on a fresh server, a row written only
/// where the decode ran a forward pass. A request is given one slot per
/// position of `[0, P + C - 1)` (the last token never runs), taken in turn
/// around a ring of [`size`](SlotPool::size) slots, as freed slots are
/// reused; its prompt's KV arrives from the prefill and writes no row, so
/// the decode's rows for prompt positions are read from slots it never
/// wrote for this request: zeros where no request ever wrote, else the row
/// the last request to run a forward there left (a true row of *another*
/// request's position). Its own positions `[P, P + C - 1)` are computed and
/// written. Everything follows from the order requests arrive in: no
/// randomness of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotPool {
    shape: Shape,
    slots: Vec<Option<Written>>,
    next: usize,
}

impl SlotPool {
    /// A fresh server's pool of `size` slots for rows of `shape`: every
    /// slot zeros. A pool of 0 slots keeps nothing (every row read is
    /// zeros).
    pub fn new(shape: Shape, size: usize) -> SlotPool {
        SlotPool {
            shape,
            slots: vec![None; size],
            next: 0,
        }
    }

    /// A pool of `size` slots after earlier requests went through it: filler
    /// decodes drawn from `seed` (prompts of 1 to 32 tokens, 2 to 65
    /// generated) run until every slot has been written or the ring has
    /// gone round four times, so a slot last used for a filler's prompt may
    /// still be zeros, as on a real server after its pool wrapped.
    pub fn worn(shape: Shape, size: usize, seed: u64) -> SlotPool {
        let mut pool = SlotPool::new(shape, size);
        let mut state = mix(seed ^ 0x5107_9001);
        let mut turned = 0usize;
        while turned < size.saturating_mul(4) && pool.slots.iter().any(Option::is_none) {
            let mut next = || {
                state = mix(state);
                state
            };
            let filler = Draw {
                prompt: 1 + next() % 32,
                completion: 2 + next() % 64,
                start: 0,
                convention: Convention::SuffixOnly,
                seed: next(),
            };
            pool.decode(&filler);
            turned += usize::try_from(filler.end()).unwrap_or(usize::MAX);
        }
        pool
    }

    /// The rows' shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// How many slots the ring has.
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// How many slots have ever been written.
    pub fn written(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// The decode's ids for `draw`, `[decode_start, P + C - 1)`
    /// ([`Draw::decode_start`]): the prompt positions read from the slots
    /// the request is given (before it writes any, so a request longer than
    /// the ring reads what earlier ones left), then its own, computed, which
    /// it writes into its slots. The ring's next request starts after its
    /// slots.
    pub fn decode(&mut self, draw: &Draw) -> Vec<i32> {
        let (end, width) = (draw.end(), self.width());
        let from = draw.decode_start();
        let own = from.max(draw.prompt);
        // Reserved up to a bound: a draw of absurd length grows the vector
        // as it goes rather than asking for it all at once.
        let rows = usize::try_from(end.saturating_sub(from)).unwrap_or(usize::MAX);
        let mut ids = Vec::with_capacity(width.saturating_mul(rows).min(1 << 20));
        for x in from..draw.prompt.min(end) {
            match self
                .slot(x)
                .and_then(|slot| self.slots.get(slot).copied().flatten())
            {
                Some(w) => ids.extend(self.stale_row(w)),
                None => ids.extend(std::iter::repeat_n(0, width)),
            }
        }
        for x in own..end {
            ids.extend(draw.truth_row(self.shape, x));
        }
        for x in draw.prompt..end {
            if let Some(slot) = self.slot(x).and_then(|slot| self.slots.get_mut(slot)) {
                *slot = Some(Written {
                    seed: draw.seed,
                    position: x,
                });
            }
        }
        if let Some(slot) = self.slot(end) {
            self.next = slot;
        }
        ids
    }

    /// The slot the current request's position `x` is given.
    fn slot(&self, x: u64) -> Option<usize> {
        let size = self.slots.len();
        let offset = usize::try_from(x.checked_rem(u64::try_from(size).ok()?)?).ok()?;
        Some((self.next + offset) % size)
    }

    fn width(&self) -> usize {
        usize::try_from(self.shape.width()).unwrap_or(0)
    }

    /// The row an earlier request's forward left.
    fn stale_row(&self, w: Written) -> Vec<i32> {
        let earlier = Draw {
            prompt: 1,
            completion: 1,
            start: 0,
            convention: Convention::SuffixOnly,
            seed: w.seed,
        };
        earlier.truth_row(self.shape, w.position)
    }
}

/// The base64 of ids, as SGLang writes them (`int32`, little-endian).
pub fn encode_ids(ids: &[i32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    encode_base64(&bytes)
}

/// The three responses of one SGLang request: prefill, decode, colocated.
#[derive(Clone, Debug, PartialEq)]
pub struct Responses {
    /// The prefill instance's.
    pub prefill: Value,
    /// The decode instance's, before any merge.
    pub decode: Value,
    /// A colocated server's.
    pub colocated: Value,
}

/// The responses of `draws` through `api`, the decode's from a fresh
/// server's pool (its full-length prompt rows zeros): one output each; for
/// [`Api::Generate`] with `batch`, an array of them. The OpenAI APIs take
/// the first draw only (one choice: SPEC Q3).
pub fn responses(api: Api, draws: &[Draw], shape: Shape, batch: bool) -> Responses {
    let slots: u64 = draws.iter().map(Draw::end).sum();
    let size = usize::try_from(slots).unwrap_or(0).max(1);
    responses_from(&mut SlotPool::new(shape, size), api, draws, batch)
}

/// The same with the decode reading and writing `pool` (rows of its
/// shape), as a decode server that has answered the requests before.
pub fn responses_from(pool: &mut SlotPool, api: Api, draws: &[Draw], batch: bool) -> Responses {
    let shape = pool.shape();
    Responses {
        prefill: prefill_answer(api, draws, shape, batch),
        decode: decode_answer(pool, api, draws, batch),
        colocated: colocated_answer(api, draws, shape, batch),
    }
}

/// The prefill's answer alone: rows `[start, P)`, one generated token.
pub fn prefill_answer(api: Api, draws: &[Draw], shape: Shape, batch: bool) -> Value {
    answer(api, draws, batch, |d| (1, d.prefill(shape)), Role::Prefill)
}

/// A colocated server's answer alone: rows `[start, P + C - 1)`.
pub fn colocated_answer(api: Api, draws: &[Draw], shape: Shape, batch: bool) -> Value {
    answer(
        api,
        draws,
        batch,
        |d| (d.completion, d.colocated(shape)),
        Role::Colocated,
    )
}

/// The decode's answer alone, each draw in turn through `pool`
/// ([`SlotPool::decode`]): rows from [`Draw::decode_start`].
pub fn decode_answer(pool: &mut SlotPool, api: Api, draws: &[Draw], batch: bool) -> Value {
    answer(
        api,
        draws,
        batch,
        |d| (d.completion, pool.decode(d)),
        Role::Decode,
    )
}

/// One output per draw (an array for a `/generate` batch, else the first
/// draw's), each with the counts and ids `rows` gives.
fn answer(
    api: Api,
    draws: &[Draw],
    batch: bool,
    mut rows: impl FnMut(&Draw) -> (u64, Vec<i32>),
    role: Role,
) -> Value {
    let mut one = |d: &Draw| {
        let (completion, ids) = rows(d);
        output(api, d.prompt, completion, &encode_ids(&ids), role)
    };
    if api == Api::Generate && batch {
        Value::Array(draws.iter().map(&mut one).collect())
    } else {
        draws.first().map_or(Value::Null, one)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Prefill,
    Decode,
    Colocated,
}

/// One output, with the keys SGLang writes around the rows: for
/// `/generate`, the `meta_info` keys of SGLang 0.5.23's answers
/// (`tests/fixtures/engines/sglang/`), and `text` beside `output_ids`, as a
/// server with a tokenizer writes it (the fixtures' servers ran without
/// one); a prefill reports its one token with `finish_reason.length` 0, as
/// the engine's does.
fn output(api: Api, prompt: u64, completion: u64, rows: &str, role: Role) -> Value {
    let text = match role {
        Role::Prefill => "",
        _ => "The answer is 42.\n\"quoted\" \u{e9}",
    };
    match api {
        Api::Generate => json!({
            "text": text,
            "output_ids": (0..completion).collect::<Vec<_>>(),
            META_INFO: {
                "id": "req-0",
                "finish_reason": {
                    "type": "length",
                    "length": if role == Role::Prefill { 0 } else { completion },
                },
                "prompt_tokens": prompt,
                "weight_version": "default",
                "num_retractions": 0,
                "reasoning_tokens": 0,
                "completion_tokens": completion,
                "cached_tokens": 0,
                "weight_versions": [{"version": "default", "start": 0, "end": completion}],
                "cached_tokens_details": null,
                ROUTED_EXPERTS: rows,
                "dp_rank": null,
                "e2e_latency": 0.125,
                "response_sent_to_client_ts": 1_764_547_200.25,
            },
        }),
        Api::ResponseExt | Api::ChoiceExt => {
            let mut choice = json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            });
            if api == Api::ChoiceExt {
                choice[SGL_EXT] = json!({ROUTED_EXPERTS: rows});
            }
            let mut response = json!({
                "id": "chatcmpl-0",
                "object": "chat.completion",
                "created": 1_764_547_200u64,
                "model": "moe",
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            });
            if api == Api::ResponseExt {
                response[SGLEXT] = json!({ROUTED_EXPERTS: rows});
            }
            response
        }
    }
}

/// The model's parts against references that are not its code: SplitMix64's
/// published outputs, the names written out, and the properties the truth
/// must have for a wrong row to show (ids in range, differing by position,
/// by id within a row and by seed, whatever the seed).
#[cfg(test)]
mod tests {
    use super::*;

    /// `mix(z)` is SplitMix64's output from state `z` (Steele, Lea and
    /// Flood; Vigna's `splitmix64.c`): from 0, `mix` of 0, then of one and
    /// two steps of the golden gamma, are its first three outputs.
    #[test]
    fn mix_is_splitmix64() {
        let gamma = 0x9e37_79b9_7f4a_7c15u64;
        let got = [0, gamma, gamma.wrapping_mul(2)].map(mix);
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
    fn apis_are_named_by_their_slots() {
        assert_eq!(Api::ALL.map(Api::name), ["generate", "sglext", "sgl_ext"]);
    }

    /// `int32` little-endian, then base64: 1 is `01 00 00 00`, -1 is
    /// `ff ff ff ff`.
    #[test]
    fn ids_are_encoded_as_sglang_writes_them() {
        assert_eq!(encode_ids(&[1, -1]), "AQAAAP////8=");
        assert_eq!(encode_ids(&[]), "");
    }

    /// Each role's response: the prompt, its own count of generated tokens
    /// (the prefill's one), its rows, and text only where tokens were
    /// decoded. A prompt of 3 from position 1, 4 generated, rows of 2 ids:
    /// the prefill has `[1, 3)`, the suffix-only decode `[3, 6)`, the
    /// colocated server `[1, 6)`.
    #[test]
    fn each_role_answers_its_counts_rows_and_text() {
        let shape = Shape {
            layers: 1,
            top_k: 2,
            experts: 256,
        };
        let d = Draw {
            prompt: 3,
            completion: 4,
            start: 1,
            convention: Convention::SuffixOnly,
            seed: 7,
        };
        let r = responses(Api::Generate, &[d], shape, false);
        for (response, completion, ids, has_text) in [
            (&r.prefill, 1, d.truth(shape, 1, 3), false),
            (&r.decode, 4, d.truth(shape, 3, 6), true),
            (&r.colocated, 4, d.truth(shape, 1, 6), true),
        ] {
            let meta = &response["meta_info"];
            assert_eq!(meta["prompt_tokens"], 3, "{response}");
            assert_eq!(meta["completion_tokens"], completion, "{response}");
            assert_eq!(meta["routed_experts"], encode_ids(&ids), "{response}");
            let text = response["text"].as_str().unwrap();
            assert_eq!(!text.is_empty(), has_text, "{response}");
        }
    }

    fn draw(seed: u64) -> Draw {
        Draw {
            prompt: 5,
            completion: 40,
            start: 2,
            convention: Convention::FullLength,
            seed,
        }
    }

    /// Every seed, even one with no bit or every bit set, draws rows whose
    /// ids are below `experts` and spread over them, differ from position
    /// to position and from id to id within a row, and differ between
    /// seeds.
    #[test]
    fn truth_rows_are_spread_and_differ_by_position_and_seed() {
        let shape = Shape {
            layers: 4,
            top_k: 4,
            experts: 256,
        };
        for seed in [0, u64::MAX, 0x5c1a_5eed] {
            let d = draw(seed);
            let rows: Vec<Vec<i32>> = (0..d.end()).map(|x| d.truth_row(shape, x)).collect();
            let mut distinct = std::collections::BTreeSet::new();
            for (x, row) in rows.iter().enumerate() {
                assert_eq!(row.len(), 16, "seed {seed}");
                assert!(row.iter().all(|&id| (0..256).contains(&id)), "{row:?}");
                distinct.extend(row.iter().copied());
                let first = row.first().copied();
                assert!(
                    row.iter().any(|&id| Some(id) != first),
                    "seed {seed} at {x}: {row:?}"
                );
                if x > 0 {
                    assert_ne!(rows[x - 1], *row, "seed {seed} at {x}");
                }
            }
            // 704 ids drawn from 256: all but a few of them occur.
            assert!(distinct.len() > 200, "seed {seed}: {}", distinct.len());
            let other = draw(seed ^ 1);
            assert_ne!(other.truth_row(shape, 3), rows[3], "seed {seed}");
            assert_eq!(d.truth(shape, 2, 5), rows[2..5].concat());
        }
    }

    const TINY: Shape = Shape {
        layers: 1,
        top_k: 2,
        experts: 64,
    };

    fn req(prompt: u64, completion: u64, start: u64, seed: u64) -> Draw {
        Draw {
            prompt,
            completion,
            start,
            convention: Convention::FullLength,
            seed,
        }
    }

    /// A ring of 8 slots, worked by hand. A (P 2, C 4) takes slots 0-4 and
    /// writes its positions 2, 3, 4 into slots 2, 3, 4. B (P 6, C 2) takes
    /// slots 5, 6, 7, 0, 1, 2, 3: its prompt positions 0-4 read slots 5, 6,
    /// 7 (never written), 0, 1 (A's prompt: never written), all zeros, and
    /// position 5 reads slot 2, A's row of position 2; it writes its
    /// position 6 into slot 3. C (P 2, C 1, from 0) takes slots 4, 5: A's
    /// row of position 4, then zeros. Each decode's own rows are its truth.
    #[test]
    fn prompt_rows_are_zeros_or_the_rows_earlier_requests_left() {
        let mut pool = SlotPool::new(TINY, 8);
        let zero = vec![0, 0];
        let a = req(2, 4, 0, 11);
        let got = pool.decode(&a);
        let mut want = [zero.clone(), zero.clone()].concat();
        want.extend(a.truth(TINY, 2, 5));
        assert_eq!(got, want, "a fresh pool answers zeros for the prompt");
        let b = req(6, 2, 0, 12);
        let mut want = zero.repeat(5);
        want.extend(a.truth_row(TINY, 2));
        want.extend(b.truth_row(TINY, 6));
        assert_eq!(pool.decode(&b), want);
        let c = req(2, 1, 0, 13);
        let want = [a.truth_row(TINY, 4), zero.clone()].concat();
        assert_eq!(pool.decode(&c), want);
        // Slots 2, 3 and 4 (3 twice), no other.
        assert_eq!(pool.written(), 3);
        // Sent a start, the decode answers from it: B's last prompt row only.
        let mut again = SlotPool::new(TINY, 8);
        again.decode(&a);
        let from_5 = Draw { start: 5, ..b };
        let want = [a.truth_row(TINY, 2), b.truth_row(TINY, 6)].concat();
        assert_eq!(again.decode(&from_5), want);
    }

    /// Suffix-only (and a full-length decode sent `start = P`) answers its
    /// own rows only, whatever the pool holds; a request longer than the
    /// ring reads what was there before writing; a ring of no slots reads
    /// zeros; none of it panics.
    #[test]
    fn own_rows_are_always_the_truth_and_odd_rings_do_not_panic() {
        let mut pool = SlotPool::worn(TINY, 16, 1);
        let suffix = Draw {
            convention: Convention::SuffixOnly,
            ..req(5, 4, 0, 2)
        };
        for (d, from) in [(suffix, 5), (req(5, 4, 5, 3), 5), (req(30, 4, 0, 4), 0)] {
            let got = pool.decode(&d);
            assert_eq!(got.len() as u64, 2 * (d.end() - from), "{d:?}");
            let own = got.len() - 2 * (d.end() - d.prompt) as usize;
            assert_eq!(got[own..], d.truth(TINY, d.prompt, d.end()), "{d:?}");
        }
        let mut empty = SlotPool::new(TINY, 0);
        let d = req(2, 2, 0, 5);
        assert_eq!(
            empty.decode(&d),
            [vec![0; 4], d.truth_row(TINY, 2)].concat()
        );
        assert_eq!(empty.written(), 0);
    }

    /// A worn pool is every slot written (or nearly: a slot last given to
    /// a filler's prompt keeps zeros), the same for the same seed and not
    /// for another.
    #[test]
    fn worn_pools_are_written_and_seeded() {
        let worn = SlotPool::worn(TINY, 256, 7);
        assert!(worn.written() > 240, "{}", worn.written());
        assert_eq!(worn, SlotPool::worn(TINY, 256, 7));
        assert_ne!(worn, SlotPool::worn(TINY, 256, 8));
        assert_eq!(SlotPool::worn(TINY, 0, 7).size(), 0);
    }
}
