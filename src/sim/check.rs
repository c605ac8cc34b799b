//! What the runner checks of one request: the colocated answer holds the
//! truth; the merge under test stitches the pair; the stitched rows, read
//! back, are the truth bitwise (and, by handle, the trainer reads the
//! merged response as it reads the colocated one). vLLM's and Dynamo's
//! choices are read back with `gather`; SGLang's outputs are held to the
//! colocated answer whole, on both paths, with and without the row shape.

use std::fs;
use std::io;
use std::path::Path;

use serde_json::Value;

use crate::algebra::{Convention, Dtype, PositionProblem};
use crate::format::sglang::{read_rows, Api};
use crate::gather::{gather, read_choice_field, Store};
use crate::reading::FieldTable;
use crate::response::fields::ROUTED_EXPERTS;
use crate::{ErrorDetail, Stitch, Stitcher};

use super::config::{Config, MergeFn};
use super::engine::{Engine, Wire};
use super::model::{Model, VOCAB};
use super::request::Request;
use super::slot_pool::{SlotPool, POOL_SLOTS};
use super::splitmix::{mix, splitmix, SplitMix64};
use super::summary::{PromptRows, WithoutRowShape};

/// What one request came to.
pub(super) struct Checked {
    pub(super) index: usize,
    /// Its choices (SGLang: its outputs).
    pub(super) outputs: usize,
    pub(super) modes: Vec<ModeCheck>,
    pub(super) mismatches: Vec<String>,
    pub(super) without_row_shape: Option<WithoutRowShape>,
    pub(super) prompt_rows: Option<PromptRows>,
}

/// What one request came to in one mode.
pub(super) struct ModeCheck {
    pub(super) name: &'static str,
    /// The merge returned `Ok(true)`.
    pub(super) stitched: bool,
    /// Every choice read back bitwise equal to the truth.
    pub(super) equal: bool,
    /// Each choice's rows, where equal to the truth.
    pub(super) gathered: Vec<Option<Vec<u8>>>,
}

/// Simulates request `index` of a vLLM or Dynamo run: writes every wire
/// form of its engine, stitches each, and reads the rows back.
pub(super) fn check_choices(config: &Config, index: usize, merge: &MergeFn) -> io::Result<Checked> {
    let request = Request::draw(config.seed, index);
    let mut store = Store::Dir(config.dir.clone());
    let forms = match config.engine {
        Engine::Dynamo => vec![
            (Wire::DynamoToken, super::dynamo::token_api(&request)),
            (Wire::DynamoOpenAi, super::dynamo::openai_api(&request)),
        ],
        _ => super::vllm::forms(&request, &mut store)?.into(),
    };
    let mut mismatches = Vec::new();
    let mut modes = Vec::new();
    for (k, (wire, responses)) in forms.into_iter().enumerate() {
        let tag = format!("request {index} ({})", wire.name());
        let choices = if wire.answers_every_choice() {
            request.choices()
        } else {
            1
        };
        let truth: Vec<Vec<u8>> = (0..choices).map(|c| request.truth(c)).collect();
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
        let stitched = match merge(&Stitcher::new(), &responses.prefill, &mut merged) {
            Ok(stitched) => stitched,
            Err(err) => {
                mismatches.push(format!("{tag}: merge failed: {err}"));
                false
            }
        };
        let folder = config.dir.join(format!("req-{index:04}"));
        fs::create_dir_all(&folder)?;
        if k == 0 {
            // The colocated server's own answer (by handle, rows in
            // colocated.bin): the baseline `pd-stitch compare` checks
            // against.
            fs::write(
                folder.join("colocated.json"),
                json_bytes(&responses.colocated)?,
            )?;
        }
        let merged_name = format!("{}.merged.json", wire.file_stem());
        fs::write(folder.join(merged_name), json_bytes(&merged)?)?;
        let gathered: Vec<Option<Vec<u8>>> = truth
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
                        let (start, data) = (rows.positions().start(), rows.data());
                        let row = request.row_bytes();
                        let why = first_difference(row, start, data, expected);
                        mismatches.push(format!("{tag} choice {c}: {why}"));
                        None
                    }
                    Err(err) => {
                        mismatches.push(format!("{tag} choice {c}: {err}"));
                        None
                    }
                },
            )
            .collect();
        // The law (SPEC RD4): the trainer reads the merged response as it
        // reads the colocated one, every field of every choice, over the
        // whole sequence (Dynamo's `nvext` is the response's, no choice's).
        if wire.answers_every_choice() {
            mismatches.extend(trainer_mismatches(
                &request,
                &merged,
                &responses.colocated,
                &config.dir,
                &tag,
            ));
        }
        modes.push(ModeCheck {
            name: wire.name(),
            stitched,
            equal: gathered.iter().all(Option::is_some),
            gathered,
        });
    }
    Ok(Checked {
        index,
        outputs: request.choices(),
        modes,
        mismatches,
        without_row_shape: None,
        prompt_rows: None,
    })
}

