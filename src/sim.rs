//! A P/D deployment and a colocated server, simulated on the local disk.
//!
//! For each request the simulator draws a prompt length, a completion length,
//! 1-4 choices, a row shape and a dtype (`uint8`, or `uint16` when expert ids
//! exceed 255), then computes the true routed experts of every position. From
//! that one truth it writes what three deployments would answer:
//!
//! - a **colocated** server: every row of every choice, `[0, P + C - 1)`;
//! - the **prefill** instance of a 1P1D pair: the prompt's rows `[0, P)`, as
//!   a chunked prefill writes them (1-3 segments);
//! - the **decode** instance: each choice's rows from its first forward,
//!   `[P - 1, P + C - 1)`, split where preemptions happened, its row for the
//!   last prompt position deliberately wrong (a decode instance does not know
//!   the prompt's routing), and, in the npy form, wrong rows for the whole
//!   prompt.
//!
//! Each in three forms: by handle (real files, end-anchored segments, with
//! `sampling_mask` segments beside them), inline compact and inline npy. It
//! stitches every pair with a merge function (the library's, or a broken one
//! in tests), gathers the rows back with [`gather`](crate::gather::gather()),
//! and compares them bitwise with the truth and across forms.
//!
//! In each request's folder (`req-NNNN/`) it leaves the merged response of
//! each form (`by-handle.merged.json`, `compact.merged.json`,
//! `npy.merged.json`) and the colocated server's own response
//! (`colocated.json`, rows by handle in `colocated.bin`), so that
//! `pd-stitch compare` has a real baseline to check them against. File names
//! in payloads are relative to the run's directory. Every response carries
//! `usage.prompt_tokens`, as servers report it.

use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::algebra::Dtype;
use crate::error::Error;
use crate::fields::ROUTED_EXPERTS;
use crate::gather::{gather, Store};
use crate::inline;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// How many requests.
    pub requests: usize,
    /// The seed every request is drawn from.
    pub seed: u64,
    /// Where the files go; payloads name them relative to it.
    pub dir: PathBuf,
    /// How many requests run at once.
    pub concurrency: usize,
}

/// The three forms rows travel in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `payload` segments pointing into files.
    ByHandle,
    /// Inline compact `routed_experts`.
    Compact,
    /// Inline `.npy` `routed_experts`.
    Npy,
}

impl Mode {
    /// All three, in report order.
    pub const ALL: [Mode; 3] = [Mode::ByHandle, Mode::Compact, Mode::Npy];

    /// The name used in reports and file names.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ByHandle => "by-handle",
            Mode::Compact => "inline compact",
            Mode::Npy => "inline npy",
        }
    }

    fn file_stem(self) -> &'static str {
        match self {
            Mode::ByHandle => "by-handle",
            Mode::Compact => "compact",
            Mode::Npy => "npy",
        }
    }
}

/// A merge function: the library's `merge_routed_experts_for_pd`, or one a
/// test breaks on purpose.
pub type MergeFn = dyn Fn(&Value, &mut Value) -> Result<bool, Error> + Sync;

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
    pub(crate) seed: u64,
}

