//! `probe`'s prompts: read from a JSONL file, or drawn from a seed.

use std::path::Path;

/// SplitMix64, the draws of generated prompts and of the tokens added
/// between turns (the crate's simulator uses the same generator).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).saturating_add(1).max(1)
    }

    /// `count` token ids below `vocab`.
    pub fn tokens(&mut self, count: u64, vocab: u64) -> Vec<u64> {
        (0..count).map(|_| self.next() % vocab.max(1)).collect()
    }
}

/// `A..B` (or `A..=B`, or one length `A`): the prompt lengths drawn from.
pub fn length_range(text: &str) -> Result<(u64, u64), String> {
    let number = |n: &str| {
        n.trim()
            .parse::<u64>()
            .map_err(|e| format!("{text:?}: {n:?} is not a length ({e})"))
    };
    let (lo, hi) = match text.split_once("..") {
        Some((lo, hi)) => (number(lo)?, number(hi.trim_start_matches('='))?),
        None => {
            let n = number(text)?;
            (n, n)
        }
    };
    if lo == 0 || hi < lo {
        return Err(format!("{text:?}: expected A..B with 1 <= A <= B"));
    }
    Ok((lo, hi))
}

/// `count` prompts of lengths in `lengths`, ids below `vocab`, from `seed`.
pub fn generated(count: usize, lengths: (u64, u64), vocab: u64, seed: u64) -> Vec<Vec<u64>> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|_| {
            let len = rng.range(lengths.0, lengths.1);
            rng.tokens(len, vocab)
        })
        .collect()
}

/// The prompts of a JSONL file: each line a JSON array of token ids, or an
/// object with one under `token_ids`, `input_ids` or `prompt_token_ids`;
/// blank lines skipped.
pub fn read_jsonl(path: &Path) -> Result<Vec<Vec<u64>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut prompts = Vec::new();
    for (k, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), k + 1);
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}: not JSON: {e}", at()))?;
        let ids = match &value {
            serde_json::Value::Object(object) => ["token_ids", "input_ids", "prompt_token_ids"]
                .iter()
                .find_map(|key| object.get(*key)),
            other => Some(other),
        };
        let prompt: Option<Vec<u64>> = ids
            .and_then(serde_json::Value::as_array)
            .and_then(|ids| ids.iter().map(serde_json::Value::as_u64).collect());
        match prompt {
            Some(prompt) if !prompt.is_empty() => prompts.push(prompt),
            _ => {
                return Err(format!(
                    "{}: expected a non-empty array of token ids, or an object with one under token_ids, input_ids or prompt_token_ids",
                    at()
                ))
            }
        }
    }
    if prompts.is_empty() {
        return Err(format!("{}: no prompt", path.display()));
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_ranges_or_one_length() {
        assert_eq!(length_range("16..128"), Ok((16, 128)));
        assert_eq!(length_range("16..=16"), Ok((16, 16)));
        assert_eq!(length_range("7"), Ok((7, 7)));
        assert!(length_range("0..4").is_err());
        assert!(length_range("9..4").is_err());
        assert!(length_range("a..4").is_err());
    }

    #[test]
    fn generated_prompts_are_in_range_and_fixed_by_the_seed() {
        let prompts = generated(50, (3, 9), 100, 7);
        assert_eq!(prompts.len(), 50);
        assert!(prompts.iter().all(|p| (3..=9).contains(&(p.len() as u64))));
        assert!(prompts.iter().flatten().all(|&id| id < 100));
        let lengths: std::collections::BTreeSet<usize> = prompts.iter().map(Vec::len).collect();
        assert_eq!(lengths.len(), 7, "every length drawn: {lengths:?}");
        assert_eq!(prompts, generated(50, (3, 9), 100, 7));
        assert_ne!(prompts, generated(50, (3, 9), 100, 8));
    }

    #[test]
    fn jsonl_prompts_are_arrays_or_objects() {
        let dir = std::env::temp_dir().join(format!("pd-stitch-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.jsonl");
        std::fs::write(
            &path,
            "[1, 2]\n\n{\"input_ids\": [3]}\n{\"token_ids\": [4, 5]}\n",
        )
        .unwrap();
        assert_eq!(
            read_jsonl(&path).unwrap(),
            vec![vec![1, 2], vec![3], vec![4, 5]]
        );
        std::fs::write(&path, "[1, 2]\n[\"a\"]\n").unwrap();
        assert!(read_jsonl(&path)
            .unwrap_err()
            .contains("p.jsonl line 2: expected"));
        std::fs::write(&path, "\n").unwrap();
        assert!(read_jsonl(&path).unwrap_err().ends_with("no prompt"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
