//! Verification for routers' own tests (feature `testing`).
//!
//! A router's response path picks the prefill's choice 0, copies fields
//! around, retries, maybe streams; its CI should show that the rows it
//! delivers are still the right ones. This module gives it the generators,
//! the truth and the checker this crate uses on itself:
//!
//! - [`cases`]: a proptest strategy of P/D response pairs as a real 1P1D
//!   deployment writes them (by handle with an in-memory file store, inline
//!   compact, inline npy), with [`Knobs`] for lengths, choices, dtypes,
//!   preemptions and hostile extras, each with its colocated truth;
//! - [`verify_stitched`]: checks a merged decode response against the case:
//!   every choice's rows, gathered back, equal the truth bitwise, the
//!   prefill's segments come first and unchanged, other payload items pass
//!   through, and segments come in position order (a trainer concatenates
//!   them in payload order); a row no engine produces (an expert twice in a
//!   layer, an id past the model's experts, a row of zeros: the rows
//!   check, [`crate::gather::check_rows`]) is named as such. A failure
//!   names the choice, the first wrong position, the segment it came from,
//!   and what was expected;
//! - [`fixture`]: committed response pairs (the seed example and error cases);
//! - [`sglang`]: the same for SGLang's rows (`meta_info`, `sglext`,
//!   `sgl_ext`), both decode conventions, prefix omission and batch arrays;
//!   [`verify_stitched`] judges those cases too.
//!
//! ```
//! use pd_stitch::testing::{cases, verify_stitched, Knobs};
//! use proptest::prelude::*;
//!
//! // The router's response path under test.
//! fn respond(prefill: &serde_json::Value, decode: serde_json::Value) -> serde_json::Value {
//!     let mut decode = decode;
//!     pd_stitch::merge_routed_experts_for_pd(prefill, &mut decode).expect("stitchable");
//!     decode
//! }
//!
//! proptest!(|(case in cases(Knobs::default()))| {
//!     let merged = respond(&case.prefill, case.decode.clone());
//!     verify_stitched(&case, &merged)?;
//! });
//! ```

pub mod stream;

use std::fmt;
use std::ops::RangeInclusive;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::algebra::Dtype;
use crate::format::by_handle::PAYLOAD;
use crate::gather::{
    check_gathered, gather_from, read_choice_field, Gathered, RowFinding, RowsCheck, RowsReport,
    Store,
};
use crate::reading::{FieldTable, Reading};
use crate::response::fields::{DEFAULT_FIELDS, ROUTED_EXPERTS};
use crate::sim::{Mode, Request};

pub mod sglang;

/// What [`cases`] generates.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// Prompt lengths `P`.
    pub prompt: RangeInclusive<u64>,
    /// Completion lengths `C` (tokens generated; the rows end at `P + C - 1`).
    pub completion: RangeInclusive<u64>,
    /// Decode choices.
    pub choices: RangeInclusive<usize>,
    /// Row dtypes to draw from (`Uint8`, and `Uint16` for expert ids > 255).
    pub dtypes: Vec<Dtype>,
    /// Forms to draw from.
    pub modes: Vec<Mode>,
    /// Most preemption splits of a decode choice's rows.
    pub preemptions: usize,
    /// Add hostile extras that a correct path must carry through untouched:
    /// malformed non-stitched payload items and unknown keys.
    pub hostile: bool,
    /// Rows each preemption re-emits (the later segment wins, the earlier
    /// copy is stale): drawn from this range.
    pub reemit: RangeInclusive<u64>,
    /// Omit a prompt prefix (rows starting after 0, as vLLM's
    /// `routed_experts_prompt_start` asks) in some cases.
    pub omit_prefix: bool,
}

impl Default for Knobs {
    /// Prompts of 1-64 tokens, completions of 1-48, 1-4 choices, uint8 and
    /// uint16, all three forms, up to 3 preemptions, hostile extras on.
    fn default() -> Knobs {
        Knobs {
            prompt: 1..=64,
            completion: 1..=48,
            choices: 1..=4,
            dtypes: vec![Dtype::Uint8, Dtype::Uint16],
            modes: Mode::ALL.to_vec(),
            preemptions: 3,
            hostile: true,
            reemit: 0..=0,
            omit_prefix: false,
        }
    }
}

/// One generated P/D request: what the prefill and the decode instance
/// answered, the files they wrote, and the truth.
#[derive(Clone, Debug)]
pub struct Case {
    /// The form the rows travel in.
    pub mode: Mode,
    /// The prefill instance's response.
    pub prefill: Value,
    /// The decode instance's response, before any merge.
    pub decode: Value,
    /// What a colocated server would have answered.
    pub colocated: Value,
    /// The files the segments point at (empty for inline forms).
    pub store: Store,
    request: Request,
}