/// SplitMix64: small, fast, and good enough to draw test data from.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform-ish in `[lo, hi]`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Up to `most` distinct split points strictly inside `(0, len)`, sorted.
fn splits(rng: &mut Rng, len: u64, most: u64) -> Vec<u64> {
    if len < 2 {
        return Vec::new();
    }
    let mut points: Vec<u64> = (0..rng.range(0, most))
        .map(|_| rng.range(1, len - 1))
        .collect();
    points.sort_unstable();
    points.dedup();
    points
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
            seed,
        }
    }

    /// Positions with rows in the end: `[0, P + C - 1)`.
    pub fn rows(&self) -> u64 {
        self.prompt + self.completion - 1
    }

    fn row_bytes(&self) -> usize {
        (self.shape[0] * self.shape[1] * self.dtype.itemsize()) as usize
    }

    /// The true row of `position` for `choice`: the prompt's rows are the same
    /// for every choice, the completion's differ.
    fn truth_row(&self, choice: usize, position: u64) -> Vec<u8> {
        let who = if position < self.prompt {
            0
        } else {
            choice as u64 + 1
        };
        let mut rng = Rng(mix(self.seed ^ mix(who << 40 ^ position)));
        let n = self.shape[0] * self.shape[1];
        (0..n)
            .flat_map(|_| {
                let id = rng.next() % self.experts;
                id.to_le_bytes()
                    .into_iter()
                    .take(self.dtype.itemsize() as usize)
            })
            .collect()
    }

    /// What a decode instance computes for a prompt position: not the truth.
    fn wrong_row(&self, choice: usize, position: u64) -> Vec<u8> {
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

/// The outcome of a simulation.
#[derive(Debug, Default)]
pub struct Summary {
    /// Requests simulated.
    pub requests: usize,
    /// Choices over all requests.
    pub choices: usize,
    /// Per form: requests stitched (`Ok(true)`), equal to the colocated truth,
    /// and equal to the other forms.
    pub modes: Vec<ModeSummary>,
    /// What went wrong, one line each (empty when all is well).
    pub mismatches: Vec<String>,
}

/// The counts of one form.
#[derive(Debug, Clone, Copy)]
pub struct ModeSummary {
    /// The form.
    pub mode: Mode,
    /// Requests whose merge returned `Ok(true)`.
    pub stitched: usize,
    /// Requests whose every choice gathered bitwise equal to the truth.
    pub equal_to_colocated: usize,
    /// Requests whose every choice gathered bitwise equal in all three forms.
    pub equal_to_others: usize,
}

impl Summary {
    /// Whether every request came out right in every form.
    pub fn all_equal(&self) -> bool {
        self.mismatches.is_empty()
            && self.modes.iter().all(|m| {
                m.stitched == self.requests
                    && m.equal_to_colocated == self.requests
                    && m.equal_to_others == self.requests
            })
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} requests, {} choices", self.requests, self.choices)?;
        writeln!(
            f,
            "{:<16}{:>10}{:>22}{:>24}",
            "mode", "stitched", "equal to colocated", "equal to other modes"
        )?;
        for m in &self.modes {
            writeln!(
                f,
                "{:<16}{:>10}{:>22}{:>24}",
                m.mode.name(),
                format!("{}/{}", m.stitched, self.requests),
                format!("{}/{}", m.equal_to_colocated, self.requests),
                format!("{}/{}", m.equal_to_others, self.requests),
            )?;
        }
        if self.all_equal() {
            write!(
                f,
                "all {} requests bitwise equal to the colocated truth in every mode",
                self.requests
            )
        } else {
            write!(f, "MISMATCH in {} place(s)", self.mismatches.len().max(1))
        }
    }
}

/// What one request came to.
struct RequestResult {
    index: usize,
    choices: usize,
    outcomes: Vec<(Mode, Outcome)>,
    mismatches: Vec<String>,
}

/// What one request came to in one form.
struct Outcome {
    stitched: bool,
    gathered: Vec<Option<Vec<u8>>>,
}

/// Runs the simulation with `merge` as the router's merge, calling
/// `progress(done, total)` after each request.
///
/// # Errors
///
/// An I/O error writing the files; every merge or gather failure is counted
/// as a mismatch instead.
pub fn run(
    config: &Config,
    merge: &MergeFn,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> io::Result<Summary> {
    fs::create_dir_all(&config.dir)?;
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<RequestResult>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<io::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..config.concurrency.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= config.requests {
                    break;
                }
                match one(config, index, merge) {
                    Ok(result) => {
                        if let Ok(mut r) = results.lock() {
                            r.push(result);
                        }
                    }
                    Err(err) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(err);
                        }
                        break;
                    }
                }
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, config.requests);
            });
        }
    });
    if let Some(err) = failure.into_inner().ok().flatten() {
        return Err(err);
    }
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|r| r.index);
    let mut summary = Summary {
        requests: results.len(),
        modes: Mode::ALL
            .iter()
            .map(|&mode| ModeSummary {
                mode,
                stitched: 0,
                equal_to_colocated: 0,
                equal_to_others: 0,
            })
            .collect(),
        ..Summary::default()
    };
    for RequestResult {
        choices,
        outcomes,
        mismatches,
        ..
    } in results
    {
        summary.choices += choices;
        summary.mismatches.extend(mismatches);
        let all: Vec<&Vec<Option<Vec<u8>>>> = outcomes.iter().map(|(_, o)| &o.gathered).collect();
        for ((mode, outcome), counts) in outcomes.iter().zip(&mut summary.modes) {
            debug_assert_eq!(*mode, counts.mode);
            counts.stitched += usize::from(outcome.stitched);
            // `gathered` holds `Some` only for a choice equal to the truth.
            let all_true = outcome.gathered.iter().all(Option::is_some);
            counts.equal_to_colocated += usize::from(outcome.stitched && all_true);
            let same = all_true && all.iter().all(|other| *other == &outcome.gathered);
            counts.equal_to_others += usize::from(same);
        }
    }
    Ok(summary)
}

