//! Streamed decodes for routers' tests: [`streams`] writes a generated P/D
//! case's decode as vLLM's `/inference/v1/generate` streams it, a
//! server-sent event stream (every framing the standard allows, cut into
//! random chunks), and [`verify_streamed`] judges a router's streamed
//! answer against the case's colocated truth.
//!
//! The event reader here ([`events`]) is written apart from
//! [`pd_stitch::stream`](crate::stream), a byte at a time, so that it can
//! judge it.
//!
//! ```
//! use pd_stitch::testing::stream::{streams, verify_streamed, StreamStyle};
//! use pd_stitch::testing::Knobs;
//! use pd_stitch::{stream::StreamStitcher, Stitcher};
//! use proptest::prelude::*;
//!
//! proptest!(|(case in streams(Knobs::default(), StreamStyle::default()))| {
//!     // The router's streaming path under test.
//!     let mut stitcher = StreamStitcher::new(Stitcher::new(), case.prefill_body.clone()).unwrap();
//!     let mut out = Vec::new();
//!     for chunk in case.chunks() {
//!         stitcher.feed(chunk, &mut out).unwrap();
//!     }
//!     stitcher.finish(&mut out).unwrap();
//!     verify_streamed(&case, &out)?;
//! });
//! ```

use std::ops::Range;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{cases, verify_stitched, Case, Knobs, Mismatch};
use crate::sim::{Engine, SplitMix64};

/// How [`streams`] frames the events.
#[derive(Clone, Debug)]
pub struct StreamStyle {
    /// Line ends to draw from (each line draws its own).
    pub line_ends: Vec<&'static str>,
    /// Comment lines, other fields (`event`, `id`, `retry`), `data:` with and
    /// without its space, data spread over several lines, a byte-order mark,
    /// and a prefill body written with `\r\n` whitespace.
    pub variants: bool,
    /// Most token events before each choice's rows event.
    pub tokens: usize,
}

impl Default for StreamStyle {
    /// All three line ends, every variant, up to 3 token events per choice.
    fn default() -> StreamStyle {
        StreamStyle {
            line_ends: vec!["\n", "\r\n", "\r"],
            variants: true,
            tokens: 3,
        }
    }
}

/// A generated P/D case with its decode written as a stream.
#[derive(Clone, Debug)]
pub struct StreamCase {
    /// The non-streaming pair and its truth.
    pub case: Case,
    /// The prefill's body, as a router holds it.
    pub prefill_body: Vec<u8>,
    /// The decode's stream: token events, one rows event per choice (the
    /// choice's whole decode answer, with its `index`), a usage event with
    /// `"choices": []`, and `data: [DONE]`.
    pub stream: Vec<u8>,
    /// The numbers of the events that carry rows.
    pub rows_events: Vec<usize>,
    /// Where `stream` is cut into chunks (increasing, inside the stream).
    pub cuts: Vec<usize>,
}

impl StreamCase {
    /// The chunks `stream` is cut into, in order.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut bounds = Vec::with_capacity(self.cuts.len() + 2);
        bounds.push(0);
        bounds.extend(self.cuts.iter().copied());
        bounds.push(self.stream.len());
        (0..bounds.len() - 1).map(move |k| &self.stream[bounds[k]..bounds[k + 1]])
    }
}

/// One event as [`events`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its bytes, from its first line to its blank line's first line-end
    /// byte.
    pub raw: Range<usize>,
    /// Its data (the `data` lines' values joined by `\n`); `None` when it
    /// has no `data` line.
    pub data: Option<Vec<u8>>,
    /// Its lines other than `data` lines, each with its line end.
    pub other_lines: Vec<Vec<u8>>,
}

/// Reads `stream` as the WHATWG event stream format, a byte at a time: its
/// complete events, and the byte ranges that belong to none (a leading
/// byte-order mark, the `\n` of a blank line's `\r\n`, an unfinished event at
/// the end).
pub fn events(stream: &[u8]) -> (Vec<Event>, Vec<Range<usize>>) {
    let mut events = Vec::new();
    let mut loose = Vec::new();
    let mut at = 0;
    if stream.starts_with(b"\xEF\xBB\xBF") {
        loose.push(0..3);
        at = 3;
    }
    let mut start = at;
    let mut line = Vec::new();
    let mut lines: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    while at < stream.len() {
        let b = stream[at];
        at += 1;
        if b != b'\n' && b != b'\r' {
            line.push(b);
            continue;
        }
        if line.is_empty() {
            events.push(event(start..at, &lines));
            lines.clear();
            if b == b'\r' && stream.get(at) == Some(&b'\n') {
                loose.push(at..at + 1);
                at += 1;
            }
            start = at;
            continue;
        }
        let mut end = vec![b];
        if b == b'\r' && stream.get(at) == Some(&b'\n') {
            end.push(b'\n');
            at += 1;
        }
        lines.push((std::mem::take(&mut line), end));
    }
    if start < stream.len() {
        loose.push(start..stream.len());
    }
    (events, loose)
}