fn json_bytes(value: &Value) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(io::Error::other)
}

/// Where the trainer's reading of `merged` differs from its reading of
/// `colocated`, for each choice and each field of its table, over
/// `[0, P + N)`; files read inside `dir`.
pub fn trainer_mismatches(
    request: &Request,
    merged: &Value,
    colocated: &Value,
    dir: &Path,
    tag: &str,
) -> Vec<String> {
    let store = match Store::confined(dir, &[]) {
        Ok(store) => store,
        Err(err) => return vec![format!("{tag}: {}: {err}", dir.display())],
    };
    trainer_mismatches_in(request, merged, colocated, &store, tag)
}

/// [`trainer_mismatches`] through any store.
pub fn trainer_mismatches_in(
    request: &Request,
    merged: &Value,
    colocated: &Value,
    store: &Store,
    tag: &str,
) -> Vec<String> {
    let seq = request.prompt_len() + request.completion_len();
    let mut out = Vec::new();
    for c in 0..request.choices() {
        for spec in FieldTable::trainer().fields() {
            let read = |r: &Value| read_choice_field(r, c, &spec.name, 0, seq, store);
            match (read(merged), read(colocated)) {
                (Ok(a), Ok(b)) if a == b => {}
                (Ok(a), Ok(b)) => {
                    let row = (0..seq).find(|&k| {
                        a.as_ref().and_then(|r| r.row(k)) != b.as_ref().and_then(|r| r.row(k))
                    });
                    out.push(format!(
                        "{tag} choice {c} {}: the trainer reads the merged response otherwise than the colocated one (first at position {row:?})",
                        spec.name
                    ));
                }
                (Err(err), _) | (_, Err(err)) => {
                    out.push(format!(
                        "{tag} choice {c} {}: the trainer cannot read it: {err}",
                        spec.name
                    ));
                }
            }
        }
    }
    out
}

