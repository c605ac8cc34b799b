//! The event stream format (WHATWG HTML, "Server-sent events", 9.2.5
//! and 9.2.6) as the stitcher needs it: where an event ends, its lines and
//! data, and an event written back with new data.

/// The UTF-8 byte-order mark, which the event stream's decoder strips.
pub(super) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The scan of an event's bytes for the blank line that ends it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scan {
    /// Whether the next byte starts a line.
    pub(super) line_start: bool,
    /// The last byte was a `\r` ending a (non-empty) line: a `\n` next
    /// belongs to it.
    pub(super) after_cr: bool,
    /// How many lines of the event have ended (its blank line included,
    /// once found): 2 is one line and the blank line.
    pub(super) lines: usize,
}

impl Scan {
    pub(super) const START: Scan = Scan {
        line_start: true,
        after_cr: false,
        lines: 0,
    };
}

/// The line of an event that is one line and the blank line, and that
/// line's line end (`\n`, `\r\n` or `\r`); the event's last byte is the
/// blank line's.
pub(super) fn one_line(event: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = event.get(..event.len().checked_sub(1)?)?;
    let end = match body {
        [.., b'\r', b'\n'] => 2,
        [.., b'\n'] | [.., b'\r'] => 1,
        _ => return None,
    };
    let split = body.len() - end;
    Some((&body[..split], &body[split..]))
}

/// Scans `bytes` from where `scan` stands for the blank line that ends the
/// event: `Some(end)`, one past that line's first line-end byte, or `None`
/// when `bytes` ends first (`scan` then says where the scan stands).
pub(super) fn find_end(bytes: &[u8], scan: &mut Scan) -> Option<usize> {
    let mut at = 0;
    loop {
        if scan.after_cr {
            // `at` follows a `\r` that ended a non-empty line (an empty one
            // ended the event): a `\n` here is the rest of its line end.
            if at == bytes.len() {
                return None;
            }
            if bytes[at] == b'\n' {
                at += 1;
            }
            scan.after_cr = false;
            scan.line_start = true;
        }
        // A line end right at a line's start (the blank line after a
        // line, as every event has) is read without a search.
        let next = match bytes.get(at) {
            Some(b'\n' | b'\r') if scan.line_start => Some(0),
            _ => memchr::memchr2(b'\n', b'\r', &bytes[at..]),
        };
        match next {
            None => {
                if at < bytes.len() {
                    scan.line_start = false;
                }
                return None;
            }
            Some(k) => {
                let empty = scan.line_start && k == 0;
                let end = at + k + 1;
                scan.lines += 1;
                if empty {
                    return Some(end);
                }
                if bytes[at + k] == b'\r' {
                    scan.after_cr = true;
                } else {
                    scan.line_start = true;
                }
                at = end;
            }
        }
    }
}

/// One line of an event: its bytes up to its line end, and the line end.
pub(super) struct Line<'e> {
    text: &'e [u8],
    end: &'e [u8],
}

/// The lines of a complete event, its final blank line's included.
pub(super) fn lines(event: &[u8]) -> impl Iterator<Item = Line<'_>> {
    let mut rest = event;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (text_len, end_len) = match memchr::memchr2(b'\n', b'\r', rest) {
            None => (rest.len(), 0),
            Some(k) if rest[k] == b'\r' && rest.get(k + 1) == Some(&b'\n') => (k, 2),
            Some(k) => (k, 1),
        };
        let line = Line {
            text: &rest[..text_len],
            end: &rest[text_len..text_len + end_len],
        };
        rest = &rest[text_len + end_len..];
        Some(line)
    })
}

/// A field line's name and value (one leading space of the value removed);
/// `None` for a comment or a blank line.
pub(super) fn field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    if line.is_empty() || line[0] == b':' {
        return None;
    }
    Some(match memchr::memchr(b':', line) {
        None => (line, &[][..]),
        Some(k) => {
            let value = &line[k + 1..];
            (&line[..k], value.strip_prefix(b" ").unwrap_or(value))
        }
    })
}