fn event(raw: Range<usize>, lines: &[(Vec<u8>, Vec<u8>)]) -> Event {
    let mut data: Option<Vec<u8>> = None;
    let mut other_lines = Vec::new();
    for (text, end) in lines {
        let field = match text.iter().position(|&b| b == b':') {
            Some(0) => None,
            Some(k) => {
                let value = &text[k + 1..];
                Some((&text[..k], value.strip_prefix(b" ").unwrap_or(value)))
            }
            None => Some((&text[..], &b""[..])),
        };
        match field {
            Some((b"data", value)) => {
                let data = data.get_or_insert_with(Vec::new);
                data.extend_from_slice(value);
                data.push(b'\n');
            }
            _ => {
                let mut line = text.clone();
                line.extend_from_slice(end);
                other_lines.push(line);
            }
        }
    }
    if let Some(data) = data.as_mut() {
        data.pop();
    }
    Event {
        raw,
        data,
        other_lines,
    }
}

/// Decode streams of generated cases: each case of [`cases`]`(knobs)` in
/// one of vLLM's wire forms (those of `knobs.wires`; the streams are
/// vLLM's) with its decode written as an event stream framed as `framing`
/// says, and cut into random chunks (sizes 1 to the whole).
///
/// # Panics
///
/// When `knobs` names none of vLLM's wire forms (a mistake in the test).
pub fn streams(mut knobs: Knobs, framing: StreamStyle) -> impl Strategy<Value = StreamCase> {
    knobs.wires.retain(|wire| wire.engine() == Engine::Vllm);
    assert!(
        !knobs.wires.is_empty(),
        "knobs need one of vLLM's wire forms"
    );
    (cases(knobs), any::<u64>()).prop_flat_map(move |(case, seed)| {
        let (prefill_body, stream, rows_events) = write_stream(&case, &framing, seed);
        let len = stream.len();
        let points: Vec<usize> = (1..len).collect();
        let most = points.len().min(40);
        let cuts = proptest::sample::subsequence(points, 0..=most);
        (Just((case, prefill_body, stream, rows_events)), cuts).prop_map(
            |((case, prefill_body, stream, rows_events), cuts)| StreamCase {
                case,
                prefill_body,
                stream,
                rows_events,
                cuts,
            },
        )
    })
}

/// A line end `framing` allows, drawn from `rng`.
fn line_end(rng: &mut SplitMix64, framing: &StreamStyle) -> &'static str {
    let at = rng.below(framing.line_ends.len() as u64) as usize;
    framing.line_ends.get(at).copied().unwrap_or("\n")
}

