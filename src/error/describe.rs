//! Offending values as error messages show them: compact JSON, shortened.

use std::fmt::{self, Write as _};

use serde_json::Value;

/// The longest rendering of an offending value an error message carries; a
/// 10 MB base64 string in a log line helps nobody.
const GOT_MAX: usize = 64;

/// `value` as compact JSON for an error message, shortened to about
/// [`GOT_MAX`] bytes, or `nothing` when the key is missing.
pub(crate) fn describe(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "nothing".to_owned();
    };
    let mut out = Bounded {
        text: String::new(),
        full: false,
    };
    // A full buffer stops the formatter with fmt::Error; that is the point.
    if write!(out, "{value}").is_err() || out.full {
        out.text.push('…');
    }
    out.text
}

/// A `fmt::Write` that keeps the first [`GOT_MAX`] bytes (on a char boundary)
/// and then refuses more, so rendering a huge value stops early.
struct Bounded {
    text: String,
    full: bool,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = GOT_MAX.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(s.get(..end).unwrap_or_default());
        self.full = true;
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The first 64 bytes of the compact JSON text (fewer when the 64th
    /// byte is inside a character), then `…` when anything was left out.
    #[test]
    fn describe_keeps_the_longest_prefix_that_fits() {
        let a = |n: usize| "a".repeat(n);
        // `"` + 62 letters + `"` is exactly 64 bytes: nothing is left out.
        assert_eq!(describe(Some(&json!(a(62)))), format!("\"{}\"", a(62)));
        // One more letter: the closing quote is the 65th byte.
        assert_eq!(describe(Some(&json!(a(63)))), format!("\"{}…", a(63)));
        assert_eq!(describe(Some(&json!(a(1000)))), format!("\"{}…", a(63)));
        // `"` + 31 two-byte characters is 63 bytes; the 32nd would end at 65.
        assert_eq!(
            describe(Some(&json!("é".repeat(1000)))),
            format!("\"{}…", "é".repeat(31))
        );
        // A long array is cut inside one of its elements.
        let numbers: Vec<u32> = (0..100).collect();
        let text = describe(Some(&json!(numbers)));
        let full = serde_json::to_string(&numbers).unwrap();
        assert_eq!(text, format!("{}…", &full[..64]));
    }

    #[test]
    fn describe_shortens_long_values_on_a_char_boundary() {
        assert_eq!(describe(None), "nothing");
        assert_eq!(describe(Some(&json!(-1))), "-1");
        assert_eq!(describe(Some(&json!(3.0))), "3.0");
        assert_eq!(describe(Some(&json!("5"))), "\"5\"");
        let long = describe(Some(&json!("é".repeat(1000))));
        assert!(long.ends_with('…'));
        assert!(long.len() <= GOT_MAX + '…'.len_utf8());
    }
}
