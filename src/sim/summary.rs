//! The outcome of a simulation, and how it reads.

use std::fmt;

use super::config::Mode;

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

/// The report against one written out by hand.
#[cfg(test)]
mod tests {
    use super::*;

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
}