fn write_stream(case: &Case, framing: &StreamStyle, seed: u64) -> (Vec<u8>, Vec<u8>, Vec<usize>) {
    let mut draw = SplitMix64::new(seed);
    let variants = framing.variants;
    let prefill_body = if variants && draw.chance(3) {
        serde_json::to_string_pretty(&case.prefill)
            .unwrap_or_default()
            .replace('\n', "\r\n")
            .into_bytes()
    } else {
        serde_json::to_vec(&case.prefill).unwrap_or_default()
    };
    let mut stream = Vec::new();
    if variants && draw.chance(4) {
        stream.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let mut events = 0;
    let mut rows_events = Vec::new();
    let choices = case.decode["choices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, choice) in choices.iter().enumerate() {
        // A choice that says its tokens (vLLM 0.32's `.npy`) keeps them all
        // on its rows event, with the prompt's count beside them, and its
        // token events carry none: so that event's data merges on its own
        // (SL2), and the stream's count of the choice's tokens, which the
        // stitcher places the rows by, is the same. The engine's own
        // streams (deltas, no usage) are stitched in
        // `tests/it/vllm.rs` (SPEC section 11, "Counts").
        let counted = choice.get("token_ids").is_some_and(Value::is_array);
        for t in 0..draw.below(framing.tokens as u64 + 1) {
            let delta = if counted { json!([]) } else { json!([t]) };
            let token = json!({"request_id": "r", "choices": [
                {"index": i, "token_ids": delta, "text": "é\u{2028}\"", "finish_reason": null}]});
            write_event(&mut stream, &token, framing, &mut draw);
            events += 1;
        }
        let mut choice = choice.clone();
        if let Some(object) = choice.as_object_mut() {
            object.insert("index".into(), json!(i));
            object.insert("finish_reason".into(), json!("length"));
        }
        let mut rows = json!({"request_id": "r", "choices": [choice]});
        if counted {
            rows["usage"] = json!({"prompt_tokens": case.decode["usage"]["prompt_tokens"]});
        }
        write_event(&mut stream, &rows, framing, &mut draw);
        rows_events.push(events);
        events += 1;
    }
    let usage = json!({"request_id": "r", "choices": [], "usage": {"prompt_tokens": 3}});
    write_event(&mut stream, &usage, framing, &mut draw);
    let end = line_end(&mut draw, framing);
    stream.extend_from_slice(format!("data: [DONE]{end}{end}").as_bytes());
    (prefill_body, stream, rows_events)
}

fn write_event(stream: &mut Vec<u8>, data: &Value, framing: &StreamStyle, draw: &mut SplitMix64) {
    let variants = framing.variants;
    if variants && draw.chance(3) {
        let end = line_end(draw, framing);
        stream.extend_from_slice(format!(": keep-alive{end}").as_bytes());
    }
    if variants && draw.chance(3) {
        let (a, b) = (line_end(draw, framing), line_end(draw, framing));
        stream.extend_from_slice(format!("event: chunk{a}id: 7{b}").as_bytes());
    }
    let text = if variants && draw.chance(4) {
        serde_json::to_string_pretty(data).unwrap_or_default()
    } else {
        serde_json::to_string(data).unwrap_or_default()
    };
    let space = !(variants && draw.chance(4));
    let mut last_end = "\n";
    for piece in text.split('\n') {
        let prefix = if space || piece.starts_with(' ') {
            "data: "
        } else {
            "data:"
        };
        let end = line_end(draw, framing);
        stream.extend_from_slice(prefix.as_bytes());
        stream.extend_from_slice(piece.as_bytes());
        stream.extend_from_slice(end.as_bytes());
        last_end = end;
    }
    if variants && draw.chance(5) {
        let end = line_end(draw, framing);
        stream.extend_from_slice(format!("retry: 10{end}").as_bytes());
        last_end = end;
    }
    // A blank line's `\n` right after a `\r` would be that line end's rest.
    let blank = match line_end(draw, framing) {
        "\n" if last_end == "\r" => "\r\n",
        blank => blank,
    };
    stream.extend_from_slice(blank.as_bytes());
}

/// Checks `output`, a router's streamed answer for `case`, against the case:
/// it has the same events as the decode's stream, in order; every event
/// without rows, and every byte outside events, is as it came; the rows
/// events' other lines are as they came; and the rows events' choices, put
/// together as one response, pass [`verify_stitched`] (the colocated truth).
///
/// # Errors
///
/// The first [`Mismatch`] (choice 0 for problems of the stream itself).
pub fn verify_streamed(case: &StreamCase, output: &[u8]) -> Result<(), Mismatch> {
    let problem = |message: String| Mismatch {
        choice: 0,
        position: None,
        segment: None,
        message,
    };
    let (want, want_loose) = events(&case.stream);
    let (got, got_loose) = events(output);
    if got.len() != want.len() {
        return Err(problem(format!(
            "{} events streamed, expected {}",
            got.len(),
            want.len()
        )));
    }
    let bytes_of = |stream: &[u8], ranges: &[Range<usize>]| -> Vec<Vec<u8>> {
        ranges.iter().map(|r| stream[r.clone()].to_vec()).collect()
    };
    if bytes_of(output, &got_loose) != bytes_of(&case.stream, &want_loose) {
        return Err(problem("bytes outside the events differ".into()));
    }
    let mut choices = Vec::new();
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        if !case.rows_events.contains(&k) {
            if case.stream[w.raw.clone()] != output[g.raw.clone()] {
                return Err(problem(format!("event {k} (without rows) changed")));
            }
            continue;
        }
        if w.other_lines != g.other_lines {
            return Err(problem(format!("event {k}: lines other than data changed")));
        }
        let data = g.data.as_deref().unwrap_or_default();
        let value: Value = serde_json::from_slice(data)
            .map_err(|err| problem(format!("event {k}: data is not JSON: {err}")))?;
        let Some(list) = value["choices"].as_array() else {
            return Err(problem(format!("event {k}: no choices")));
        };
        for choice in list {
            let mut choice = choice.clone();
            if let Some(object) = choice.as_object_mut() {
                object.remove("index");
                object.remove("finish_reason");
            }
            choices.push(choice);
        }
    }
    let mut merged = case.case.decode.clone();
    merged["choices"] = Value::Array(choices);
    verify_stitched(&case.case, &merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line end the style allows is drawn, and only those.
    #[test]
    fn line_ends_are_drawn_from_the_style() {
        let mut draw = SplitMix64::new(7);
        let style = StreamStyle::default();
        let ends: std::collections::BTreeSet<&str> =
            (0..100).map(|_| line_end(&mut draw, &style)).collect();
        assert_eq!(ends, ["\n", "\r", "\r\n"].into_iter().collect());
        let one = StreamStyle {
            line_ends: vec!["\r"],
            ..StreamStyle::default()
        };
        assert!((0..20).all(|_| line_end(&mut draw, &one) == "\r"));
        let none = StreamStyle {
            line_ends: vec![],
            ..StreamStyle::default()
        };
        assert_eq!(line_end(&mut draw, &none), "\n");
    }

    #[test]
    fn the_reader_splits_events_as_the_standard_does() {
        let stream = b"\xEF\xBB\xBFdata: a\r\n: c\revent: e\ndata:b\r\n\r\ndata\n\npartial";
        let (events, loose) = events(stream);
        assert_eq!(loose, [0..3, 34..35, 41..48]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data.as_deref(), Some(&b"a\nb"[..]));
        assert_eq!(
            events[0].other_lines,
            [b": c\r".to_vec(), b"event: e\n".to_vec()]
        );
        assert_eq!(events[0].raw, 3..34);
        assert_eq!(events[1].data.as_deref(), Some(&b""[..]));
    }
}
