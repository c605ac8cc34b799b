//! `StreamStitcher::awaiting_prefill`: a stream whose prefill comes late
//! (SPEC section 11, SL5). The bytes out over the whole stream are those of
//! a stitcher given the prefill first, whenever it comes, errors included;
//! every event before the first rows event goes out at once; a prefill that
//! never comes is an error at `finish`. Generated streams of every framing,
//! and the real engines' streams.

use crate::stream::{faulted, knobs, Faulted};
use pd_stitch::stream::StreamStitcher;
use pd_stitch::testing::stream::{events, streams, StreamCase, StreamStyle};
use pd_stitch::{Error, ErrorDetail, ErrorKind, Stitcher};
use proptest::prelude::*;
use serde_json::Value;

/// What a run gave: the bytes out before the prefill was given, all the
/// bytes out, and how it ended.
struct Run {
    before: Vec<u8>,
    out: Vec<u8>,
    end: Result<(), Error>,
}

/// `chunks` fed to a stitcher made with `prefill` at once (`at` `None`), or
/// awaiting it and given it after the first `at` chunks; then finished.
fn run(stitcher: &Stitcher, prefill: &[u8], chunks: &[&[u8]], at: Option<usize>) -> Run {
    let mut out = Vec::new();
    let mut before = Vec::new();
    let mut stream = match at {
        None => match StreamStitcher::new(stitcher.clone(), prefill.to_vec()) {
            Ok(s) => s,
            Err(end) => {
                return Run {
                    before,
                    out,
                    end: Err(end),
                }
            }
        },
        Some(_) => StreamStitcher::awaiting_prefill(stitcher.clone()),
    };
    let end = (|| {
        for (k, chunk) in chunks.iter().enumerate() {
            if at == Some(k) {
                before.clone_from(&out);
                stream.give_prefill(prefill.to_vec(), &mut out)?;
            }
            stream.feed(chunk, &mut out)?;
        }
        if at.is_some_and(|at| at >= chunks.len()) {
            before.clone_from(&out);
            stream.give_prefill(prefill.to_vec(), &mut out)?;
        }
        stream.finish(&mut out)
    })();
    Run { before, out, end }
}

fn chunks_of(case: &StreamCase) -> Vec<&[u8]> {
    case.chunks().collect()
}

/// Where the first event that carries rows starts.
fn first_rows_start(case: &StreamCase) -> usize {
    let (events, _) = events(&case.stream);
    events[case.rows_events[0]].raw.start
}

proptest! {
    #![proptest_config(crate::support::config("stream_late"))]

    /// SL5: for every arrival of the prefill (before the first chunk,
    /// between any two, after the last), the bytes out are those of a
    /// stitcher given it first; before it comes, every event before the
    /// first rows event has gone out, and nothing from that event on.
    #[test]
    fn sl5_the_prefill_may_come_at_any_point(case in streams(knobs(), StreamStyle::default())) {
        let stitcher = Stitcher::new();
        let chunks = chunks_of(&case);
        let early = run(&stitcher, &case.prefill_body, &chunks, None);
        prop_assert_eq!(&early.end, &Ok(()));
        let rows_start = first_rows_start(&case);
        for at in 0..=chunks.len() {
            let late = run(&stitcher, &case.prefill_body, &chunks, Some(at));
            prop_assert_eq!(&late.end, &Ok(()), "prefill after {} chunks", at);
            prop_assert_eq!(&late.out, &early.out, "prefill after {} chunks", at);
            // What a stitcher given the prefill first had sent by then, up
            // to the first rows event.
            let mut sent = Vec::new();
            let mut first = StreamStitcher::new(stitcher.clone(), case.prefill_body.clone()).unwrap();
            for chunk in &chunks[..at] {
                first.feed(chunk, &mut sent).unwrap();
            }
            let upto = sent.len().min(rows_start);
            prop_assert_eq!(&late.before[..], &case.stream[..upto], "prefill after {} chunks", at);
        }
    }

    /// SL5, errors: a stream that fails, fails the same way whenever the
    /// prefill comes, after the same bytes out.
    #[test]
    fn sl5_errors_do_not_depend_on_when_the_prefill_comes(
        case in streams(knobs(), StreamStyle::default()),
        fault in 0..3usize,
        pick in any::<prop::sample::Index>(),
    ) {
        let Faulted { stream, prefill, kind, .. } =
            faulted(&case, fault, pick.index(case.rows_events.len()));
        let chunks: Vec<&[u8]> = stream.chunks(7).collect();
        let stitcher = Stitcher::new();
        let early = run(&stitcher, &prefill, &chunks, None);
        prop_assert_eq!(early.end.as_ref().map_err(Error::kind), Err(kind));
        for at in 0..=chunks.len() {
            let late = run(&stitcher, &prefill, &chunks, Some(at));
            prop_assert_eq!(&late.end, &early.end, "prefill after {} chunks", at);
            prop_assert_eq!(&late.out, &early.out, "prefill after {} chunks", at);
        }
    }
}

