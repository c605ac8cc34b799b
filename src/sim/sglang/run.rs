//! `pd-stitch simulate --engine sglang`: SGLang deployments over one truth
//! ([`model`](super::model)), every request answered by a colocated server
//! and by a 1P1D pair in both decode conventions, stitched on the bytes
//! path and the `Value` path with the row shape, and checked bitwise
//! against the colocated answer; the same pairs without the row shape are
//! merged where determined (and must then be right too) and counted where
//! refused as ambiguous.
//!
//! Each row shape is a deployment of its own model, and each convention a
//! decode of its own: the decode keeps a [`SlotPool`] of [`POOL_SLOTS`]
//! slots across the run's requests, so a full-length decode answers its
//! prompt rows as SGLang's does, zeros until its pool wraps and stale rows
//! of earlier requests after (SPEC F10); the run counts them.

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

use serde_json::Value;

use super::model::{mix, responses_from, Api, Draw, Shape, SlotPool};
use crate::algebra::{Convention, PositionProblem};
use crate::{Error, ErrorDetail, Stitch, Stitcher};

/// One simulated SGLang request: an API, a row shape, and one draw per
/// output (a `/generate` batch has up to 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its index in the run.
    pub index: usize,
    /// The API.
    pub api: Api,
    /// The rows' shape.
    pub shape: Shape,
    /// Whether the `/generate` responses are batch arrays.
    pub batch: bool,
    /// One per output; the decode's convention is set per pair.
    pub draws: Vec<Draw>,
}

impl Request {
    /// The request `index` of a run seeded with `seed`.
    pub fn draw(seed: u64, index: usize) -> Request {
        let mut state = mix(seed ^ mix(index as u64 + 0x5c1a));
        let mut next = move |lo: u64, hi: u64| {
            state = mix(state);
            lo + state % (hi - lo + 1)
        };
        let api = Api::ALL[next(0, 2) as usize];
        let (layers, top_k) = [(4, 2), (8, 4), (16, 8), (48, 8)][next(0, 3) as usize];
        let batch = api == Api::Generate && next(0, 2) == 0;
        let outputs = if batch { next(1, 3) as usize } else { 1 };
        let draws = (0..outputs)
            .map(|_| {
                let prompt = next(1, 160);
                let completion = next(1, 96);
                // Half from 0, the rest anywhere in the prompt (prefix omission).
                let start = if next(0, 1) == 0 { 0 } else { next(0, prompt) };
                Draw {
                    prompt,
                    completion,
                    start,
                    convention: Convention::FullLength,
                    seed: next(0, u64::MAX - 1),
                }
            })
            .collect();
        Request {
            index,
            api,
            shape: Shape {
                layers,
                top_k,
                experts: 256,
            },
            batch,
            draws,
        }
    }

    fn with(&self, convention: Convention) -> Vec<Draw> {
        self.draws
            .iter()
            .map(|d| Draw { convention, ..*d })
            .collect()
    }
}

/// What a run found, per convention.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Requests simulated.
    pub requests: usize,
    /// Outputs (a batch counts each).
    pub outputs: usize,
    /// Per convention (full-length, suffix-only): pairs stitched with the
    /// row shape, and of those equal to the colocated answer on both paths.
    pub stitched: [usize; 2],
    /// Of the stitched pairs, those equal to the colocated answer bitwise.
    pub equal: [usize; 2],
    /// Without the row shape: pairs merged (all must be equal too), pairs
    /// refused as ambiguous.
    pub determined: usize,
    /// Pairs refused without the row shape as ambiguous.
    pub ambiguous: usize,
    /// The full-length decodes' prompt rows, which they never computed.
    pub prompt_rows: PromptRows,
    /// What went wrong, one line each.
    pub mismatches: Vec<String>,
}

/// What the full-length decodes answered for prompt positions (rows the
/// merge replaces with the prefill's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptRows {
    /// All zeros: slots no request had written.
    pub zeros: usize,
    /// Rows other than the truth: stale rows of earlier requests.
    pub stale: usize,
    /// Rows equal to the position's truth, by chance.
    pub true_by_chance: usize,
}

/// The slots of each simulated decode's pool: a few requests' worth (the
/// draws average about 128 positions), so that each shape's decodes wrap
/// within a short run.
pub const POOL_SLOTS: usize = 1024;