impl Case {
    /// The true rows of `choice`, positions `[0, P + C - 1)` back to back.
    pub fn truth(&self, choice: usize) -> Vec<u8> {
        self.request.truth(choice)
    }

    /// The parameters the case was drawn with.
    pub fn request(&self) -> &Request {
        &self.request
    }
}

/// Cases drawn with `knobs`.
///
/// # Panics
///
/// When `knobs` has an empty range or list (a mistake in the test).
pub fn cases(knobs: Knobs) -> impl Strategy<Value = Case> {
    assert!(
        !knobs.dtypes.is_empty() && !knobs.modes.is_empty(),
        "knobs need a dtype and a mode"
    );
    let shape = prop_oneof![Just([4u64, 2]), Just([8, 4]), Just([48, 8])];
    (
        knobs.prompt.clone(),
        knobs.completion.clone(),
        knobs.choices.clone(),
        proptest::sample::select(knobs.dtypes.clone()),
        proptest::sample::select(knobs.modes.clone()),
        shape,
        any::<u64>(),
        Just(knobs),
    )
        .prop_flat_map(
            |(prompt, completion, choices, dtype, mode, shape, seed, knobs)| {
                let reemit = knobs.reemit.clone();
                let omit = if knobs.omit_prefix { 0..prompt } else { 0..1 };
                let interior = |len: u64, most: usize| {
                    let points: Vec<u64> = (1..len).collect();
                    let most = points.len().min(most);
                    proptest::sample::subsequence(points, 0..=most)
                };
                let prefill_splits = interior(prompt, 2);
                let preemptions =
                    proptest::collection::vec(interior(completion, knobs.preemptions), choices);
                (prefill_splits, preemptions, reemit, omit).prop_map(
                    move |(prefill_splits, preemptions, reemit, omit)| {
                        let request = Request {
                            index: 0,
                            prompt,
                            completion,
                            choices,
                            dtype,
                            shape,
                            experts: if dtype == Dtype::Uint8 { 256 } else { 512 },
                            prefill_splits,
                            preemptions,
                            reemit,
                            prompt_start: 0,
                            seed,
                        }
                        .omitting(omit);
                        case(request, mode, knobs.hostile)
                    },
                )
            },
        )
}

