//! Server-sent events as `probe` reads a stream: bytes fed as they arrive,
//! events split at blank lines (`\n\n` or `\r\n\r\n`), each event's `data:`
//! lines joined by `\n`; comments and other fields are left out.

/// An incremental reader of events.
#[derive(Default)]
pub struct Events {
    pending: Vec<u8>,
    /// Each complete event's data, in order.
    pub data: Vec<Vec<u8>>,
}

impl Events {
    /// Feeds the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = blank_line(self.pending.get(start..).unwrap_or_default()) {
            let (event, skip) = end;
            let text = self
                .pending
                .get(start..start + event)
                .unwrap_or_default()
                .to_vec();
            self.event(&text);
            start += event + skip;
        }
        self.pending.drain(..start);
    }

    /// Whether bytes of an unfinished event are left.
    pub fn unfinished(&self) -> bool {
        self.pending.iter().any(|b| !b.is_ascii_whitespace())
    }

    fn event(&mut self, text: &[u8]) {
        let mut data: Option<Vec<u8>> = None;
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(value) = line.strip_prefix(b"data:") else {
                continue;
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match &mut data {
                Some(d) => {
                    d.push(b'\n');
                    d.extend_from_slice(value);
                }
                None => data = Some(value.to_vec()),
            }
        }
        self.data.extend(data);
    }
}

/// Where the first event of `bytes` ends: its length and the length of the
/// blank line after it.
fn blank_line(bytes: &[u8]) -> Option<(usize, usize)> {
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events split anywhere come out whole, multi-line data joined, CRLF
    /// framing read, comments and other fields left out.
    #[test]
    fn events_are_read_across_any_split() {
        let stream = b": comment\n\ndata: {\"a\": 1}\n\nevent: x\ndata: one\ndata: two\r\n\r\ndata:[DONE]\n\n";
        for cut in 0..stream.len() {
            let mut events = Events::default();
            events.feed(&stream[..cut]);
            events.feed(&stream[cut..]);
            assert_eq!(
                events.data,
                vec![
                    b"{\"a\": 1}".to_vec(),
                    b"one\ntwo".to_vec(),
                    b"[DONE]".to_vec()
                ],
                "cut at {cut}"
            );
            assert!(!events.unfinished());
        }
        let mut events = Events::default();
        events.feed(b"data: {\"cut\": ");
        assert!(events.unfinished() && events.data.is_empty());
    }
}