/// Whether `result` is the refusal of a stitcher that failed (or was
/// finished, `failed` false).
fn closed(result: &Result<(), Error>, failed: bool) -> bool {
    matches!(result.as_ref().map_err(Error::detail), Err(ErrorDetail::StreamClosed { failed: f, .. }) if *f == failed)
}

fn prefill() -> Vec<u8> {
    br#"{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#.to_vec()
}

const TOKEN: &[u8] = b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [7]}]}\n\n";
const ROWS: &[u8] = b"data: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AAAABAUG\", \"shape\": [2, 1, 3], \"start\": 0, \"dtype\": \"uint8\"}}]}\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

#[test]
fn a_prefill_that_never_comes_is_an_error_at_finish_and_nothing_waiting_goes_out() {
    let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    let mut out = Vec::new();
    stream.feed(TOKEN, &mut out).unwrap();
    stream.feed(ROWS, &mut out).unwrap();
    stream.feed(TOKEN, &mut out).unwrap();
    stream.feed(&DONE[..6], &mut out).unwrap();
    assert_eq!(out, TOKEN);
    assert_eq!(stream.buffered(), ROWS.len() + TOKEN.len() + 6);
    assert!(!stream.has_prefill());
    let err = stream.finish(&mut out).unwrap_err();
    let waited = (ROWS.len() + TOKEN.len() + 6) as u64;
    assert!(
        matches!(err.detail(), ErrorDetail::StreamPrefillMissing { held, .. } if *held == waited),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::StreamPrefillMissing);
    assert_eq!(out, TOKEN);
    assert_eq!(stream.buffered(), 0);
    let again = stream.give_prefill(prefill(), &mut out);
    assert!(closed(&again, true), "{again:?}");
}

#[test]
fn a_stream_without_rows_still_needs_its_prefill_at_finish() {
    let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    let mut out = Vec::new();
    stream.feed(TOKEN, &mut out).unwrap();
    stream.feed(DONE, &mut out).unwrap();
    assert_eq!(out, [TOKEN, DONE].concat());
    let end = stream.finish(&mut out);
    assert!(
        matches!(
            end.as_ref().map_err(Error::detail),
            Err(ErrorDetail::StreamPrefillMissing { held: 0, .. })
        ),
        "{end:?}"
    );
    // Given, the same stream finishes.
    let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    let mut out = Vec::new();
    stream.feed(TOKEN, &mut out).unwrap();
    stream.give_prefill(prefill(), &mut out).unwrap();
    stream.feed(DONE, &mut out).unwrap();
    assert_eq!(stream.finish(&mut out), Ok(()));
    assert_eq!(out, [TOKEN, DONE].concat());
}

#[test]
fn a_prefill_given_twice_is_refused_and_closes_the_stitcher() {
    let mut out = Vec::new();
    let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    stream.give_prefill(prefill(), &mut out).unwrap();
    let err = stream.give_prefill(prefill(), &mut out).unwrap_err();
    assert!(
        matches!(err.detail(), ErrorDetail::StreamPrefillRepeated { .. }),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::StreamPrefillRepeated);
    assert_eq!(err.location().side(), pd_stitch::Side::Prefill);
    assert!(closed(&stream.feed(TOKEN, &mut out), true));
    // One given to `new` counts.
    let mut stream = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let again = stream.give_prefill(prefill(), &mut out);
    assert!(
        matches!(
            again.as_ref().map_err(Error::detail),
            Err(ErrorDetail::StreamPrefillRepeated { .. })
        ),
        "{again:?}"
    );
    assert!(out.is_empty());
}

