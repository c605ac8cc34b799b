//! The outcome of a simulated run, and how it reads.

use std::fmt;

use super::engine::Engine;
use super::slot_pool::POOL_SLOTS;

/// The outcome of a run ([`run`](super::run())).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The engine simulated.
    pub engine: Engine,
    /// Requests simulated.
    pub requests: usize,
    /// Choices over all requests (SGLang: outputs, a batch counting each).
    pub outputs: usize,
    /// Per mode (vLLM's and Dynamo's wire forms; SGLang's decode
    /// conventions), in report order.
    pub modes: Vec<ModeSummary>,
    /// SGLang: the pairs merged again without the row shape.
    pub without_row_shape: Option<WithoutRowShape>,
    /// SGLang: what the full-length decodes answered for prompt positions,
    /// which they never computed.
    pub prompt_rows: Option<PromptRows>,
    /// What went wrong, one line each (empty when all is well).
    pub mismatches: Vec<String>,
}

/// The counts of one mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeSummary {
    /// The mode's name: a wire form's ([`Wire::name`](super::Wire::name)),
    /// or SGLang's convention (`full-length`, `suffix-only`).
    pub name: &'static str,
    /// Requests whose merge returned `Ok(true)`.
    pub stitched: usize,
    /// Requests stitched whose every choice is bitwise the colocated
    /// server's.
    pub equal_to_colocated: usize,
    /// Requests whose every choice came out bitwise equal in every mode
    /// (the choices both have), when the modes are compared (not SGLang's,
    /// whose every pair is held to the colocated answer whole).
    pub equal_to_others: Option<usize>,
}

/// SGLang's pairs merged without the row shape: the merge reads them
/// every way it can (SPEC Q5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WithoutRowShape {
    /// Pairs whose readings all agree, merged (and equal to the colocated
    /// answer, else a mismatch).
    pub determined: usize,
    /// Pairs refused as ambiguous.
    pub ambiguous: usize,
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

impl Summary {
    /// An empty summary of `engine` with these modes.
    pub(super) fn new(engine: Engine, names: &[&'static str], compared: bool) -> Summary {
        Summary {
            engine,
            requests: 0,
            outputs: 0,
            modes: names
                .iter()
                .map(|&name| ModeSummary {
                    name,
                    stitched: 0,
                    equal_to_colocated: 0,
                    equal_to_others: compared.then_some(0),
                })
                .collect(),
            without_row_shape: None,
            prompt_rows: None,
            mismatches: Vec::new(),
        }
    }

    /// Whether every request came out right in every mode.
    pub fn all_equal(&self) -> bool {
        let n = self.requests;
        self.mismatches.is_empty()
            && self.modes.iter().all(|m| {
                m.stitched == n && m.equal_to_colocated == n && m.equal_to_others.unwrap_or(n) == n
            })
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sglang = self.engine == Engine::Sglang;
        let (unit, mode, every) = if sglang {
            ("outputs", "convention", "both conventions")
        } else {
            ("choices", "mode", "every mode")
        };
        let n = self.requests;
        writeln!(
            f,
            "{n} {} requests, {} {unit}",
            self.engine.label(),
            self.outputs
        )?;
        let others = self.modes.iter().any(|m| m.equal_to_others.is_some());
        write!(
            f,
            "{mode:<16}{:>10}{:>22}",
            "stitched", "equal to colocated"
        )?;
        if others {
            write!(f, "{:>24}", "equal to other modes")?;
        }
        writeln!(f)?;
        for m in &self.modes {
            write!(
                f,
                "{:<16}{:>10}{:>22}",
                m.name,
                format!("{}/{n}", m.stitched),
                format!("{}/{n}", m.equal_to_colocated),
            )?;
            if let Some(equal) = m.equal_to_others {
                write!(f, "{:>24}", format!("{equal}/{n}"))?;
            }
            writeln!(f)?;
        }
        if let Some(w) = self.without_row_shape {
            writeln!(
                f,
                "without row_shape: {} of {} pairs determined (equal to colocated), {} ambiguous (refused)",
                w.determined,
                self.modes.len() * n,
                w.ambiguous
            )?;
        }
        if let Some(rows) = self.prompt_rows {
            writeln!(
                f,
                "full-length decodes' prompt rows ({POOL_SLOTS}-slot pools): {} zeros, {} stale rows of earlier requests, {} true by chance",
                rows.zeros, rows.stale, rows.true_by_chance
            )?;
        }
        if self.all_equal() {
            write!(
                f,
                "all {n} requests bitwise equal to the colocated truth in {every}"
            )
        } else {
            write!(f, "MISMATCH in {} place(s)", self.mismatches.len().max(1))
        }
    }
}

/// The report against one written out by hand.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_reads_as_written() {
        let mut summary = Summary::new(
            Engine::Vllm,
            &["by-handle", "inline compact", "inline npy"],
            true,
        );
        summary.requests = 3;
        summary.outputs = 7;
        for m in &mut summary.modes {
            (m.stitched, m.equal_to_colocated, m.equal_to_others) = (3, 3, Some(3));
        }
        assert!(summary.all_equal());
        let header = "3 vLLM requests, 7 choices\n\
             mode              stitched    equal to colocated    equal to other modes\n\
             by-handle              3/3                   3/3                     3/3\n\
             inline compact         3/3                   3/3                     3/3\n\
             inline npy             3/3                   3/3                     3/3\n";
        assert_eq!(
            summary.to_string(),
            format!("{header}all 3 requests bitwise equal to the colocated truth in every mode")
        );
        for field in 0..4 {
            let mut broken = summary.clone();
            match field {
                0 => broken.modes[1].stitched = 2,
                1 => broken.modes[2].equal_to_colocated = 2,
                2 => broken.modes[0].equal_to_others = Some(2),
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
    }

    #[test]
    fn an_sglang_report_counts_conventions_and_prompt_rows() {
        let mut summary = Summary::new(Engine::Sglang, &["full-length", "suffix-only"], false);
        summary.requests = 2;
        summary.outputs = 3;
        for m in &mut summary.modes {
            (m.stitched, m.equal_to_colocated) = (2, 2);
        }
        summary.without_row_shape = Some(WithoutRowShape {
            determined: 3,
            ambiguous: 1,
        });
        summary.prompt_rows = Some(PromptRows {
            zeros: 5,
            stale: 6,
            true_by_chance: 0,
        });
        assert!(summary.all_equal());
        assert_eq!(
            summary.to_string(),
            "2 SGLang requests, 3 outputs\n\
             convention        stitched    equal to colocated\n\
             full-length            2/2                   2/2\n\
             suffix-only            2/2                   2/2\n\
             without row_shape: 3 of 4 pairs determined (equal to colocated), 1 ambiguous (refused)\n\
             full-length decodes' prompt rows (1024-slot pools): 5 zeros, 6 stale rows of earlier requests, 0 true by chance\n\
             all 2 requests bitwise equal to the colocated truth in both conventions"
        );
        let mut named = summary.clone();
        named.mismatches.push("req-0001 full: differs".into());
        assert!(!named.all_equal());
        summary.modes[1].equal_to_colocated = 1;
        assert!(!summary.all_equal());
    }
}
