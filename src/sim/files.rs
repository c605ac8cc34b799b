//! The files rows by handle point into, written as a writer writes them:
//! fixed-width rows in segments split where the engine split them, CSR
//! fields with their offsets, each segment anchored at the end of its rows.

use std::io;

use serde_json::{json, Value};

use crate::gather::Store;
use crate::reading::{SAMPLING_MASK, SAMPLING_MASK_LOGPROBS};

/// File contents being written, by name, and flushed into a store at once.
#[derive(Default)]
pub(super) struct FileSet {
    contents: Vec<(String, Vec<u8>)>,
}

/// What a run of fixed-width rows is: its field, dtype and row shape.
#[derive(Clone, Copy)]
pub(super) struct FieldRows<'a> {
    pub(super) field: &'a str,
    pub(super) dtype: &'a str,
    pub(super) shape: [u64; 2],
}

/// Where a run of rows lies: positions `[start, start + n)`, split at
/// `splits` (offsets inside), each segment after a split re-emitting the
/// `reemit` rows before it.
#[derive(Clone, Copy)]
pub(super) struct Span<'a> {
    pub(super) start: u64,
    pub(super) n: u64,
    pub(super) splits: &'a [u64],
    pub(super) reemit: u64,
}

impl FileSet {
    fn buffer(&mut self, name: &str) -> &mut Vec<u8> {
        let at = match self.contents.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.contents.push((name.to_owned(), Vec::new()));
                self.contents.len() - 1
            }
        };
        &mut self.contents[at].1
    }

    /// Fixed-width segments of `rows` over `span`: `row(x, stale)` gives the
    /// row of position `x`, stale for an earlier copy that a later segment
    /// re-emits. Anchored at the end, as the writer anchors them: each
    /// segment's `pos` is where the rows it holds end, minus its row count.
    pub(super) fn fixed(
        &mut self,
        file: &str,
        rows: FieldRows<'_>,
        row: &dyn Fn(u64, bool) -> Vec<u8>,
        span: Span<'_>,
    ) -> Vec<Value> {
        let Span {
            start,
            n,
            splits,
            reemit,
        } = span;
        let buffer = self.buffer(file);
        let mut bounds = vec![0];
        bounds.extend(splits.iter().copied().filter(|&s| s > 0 && s < n));
        bounds.push(n);
        // Each segment's first row: its split point, less the re-emitted rows
        // (never before the previous segment's own start).
        let firsts: Vec<u64> = (0..bounds.len() - 1)
            .map(|k| {
                if k == 0 {
                    0
                } else {
                    bounds[k].saturating_sub(reemit).max(bounds[k - 1])
                }
            })
            .collect();
        (0..bounds.len() - 1)
            .map(|k| {
                let (from, to) = (firsts[k], bounds[k + 1]);
                let stale_from = firsts.get(k + 1).copied().unwrap_or(to);
                let offset = buffer.len() as u64;
                for x in from..to {
                    buffer.extend(row(start + x, x >= stale_from));
                }
                json!({"field": rows.field, "file": file, "offset": offset,
                       "pos": start + to - (to - from), "rows": to - from,
                       "dtype": rows.dtype, "shape": rows.shape})
            })
            .collect()
    }

    /// CSR segments of `field` for positions `[start, start + n)` split at
    /// `splits`: for each, `rows + 1` uint32 file offsets, then the values
    /// (`values(x)`, 4 bytes each). Labelled `uint32`, shape `[]`, so that
    /// clipping moves the offset 4 bytes a row.
    fn csr(
        &mut self,
        file: &str,
        field: &str,
        values: &dyn Fn(u64) -> Vec<[u8; 4]>,
        span: Span<'_>,
    ) -> Vec<Value> {
        let Span {
            start, n, splits, ..
        } = span;
        let buffer = self.buffer(file);
        let mut bounds = vec![0];
        bounds.extend(splits.iter().copied().filter(|&s| s > 0 && s < n));
        bounds.push(n);
        bounds
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0], w[1]);
                let offset = buffer.len() as u64;
                let rows: Vec<Vec<[u8; 4]>> = (from..to).map(|x| values(start + x)).collect();
                let mut at = offset + 4 * (to - from + 1);
                buffer.extend((at as u32).to_le_bytes());
                for r in &rows {
                    at += 4 * r.len() as u64;
                    buffer.extend((at as u32).to_le_bytes());
                }
                for r in &rows {
                    buffer.extend(r.iter().flatten());
                }
                json!({"field": field, "file": file, "offset": offset, "pos": start + from,
                       "rows": to - from, "dtype": "uint32", "shape": []})
            })
            .collect()
    }

    /// The sampling mask and its logprobs (`mask(x)`: the kept ids and
    /// their logprobs of the token sampled at `x`) over `span`.
    pub(super) fn masks(
        &mut self,
        file: &str,
        mask: &dyn Fn(u64) -> (Vec<i32>, Vec<f32>),
        span: Span<'_>,
    ) -> Vec<Value> {
        let ids = |x: u64| mask(x).0.iter().map(|v| v.to_le_bytes()).collect();
        let logprobs = |x: u64| mask(x).1.iter().map(|v| v.to_le_bytes()).collect();
        let mut out = self.csr(file, SAMPLING_MASK, &ids, span);
        out.extend(self.csr(file, SAMPLING_MASK_LOGPROBS, &logprobs, span));
        out
    }

    /// Writes every file into `store`.
    pub(super) fn flush(self, store: &mut Store) -> io::Result<()> {
        for (name, bytes) in self.contents {
            store.write(&name, bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split points outside `(0, n)` are ignored: no empty segment at the
    /// start or the end, none past the rows.
    #[test]
    fn split_points_outside_the_rows_are_ignored() {
        let rb = 3u64;
        let data: Vec<u8> = (0..5 * rb).map(|b| b as u8).collect();
        let spans = |splits: &[u64]| -> Vec<(u64, u64, u64)> {
            let mut files = FileSet::default();
            let row = |x: u64, _: bool| {
                let k = (x - 10) as usize * rb as usize;
                data[k..k + rb as usize].to_vec()
            };
            let rows = FieldRows {
                field: "routed_experts",
                dtype: "uint8",
                shape: [1, 3],
            };
            let span = Span {
                start: 10,
                n: 5,
                splits,
                reemit: 0,
            };
            let segments = files.fixed("f", rows, &row, span);
            assert_eq!(files.contents, [("f".to_owned(), data.clone())]);
            segments
                .iter()
                .map(|s| {
                    let n = |k: &str| s[k].as_u64().unwrap();
                    (n("pos"), n("rows"), n("offset"))
                })
                .collect()
        };
        assert_eq!(spans(&[]), [(10, 5, 0)]);
        assert_eq!(spans(&[2]), [(10, 2, 0), (12, 3, 2 * rb)]);
        assert_eq!(spans(&[0, 2, 5, 7]), spans(&[2]));
    }

    /// A re-emitting split: the later segment starts `reemit` rows early,
    /// and the earlier copy of those rows is the stale one.
    #[test]
    fn a_reemitted_row_is_written_twice_the_first_copy_stale() {
        let mut files = FileSet::default();
        let row = |x: u64, stale: bool| vec![x as u8 + if stale { 100 } else { 0 }];
        let rows = FieldRows {
            field: "routed_experts",
            dtype: "uint8",
            shape: [1, 1],
        };
        let span = Span {
            start: 0,
            n: 4,
            splits: &[2],
            reemit: 1,
        };
        let segments = files.fixed("f", rows, &row, span);
        let got: Vec<(u64, u64)> = segments
            .iter()
            .map(|s| (s["pos"].as_u64().unwrap(), s["rows"].as_u64().unwrap()))
            .collect();
        assert_eq!(got, [(0, 2), (1, 3)]);
        assert_eq!(files.contents[0].1, [0, 101, 1, 2, 3]);
    }
}