/// The event's data, as the standard builds it: the values of its `data`
/// lines, each followed by `\n`, the last `\n` removed. `None` when the
/// event has no `data` line (it dispatches nothing); `Some(Some(value))`
/// when it has one, whose value is the data; `Some(None)` when it has
/// several, their data written into `data`.
pub(super) fn event_data<'e>(event: &'e [u8], data: &mut Vec<u8>) -> Option<Option<&'e [u8]>> {
    let mut values = lines(event).filter_map(|line| match field(line.text) {
        Some((b"data", value)) => Some(value),
        _ => None,
    });
    let first = values.next()?;
    let Some(second) = values.next() else {
        return Some(Some(first));
    };
    for value in [first, second].into_iter().chain(values) {
        data.extend_from_slice(value);
        data.push(b'\n');
    }
    data.pop();
    Some(None)
}

/// Writes `event` to `out` with its data replaced by `merged`: the merged
/// text split at its line breaks (JSON whitespace, so a CR or CRLF in it
/// becomes a line end, read back as `\n`) into pieces; the event's `k`-th
/// `data` line, but the last, gets piece `k` (while more than one piece is
/// left) with that line's `data:` or `data: ` and line end, and the last
/// data line gets the pieces left, each with its prefix and line end (so the
/// line before the next field or the blank line ends as it did); data lines
/// beyond the pieces are left out; every other line is as it was.
pub(super) fn reframe(event: &[u8], merged: &[u8], out: &mut Vec<u8>) {
    let pieces: Vec<&[u8]> = lines(merged).map(|line| line.text).collect();
    let data_lines = lines(event)
        .filter(|line| matches!(field(line.text), Some((b"data", _))))
        .count();
    let mut next = 0;
    let mut seen = 0;
    for line in lines(event) {
        if !matches!(field(line.text), Some((b"data", _))) {
            out.extend_from_slice(line.text);
            out.extend_from_slice(line.end);
            continue;
        }
        seen += 1;
        let last = seen == data_lines;
        let prefix = data_prefix(line.text);
        while next < pieces.len() && (last || next + 1 < pieces.len()) {
            let piece = pieces[next];
            next += 1;
            out.extend_from_slice(prefix);
            if !prefix.ends_with(b" ") && piece.first() == Some(&b' ') {
                out.push(b' ');
            }
            out.extend_from_slice(piece);
            out.extend_from_slice(line.end);
            if !last {
                break;
            }
        }
    }
}

/// The `data:` or `data: ` that starts a data line (`data:` for a line that
/// is the bare name).
pub(super) fn data_prefix(line: &[u8]) -> &[u8] {
    match line.get(4) {
        Some(b':') if line.get(5) == Some(&b' ') => &line[..6],
        Some(b':') => &line[..5],
        _ => b"data:",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(bytes: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let mut scan = Scan::START;
            match find_end(&bytes[at..], &mut scan) {
                Some(end) => {
                    at += end;
                    out.push(at);
                    // The `\n` of a blank line's `\r\n` follows its event.
                    if bytes[at - 1] == b'\r' && bytes.get(at) == Some(&b'\n') {
                        at += 1;
                    }
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn blank_lines_end_events_with_every_line_end() {
        assert_eq!(ends(b"data: a\n\ndata: b\n\n"), [9, 18]);
        assert_eq!(ends(b"data: a\r\n\r\n"), [10]);
        assert_eq!(ends(b"data: a\r\rdata: b\r\r"), [9, 18]);
        assert_eq!(ends(b"data: a\r\n\n"), [10]);
        assert_eq!(ends(b"\n"), [1]);
        assert_eq!(ends(b"data: a\n"), Vec::<usize>::new());
        // A `\r\n` is one line end, not a line and a blank one.
        assert_eq!(ends(b"data: a\r\ndata: b\n"), Vec::<usize>::new());
    }

    #[test]
    fn data_is_the_data_lines_joined() {
        let mut data = Vec::new();
        let joined = event_data(b": c\ndata: a\r\nevent: x\rdata:b\ndata\n\n", &mut data);
        assert_eq!(joined, Some(None));
        assert_eq!(data, b"a\nb\n");
        data.clear();
        assert_eq!(event_data(b"event: x\n\n", &mut data), None);
        let one = event_data(b"data:  two spaces\n\n", &mut data);
        assert_eq!(one, Some(Some(&b" two spaces"[..])));
        assert_eq!(event_data(b"data\r\r", &mut data), Some(Some(&b""[..])));
        assert!(data.is_empty());
    }
}
