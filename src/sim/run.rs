//! The runner: requests on a few threads, each written, stitched, gathered
//! back and compared with the truth, the outcomes summed up.

use std::fs;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::Value;

use crate::error::Error;
use crate::gather::{gather, read_choice_field, Store};
use crate::reading::FieldTable;
use crate::response::fields::ROUTED_EXPERTS;

use super::config::{Config, Mode};
use super::request::Request;
use super::summary::{ModeSummary, Summary};

/// A merge function: the library's `merge_routed_experts_for_pd`, or one a
/// test breaks on purpose.
pub type MergeFn = dyn Fn(&Value, &mut Value) -> Result<bool, Error> + Sync;

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
/// Where the trainer's reading of `merged` differs from its reading of
/// `colocated`, for each choice and each field of its table, over
/// `[0, P + C)`; files read inside `dir`.
pub fn trainer_mismatches(
    request: &Request,
    merged: &Value,
    colocated: &Value,
    dir: &std::path::Path,
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
    let seq = request.prompt + request.completion;
    let mut out = Vec::new();
    for c in 0..request.choices {
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
        // The law (SPEC RD4): the trainer reads the merged response as it
        // reads the colocated one, every field, over the whole sequence.
        mismatches.extend(trainer_mismatches(
            &request,
            &merged,
            &responses.colocated,
            &config.dir,
            &tag,
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

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
