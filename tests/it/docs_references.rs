//! docs/PERFORMANCE.md and docs/VERIFICATION.md are references: what is
//! measured or checked, its figure, and how to reproduce it. History is
//! git's, so neither names a commit (a word of 7 to 40 hex digits with a
//! letter among them) or a session.

use std::path::Path;

/// The words of `text` that tell history: commit-like hex words and
/// "session", each with its line number.
fn history_words(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for word in line.split(|c: char| !c.is_ascii_alphanumeric()) {
            let hex = (7..=40).contains(&word.len())
                && word.bytes().all(|b| b.is_ascii_hexdigit())
                && word.bytes().any(|b| b.is_ascii_alphabetic());
            if hex || word.to_ascii_lowercase().starts_with("session") {
                found.push((n + 1, word.to_owned()));
            }
        }
    }
    found
}

#[test]
fn the_reference_docs_name_no_commit_and_no_session() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in ["docs/PERFORMANCE.md", "docs/VERIFICATION.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        assert_eq!(history_words(&text), [], "{doc}");
    }
}

#[test]
fn history_words_are_found() {
    let text =
        "measured at 7c9109c\nin the fourth Session\n1234567 rows, 0xdeadbeef, cafe, deadbeef1\n";
    let words: Vec<String> = history_words(text).into_iter().map(|(_, w)| w).collect();
    assert_eq!(words, ["7c9109c", "Session", "deadbeef1"]);
}
