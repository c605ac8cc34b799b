//! The subcommands, a file each, and what they share: reading a response
//! file and the store that reads only inside the allowed directories.

pub mod check;
pub mod compare;
pub mod completions;
pub mod episode;
pub mod gather;
pub mod merge;
pub mod probe;
pub mod progress;
pub mod simulate;

use std::fs;
use std::path::{Path, PathBuf};

use pd_stitch::gather::Store;
use serde_json::Value;

/// The store that reads only inside `root` and the `allow` directories.
pub fn confined(root: &Path, allow: &[PathBuf]) -> Result<Store, String> {
    Store::confined(root, allow).map_err(|e| {
        // Name the directory that failed to resolve.
        let bad = std::iter::once(root)
            .chain(allow.iter().map(PathBuf::as_path))
            .find(|dir| dir.canonicalize().is_err())
            .unwrap_or(root);
        format!("{}: {e}", bad.display())
    })
}

pub fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}

pub fn read_bytes(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `LAYERSxTOP_K`, e.g. `48x8`: SGLang's row shape (`--row-shape`).
pub fn row_shape(text: &str) -> Result<(u64, u64), String> {
    let (layers, top_k) = text
        .split_once(['x', 'X', ','])
        .ok_or_else(|| format!("{text:?}: expected LAYERSxTOP_K, e.g. 48x8"))?;
    let number = |n: &str| {
        n.trim()
            .parse::<u64>()
            .map_err(|e| format!("{text:?}: {n:?} is not a count ({e})"))
    };
    Ok((number(layers)?, number(top_k)?))
}

/// A model's `config.json`, for what the commands read of it: the expert
/// count (`--config` of `check`, `compare` and `probe`) and the vocabulary
/// (`probe`'s generated prompts).
pub struct ModelConfig(Value);

impl ModelConfig {
    pub fn read(path: &Path) -> Result<ModelConfig, String> {
        read_json(path).map(ModelConfig)
    }

    /// The first of `keys` holding a count, at the top or in `text_config`
    /// (multimodal models nest the language model's there).
    fn count(&self, keys: &[&str]) -> Option<u64> {
        let scopes = [Some(&self.0), self.0.get("text_config")];
        scopes.into_iter().flatten().find_map(|scope| {
            keys.iter()
                .find_map(|key| scope.get(*key).and_then(Value::as_u64))
        })
    }

    /// The routed experts per layer: `num_experts` (Qwen-MoE),
    /// `n_routed_experts` (DeepSeek), `num_local_experts` (Mixtral).
    pub fn experts(&self) -> Option<u64> {
        self.count(&["num_experts", "n_routed_experts", "num_local_experts"])
    }

    /// `vocab_size`.
    pub fn vocab(&self) -> Option<u64> {
        self.count(&["vocab_size"])
    }
}

/// The model's expert count: `--experts`, else the `--config` file's, else
/// unknown; an error when the config names none.
pub fn experts(given: Option<u64>, config: Option<&Path>) -> Result<Option<u64>, String> {
    if given.is_some() {
        return Ok(given);
    }
    let Some(path) = config else {
        return Ok(None);
    };
    ModelConfig::read(path)?.experts().map(Some).ok_or_else(|| {
        format!(
            "{}: no num_experts, n_routed_experts or num_local_experts",
            path.display()
        )
    })
}

/// The rows check's findings of one response, as `problem:` lines, each
/// prefixed by `prefix` (`A: `, ...); nothing when there are none.
pub fn rows_problems(report: &pd_stitch::gather::RowsReport, prefix: &str) -> String {
    report
        .to_string()
        .lines()
        .map(|line| format!("problem: {prefix}rows: {line}\n"))
        .collect()
}