#[test]
fn a_late_prefill_that_is_not_json_is_refused_and_nothing_waiting_goes_out() {
    let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    let mut out = Vec::new();
    stream.feed(ROWS, &mut out).unwrap();
    stream.feed(DONE, &mut out).unwrap();
    assert!(out.is_empty());
    let err = stream
        .give_prefill(&b"{\"choices\": ["[..], &mut out)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Json);
    assert_eq!(err.location().side(), pd_stitch::Side::Prefill);
    assert!(out.is_empty());
    assert!(closed(&stream.finish(&mut out), true));
}

#[test]
fn a_prefill_given_after_finish_is_refused() {
    let mut stream = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    stream.feed(DONE, &mut out).unwrap();
    stream.finish(&mut out).unwrap();
    assert!(closed(&stream.give_prefill(prefill(), &mut out), false));
}

#[test]
fn what_waits_is_counted_in_the_buffers_and_let_go_once_stitched() {
    let mut stream = StreamStitcher::awaiting_prefill(Stitcher::new());
    let mut out = Vec::new();
    stream.feed(ROWS, &mut out).unwrap();
    stream.feed(DONE, &mut out).unwrap();
    assert_eq!(stream.buffered(), ROWS.len() + DONE.len());
    assert!(stream.capacity() >= ROWS.len() + DONE.len());
    stream.give_prefill(prefill(), &mut out).unwrap();
    assert_eq!(stream.buffered(), 0);
    stream.finish(&mut out).unwrap();
    let early = {
        let mut s = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
        let mut o = Vec::new();
        s.feed(&[ROWS, DONE].concat(), &mut o).unwrap();
        s.finish(&mut o).unwrap();
        o
    };
    assert_eq!(out, early);
}

fn fixture(path: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/engines/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The real engines' streams, the prefill given after every chunk of 64
/// bytes: vLLM 0.32's `.npy`, placed by the tokens of the whole stream
/// (counted while the prefill was awaited), and SGLang's `/generate`, whose
/// prefill answers after the decode's first bytes when both are sent at
/// once. The output is the one with the prefill first, and its rows are
/// the colocated server's.
#[test]
fn the_engines_streams_take_their_prefill_at_any_point() {
    let cases = [
        ("vllm/p45/prefill.json", "vllm/p45/decode.sse", None),
        ("vllm/p45/prefill.json", "vllm/p45/decode-usage.sse", None),
        ("vllm/p70/prefill.json", "vllm/p70/decode.sse", None),
        (
            "sglang/prefill.json",
            "sglang/decode_stream.sse",
            Some((3, 2)),
        ),
    ];
    for (prefill, stream, row_shape) in cases {
        let prefill = fixture(prefill);
        let input = fixture(stream);
        let stitcher = match row_shape {
            Some((layers, top_k)) => Stitcher::new().row_shape(layers, top_k),
            None => Stitcher::new(),
        };
        let chunks: Vec<&[u8]> = input.chunks(64).collect();
        let early = run(&stitcher, &prefill, &chunks, None);
        assert_eq!(early.end, Ok(()), "{stream}");
        assert_ne!(early.out, input, "{stream}: the rows event was stitched");
        for at in 0..=chunks.len() {
            let late = run(&stitcher, &prefill, &chunks, Some(at));
            assert_eq!(late.end, Ok(()), "{stream}, prefill after {at} chunks");
            assert_eq!(late.out, early.out, "{stream}, prefill after {at} chunks");
        }
        if row_shape.is_some() {
            // The stitched rows are the colocated server's.
            let text = String::from_utf8(early.out).unwrap();
            let last = text
                .split("\n\n")
                .filter_map(|e| e.strip_prefix("data: "))
                .filter(|d| d.starts_with('{'))
                .last()
                .unwrap();
            let last: Value = serde_json::from_str(last).unwrap();
            let colocated: Value =
                serde_json::from_slice(&fixture("sglang/colocated.json")).unwrap();
            assert_eq!(
                last["meta_info"]["routed_experts"], colocated["meta_info"]["routed_experts"],
                "{stream}"
            );
        }
    }
}
