//! Progress of a long run on stderr, shared by `simulate`, `check` over many
//! files and `compare --dirs`.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Instant;

/// Progress of a long run on stderr: items done of the total, a bar, the
/// rate and the time left. Drawn only when stderr is a terminal and
/// `--quiet` was not given, so that scripts and CI logs get nothing extra;
/// redrawn at most ten times a second, from any thread.
pub struct Progress {
    what: &'static str,
    total: usize,
    started: Instant,
    /// When the line was last drawn; `None` when progress is not shown.
    drawn: Option<Mutex<Option<Instant>>>,
}

impl Progress {
    pub fn new(what: &'static str, total: usize, quiet: bool) -> Progress {
        let shown = !quiet && std::io::stderr().is_terminal();
        Progress {
            what,
            total,
            started: Instant::now(),
            drawn: shown.then(|| Mutex::new(None)),
        }
    }

    /// `done` items are finished.
    pub fn set(&self, done: usize) {
        let Some(drawn) = &self.drawn else {
            return;
        };
        let Ok(mut last) = drawn.lock() else {
            return;
        };
        let now = Instant::now();
        if done < self.total && last.is_some_and(|t| now.duration_since(t).as_millis() < 100) {
            return;
        }
        *last = Some(now);
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let filled = (done * 30).checked_div(self.total).unwrap_or(30).min(30);
        let rate = if elapsed > 0.0 {
            done as f64 / elapsed
        } else {
            0.0
        };
        let left = if done > 0 && done < self.total {
            format!(
                ", {:.0} s left",
                (self.total - done) as f64 * elapsed / done as f64
            )
        } else {
            String::new()
        };
        // A failed write to stderr is no reason to stop the work.
        let _ = write!(
            std::io::stderr(),
            "\r[{}{}] {done}/{} {}, {rate:.1}/s{left}\x1b[K",
            "#".repeat(filled),
            ".".repeat(30 - filled),
            self.total,
            self.what,
        );
    }

    /// Erases the progress line, so that what comes next starts clean.
    pub fn clear(&self) {
        if self.drawn.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }

    /// Prints `line` on stdout, with the progress line out of its way.
    pub fn say(&self, line: &str) {
        self.clear();
        println!("{line}");
    }

    /// Draws the final count and ends the line.
    pub fn finish(&self) {
        if self.drawn.is_some() {
            self.set(self.total);
            let _ = writeln!(std::io::stderr());
        }
    }
}