impl Summary {
    /// Whether every pair was stitched right.
    pub fn all_equal(&self) -> bool {
        self.mismatches.is_empty() && self.equal == [self.requests; 2]
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} SGLang requests, {} outputs",
            self.requests, self.outputs
        )?;
        writeln!(
            f,
            "{:<14}{:>12}{:>22}",
            "convention", "stitched", "equal to colocated"
        )?;
        for (i, name) in ["full-length", "suffix-only"].into_iter().enumerate() {
            let (n, s, e) = (self.requests, self.stitched[i], self.equal[i]);
            writeln!(
                f,
                "{name:<14}{:>12}{:>22}",
                format!("{s}/{n}"),
                format!("{e}/{n}")
            )?;
        }
        writeln!(
            f,
            "without row_shape: {} of {} pairs determined (equal to colocated), {} ambiguous (refused)",
            self.determined,
            2 * self.requests,
            self.ambiguous
        )?;
        let rows = self.prompt_rows;
        writeln!(
            f,
            "full-length decodes' prompt rows ({POOL_SLOTS}-slot pools): {} zeros, {} stale rows of earlier requests, {} true by chance",
            rows.zeros, rows.stale, rows.true_by_chance
        )?;
        if self.all_equal() {
            write!(
                f,
                "all {} requests bitwise equal to the colocated truth in both conventions",
                self.requests
            )
        } else {
            write!(f, "MISMATCHES: {}", self.mismatches.len())
        }
    }
}

/// A bytes merge with a stitcher: the library's, or one a test breaks.
pub type MergeBytes = dyn Fn(&Stitcher, &[u8], &mut Vec<u8>) -> Result<bool, Error>;

/// Runs `requests` requests seeded with `seed`, stitching with `merge`
/// (the library's, or one a test breaks); with `dir`, each request's
/// responses are kept in `dir/req-NNNN/`.
///
/// # Errors
///
/// An I/O error writing into `dir`.
pub fn run(
    requests: usize,
    seed: u64,
    dir: Option<&Path>,
    merge: &MergeBytes,
) -> io::Result<Summary> {
    let mut summary = Summary {
        requests,
        ..Summary::default()
    };
    // One decode per row shape and convention, each with its pool.
    let mut pools: Vec<(Shape, [SlotPool; 2])> = Vec::new();
    for index in 0..requests {
        let request = Request::draw(seed, index);
        summary.outputs += request.draws.len();
        let with_shape = Stitcher::new().row_shape(request.shape.layers, request.shape.top_k);
        let folder = dir.map(|d| d.join(format!("req-{index:04}")));
        if let Some(folder) = &folder {
            fs::create_dir_all(folder)?;
        }
        for (c, convention) in [Convention::FullLength, Convention::SuffixOnly]
            .into_iter()
            .enumerate()
        {
            let shape = request.shape;
            let at = match pools.iter().position(|(s, _)| *s == shape) {
                Some(at) => at,
                None => {
                    let fresh = || SlotPool::new(shape, POOL_SLOTS);
                    pools.push((shape, [fresh(), fresh()]));
                    pools.len() - 1
                }
            };
            let draws = request.with(convention);
            let r = responses_from(&mut pools[at].1[c], request.api, &draws, request.batch);
            if convention == Convention::FullLength {
                count_prompt_rows(&r.decode, &draws, shape, &mut summary.prompt_rows);
            }
            let name = ["full", "suffix"][c];
            let p = serde_json::to_vec(&r.prefill).unwrap_or_default();
            let d = serde_json::to_vec(&r.decode).unwrap_or_default();
            let label = format!("req-{index:04} {name}");
            let mut out = d.clone();
            match merge(&with_shape, &p, &mut out) {
                Ok(true) => {
                    summary.stitched[c] += 1;
                    let mut value = r.decode.clone();
                    let by_value = with_shape.merge(&r.prefill, &mut value, Stitch::ForPd);
                    let parsed = serde_json::from_slice::<Value>(&out).ok();
                    if parsed.as_ref() == Some(&r.colocated)
                        && by_value == Ok(true)
                        && value == r.colocated
                    {
                        summary.equal[c] += 1;
                    } else {
                        summary.mismatches.push(format!(
                            "{label}: the merged rows differ from the colocated server's"
                        ));
                    }
                }
                other => summary
                    .mismatches
                    .push(format!("{label}: not stitched: {other:?}")),
            }
            let mut bare = d.clone();
            match merge(&Stitcher::new(), &p, &mut bare).map_err(Error::into_detail) {
                Ok(true) => {
                    if serde_json::from_slice::<Value>(&bare).ok().as_ref() == Some(&r.colocated) {
                        summary.determined += 1;
                    } else {
                        summary.mismatches.push(format!(
                            "{label}: merged without the row shape, but wrongly"
                        ));
                    }
                }
                Err(ErrorDetail::Positions {
                    problem: PositionProblem::Ambiguous { .. },
                    ..
                }) => summary.ambiguous += 1,
                other => summary
                    .mismatches
                    .push(format!("{label}: without the row shape: {other:?}")),
            }
            if let Some(folder) = &folder {
                fs::write(folder.join("prefill.json"), &p)?;
                fs::write(folder.join(format!("decode-{name}.json")), &d)?;
                fs::write(folder.join(format!("merged-{name}.json")), &out)?;
                if c == 0 {
                    let colocated = serde_json::to_vec(&r.colocated).unwrap_or_default();
                    fs::write(folder.join("colocated.json"), colocated)?;
                }
            }
        }
    }
    Ok(summary)
}