/// Writes `request` into a memory store and keeps the responses of `mode`.
fn case(request: Request, mode: Mode, hostile: bool) -> Case {
    let mut store = Store::memory();
    // Writing to memory cannot fail.
    let forms = request.write(&mut store).unwrap_or_default();
    let responses = forms.into_iter().find(|(m, _)| *m == mode).map(|(_, r)| r);
    let (prefill, mut decode, colocated) = match responses {
        Some(r) => (r.prefill, r.decode, r.colocated),
        None => (Value::Null, Value::Null, Value::Null),
    };
    if hostile {
        for (i, choice) in decode["choices"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .enumerate()
        {
            choice["x-router-trace"] = json!({"hop": i});
            if let Some(payload) = choice.get_mut(PAYLOAD).and_then(Value::as_array_mut) {
                let at = i % (payload.len() + 1);
                payload.insert(
                    at,
                    json!({"field": "logprobs_by_handle", "pos": -1, "rows": "?"}),
                );
                payload.push(json!(null));
            }
        }
    }
    Case {
        mode,
        prefill,
        decode,
        colocated,
        store,
        request,
    }
}

/// The first way a merged response is wrong, in words a router author can
/// act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The choice.
    pub choice: usize,
    /// The first wrong position, when the problem is a row.
    pub position: Option<u64>,
    /// The segment that position came from, e.g. `payload[2] (file
    /// req-0000/decode.bin, offset 4096, pos 17, rows 5)`.
    pub segment: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "choice {}", self.choice)?;
        if let Some(position) = self.position {
            write!(f, ", position {position}")?;
        }
        if let Some(segment) = &self.segment {
            write!(f, " (from {segment})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Mismatch {}

/// Checks `merged`, a router's stitched answer for `case`, against the case.
///
/// # Errors
///
/// The first [`Mismatch`]: a missing choice; prefill segments missing,
/// changed or not first; a non-stitched payload item lost or changed;
/// segments out of position order; rows that cannot be gathered (gap,
/// overlap, short file); or the first position whose row differs from the
/// truth, with the segment it came from and what was expected.
pub fn verify_stitched<C: Verify + ?Sized>(case: &C, merged: &Value) -> Result<(), Mismatch> {
    case.verify(merged)
}

/// A generated case [`verify_stitched`] can judge a merged response of: a
/// vLLM [`Case`], or an SGLang [`sglang::Case`].
pub trait Verify {
    /// The first way `merged` is wrong for this case.
    ///
    /// # Errors
    ///
    /// That [`Mismatch`].
    fn verify(&self, merged: &Value) -> Result<(), Mismatch>;
}

impl Verify for Case {
    fn verify(&self, merged: &Value) -> Result<(), Mismatch> {
        verify_case(self, merged)
    }
}

fn verify_case(case: &Case, merged: &Value) -> Result<(), Mismatch> {
    let mismatch = |choice, message: String| Mismatch {
        choice,
        position: None,
        segment: None,
        message,
    };
    let choices = merged["choices"]
        .as_array()
        .ok_or_else(|| mismatch(0, "merged choices is not an array".into()))?;
    let expected_choices = case.request.choices;
    if choices.len() != expected_choices {
        return Err(mismatch(
            0,
            format!("{} choices, expected {expected_choices}", choices.len()),
        ));
    }
    for (c, choice) in choices.iter().enumerate() {
        if case.mode == Mode::ByHandle {
            check_payload(case, c, choice)?;
        }
        let store = &case.store;
        let rows = gather_from(merged, c, ROUTED_EXPERTS, store)
            .map_err(|e| mismatch(c, format!("rows cannot be read back: {e}")))?;
        // Rows no engine produces, named as what they are before they are
        // held against the truth.
        let experts = RowsCheck::experts(Some(case.request.experts));
        if let Some(finding) = first_finding(c, &rows, experts) {
            return Err(Mismatch {
                choice: c,
                position: Some(finding.position),
                segment: Some(source_of(case, choice, finding.position)),
                message: wrong_row(&finding),
            });
        }
        let all = case.truth(c);
        let row = all.len() / usize::try_from(case.request.rows()).unwrap_or(1).max(1);
        // Where the rows start: the omitted prefix, except in the npy form,
        // which always starts at 0.
        let start = if case.mode == Mode::Npy {
            0
        } else {
            case.request.prompt_start
        };
        let truth = all.get(start as usize * row..).unwrap_or_default();
        if rows.positions().start() != start || rows.data().len() != truth.len() {
            return Err(mismatch(
                c,
                format!(
                    "rows cover positions {}, expected [{start}, {})",
                    rows.positions(),
                    case.request.rows()
                ),
            ));
        }
        let wrong = rows
            .data()
            .chunks(row.max(1))
            .zip(truth.chunks(row.max(1)))
            .position(|(a, b)| a != b);
        if let Some(x) = wrong {
            let x = x as u64 + start;
            let expected = if x < case.request.prompt {
                "the prefill's row (a prompt position)"
            } else {
                "the decode's row (a completion position)"
            };
            return Err(Mismatch {
                choice: c,
                position: Some(x),
                segment: Some(source_of(case, choice, x)),
                message: format!("row differs from the truth; expected {expected}"),
            });
        }
        // What the trainer reads, every field of its table, over the whole
        // sequence: the merged response as the colocated one.
        let seq = case.request.prompt + case.request.completion;
        for spec in FieldTable::trainer().fields() {
            let read = |response: &Value| {
                read_choice_field(response, c, &spec.name, 0, seq, store).map_err(|e| {
                    mismatch(c, format!("{}: the trainer cannot read it: {e}", spec.name))
                })
            };
            let (got, want) = (read(merged)?, read(&case.colocated)?);
            if got != want {
                let row = (0..seq).find(|&k| {
                    got.as_ref().and_then(|r| r.row(k)) != want.as_ref().and_then(|r| r.row(k))
                });
                return Err(Mismatch {
                    choice: c,
                    position: row,
                    segment: None,
                    message: format!(
                        "{}: the trainer reads {} where the colocated response reads {}",
                        spec.name,
                        describe(got.as_ref()),
                        describe(want.as_ref())
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The first row of `rows` no engine produces, if any (rows that cannot be
/// checked, of floats, say nothing here: the truth judges them).
fn first_finding(choice: usize, rows: &Gathered, check: RowsCheck) -> Option<RowFinding> {
    let mut report = RowsReport::new();
    check_gathered(choice, rows, RowsCheck { limit: 1, ..check }, &mut report).ok()?;
    report.findings.into_iter().next()
}

/// A [`Mismatch`] message for a row no engine produces.
pub(crate) fn wrong_row(finding: &RowFinding) -> String {
    let layer = finding
        .layer
        .map_or_else(String::new, |l| format!(" (layer {l})"));
    format!("a row no engine produces{layer}: {}", finding.what())
}

/// A reading in a few words.
fn describe(reading: Option<&Reading>) -> String {
    reading.map_or_else(
        || "nothing".to_owned(),
        |r| format!("{} {:?}", r.values().name(), r.shape()),
    )
}

/// By handle: the prefill's segments first and unchanged, the decode's other
/// items through, and segments in position order.
fn check_payload(case: &Case, c: usize, choice: &Value) -> Result<(), Mismatch> {
    let fail = |message: String| Mismatch {
        choice: c,
        position: None,
        segment: None,
        message,
    };
    let stitched = |item: &&Value| {
        item.get("field")
            .and_then(Value::as_str)
            .is_some_and(|f| DEFAULT_FIELDS.contains(&f))
    };
    let payload = choice[PAYLOAD]
        .as_array()
        .ok_or_else(|| fail("merged payload is not an array".into()))?;
    let prefix: Vec<&Value> = crate::format::by_handle::prefill_payload(&case.prefill)
        .filter(stitched)
        .collect();
    for (j, expected) in prefix.iter().enumerate() {
        if payload.get(j) != Some(*expected) {
            return Err(fail(format!(
                "payload[{j}] should be the prefill's segment {expected}, as it is"
            )));
        }
    }
    let others = |items: &[Value]| -> Vec<Value> {
        items.iter().filter(|i| !stitched(i)).cloned().collect()
    };
    let original = case.decode["choices"][c][PAYLOAD]
        .as_array()
        .map(|a| others(a))
        .unwrap_or_default();
    if others(payload) != original {
        return Err(fail(
            "a payload item that is not stitched was lost, added or changed".into(),
        ));
    }
    // A segment may start inside the one before (a re-emission: the later
    // rows win), never before it: the writer emits rows in position order,
    // so a step back is a router reordering them.
    for field in DEFAULT_FIELDS {
        let mut last_start = 0;
        for (j, segment) in payload
            .iter()
            .enumerate()
            .filter(|(_, s)| s["field"] == *field)
        {
            let (pos, rows) = (
                segment["pos"].as_u64().unwrap_or(0),
                segment["rows"].as_u64().unwrap_or(0),
            );
            if rows > 0 && pos < last_start {
                return Err(fail(format!(
                    "payload[{j}] (pos {pos}) comes after a segment starting at {last_start}: segments out of position order, so re-emitted rows would lose to stale ones"
                )));
            }
            if rows > 0 {
                last_start = pos;
            }
        }
    }
    Ok(())
}

/// Where the row of position `x` of a merged choice came from, in words.
fn source_of(case: &Case, choice: &Value, x: u64) -> String {
    if case.mode != Mode::ByHandle {
        return format!(
            "inline routed_experts ({})",
            if case.mode == Mode::Compact {
                "compact"
            } else {
                "npy"
            }
        );
    }
    let payload = choice[PAYLOAD]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    payload
        .iter()
        .enumerate()
        .find(|(_, s)| {
            s.get("field").and_then(Value::as_str) == Some(ROUTED_EXPERTS) && {
                let (pos, rows) = (
                    s["pos"].as_u64().unwrap_or(0),
                    s["rows"].as_u64().unwrap_or(0),
                );
                pos <= x && x < pos.saturating_add(rows)
            }
        })
        .map_or_else(
            || "no segment".to_owned(),
            |(j, s)| {
                format!(
                    "payload[{j}] (file {}, offset {}, pos {}, rows {})",
                    s["file"], s["offset"], s["pos"], s["rows"]
                )
            },
        )
}

/// A committed response pair: `prefill.json` and `decode.json` of a case
/// under `tests/fixtures/pairs/`, with the files their segments name.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// The case's name.
    pub name: &'static str,
    /// What it shows.
    pub about: &'static str,
    /// The prefill response.
    pub prefill: Value,
    /// The decode response.
    pub decode: Value,
    /// The files.
    pub store: Store,
}

macro_rules! fixtures {
    ($($name:literal: $about:literal, [$($file:literal),*];)*) => {
        /// The names of the committed fixtures.
        pub const FIXTURES: &[&str] = &[$($name),*];

        /// The committed fixture `name` (see [`FIXTURES`]), or `None`.
        pub fn fixture(name: &str) -> Option<Fixture> {
            match name {
                $($name => {
                    #[allow(unused_mut)] // fixtures without files
                    let mut store = Store::memory();
                    $(let _ = store.write($file, include_bytes!(concat!("../tests/fixtures/pairs/", $name, "/", $file)).to_vec());)*
                    Some(Fixture {
                        name: $name,
                        about: $about,
                        prefill: serde_json::from_str(include_str!(concat!("../tests/fixtures/pairs/", $name, "/prefill.json"))).ok()?,
                        decode: serde_json::from_str(include_str!(concat!("../tests/fixtures/pairs/", $name, "/decode.json"))).ok()?,
                        store,
                    })
                })*
                _ => None,
            }
        }
    };
}

fixtures! {
    "seed": "prefill rows [0, 3) and decode rows [2, 5) of uint16 (2, 4), two choices, one preempted", ["p.bin", "d.bin", "m.bin"];
    "inline": "the seed example as inline compact rows", [];
    "missing-prefill-rows": "decode rows by handle, prefill without any: MissingPrefillField", [];
    "bad-rows": "a decode segment with rows -1: Integer", [];
    "gap": "inline decode rows starting after the cut: Coverage", [];
}