/// Simulates request `index`: writes, stitches, gathers and compares.
fn one(config: &Config, index: usize, merge: &MergeFn) -> io::Result<RequestResult> {
    let request = Request::draw(config.seed, index);
    let forms = request.write(&mut Store::Dir(config.dir.clone()))?;
    let truth: Vec<Vec<u8>> = (0..request.choices).map(|c| request.truth(c)).collect();
    let mut mismatches = Vec::new();
    let mut outcomes = Vec::new();
    for (mode, responses) in forms {
        let tag = format!("request {index} ({})", mode.name());
        // The simulator's own check: the colocated server holds the truth.
        for (c, expected) in truth.iter().enumerate() {
            match gather(&responses.colocated, c, ROUTED_EXPERTS, &config.dir) {
                Ok(rows) if rows.data() == expected.as_slice() => {}
                Ok(_) => mismatches.push(format!(
                    "{tag} choice {c}: the colocated response does not hold the truth"
                )),
                Err(err) => mismatches.push(format!("{tag} choice {c}: colocated: {err}")),
            }
        }
        let mut merged = responses.decode.clone();
        let stitched = match merge(&responses.prefill, &mut merged) {
            Ok(stitched) => stitched,
            Err(err) => {
                mismatches.push(format!("{tag}: merge failed: {err}"));
                false
            }
        };
        if mode == Mode::ByHandle {
            // The colocated server's own answer, rows by handle in
            // colocated.bin: the baseline `pd-stitch compare` checks against.
            fs::write(
                config.dir.join(format!("req-{index:04}/colocated.json")),
                serde_json::to_vec(&responses.colocated).map_err(io::Error::other)?,
            )?;
        }
        let merged_name = format!("req-{index:04}/{}.merged.json", mode.file_stem());
        fs::write(
            config.dir.join(merged_name),
            serde_json::to_vec(&merged).map_err(io::Error::other)?,
        )?;
        let gathered = truth
            .iter()
            .enumerate()
            .map(
                |(c, expected)| match gather(&merged, c, ROUTED_EXPERTS, &config.dir) {
                    Ok(rows)
                        if rows.data() == expected.as_slice() && rows.positions().start() == 0 =>
                    {
                        Some(rows.data().to_vec())
                    }
                    Ok(rows) => {
                        mismatches.push(format!(
                            "{tag} choice {c}: {}",
                            first_difference(
                                &request,
                                rows.positions().start(),
                                rows.data(),
                                expected
                            )
                        ));
                        None
                    }
                    Err(err) => {
                        mismatches.push(format!("{tag} choice {c}: {err}"));
                        None
                    }
                },
            )
            .collect();
        outcomes.push((mode, Outcome { stitched, gathered }));
    }
    Ok(RequestResult {
        index,
        choices: request.choices,
        outcomes,
        mismatches,
    })
}

/// Where gathered rows first differ from the truth.
fn first_difference(request: &Request, start: u64, got: &[u8], expected: &[u8]) -> String {
    let row = request.row_bytes().max(1);
    if start != 0 {
        return format!("rows start at position {start}, not 0");
    }
    let first = got
        .chunks(row)
        .zip(expected.chunks(row))
        .position(|(a, b)| a != b);
    match first {
        Some(x) => format!("position {x}: rows differ from the truth"),
        None => format!(
            "{} rows gathered, {} expected",
            got.len() / row,
            expected.len() / row
        ),
    }
}