/// Where gathered rows (of `row` bytes each) first differ from the truth.
fn first_difference(row: usize, start: u64, got: &[u8], expected: &[u8]) -> String {
    let row = row.max(1);
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

/// An SGLang run's decodes, one per row shape and convention (full-length,
/// suffix-only), each with its pool, kept across the run's requests.
#[derive(Default)]
pub(super) struct Pools {
    decodes: Vec<([u64; 2], [SlotPool; 2])>,
}

impl Pools {
    fn of(&mut self, shape: [u64; 2]) -> &mut [SlotPool; 2] {
        let at = match self.decodes.iter().position(|(s, _)| *s == shape) {
            Some(at) => at,
            None => {
                let fresh = || SlotPool::new(POOL_SLOTS);
                self.decodes.push((shape, [fresh(), fresh()]));
                self.decodes.len() - 1
            }
        };
        &mut self.decodes[at].1
    }
}

/// The SGLang request `index` of a run seeded with `seed`: an API, a row
/// shape of 4 x 2, 8 x 4, 16 x 8 or 48 x 8 ids among 256 experts, and
/// one output (a third of `/generate`'s a batch of 1 to 3): each a prompt
/// of 1-160 tokens, 1-96 generated, rows from 0 for half of them, else from
/// anywhere in the prompt (prefix omission). Returns the API, whether the
/// answers are batch arrays, and the outputs' requests.
pub fn sglang_draw(seed: u64, index: usize) -> (Api, bool, Vec<Request>) {
    let mut rng = SplitMix64::new(mix(seed ^ mix(index as u64 + 0x5c1a)));
    let api = Api::ALL[rng.below(3) as usize];
    let (layers, top_k) = [(4, 2), (8, 4), (16, 8), (48, 8)][rng.below(4) as usize];
    let batch = api == Api::Generate && rng.chance(3);
    let outputs = if batch { rng.range(1, 3) as usize } else { 1 };
    let model = Model {
        seed: splitmix(seed ^ 0x0de1_5eed),
        layers,
        top_k,
        experts: 256,
    };
    let requests = (0..outputs)
        .map(|_| {
            let prompt = rng.range(1, 160);
            let completion = rng.range(1, 96);
            let start = if rng.chance(2) {
                0
            } else {
                rng.range(0, prompt)
            };
            let tokens = (0..prompt).map(|_| rng.below(VOCAB)).collect();
            Request::new(index, model, Dtype::Int32, tokens, 1, completion).starting_at(start)
        })
        .collect();
    (api, batch, requests)
}

/// The conventions of an SGLang run's two decodes, and their names.
const CONVENTIONS: [(Convention, &str, &str); 2] = [
    (Convention::FullLength, "full-length", "full"),
    (Convention::SuffixOnly, "suffix-only", "suffix"),
];

/// Simulates SGLang request `index`: answered by a colocated server and by
/// a 1P1D pair with each decode convention (each decode's pool kept across
/// the run), stitched with the row shape on the `Value` path (the merge
/// under test) and on the bytes path (the library's), held to the colocated
/// answer bitwise; merged again without the row shape, where the rows
/// alone determine the pair (and must then be right too).
pub(super) fn check_outputs(
    config: &Config,
    index: usize,
    pools: &mut Pools,
    merge: &MergeFn,
) -> io::Result<Checked> {
    let (api, batch, requests) = sglang_draw(config.seed, index);
    let shape = requests.first().map_or([0, 0], Request::row_shape);
    let with_shape = Stitcher::new().row_shape(shape[0], shape[1]);
    let folder = config.dir.join(format!("req-{index:04}"));
    fs::create_dir_all(&folder)?;
    let mut checked = Checked {
        index,
        outputs: requests.len(),
        modes: Vec::new(),
        mismatches: Vec::new(),
        without_row_shape: Some(WithoutRowShape::default()),
        prompt_rows: Some(PromptRows::default()),
    };
    for (c, (convention, name, file)) in CONVENTIONS.into_iter().enumerate() {
        let requests: Vec<Request> = requests
            .iter()
            .map(|r| r.clone().with_convention(convention))
            .collect();
        let pool = &mut pools.of(shape)[c];
        let r = super::sglang::answer(api, &requests, batch, Some(pool));
        if let (Convention::FullLength, Some(rows)) = (convention, &mut checked.prompt_rows) {
            count_prompt_rows(&r.decode, &requests, rows);
        }
        let label = format!("req-{index:04} {file}");
        let mut merged = r.decode.clone();
        let stitched = merge(&with_shape, &r.prefill, &mut merged);
        let mut equal = false;
        match stitched {
            Ok(true) => {
                let (p, d) = (json_bytes(&r.prefill)?, json_bytes(&r.decode)?);
                let mut bytes = d.clone();
                let by_bytes = with_shape.merge_bytes(&p, &mut bytes, Stitch::ForPd);
                let parsed = serde_json::from_slice::<Value>(&bytes).ok();
                equal = merged == r.colocated
                    && by_bytes == Ok(true)
                    && parsed.as_ref() == Some(&r.colocated);
                if !equal {
                    checked.mismatches.push(format!(
                        "{label}: the merged rows differ from the colocated server's"
                    ));
                }
            }
            ref other => checked
                .mismatches
                .push(format!("{label}: not stitched: {other:?}")),
        }
        let mut bare = r.decode.clone();
        let without =
            merge(&Stitcher::new(), &r.prefill, &mut bare).map_err(crate::Error::into_detail);
        let counts = checked
            .without_row_shape
            .get_or_insert_with(Default::default);
        match without {
            Ok(true) if bare == r.colocated => counts.determined += 1,
            Ok(true) => checked.mismatches.push(format!(
                "{label}: merged without the row shape, but wrongly"
            )),
            Err(ErrorDetail::Positions {
                problem: PositionProblem::Ambiguous { .. },
                ..
            }) => counts.ambiguous += 1,
            other => checked
                .mismatches
                .push(format!("{label}: without the row shape: {other:?}")),
        }
        fs::write(folder.join("prefill.json"), json_bytes(&r.prefill)?)?;
        fs::write(
            folder.join(format!("decode-{file}.json")),
            json_bytes(&r.decode)?,
        )?;
        fs::write(
            folder.join(format!("merged-{file}.json")),
            json_bytes(&merged)?,
        )?;
        if c == 0 {
            fs::write(folder.join("colocated.json"), json_bytes(&r.colocated)?)?;
        }
        checked.modes.push(ModeCheck {
            name,
            stitched: matches!(stitched, Ok(true)),
            equal,
            gathered: Vec::new(),
        });
    }
    Ok(checked)
}

/// Adds what `decode`'s outputs hold for their prompt positions to `rows`,
/// reading them back as a trainer would (by the counts).
fn count_prompt_rows(decode: &Value, requests: &[Request], rows: &mut PromptRows) {
    for (i, request) in requests.iter().enumerate() {
        let [layers, top_k] = request.row_shape();
        let width = usize::try_from(layers * top_k).unwrap_or(1).max(1);
        let Ok(Some(read)) = read_rows(decode, i, layers, top_k) else {
            continue;
        };
        let prefixes = request.prefixes(0);
        let from = read.positions.start();
        for (k, row) in read.ids.chunks(width).enumerate() {
            let x = from + k as u64;
            if x >= request.prompt_len() {
                break;
            }
            let truth = request.true_ids(x, prefixes[x as usize]);
            if row.iter().all(|&id| id == 0) {
                rows.zeros += 1;
            } else if row.iter().map(|&id| id as u64).eq(truth) {
                rows.true_by_chance += 1;
            } else {
                rows.stale += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_says_how_rows_differ() {
        let r = Request::draw(1, 0);
        let truth = r.truth(0);
        let row = r.row_bytes();
        assert_eq!(
            first_difference(row, 2, &truth, &truth),
            "rows start at position 2, not 0"
        );
        let mut wrong = truth.clone();
        wrong[row * (r.rows() as usize - 1)] ^= 1;
        assert_eq!(
            first_difference(row, 0, &wrong, &truth),
            format!("position {}: rows differ from the truth", r.rows() - 1)
        );
        assert_eq!(
            first_difference(row, 0, &truth[..truth.len() - row], &truth),
            format!("{} rows gathered, {} expected", r.rows() - 1, r.rows())
        );
    }

    /// The draws cover their documented ranges and no more: prompts
    /// 1..=160, completions 1..=96, 1 to 3 outputs, batches of `/generate`
    /// only (and some of them), starts in `[0, P]`, half of them 0.
    #[test]
    fn sglang_draws_stay_in_their_ranges_and_reach_their_ends() {
        let draws: Vec<(Api, bool, Vec<Request>)> = (0..3000).map(|i| sglang_draw(9, i)).collect();
        let all = || draws.iter().flat_map(|(_, _, r)| r);
        let (prompts, completions): (Vec<u64>, Vec<u64>) =
            all().map(|r| (r.prompt_len(), r.completion_len())).unzip();
        assert_eq!(prompts.iter().min(), Some(&1));
        assert_eq!(prompts.iter().max(), Some(&160));
        assert_eq!(completions.iter().min(), Some(&1));
        assert_eq!(completions.iter().max(), Some(&96));
        let outputs: Vec<usize> = draws.iter().map(|(_, _, r)| r.len()).collect();
        assert_eq!(
            (outputs.iter().min(), outputs.iter().max()),
            (Some(&1), Some(&3))
        );
        assert!(draws
            .iter()
            .all(|(api, batch, _)| !batch || *api == Api::Generate));
        assert!(draws.iter().all(|(_, batch, r)| *batch || r.len() == 1));
        let generate = draws
            .iter()
            .filter(|(api, _, _)| *api == Api::Generate)
            .count();
        let batches = draws.iter().filter(|(_, batch, _)| *batch).count();
        // A third of the /generate requests are batches.
        assert!(
            batches * 4 > generate && batches * 2 < generate,
            "{batches} of {generate}"
        );
        assert!(all().all(|r| r.start <= r.prompt_len() && r.choices() == 1));
        let from_zero = all().filter(|r| r.start == 0).count();
        assert!(
            from_zero * 2 > all().count(),
            "{from_zero} of {} start at 0",
            all().count()
        );
        // Every seed draws distinct requests, an all-ones seed too (a seed
        // folded in with `|` would give it one request over and over).
        for seed in [0, u64::MAX] {
            let first = sglang_draw(seed, 0).2;
            assert!(
                (1..50).any(|i| sglang_draw(seed, i).2[0].prompt != first[0].prompt),
                "seed {seed}"
            );
        }
    }
}
