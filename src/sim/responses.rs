//! What the three deployments answer for a request, in each form: the
//! responses, and the files their by-handle rows point into.

use std::io;

use serde_json::{json, Value};

use crate::format::by_handle::PAYLOAD;
use crate::format::inline;
use crate::gather::Store;
use crate::reading::{SAMPLING_MASK, SAMPLING_MASK_LOGPROBS};
use crate::response::fields::{ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS};

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

        // By handle: real files, segments anchored at the end as the writer
        // does: routed experts, float32 weights beside them, and the CSR
        // sampling masks and logprobs of the sampled tokens, [P, P + C).
        let colocated_file = format!("{name}/colocated.bin");
        let prefill_file = format!("{name}/prefill.bin");
        let decode_file = format!("{name}/decode.bin");
        let mask_file = format!("{name}/mask.bin");
        let s0 = self.prompt_start;
        let (p, end) = (self.prompt, self.rows());
        let dtype = self.dtype.name();
        let truth = |c: usize| move |x: u64, _stale: bool| self.truth_row(c, x);
        let weights = |c: usize| move |x: u64, _stale: bool| self.weight_row(c, x, false);
        // The decode's rows: wrong for the prompt's last position, stale
        // where a later segment re-emits them.
        let decoded = |c: usize| {
            move |x: u64, stale: bool| {
                if x < p || stale {
                    self.wrong_row(c, x)
                } else {
                    self.truth_row(c, x)
                }
            }
        };
        let decoded_weights =
            |c: usize| move |x: u64, stale: bool| self.weight_row(c, x, x < p || stale);
        let colocated_choices: Vec<Value> = (0..self.choices)
            .map(|c| {
                let at = [p - s0];
                let mut payload = files.fixed(
                    &colocated_file,
                    ROUTED_EXPERTS,
                    dtype,
                    self.shape,
                    &truth(c),
                    s0,
                    end - s0,
                    &at,
                    0,
                );
                payload.extend(files.fixed(
                    &colocated_file,
                    ROUTED_EXPERT_WEIGHTS,
                    "float32",
                    self.shape,
                    &weights(c),
                    s0,
                    end - s0,
                    &at,
                    0,
                ));
                payload.extend(files.masks(&mask_file, self, c, p, p + self.completion, &[]));
                json!({"index": c, PAYLOAD: payload})
            })
            .collect();
        let prefill_at: Vec<u64> = self
            .prefill_splits
            .iter()
            .filter_map(|&x| x.checked_sub(s0))
            .collect();
        let mut prefill_payload = files.fixed(
            &prefill_file,
            ROUTED_EXPERTS,
            dtype,
            self.shape,
            &truth(0),
            s0,
            p - s0,
            &prefill_at,
            0,
        );
        prefill_payload.extend(files.fixed(
            &prefill_file,
            ROUTED_EXPERT_WEIGHTS,
            "float32",
            self.shape,
            &weights(0),
            s0,
            p - s0,
            &prefill_at,
            0,
        ));
        // The prefill samples the first token too; its mask is not stitched.
        prefill_payload.extend(files.masks(&mask_file, self, 0, p, p + 1, &[]));
        let decode_choices: Vec<Value> = (0..self.choices)
            .map(|c| {
                let splits = &self.preemptions[c];
                let mut payload = files.fixed(
                    &decode_file,
                    ROUTED_EXPERTS,
                    dtype,
                    self.shape,
                    &decoded(c),
                    p - 1,
                    self.completion,
                    splits,
                    self.reemit,
                );
                // The sampling masks sit among the routed segments, as writers interleave them.
                let masks = files.masks(&mask_file, self, c, p, p + self.completion, splits);
                let at = (c + self.index) % (payload.len() + 1);
                payload.splice(at..at, masks);
                payload.extend(files.fixed(
                    &decode_file,
                    ROUTED_EXPERT_WEIGHTS,
                    "float32",
                    self.shape,
                    &decoded_weights(c),
                    p - 1,
                    self.completion,
                    splits,
                    self.reemit,
                ));
                json!({"index": c, PAYLOAD: payload})
            })
            .collect();
        files.flush(store)?;

        let compact = |rows: &[u8], start: u64, seq: u64| {
            json!({"data": inline::encode_base64(rows), "shape": [seq, self.shape[0], self.shape[1]],
                   "start": start, "dtype": self.dtype.name()})
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
        // Inline forms carry the routed experts inline and the other fields
        // by handle, in the same files as the by-handle form.
        let others = |choices: &[Value], c: usize| -> Value {
            let payload = choices
                .get(c)
                .and_then(|choice| choice[PAYLOAD].as_array())
                .map(|items| {
                    items
                        .iter()
                        .filter(|s| s["field"] != ROUTED_EXPERTS)
                        .cloned()
                        .collect::<Vec<Value>>()
                })
                .unwrap_or_default();
            Value::Array(payload)
        };
        let inline_response = |id: &str, values: Vec<Value>, by_handle: &[Value]| {
            let choices = values
                .into_iter()
                .enumerate()
                .map(|(c, v)| json!({"index": c, ROUTED_EXPERTS: v, PAYLOAD: others(by_handle, c)}))
                .collect();
            response(id, choices)
        };

        let prefill_choices = vec![json!({"index": 0, PAYLOAD: prefill_payload})];
        let compact_rows =
            |rows: &[u8], from: u64| rows[(from as usize) * self.row_bytes()..].to_vec();
        let compact_form = Responses {
            colocated: inline_response(
                "colocated",
                colocated_rows
                    .iter()
                    .map(|r| compact(&compact_rows(r, s0), s0, self.rows() - s0))
                    .collect(),
                &colocated_choices,
            ),
            prefill: inline_response(
                "prefill",
                vec![compact(
                    &compact_rows(&prompt_rows, s0),
                    s0,
                    self.prompt - s0,
                )],
                &prefill_choices,
            ),
            decode: inline_response(
                "decode",
                decode_rows
                    .iter()
                    .map(|r| compact(r, self.prompt - 1, self.completion))
                    .collect(),
                &decode_choices,
            ),
        };
        // `.npy` as vLLM 0.32 answers it (SPEC section 4a): each choice
        // with its `token_ids`, its rows ending at `P + N - 1` and starting
        // where it was asked: the colocated server and the prefill at `S0`,
        // the decode at `max(P, S0)`, which the router sends it.
        let npy_choices = |id: &str, from: u64, by_handle: &[Value]| -> io::Result<Value> {
            let mut response = inline_response(
                id,
                (0..if id == "prefill" { 1 } else { self.choices })
                    .map(|c| self.vllm_npy(c, from, id == "prefill"))
                    .collect::<io::Result<_>>()?,
                by_handle,
            );
            for (c, choice) in response["choices"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .enumerate()
            {
                choice["token_ids"] = json!(self.token_ids(c, id == "prefill"));
            }
            Ok(response)
        };
        let npy_form = Responses {
            colocated: npy_choices("colocated", s0, &colocated_choices)?,
            prefill: npy_choices("prefill", s0, &prefill_choices)?,
            decode: npy_choices("decode", p.max(s0), &decode_choices)?,
        };
        let by_handle = Responses {
            colocated: response("colocated", colocated_choices),
            prefill: response("prefill", prefill_choices),
            decode: response("decode", decode_choices),
        };
        Ok(vec![
            (Mode::ByHandle, by_handle),
            (Mode::Compact, compact_form),
            (Mode::Npy, npy_form),
        ])
    }
}

