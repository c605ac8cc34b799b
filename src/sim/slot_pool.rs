//! An SGLang decode's routed-experts host buffer (SPEC F10), the one state
//! a simulated instance keeps across requests: what a full-length decode
//! answers for the prompt positions it never computed.

use crate::algebra::{Convention, Dtype};

use super::model::{Model, Prefix, VOCAB};
use super::request::Request;
use super::splitmix::{mix, SplitMix64};

/// The slots of each simulated SGLang decode's pool in a run: a few
/// requests' worth (the draws average about 128 positions), so that each
/// shape's decodes wrap within a short run.
pub const POOL_SLOTS: usize = 1024;

/// Where a slot was last written from: a position of an earlier request
/// (its prefix), and whether that decode step flipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Written {
    prefix: Prefix,
    flipped: bool,
}

/// One row per KV-cache token slot, all zeros on a fresh server, a row
/// written only where the decode ran a forward pass. A request is given
/// one slot per position of `[0, P + N - 1)` (the last token never runs),
/// taken in turn around a ring of [`size`](SlotPool::size) slots, as freed
/// slots are reused; its prompt's KV arrives from the prefill and writes no
/// row, so the decode's rows for prompt positions are read from slots it
/// never wrote for this request: zeros where no request ever wrote, else
/// the row the last request to run a forward there left (a true row of
/// *another* request's position). Its own positions `[P, P + N - 1)` are
/// computed and written. Everything follows from the order requests arrive
/// in: no randomness of its own. A pool belongs to one deployment, so to
/// one model: the rows it holds are read back with the requests' model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotPool {
    slots: Vec<Option<Written>>,
    next: usize,
}

impl SlotPool {
    /// A fresh server's pool of `size` slots: every slot zeros. A pool of
    /// 0 slots keeps nothing (every row read is zeros).
    pub fn new(size: usize) -> SlotPool {
        SlotPool {
            slots: vec![None; size],
            next: 0,
        }
    }

    /// A pool of `size` slots after earlier requests of `model` went
    /// through it: filler decodes drawn from `seed` (prompts of 1 to 32
    /// tokens, 2 to 65 generated) run until every slot has been written or
    /// the ring has gone round eight times, so a slot last used for a
    /// filler's prompt may still be zeros, as on a real server after its
    /// pool wrapped.
    pub fn worn(model: Model, size: usize, seed: u64) -> SlotPool {
        let mut pool = SlotPool::new(size);
        let mut rng = SplitMix64::new(mix(seed ^ 0x5107_9001));
        let mut turned = 0usize;
        while turned < size.saturating_mul(8) && pool.slots.iter().any(Option::is_none) {
            let prompt: Vec<u64> = (0..rng.range(1, 32)).map(|_| rng.below(VOCAB)).collect();
            let filler = Request::new(0, model, Dtype::Int32, prompt, 1, rng.range(2, 65))
                .with_convention(Convention::SuffixOnly);
            pool.decode(&filler);
            turned += usize::try_from(filler.rows()).unwrap_or(usize::MAX);
        }
        pool
    }