/// Adds what `decode`'s outputs hold for their prompt positions to `rows`,
/// reading them back as a trainer would (by the counts).
fn count_prompt_rows(decode: &Value, draws: &[Draw], shape: Shape, rows: &mut PromptRows) {
    let width = usize::try_from(shape.width()).unwrap_or(1).max(1);
    for (i, draw) in draws.iter().enumerate() {
        let Ok(Some(read)) = crate::format::sglang::read_rows(decode, i, shape.layers, shape.top_k)
        else {
            continue;
        };
        let from = read.positions.start();
        for (k, row) in read.ids.chunks(width).enumerate() {
            let x = from + k as u64;
            if x >= draw.prompt {
                break;
            }
            if row.iter().all(|&id| id == 0) {
                rows.zeros += 1;
            } else if row == draw.truth_row(shape, x) {
                rows.true_by_chance += 1;
            } else {
                rows.stale += 1;
            }
        }
    }
}

/// The library's merge on the bytes path: what `simulate` stitches with.
pub fn library_merge(
    stitcher: &Stitcher,
    prefill: &[u8],
    decode: &mut Vec<u8>,
) -> Result<bool, Error> {
    stitcher.merge_bytes(prefill, decode, Stitch::ForPd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draws cover their documented ranges and no more: prompts
    /// 1..=160, completions 1..=96, 1 to 3 outputs, batches of `/generate`
    /// only (and some of them), starts in `[0, P]`, half of them 0.
    #[test]
    fn draws_stay_in_their_ranges_and_reach_their_ends() {
        let draws: Vec<Request> = (0..3000).map(|i| Request::draw(9, i)).collect();
        let all = || draws.iter().flat_map(|r| &r.draws);
        let (prompts, completions): (Vec<u64>, Vec<u64>) =
            all().map(|d| (d.prompt, d.completion)).unzip();
        assert_eq!(prompts.iter().min(), Some(&1));
        assert_eq!(prompts.iter().max(), Some(&160));
        assert_eq!(completions.iter().min(), Some(&1));
        assert_eq!(completions.iter().max(), Some(&96));
        let outputs: Vec<usize> = draws.iter().map(|r| r.draws.len()).collect();
        assert_eq!(
            (outputs.iter().min(), outputs.iter().max()),
            (Some(&1), Some(&3))
        );
        assert!(draws.iter().all(|r| !r.batch || r.api == Api::Generate));
        assert!(draws.iter().all(|r| r.batch || r.draws.len() == 1));
        let generate = draws.iter().filter(|r| r.api == Api::Generate).count();
        let batches = draws.iter().filter(|r| r.batch).count();
        // A third of the /generate requests are batches.
        assert!(
            batches * 4 > generate && batches * 2 < generate,
            "{batches} of {generate}"
        );
        assert!(all().all(|d| d.start <= d.prompt));
        let from_zero = all().filter(|d| d.start == 0).count();
        assert!(
            from_zero * 2 > all().count(),
            "{from_zero} of {} start at 0",
            all().count()
        );
        // Every seed draws distinct requests, an all-ones seed too (a seed
        // folded in with `|` would give it one request over and over).
        for seed in [0, u64::MAX] {
            let first = Request::draw(seed, 0);
            assert!(
                (1..50).any(|i| Request::draw(seed, i).draws != first.draws),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn all_equal_needs_no_mismatch_and_every_pair_equal() {
        let right = Summary {
            requests: 2,
            equal: [2, 2],
            ..Summary::default()
        };
        assert!(right.all_equal());
        let short = Summary {
            equal: [2, 1],
            ..right.clone()
        };
        assert!(!short.all_equal());
        let named = Summary {
            mismatches: vec!["request 1: differs".into()],
            ..right
        };
        assert!(!named.all_equal());
    }

    /// The run is right with the library's merge, whatever the full-length
    /// decodes answered for the prompt (zeros, then stale rows once their
    /// pools wrapped), and catches a merge that splices the prefill's bytes
    /// over the head of the decode's (Miles'), on the suffix-only decodes
    /// only.
    #[test]
    fn the_library_is_right_and_the_head_splice_is_caught() {
        let summary = run(40, 3, None, &library_merge).unwrap();
        assert!(summary.all_equal(), "{summary}\n{:?}", summary.mismatches);
        assert_eq!(summary.determined + summary.ambiguous, 80);
        assert!(summary.outputs > 40);
        // Every prompt row of a full-length decode counted once; each pool
        // wraps within the run, so both kinds SGLang answers occur. With
        // rows of 4 layers or more of 2 of 256 experts, a stale row is the
        // truth with a chance below 1 in 10^18 per row: none for this seed.
        let rows = summary.prompt_rows;
        let prompt_rows: u64 = (0..40)
            .flat_map(|i| Request::draw(3, i).draws)
            .map(|d| d.prompt - d.start)
            .sum();
        assert_eq!(
            (rows.zeros + rows.stale + rows.true_by_chance) as u64,
            prompt_rows
        );
        assert!(rows.zeros > 0 && rows.stale > 0, "{rows:?}");
        assert_eq!(rows.true_by_chance, 0, "{rows:?}");

        let splice = |_: &Stitcher, p: &[u8], d: &mut Vec<u8>| -> Result<bool, Error> {
            let (p, mut v): (Value, Value) = (
                serde_json::from_slice(p).unwrap(),
                serde_json::from_slice(d).unwrap(),
            );
            let paths = [
                "/meta_info/routed_experts",
                "/sglext/routed_experts",
                "/choices/0/sgl_ext/routed_experts",
            ];
            let items: Vec<String> = match &v {
                Value::Array(a) => (0..a.len()).map(|i| format!("/{i}")).collect(),
                _ => vec![String::new()],
            };
            for item in items {
                for path in paths {
                    let at = format!("{item}{path}");
                    let (Some(pt), Some(dt)) = (
                        p.pointer(&at).and_then(Value::as_str),
                        v.pointer(&at).and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    let (pb, db) = (
                        crate::codec::base64::Base64::parse(pt.as_bytes()).unwrap(),
                        crate::codec::base64::Base64::parse(dt.as_bytes()).unwrap(),
                    );
                    let (mut pbytes, mut dbytes) = (Vec::new(), Vec::new());
                    pb.decode_range(0, pb.decoded_len(), &mut pbytes);
                    db.decode_range(0, db.decoded_len(), &mut dbytes);
                    let tail = dbytes.get(pbytes.len()..).unwrap_or_default().to_vec();
                    pbytes.extend(tail);
                    *v.pointer_mut(&at).unwrap() =
                        Value::String(crate::format::inline::encode_base64(&pbytes));
                }
            }
            *d = serde_json::to_vec(&v).unwrap();
            Ok(true)
        };
        let broken = run(40, 3, None, &splice).unwrap();
        assert!(!broken.all_equal());
        assert_eq!(
            broken.equal[0], 40,
            "the splice is right for full-length decodes"
        );
        assert!(broken.equal[1] < 40);
        assert!(
            broken.mismatches.iter().all(|m| m.contains("suffix")),
            "{:?}",
            broken.mismatches
        );
    }
}
