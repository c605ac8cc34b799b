//! The tokens a stream has generated so far, per choice: what places a
//! vLLM 0.32 `.npy` on the rows event (SPEC section 11, "Counts").

use crate::bytes::ScannedValue;
use crate::format::end_anchored::{Counts, TOKEN_IDS};
use crate::response::view::View;

use super::slots::choice_index;

/// The counts a stream gives a vLLM `.npy`: the prompt's tokens (the
/// prefill's `usage.prompt_tokens`) and each choice's generated tokens so
/// far, by the choice's `index`.
#[derive(Debug)]
pub(super) struct Tokens {
    pub(super) prompt: u64,
    pub(super) by_index: Vec<(u64, u64)>,
}

impl Tokens {
    fn seen(&self, index: u64) -> u64 {
        self.by_index
            .iter()
            .find(|(i, _)| *i == index)
            .map_or(0, |(_, n)| *n)
    }

    /// Adds the tokens of each choice of the event `root`.
    pub(super) fn add(&mut self, root: ScannedValue<'_>) {
        let Some(choices) = root.get("choices").and_then(View::elements) else {
            return;
        };
        for (i, choice) in choices.enumerate() {
            let n = choice.get(TOKEN_IDS).and_then(View::len).unwrap_or(0) as u64;
            let index = choice_index(choice, i);
            match self.by_index.iter_mut().find(|(k, _)| *k == index) {
                Some((_, seen)) => *seen = seen.saturating_add(n),
                None => self.by_index.push((index, n)),
            }
        }
    }

    /// The counts of each choice of the event `root`: the tokens before it
    /// and its own.
    pub(super) fn counts(&self, root: ScannedValue<'_>) -> Vec<Counts> {
        root.get("choices")
            .and_then(View::elements)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, choice)| {
                let own = choice.get(TOKEN_IDS).and_then(View::len).unwrap_or(0) as u64;
                Counts {
                    prompt: self.prompt,
                    generated: self.seen(choice_index(choice, i)).saturating_add(own),
                }
            })
            .collect()
    }
}