    /// How many slots the ring has.
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// How many slots have ever been written.
    pub fn written(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// The decode's ids for choice 0 of `request`, `[S, P + N - 1)`, `S` the
    /// start it was sent when full-length, the prompt's end when
    /// suffix-only: the prompt positions read from the
    /// slots the request is given (before it writes any, so a request
    /// longer than the ring reads what earlier ones left), then its own,
    /// computed (flipped where it flips), which it writes into its slots.
    /// The ring's next request starts after its slots.
    pub fn decode(&mut self, request: &Request) -> Vec<u64> {
        let model = request.model;
        let (prompt, end) = (request.prompt_len(), request.rows());
        let width = usize::try_from(model.width()).unwrap_or(0);
        let from = decode_start(request);
        let own = from.max(prompt);
        let prefixes = request.prefixes(0);
        // Reserved up to a bound: a request of absurd length grows the
        // vector as it goes rather than asking for it all at once.
        let rows = usize::try_from(end.saturating_sub(from)).unwrap_or(usize::MAX);
        let mut ids = Vec::with_capacity(width.saturating_mul(rows).min(1 << 20));
        for x in from..prompt.min(end) {
            match self
                .slot(x)
                .and_then(|slot| self.slots.get(slot).copied().flatten())
            {
                Some(w) => {
                    let row = model.row(w.prefix);
                    ids.extend(if w.flipped { model.flipped(&row) } else { row });
                }
                None => ids.extend(std::iter::repeat_n(0, width)),
            }
        }
        for x in own..end {
            ids.extend(request.true_ids(x, prefixes[x as usize]));
        }
        for x in prompt..end {
            let written = Written {
                prefix: prefixes[x as usize],
                flipped: request.flips_at(x),
            };
            if let Some(slot) = self.slot(x).and_then(|slot| self.slots.get_mut(slot)) {
                *slot = Some(written);
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
}

/// Where an SGLang decode's rows start: the start it was sent when
/// full-length, the prompt's end when suffix-only.
fn decode_start(request: &Request) -> u64 {
    match request.convention {
        Convention::FullLength => request.start,
        Convention::SuffixOnly => request.prompt_len(),
    }
}

/// The pool against rings worked by hand.
#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Model = Model {
        seed: 3,
        layers: 1,
        top_k: 2,
        experts: 64,
    };

    /// A full-length request of `prompt` tokens and `completion` generated,
    /// asked from `start`; its tokens from `seed`.
    fn req(prompt: u64, completion: u64, start: u64, seed: u64) -> Request {
        let tokens = (0..prompt).map(|t| (seed * 31 + t * 7) % VOCAB).collect();
        Request::new(0, TINY, Dtype::Int32, tokens, 1, completion).starting_at(start)
    }

    fn row(r: &Request, x: u64) -> Vec<u64> {
        r.true_ids(x, r.prefixes(0)[x as usize])
    }

    fn rows(r: &Request, from: u64, to: u64) -> Vec<u64> {
        (from..to).flat_map(|x| row(r, x)).collect()
    }

    /// A ring of 8 slots, worked by hand. A (P 2, N 4) takes slots 0-4 and
    /// writes its positions 2, 3, 4 into slots 2, 3, 4. B (P 6, N 2) takes
    /// slots 5, 6, 7, 0, 1, 2, 3: its prompt positions 0-4 read slots 5, 6,
    /// 7 (never written), 0, 1 (A's prompt: never written), all zeros, and
    /// position 5 reads slot 2, A's row of position 2; it writes its
    /// position 6 into slot 3. C (P 2, N 1, from 0) takes slots 4, 5: A's
    /// row of position 4, then zeros. Each decode's own rows are its truth.
    #[test]
    fn prompt_rows_are_zeros_or_the_rows_earlier_requests_left() {
        let mut pool = SlotPool::new(8);
        let zero = vec![0, 0];
        let a = req(2, 4, 0, 11);
        let got = pool.decode(&a);
        let mut want = [zero.clone(), zero.clone()].concat();
        want.extend(rows(&a, 2, 5));
        assert_eq!(got, want, "a fresh pool answers zeros for the prompt");
        let b = req(6, 2, 0, 12);
        let mut want = zero.repeat(5);
        want.extend(row(&a, 2));
        want.extend(row(&b, 6));
        assert_eq!(pool.decode(&b), want);
        let c = req(2, 1, 0, 13);
        let want = [row(&a, 4), zero.clone()].concat();
        assert_eq!(pool.decode(&c), want);
        // Slots 2, 3 and 4 (3 twice), no other.
        assert_eq!(pool.written(), 3);
        // Sent a start, the decode answers from it: B's last prompt row only.
        let mut again = SlotPool::new(8);
        again.decode(&a);
        let from_5 = b.clone().starting_at(5);
        let want = [row(&a, 2), row(&b, 6)].concat();
        assert_eq!(again.decode(&from_5), want);
    }

    /// A flipped decode step writes its flipped row, and a later request
    /// reads that back.
    #[test]
    fn a_flipped_row_is_what_the_slot_keeps() {
        let mut pool = SlotPool::new(4);
        let a = req(1, 3, 0, 1).with_flips(vec![1]);
        let own = pool.decode(&a);
        let flipped = TINY.flipped(&TINY.row(a.prefixes(0)[1]));
        assert_eq!(own[2..4], flipped);
        let b = req(3, 1, 0, 2);
        // B takes slots 3, 0, 1: zeros, zeros, A's flipped row of 1.
        assert_eq!(pool.decode(&b)[4..6], flipped);
    }

    /// Suffix-only (and a full-length decode sent `start = P`) answers its
    /// own rows only, whatever the pool holds; a request longer than the
    /// ring reads what was there before writing; a ring of no slots reads
    /// zeros; none of it panics.
    #[test]
    fn own_rows_are_always_the_truth_and_odd_rings_do_not_panic() {
        let mut pool = SlotPool::worn(TINY, 16, 1);
        let suffix = req(5, 4, 0, 2).with_convention(Convention::SuffixOnly);
        for (d, from) in [(suffix, 5), (req(5, 4, 5, 3), 5), (req(30, 4, 0, 4), 0)] {
            let got = pool.decode(&d);
            assert_eq!(got.len() as u64, 2 * (d.rows() - from), "{d:?}");
            let own = got.len() - 2 * (d.rows() - d.prompt_len()) as usize;
            assert_eq!(got[own..], rows(&d, d.prompt_len(), d.rows()), "{d:?}");
        }
        let mut empty = SlotPool::new(0);
        let d = req(2, 2, 0, 5);
        assert_eq!(empty.decode(&d), [vec![0; 4], row(&d, 2)].concat());
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