/// The simulator's own parts, against references that are not this code:
/// SplitMix64's published outputs, the bounds its draws promise, and reports
/// written out by hand.
#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64 (Steele, Lea and Flood; Vigna's `splitmix64.c`): the first
    /// outputs from state 0, and from state 1234567 as in the reference's
    /// test vectors.
    #[test]
    fn rng_is_splitmix64() {
        let mut rng = Rng(0);
        let got: Vec<u64> = (0..3).map(|_| rng.next()).collect();
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        let mut rng = Rng(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821
            ]
        );
    }

    #[test]
    fn range_stays_within_its_bounds_and_reaches_both() {
        let mut rng = Rng(7);
        for (lo, hi) in [(1, 1), (0, 1), (1, 4), (1, 160), (5, 6)] {
            let draws: Vec<u64> = (0..2000).map(|_| rng.range(lo, hi)).collect();
            assert!(draws.iter().all(|x| (lo..=hi).contains(x)), "{lo}..={hi}");
            assert_eq!(draws.iter().min(), Some(&lo), "{lo}..={hi}");
            assert_eq!(draws.iter().max(), Some(&hi), "{lo}..={hi}");
        }
    }

    #[test]
    fn splits_are_distinct_sorted_points_inside() {
        let mut rng = Rng(11);
        for len in [0, 1] {
            assert!(splits(&mut rng, len, 3).is_empty());
        }
        for (len, most) in [(2, 2), (3, 3), (40, 3), (160, 2)] {
            let mut counts = vec![0; most as usize + 1];
            for _ in 0..500 {
                let points = splits(&mut rng, len, most);
                assert!(points.len() as u64 <= most, "{points:?}");
                assert!(points.windows(2).all(|w| w[0] < w[1]), "{points:?}");
                assert!(points.iter().all(|&p| 0 < p && p < len), "{points:?}");
                counts[points.len()] += 1;
            }
            // Every count up to `most` the interior allows occurs.
            let possible = most.min(len - 1) as usize;
            assert!(
                counts[..=possible].iter().all(|&n| n > 0),
                "{len}: {counts:?}"
            );
        }
    }

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
    fn truth_rows_are_shared_by_the_prompt_and_wrong_rows_differ_everywhere() {
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

    #[test]
    fn the_report_reads_as_written() {
        let counts = |mode, n| ModeSummary {
            mode,
            stitched: n,
            equal_to_colocated: n,
            equal_to_others: n,
        };
        let mut summary = Summary {
            requests: 3,
            choices: 7,
            modes: Mode::ALL.iter().map(|&m| counts(m, 3)).collect(),
            mismatches: Vec::new(),
        };
        assert!(summary.all_equal());
        let header = "3 requests, 7 choices\n\
             mode              stitched    equal to colocated    equal to other modes\n\
             by-handle              3/3                   3/3                     3/3\n\
             inline compact         3/3                   3/3                     3/3\n\
             inline npy             3/3                   3/3                     3/3\n";
        assert_eq!(
            summary.to_string(),
            format!("{header}all 3 requests bitwise equal to the colocated truth in every mode")
        );
        for field in 0..4 {
            let mut broken = Summary {
                modes: summary.modes.clone(),
                mismatches: Vec::new(),
                ..summary
            };
            match field {
                0 => broken.modes[1].stitched = 2,
                1 => broken.modes[2].equal_to_colocated = 2,
                2 => broken.modes[0].equal_to_others = 2,
                _ => broken.mismatches = vec!["a".into(), "b".into()],
            }
            assert!(!broken.all_equal(), "{field}");
            let end = if field == 3 {
                "2 place(s)"
            } else {
                "1 place(s)"
            };
            assert!(broken.to_string().ends_with(&format!("MISMATCH in {end}")));
        }
        summary.mismatches.push("x".into());
        assert!(!summary.all_equal());
        assert_eq!(Mode::Compact.file_stem(), "compact");
        assert_eq!(
            Mode::ALL.map(Mode::file_stem),
            ["by-handle", "compact", "npy"]
        );
        assert_eq!(
            Mode::ALL.map(Mode::name),
            ["by-handle", "inline compact", "inline npy"]
        );
    }

    #[test]
    fn first_difference_says_how_rows_differ() {
        let r = Request::draw(1, 0);
        let truth = r.truth(0);
        let row = r.row_bytes();
        assert_eq!(
            first_difference(&r, 2, &truth, &truth),
            "rows start at position 2, not 0"
        );
        let mut wrong = truth.clone();
        wrong[row * (r.rows() as usize - 1)] ^= 1;
        assert_eq!(
            first_difference(&r, 0, &wrong, &truth),
            format!("position {}: rows differ from the truth", r.rows() - 1)
        );
        assert_eq!(
            first_difference(&r, 0, &truth[..truth.len() - row], &truth),
            format!("{} rows gathered, {} expected", r.rows() - 1, r.rows())
        );
    }
}