impl Request {
    /// The `.npy` rows vLLM 0.32 answers for `choice` asked from `from`
    /// (clamped to the prompt): the truth of `[from, P + N - 1)`, or of
    /// `[from, P)` for a prefill, which generates one token.
    ///
    /// # Errors
    ///
    /// A row shape the `.npy` header cannot hold.
    pub fn vllm_npy(&self, choice: usize, from: u64, prefill: bool) -> io::Result<Value> {
        let end = if prefill { self.prompt } else { self.rows() };
        let from = from.min(self.prompt);
        let rows: Vec<u8> = (from..end)
            .flat_map(|x| self.truth_row(choice, x))
            .collect();
        let file = inline::npy_file(
            self.dtype,
            &[end - from, self.shape[0], self.shape[1]],
            &rows,
        )
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(Value::String(inline::encode_base64(&file)))
    }

    /// The tokens `choice` generates (one for a prefill): ids below 512,
    /// the same first token for every choice, as greedy sampling gives.
    pub fn token_ids(&self, choice: usize, prefill: bool) -> Vec<u64> {
        let n = if prefill { 1 } else { self.completion };
        (0..n)
            .map(|t| {
                let who = if t == 0 { 0 } else { choice as u64 + 1 };
                (self.seed ^ (self.index as u64 * 31 + who * 97 + t * 13)) % 512
            })
            .collect()
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
    #[cfg(test)]
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
        let row = |x: u64, _: bool| {
            let k = (x - start) as usize;
            rows[k * row_bytes..(k + 1) * row_bytes].to_vec()
        };
        self.fixed(
            file,
            ROUTED_EXPERTS,
            req.dtype.name(),
            req.shape,
            &row,
            start,
            n,
            splits,
            0,
        )
    }

    /// Fixed-width segments of `field` for positions `[start, start + n)`,
    /// split at `splits` (offsets inside), each segment after a split
    /// re-emitting the `reemit` rows before it: `row(x, stale)` gives the row
    /// of position `x`, stale for an earlier copy that a later segment
    /// re-emits. Anchored at the end, as the writer anchors them.
    #[allow(clippy::too_many_arguments)]
    fn fixed(
        &mut self,
        file: &str,
        field: &str,
        dtype: &str,
        shape: [u64; 2],
        row: &dyn Fn(u64, bool) -> Vec<u8>,
        start: u64,
        n: u64,
        splits: &[u64],
        reemit: u64,
    ) -> Vec<Value> {
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
                json!({"field": field, "file": file, "offset": offset, "pos": start + to - (to - from),
                       "rows": to - from, "dtype": dtype, "shape": shape})
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
        start: u64,
        n: u64,
        splits: &[u64],
    ) -> Vec<Value> {
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

    /// The sampling mask and its logprobs of `choice` for the sampled
    /// positions `[from, to)`, split at `splits` (offsets inside).
    fn masks(
        &mut self,
        file: &str,
        req: &Request,
        choice: usize,
        from: u64,
        to: u64,
        splits: &[u64],
    ) -> Vec<Value> {
        let ids = |x: u64| {
            req.mask_row(choice, x)
                .0
                .iter()
                .map(|v| v.to_le_bytes())
                .collect()
        };
        let logprobs = |x: u64| {
            req.mask_row(choice, x)
                .1
                .iter()
                .map(|v| v.to_le_bytes())
                .collect()
        };
        let mut out = self.csr(file, SAMPLING_MASK, &ids, from, to - from, splits);
        out.extend(self.csr(
            file,
            SAMPLING_MASK_LOGPROBS,
            &logprobs,
            from,
            to - from,
            splits,
        ));
        out
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
