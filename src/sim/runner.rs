//! The runner: a run's requests written by its engine's writers, stitched
//! by the merge under test, checked ([`check`](super::check)), and summed
//! up. vLLM's and Dynamo's requests are independent and run on a few
//! threads; an SGLang decode's slot pool makes each request's answer depend
//! on those before it, so SGLang's run in index order, one at a time.

use std::fs;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::check::{check_choices, check_outputs, Checked, Pools};
use super::config::{Config, MergeFn};
use super::engine::Engine;
use super::summary::{PromptRows, Summary, WithoutRowShape};

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
    let mut results = if config.engine == Engine::Sglang {
        let mut pools = Pools::default();
        let mut results = Vec::with_capacity(config.requests);
        for index in 0..config.requests {
            results.push(check_outputs(config, index, &mut pools, merge)?);
            progress(index + 1, config.requests);
        }
        results
    } else {
        threaded(config, merge, progress)?
    };
    results.sort_by_key(|r| r.index);
    Ok(summarize(config.engine, results))
}

/// vLLM's and Dynamo's requests, on `config.concurrency` threads.
fn threaded(
    config: &Config,
    merge: &MergeFn,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> io::Result<Vec<Checked>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Checked>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<io::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..config.concurrency.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= config.requests {
                    break;
                }
                match check_choices(config, index, merge) {
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
    Ok(results.into_inner().unwrap_or_default())
}

/// The requests' results, summed up per mode.
fn summarize(engine: Engine, results: Vec<Checked>) -> Summary {
    let names: Vec<&'static str> = results
        .first()
        .map(|r| r.modes.iter().map(|m| m.name).collect())
        .unwrap_or_default();
    let sglang = engine == Engine::Sglang;
    let mut summary = Summary::new(engine, &names, !sglang);
    summary.requests = results.len();
    if sglang {
        summary.without_row_shape = Some(WithoutRowShape::default());
        summary.prompt_rows = Some(PromptRows::default());
    }
    for result in results {
        summary.outputs += result.outputs;
        summary.mismatches.extend(result.mismatches);
        if let (Some(total), Some(more)) =
            (&mut summary.without_row_shape, result.without_row_shape)
        {
            total.determined += more.determined;
            total.ambiguous += more.ambiguous;
        }
        if let (Some(total), Some(more)) = (&mut summary.prompt_rows, result.prompt_rows) {
            total.zeros += more.zeros;
            total.stale += more.stale;
            total.true_by_chance += more.true_by_chance;
        }
        for (mode, counts) in result.modes.iter().zip(&mut summary.modes) {
            debug_assert_eq!(mode.name, counts.name);
            counts.stitched += usize::from(mode.stitched);
            // `gathered` holds `Some` only for a choice equal to the truth.
            counts.equal_to_colocated += usize::from(mode.stitched && mode.equal);
            if let Some(equal) = &mut counts.equal_to_others {
                let same = mode.equal
                    && result.modes.iter().all(|other| {
                        other
                            .gathered
                            .iter()
                            .zip(&mode.gathered)
                            .all(|(a, b)| a == b)
                    });
                *equal += usize::from(same);
            }
        }
    }
    summary
}
