//! The subcommands, a file each, and what they share: reading a response
//! file and the store that reads only inside the allowed directories.

pub mod check;
pub mod compare;
pub mod completions;
pub mod gather;
pub mod merge;
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
