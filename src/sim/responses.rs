//! What the three deployments answer for a request, in each form: the
//! responses, and the files their by-handle rows point into.

use std::io;

use serde_json::{json, Value};

use crate::fields::ROUTED_EXPERTS;
use crate::gather::Store;
use crate::inline;

use super::config::Mode;
use super::request::Request;

impl Request {
    /// Writes the files of every deployment into `store` and returns the
    /// responses of each form.
    ///
    /// # Errors
    ///
    /// An I/O error writing to a directory store.
    pub fn write(&self, store: &mut Store) -> io::Result<Vec<(Mode, Responses)>> {
        let name = format!("req-{:04}", self.index);
        let mut files = Files::default();
        let colocated_rows: Vec<Vec<u8>> = (0..self.choices).map(|c| self.truth(c)).collect();
        let prompt_rows: Vec<u8> = (0..self.prompt)
            .flat_map(|x| self.truth_row(0, x))
            .collect();
        // What the decode instance holds for positions `from..`: its own
        // (wrong) rows for prompt positions, the truth after them.
        let decode_from = |from: u64| -> Vec<Vec<u8>> {
            (0..self.choices)
                .map(|c| {
                    (from..self.rows())
                        .flat_map(|x| {
                            if x < self.prompt {
                                self.wrong_row(c, x)
                            } else {
                                self.truth_row(c, x)
                            }
                        })
                        .collect()
                })
                .collect()
        };
        let decode_rows = decode_from(self.prompt - 1);
        let decode_npy_rows = decode_from(0);

        // By handle: real files, segments anchored at the end as the writer does.
        let colocated_file = format!("{name}/colocated.bin");
        let prefill_file = format!("{name}/prefill.bin");
        let decode_file = format!("{name}/decode.bin");
        let mask_file = format!("{name}/mask.bin");
        let colocated_choices: Vec<Value> = (0..self.choices)
            .map(|c| {
                let mut payload = files.segments(
                    &colocated_file,
                    &colocated_rows[c],
                    0,
                    self.rows(),
                    &[self.prompt],
                    self,
                );
                payload.push(files.mask(&mask_file, self.prompt - 1, self.completion, self));
                json!({"index": c, "payload": payload})
            })
            .collect();
        let mut prefill_payload = files.segments(
            &prefill_file,
            &prompt_rows,
            0,
            self.prompt,
            &self.prefill_splits,
            self,
        );
        prefill_payload.push(files.mask(&mask_file, self.prompt - 1, 1, self));
        let decode_choices: Vec<Value> = (0..self.choices)
            .map(|c| {
                let mut payload = files.segments(
                    &decode_file,
                    &decode_rows[c],
                    self.prompt - 1,
                    self.completion,
                    &self.preemptions[c],
                    self,
                );
                // The sampling mask sits among the routed segments, as writers interleave them.
                let mask = files.mask(&mask_file, self.prompt - 1, self.completion, self);
                let at = (c + self.index) % (payload.len() + 1);
                payload.insert(at, mask);
                json!({"index": c, "payload": payload})
            })
            .collect();
        files.flush(store)?;

        let compact = |rows: &[u8], start: u64, seq: u64| {
            json!({"data": inline::encode_base64(rows), "shape": [seq, self.shape[0], self.shape[1]],
                   "start": start, "dtype": self.dtype.name()})
        };
        let npy = |rows: &[u8], seq: u64| -> io::Result<Value> {
            let file = inline::npy_file(self.dtype, &[seq, self.shape[0], self.shape[1]], rows)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            Ok(Value::String(inline::encode_base64(&file)))
        };
        // `usage` as an OpenAI-style server reports it: the prompt, and the
        // tokens generated over all choices (the prefill instance generates one).
        let response = |id: &str, choices: Vec<Value>| {
            let completion = if id == "prefill" {
                1
            } else {
                self.completion * choices.len() as u64
            };
            json!({"id": format!("{name}-{id}"), "object": "text_completion", "choices": choices,
                   "usage": {"prompt_tokens": self.prompt, "completion_tokens": completion,
                             "total_tokens": self.prompt + completion}})
        };
        let inline_response = |id: &str, values: Vec<Value>| {
            let choices = values
                .into_iter()
                .enumerate()
                .map(|(c, v)| json!({"index": c, ROUTED_EXPERTS: v}))
                .collect();
            response(id, choices)
        };

        let by_handle = Responses {
            colocated: response("colocated", colocated_choices),
            prefill: response(
                "prefill",
                vec![json!({"index": 0, "payload": prefill_payload})],
            ),
            decode: response("decode", decode_choices),
        };
        let compact_form = Responses {
            colocated: inline_response(
                "colocated",
                colocated_rows
                    .iter()
                    .map(|r| compact(r, 0, self.rows()))
                    .collect(),
            ),
            prefill: inline_response("prefill", vec![compact(&prompt_rows, 0, self.prompt)]),
            decode: inline_response(
                "decode",
                decode_rows
                    .iter()
                    .map(|r| compact(r, self.prompt - 1, self.completion))
                    .collect(),
            ),
        };
        let npy_form = Responses {
            colocated: inline_response(
                "colocated",
                colocated_rows
                    .iter()
                    .map(|r| npy(r, self.rows()))
                    .collect::<io::Result<_>>()?,
            ),
            prefill: inline_response("prefill", vec![npy(&prompt_rows, self.prompt)?]),
            decode: inline_response(
                "decode",
                decode_npy_rows
                    .iter()
                    .map(|r| npy(r, self.rows()))
                    .collect::<io::Result<_>>()?,
            ),
        };
        Ok(vec![
            (Mode::ByHandle, by_handle),
            (Mode::Compact, compact_form),
            (Mode::Npy, npy_form),
        ])
    }
}

/// The responses of one form: colocated, and the 1P1D pair.
#[derive(Clone, Debug)]
pub struct Responses {
    /// What a colocated server answers.
    pub colocated: Value,
    /// What the prefill instance answers.
    pub prefill: Value,
    /// What the decode instance answers.
    pub decode: Value,
}

/// File contents being written, by name.
#[derive(Default)]
struct Files {
    contents: Vec<(String, Vec<u8>)>,
}

impl Files {
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

    /// Appends `rows` (of positions `[start, start + n)`) to `file`, split at
    /// `splits` (offsets inside them), and returns the segments, anchored at
    /// the end: each segment's `pos` is where the rows it holds end, minus its
    /// row count.
    fn segments(
        &mut self,
        file: &str,
        rows: &[u8],
        start: u64,
        n: u64,
        splits: &[u64],
        req: &Request,
    ) -> Vec<Value> {
        let row_bytes = req.row_bytes();
        let buffer = self.buffer(file);
        let mut bounds = vec![0];
        bounds.extend(splits.iter().copied().filter(|&s| s > 0 && s < n));
        bounds.push(n);
        bounds
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0], w[1]);
                let offset = buffer.len() as u64;
                buffer.extend_from_slice(&rows[from as usize * row_bytes..to as usize * row_bytes]);
                let end = start + to; // one past the last position this segment holds
                json!({"field": ROUTED_EXPERTS, "file": file, "offset": offset, "pos": end - (to - from),
                       "rows": to - from, "dtype": req.dtype.name(), "shape": req.shape})
            })
            .collect()
    }

    /// A `sampling_mask` segment of `rows` positions from `pos`.
    fn mask(&mut self, file: &str, pos: u64, rows: u64, req: &Request) -> Value {
        let buffer = self.buffer(file);
        let offset = buffer.len() as u64;
        buffer.extend((0..rows * 16).map(|i| (i as u8).wrapping_add(req.index as u8) & 1));
        json!({"field": "sampling_mask", "file": file, "offset": offset, "pos": pos, "rows": rows,
               "dtype": "bool", "shape": [16]})
    }

    fn flush(self, store: &mut Store) -> io::Result<()> {
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
        let r = Request::draw(42, 0);
        let rb = r.row_bytes() as u64;
        let rows: Vec<u8> = (0..5 * rb).map(|b| b as u8).collect();
        let spans = |splits: &[u64]| -> Vec<(u64, u64, u64)> {
            let mut files = Files::default();
            let segments = files.segments("f", &rows, 10, 5, splits, &r);
            assert_eq!(files.contents, [("f".to_owned(), rows.clone())]);
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
}
