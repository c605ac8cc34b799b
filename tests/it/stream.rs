//! `pd_stitch::stream`: the laws of SPEC section 11 (SL1-SL4) over generated
//! decode streams of every framing, cut into random chunks, and every error
//! path. The event reader that judges the output is
//! `pd_stitch::testing::stream::events`, written apart from the stitcher (a
//! byte at a time).

use pd_stitch::stream::StreamStitcher;
use pd_stitch::testing::stream::{events, streams, verify_streamed, StreamCase, StreamStyle};
use pd_stitch::testing::Knobs;
use pd_stitch::{Error, ErrorDetail, ErrorKind, Stitch, Stitcher};
use proptest::prelude::*;

/// The generated streams' knobs (shared with `stream_late`).
pub(crate) fn knobs() -> Knobs {
    Knobs {
        prompt: 1..=24,
        completion: 1..=16,
        choices: 1..=3,
        ..Knobs::engine(pd_stitch::sim::Engine::Vllm)
    }
}

/// Feeds `chunks` and finishes: the output, or the error with what was
/// output before it.
fn run<'a>(
    prefill: &[u8],
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<u8>, Result<(), Error>) {
    let mut stitcher = match StreamStitcher::new(Stitcher::new(), prefill.to_vec()) {
        Ok(s) => s,
        Err(err) => return (Vec::new(), Err(err)),
    };
    let mut out = Vec::new();
    for chunk in chunks {
        if let Err(err) = stitcher.feed(chunk, &mut out) {
            return (out, Err(err));
        }
    }
    let result = stitcher.finish(&mut out);
    (out, result)
}

/// The stream fed whole.
fn whole(case: &StreamCase) -> Vec<u8> {
    let (out, result) = run(&case.prefill_body, [&case.stream[..]]);
    assert_eq!(result, Ok(()));
    out
}

/// `merged` with every CR LF and lone CR made LF: how a merged text's line
/// breaks read back from `data:` lines.
fn lf(merged: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < merged.len() {
        if merged[i] == b'\r' {
            out.push(b'\n');
            if merged.get(i + 1) == Some(&b'\n') {
                i += 1;
            }
        } else {
            out.push(merged[i]);
        }
        i += 1;
    }
    out
}

proptest! {
    #![proptest_config(crate::support::config("stream"))]

    /// SL1: every split of the stream into chunks (sizes 1 to the whole)
    /// gives the same output; and one byte at a time too.
    #[test]
    fn sl1_every_chunking_gives_the_same_output(case in streams(knobs(), StreamStyle::default())) {
        let expected = whole(&case);
        let (out, result) = run(&case.prefill_body, case.chunks());
        prop_assert_eq!(result, Ok(()));
        prop_assert_eq!(&out, &expected);
        let (bytewise, result) = run(&case.prefill_body, case.stream.chunks(1));
        prop_assert_eq!(result, Ok(()));
        prop_assert_eq!(&bytewise, &expected);
    }

    /// SL2: the output is the input with only the rows events' data replaced
    /// by the non-streaming bytes merge of that data (its line breaks read
    /// back as LF); the rows gathered back equal the colocated truth.
    #[test]
    fn sl2_only_the_rows_events_data_changes(case in streams(knobs(), StreamStyle::default())) {
        let out = whole(&case);
        let (want, want_loose) = events(&case.stream);
        let (got, got_loose) = events(&out);
        prop_assert_eq!(want.len(), got.len());
        prop_assert_eq!(want_loose.len(), got_loose.len());
        for (w, g) in want_loose.iter().zip(&got_loose) {
            prop_assert_eq!(&case.stream[w.clone()], &out[g.clone()]);
        }
        for (k, (w, g)) in want.iter().zip(&got).enumerate() {
            if case.rows_events.contains(&k) {
                let mut merged = w.data.clone().unwrap_or_default();
                prop_assert_eq!(
                    Stitcher::new().merge_bytes(&case.prefill_body, &mut merged, Stitch::ForPd),
                    Ok(true)
                );
                prop_assert_eq!(g.data.clone(), Some(lf(&merged)), "event {}", k);
                prop_assert_eq!(&w.other_lines, &g.other_lines);
            } else {
                prop_assert_eq!(&case.stream[w.raw.clone()], &out[g.raw.clone()], "event {}", k);
            }
        }
        // Nothing else: the events and the loose bytes tile the output.
        let covered: usize = got.iter().map(|e| e.raw.len()).sum::<usize>()
            + got_loose.iter().map(|r| r.len()).sum::<usize>();
        prop_assert_eq!(covered, out.len());
        verify_streamed(&case, &out)?;
    }

    /// SL3: once a complete event has been fed (its blank line's first
    /// line-end byte), it has been emitted, with every event before it.
    #[test]
    fn sl3_a_complete_event_has_been_emitted(case in streams(knobs(), StreamStyle::default())) {
        let out = whole(&case);
        let (want, _) = events(&case.stream);
        let (got, _) = events(&out);
        for (w, g) in want.iter().zip(&got) {
            let fed = &case.stream[..w.raw.end];
            let mut stitcher = StreamStitcher::new(Stitcher::new(), case.prefill_body.clone()).unwrap();
            let mut early = Vec::new();
            let cuts: Vec<usize> = case.cuts.iter().copied().filter(|&c| c < fed.len()).collect();
            let mut from = 0;
            for cut in cuts.into_iter().chain([fed.len()]) {
                stitcher.feed(&fed[from..cut], &mut early).unwrap();
                from = cut;
            }
            prop_assert_eq!(&early[..], &out[..g.raw.end]);
        }
    }

    /// SL4: an error leaves what was emitted a prefix of what the stream up
    /// to the failing event gives, and every later call is refused.
    #[test]
    fn sl4_an_error_leaves_a_prefix(
        case in streams(knobs(), StreamStyle::default()),
        fault in 0..3usize,
        pick in any::<prop::sample::Index>(),
    ) {
        let Faulted { stream, prefill, kind: expect_kind, failing_start } =
            faulted(&case, fault, pick.index(case.rows_events.len()));
        if fault == 0 {
            let (out, result) = run(&prefill, stream.chunks(7));
            match result.map_err(Error::into_detail) {
                Err(ErrorDetail::StreamEvent { error, .. }) => {
                    prop_assert_eq!(error.kind(), ErrorKind::MissingPrefillField);
                }
                other => prop_assert!(false, "{:?}", other),
            }
            prop_assert_eq!(&out[..], &stream[..failing_start]);
            return Ok(());
        }
        let (out, result) = run(&case.prefill_body, stream.chunks(7));
        prop_assert_eq!(result.as_ref().map_err(Error::kind), Err(expect_kind));
        let (good, ok) = run(&case.prefill_body, [&stream[..failing_start]]);
        prop_assert_eq!(ok, Ok(()));
        prop_assert!(good.starts_with(&out), "emitted output is not a prefix");
        // Refused after the error.
        let mut stitcher = StreamStitcher::new(Stitcher::new(), case.prefill_body.clone()).unwrap();
        let mut sink = Vec::new();
        let mut failed = false;
        for chunk in stream.chunks(7) {
            if stitcher.feed(chunk, &mut sink).is_err() {
                failed = true;
                break;
            }
        }
        if !failed {
            prop_assert!(stitcher.finish(&mut sink).is_err());
        }
        let refused = stitcher.feed(b"data: x\n\n", &mut sink);
        prop_assert!(matches!(refused.as_ref().map_err(Error::detail), Err(ErrorDetail::StreamClosed { failed: true, .. })), "{:?}", refused);
    }
}

/// A generated stream with one of SL4's faults, and how it fails.
pub(crate) struct Faulted {
    pub(crate) stream: Vec<u8>,
    pub(crate) prefill: Vec<u8>,
    pub(crate) kind: ErrorKind,
    /// Where the failing event starts: what goes out before it is what the
    /// stream up to there gives.
    pub(crate) failing_start: usize,
}

/// `case` with fault 0 (a prefill without rows: the first rows event fails
/// to stitch), 1 (its `pick`-th rows event twice) or 2 (the stream cut
/// inside that event).
pub(crate) fn faulted(case: &StreamCase, fault: usize, pick: usize) -> Faulted {
    let (want, _) = events(&case.stream);
    let event = want[case.rows_events[pick]].raw.clone();
    let mut stream = case.stream.clone();
    let mut prefill = case.prefill_body.clone();
    let (kind, failing_start) = match fault {
        0 => {
            prefill = b"{\"choices\": [{}]}".to_vec();
            (ErrorKind::StreamEvent, want[case.rows_events[0]].raw.start)
        }
        1 => {
            let copy = stream[event.clone()].to_vec();
            let after = if stream[event.end - 1] == b'\r' && stream.get(event.end) == Some(&b'\n') {
                event.end + 1
            } else {
                event.end
            };
            stream.splice(after..after, copy);
            (ErrorKind::StreamRowsRepeated, after)
        }
        _ => {
            stream.truncate(event.end - 1);
            (ErrorKind::StreamUnfinished, event.start)
        }
    };
    Faulted {
        stream,
        prefill,
        kind,
        failing_start,
    }
}

fn prefill() -> Vec<u8> {
    br#"{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#.to_vec()
}

const ROWS: &[u8] = br#"data: {"choices": [{"index": 0, "routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;

#[test]
fn a_prefill_that_is_not_json_is_refused_at_construction() {
    let err = StreamStitcher::new(Stitcher::new(), b"{\"choices\": [".to_vec()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Json);
    assert!(
        err.to_string()
            .starts_with("prefill response: invalid JSON"),
        "{err}"
    );
}

#[test]
fn a_rows_event_that_fails_names_the_event_and_the_inner_error() {
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    stitcher
        .feed(b"data: {\"choices\": [{\"index\": 0}]}\n\n", &mut out)
        .unwrap();
    let bad = br#"data: {"choices": [{"index": 0, "routed_experts": {"data": "AAA*", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;
    let mut event = bad.to_vec();
    event.extend_from_slice(b"\n\n");
    let err = stitcher.feed(&event, &mut out).unwrap_err();
    match err.detail() {
        ErrorDetail::StreamEvent {
            event,
            offset,
            error,
            ..
        } => {
            assert_eq!((*event, *offset), (1, 35));
            assert_eq!(error.kind(), ErrorKind::Base64);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.kind(), ErrorKind::StreamEvent);
    assert_eq!(
        err.location().to_string(),
        "decode choices[0].routed_experts.data"
    );
    assert!(
        err.to_string().starts_with(
            "stream event 1 (at byte 35): decode choices[0].routed_experts.data: invalid base64"
        ),
        "{err}"
    );
    assert_eq!(out, b"data: {\"choices\": [{\"index\": 0}]}\n\n");
    assert!(matches!(
        stitcher.finish(&mut out).map_err(Error::into_detail),
        Err(ErrorDetail::StreamClosed { failed: true, .. })
    ));
}

#[test]
fn two_rows_events_for_one_choice_are_refused() {
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    let mut two = ROWS.to_vec();
    two.extend_from_slice(b"\n\n");
    let len = two.len();
    two.extend_from_slice(&two.clone());
    let err = stitcher.feed(&two, &mut out).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StreamRowsRepeated);
    assert_eq!(
        err.to_string(),
        format!("stream event 1 (at byte {len}): rows for choice 0 again (event 0 had them); a choice's rows come on one event")
    );
    // The first went out, stitched (its shape written `[2,1,3]`).
    assert!(out.starts_with(
        b"data: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AQIDBAUG\""
    ));
    assert_eq!(out.len(), len - 2);
}

#[test]
fn a_stream_that_ends_inside_a_rows_event_is_an_error_and_other_ends_pass() {
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    stitcher.feed(b"data: [DONE]\n\n", &mut out).unwrap();
    stitcher.feed(&ROWS[..60], &mut out).unwrap();
    assert_eq!(stitcher.buffered(), 60);
    let err = stitcher.finish(&mut out).unwrap_err();
    assert!(
        matches!(
            err.detail(),
            ErrorDetail::StreamUnfinished {
                offset: 14,
                len: 60,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(out, b"data: [DONE]\n\n");
    // An unfinished event that cannot carry rows goes out as it came.
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    stitcher.feed(b"data: [DONE]\n", &mut out).unwrap();
    assert!(out.is_empty());
    stitcher.finish(&mut out).unwrap();
    assert_eq!(out, b"data: [DONE]\n");
    assert!(matches!(
        stitcher.feed(b"x", &mut out).map_err(Error::into_detail),
        Err(ErrorDetail::StreamClosed { failed: false, .. })
    ));
}

#[test]
fn sglang_rows_are_found_by_their_keys() {
    // SGLang's /generate finished chunk, and chat's sglext event: rows, so
    // they are never passed on unstitched.
    let prefill = br#"{"text": "a", "meta_info": {"prompt_tokens": 2, "completion_tokens": 1, "routed_experts": "AQAAAA=="}}"#;
    for event in [
        &br#"data: {"text": "b", "meta_info": {"prompt_tokens": 2, "completion_tokens": 2, "routed_experts": "AQAAAAIAAAA="}}"#[..],
        &br#"data: {"choices": [], "sglext": {"routed_experts": "AQAAAAIAAAA="}}"#[..],
        &br#"data: {"choices": [{"index": 0, "sgl_ext": {"routed_experts": "AQAAAAIAAAA="}}]}"#[..],
        &br#"data: {"choices": [], "sgl\u0065xt": {"routed_experts": "AQAAAAIAAAA="}}"#[..],
    ] {
        let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill.to_vec()).unwrap();
        let mut out = Vec::new();
        let mut bytes = event.to_vec();
        bytes.extend_from_slice(b"\n\n");
        match stitcher.feed(&bytes, &mut out) {
            // /generate's chunk has its counts: the P/D merge places it
            // (SPEC section 10; one id a row, full-length from position 1).
            Ok(()) if event.starts_with(br#"data: {"text""#) => {
                assert_eq!(out, bytes, "the merged rows are the prefill's id 1, then the decode's 2");
            }
            Ok(()) => panic!("rows without counts were passed on"),
            Err(err) => {
                assert!(
                    matches!(err.kind(), ErrorKind::StreamUnstitched | ErrorKind::StreamEvent),
                    "{err}"
                );
                assert!(out.is_empty());
            }
        }
    }
}

#[test]
fn events_without_rows_are_never_merged() {
    // A choice without rows would get the prefill's segments from the merge,
    // or fail MissingDecodeRows: such events pass as they came, however
    // their keys are spelled.
    let prefill = br#"{"choices": [{"payload": [{"field": "routed_experts", "file": "p", "offset": 0, "pos": 0, "rows": 1, "dtype": "uint8", "shape": [1]}]}]}"#;
    let stream: &[u8] = b"data: {\"choices\": [{\"index\": 0, \"payload\": []}]}\n\n\
data: {\"choices\": [{\"index\": 0, \"text\": \"routed_experts \\u00e9\", \"routed_experts\": null}]}\n\n\
data: {\"choices\": [{\"index\": 0, \"payload\": [{\"field\": \"sampling_mask\"}]}]}\n\n\
data: not json, payload\n\n\
event: payload\n\n";
    let (out, result) = run(prefill, [stream]);
    assert_eq!(result, Ok(()));
    assert_eq!(out, stream);
    // An escaped key is still the key: this one carries rows.
    let escaped: &[u8] = b"data: {\"choices\": [{\"index\": 0, \"pay\\u006coad\": [{\"field\": \"routed_experts\", \"file\": \"d\", \"offset\": 0, \"pos\": 0, \"rows\": 2, \"dtype\": \"uint8\", \"shape\": [1]}]}]}\n\n";
    let (out, result) = run(prefill, [escaped]);
    assert_eq!(result, Ok(()));
    assert_ne!(out, escaped);
    assert!(out.starts_with(b"data: {\"choices\": [{\"index\": 0, \"pay\\u006coad\": [{\"field\": \"routed_experts\", \"file\": \"p\""));
}

#[test]
fn memory_is_bounded_by_the_largest_event() {
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    let big = format!("data: {{\"text\": \"{}\"}}\n\n", "x".repeat(100_000));
    // A big event a byte of it at a time, then many small ones.
    for chunk in big.as_bytes().chunks(1000) {
        stitcher.feed(chunk, &mut out).unwrap();
        assert!(stitcher.buffered() <= big.len());
    }
    let small = b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [1]}]}\n\n";
    for _ in 0..10_000 {
        stitcher.feed(&small[..20], &mut out).unwrap();
        stitcher.feed(&small[20..], &mut out).unwrap();
    }
    assert_eq!(stitcher.buffered(), 0);
    // The buffers are at most twice the largest event (a Vec's doubling),
    // plus the prefill, however long the stream.
    assert!(
        stitcher.capacity() <= 2 * big.len() + prefill().len(),
        "{}",
        stitcher.capacity()
    );
    assert_eq!(stitcher.events(), 10_001);
}

#[test]
fn a_rows_event_keeps_its_other_lines_and_line_ends() {
    let mut event = b": note\r\nid: 3\rdata:".to_vec();
    event.extend_from_slice(&ROWS[5..]);
    event.extend_from_slice(b"\r\nretry: 5\r\r\n");
    let (out, result) = run(&prefill(), [&event[..]]);
    assert_eq!(result, Ok(()));
    let expected = b": note\r\nid: 3\rdata: {\"choices\": [{\"index\": 0, \"routed_experts\": {\"data\": \"AQIDBAUG\", \"shape\": [2,1,3], \"start\": 0, \"dtype\": \"uint8\"}}]}\r\nretry: 5\r\r\n";
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(expected)
    );
}

#[test]
fn a_streamed_item_of_an_sglang_batch_is_refused_not_misplaced() {
    // A batch's prefill is an array of outputs; a stream's event is one
    // output. Which of the prefill's items it is the stitcher does not
    // guess: the merge refuses the shapes (Q1), typed, and nothing of the
    // event goes out.
    let prefill = br#"[{"text": "", "meta_info": {"prompt_tokens": 2, "completion_tokens": 1, "routed_experts": "AQAAAAIAAAA="}}, {"text": "", "meta_info": {"prompt_tokens": 2, "completion_tokens": 1, "routed_experts": "AwAAAAQAAAA="}}]"#;
    let before: &[u8] = b"data: {\"index\": 1, \"text\": \"x\", \"meta_info\": {\"prompt_tokens\": 2, \"completion_tokens\": 1}}\n\n";
    let event: &[u8] = b"data: {\"index\": 1, \"text\": \"xy\", \"meta_info\": {\"prompt_tokens\": 2, \"completion_tokens\": 2, \"routed_experts\": \"AAAAAAAAAAAHAAAA\"}}\n\n";
    let (out, result) = run(prefill, [before, event]);
    let err = result.expect_err("an item of a batch is not placed");
    assert_eq!(err.kind(), ErrorKind::StreamEvent, "{err}");
    let ErrorDetail::StreamEvent { error, .. } = err.detail() else {
        unreachable!("the kind says so")
    };
    assert_eq!(error.kind(), ErrorKind::Structure, "{err}");
    assert_eq!(out, before, "the event before it went out, nothing of it");
}

/// What a part of [`framed`]'s stream is, as the standard reads it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Part {
    /// The byte-order mark: held until whole, then passed on.
    Bom,
    /// A byte of no event (the `\n` of a blank line's `\r\n`): passed on
    /// as it arrives.
    Loose,
    /// An event, held until its blank line's first byte has arrived.
    Event,
}

const MERGED: &[u8] = br#"data: {"choices": [{"index": 0, "routed_experts": {"data": "AQIDBAUG", "shape": [2,1,3], "start": 0, "dtype": "uint8"}}]}"#;

/// A stream of every framing case, cut into its parts by hand: each part's
/// kind, its bytes in, and its bytes out (the rows event's merged by hand:
/// the prefill's row `[1, 2, 3]` then the decode's second `[4, 5, 6]`).
/// Seven events (0-6; 5 carries rows), a mark and two loose bytes.
fn framed() -> Vec<(Part, Vec<u8>, Vec<u8>)> {
    let same = |part: Part, bytes: &[u8]| (part, bytes.to_vec(), bytes.to_vec());
    let with = |line: &[u8], end: &[u8]| [line, end].concat();
    vec![
        same(Part::Bom, b"\xEF\xBB\xBF"),
        // 0: a CRLF line, then a blank line of CR whose LF follows it.
        same(Part::Event, b"data: a\r\n\r"),
        same(Part::Loose, b"\n"),
        // 1, 2: a field other than data; a comment ended by CRs.
        same(Part::Event, b"id: 1\n\n"),
        same(Part::Event, b": c\r\r"),
        // 3: two data lines.
        same(Part::Event, b"data: b\rdata: c\n\n"),
        // 4: a blank line alone (it dispatches nothing, but ends an event).
        same(Part::Event, b"\n"),
        // 5: the rows, one line of CRLF, a blank line of CR, its LF after.
        (Part::Event, with(ROWS, b"\r\n\r"), with(MERGED, b"\r\n\r")),
        same(Part::Loose, b"\n"),
        // 6.
        same(Part::Event, b"data: [DONE]\r\r"),
    ]
}

/// For a stream of `parts` fed up to byte `cut`: how many bytes of the
/// output have gone out, how many the stitcher holds, how many events it has
/// completed. A part has gone out once its last byte has been fed (a mark
/// once whole); the part `cut` falls inside is held.
fn fed_up_to(parts: &[(Part, Vec<u8>, Vec<u8>)], cut: usize) -> (usize, usize, u64) {
    let (mut start, mut emitted, mut events) = (0, 0, 0);
    for (part, bytes, out) in parts {
        let end = start + bytes.len();
        if end <= cut {
            emitted += out.len();
            events += u64::from(*part == Part::Event);
        } else {
            return (emitted, cut - start, events);
        }
        start = end;
    }
    (emitted, 0, events)
}

#[test]
fn every_cut_of_a_framed_stream_emits_holds_and_counts_what_the_standard_says() {
    let parts = framed();
    let stream: Vec<u8> = parts
        .iter()
        .flat_map(|(_, bytes, _)| bytes.clone())
        .collect();
    let expected: Vec<u8> = parts.iter().flat_map(|(_, _, out)| out.clone()).collect();
    assert_eq!(stream.len(), 185);
    for i in 0..=stream.len() {
        for j in i..=stream.len() {
            let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
            let mut out = Vec::new();
            for (from, to) in [(0, i), (i, j), (j, stream.len())] {
                stitcher.feed(&stream[from..to], &mut out).unwrap();
                let (emitted, held, events) = fed_up_to(&parts, to);
                assert_eq!(out, expected[..emitted], "cuts {i}, {j}: fed to {to}");
                assert_eq!(stitcher.buffered(), held, "cuts {i}, {j}: fed to {to}");
                assert_eq!(stitcher.events(), events, "cuts {i}, {j}: fed to {to}");
            }
            stitcher.finish(&mut out).unwrap();
            assert_eq!(out, expected, "cuts {i}, {j}");
            assert_eq!(stitcher.events(), 7);
        }
    }
}

#[test]
fn errors_after_every_framing_case_name_the_event_and_its_offset() {
    let parts = framed();
    let stream: Vec<u8> = parts
        .iter()
        .flat_map(|(_, bytes, _)| bytes.clone())
        .collect();
    let expected: Vec<u8> = parts.iter().flat_map(|(_, _, out)| out.clone()).collect();
    // Event 7, at byte 185: the rows of choice 0 again.
    let mut repeated = stream.clone();
    repeated.extend_from_slice(&[ROWS, b"\n\n"].concat());
    // The stream cut inside a rows event 7, 60 bytes of it.
    let mut cut_short = stream.clone();
    cut_short.extend_from_slice(&ROWS[..60]);
    for i in 0..=repeated.len() {
        let (out, result) = run(&prefill(), [&repeated[..i], &repeated[i..]]);
        match result.map_err(Error::into_detail) {
            Err(ErrorDetail::StreamRowsRepeated {
                event: 7,
                offset: 185,
                first_event: 5,
                ..
            }) => {}
            other => panic!("cut {i}: {other:?}"),
        }
        assert_eq!(out, expected, "cut {i}");
    }
    for i in 0..=cut_short.len() {
        let (out, result) = run(&prefill(), [&cut_short[..i], &cut_short[i..]]);
        match result.map_err(Error::into_detail) {
            Err(ErrorDetail::StreamUnfinished {
                offset: 185,
                len: 60,
                ..
            }) => {}
            other => panic!("cut {i}: {other:?}"),
        }
        assert_eq!(out, expected, "cut {i}");
    }
}

#[test]
fn a_rows_line_keeps_its_data_prefix_and_its_value_s_spaces() {
    // `data:` without its space, and `data: ` before a value that starts
    // with a space of its own: each written back as it came (SR2), the
    // value's space kept.
    let value = &ROWS[6..];
    let merged = &MERGED[6..];
    for (prefix, out_prefix) in [
        (&b"data:"[..], &b"data:"[..]),
        (b"data:  ", b"data:  "),
        (b"data: ", b"data: "),
    ] {
        let event = [prefix, value, b"\n\n"].concat();
        let (out, result) = run(&prefill(), [&event[..]]);
        assert_eq!(result, Ok(()));
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&[out_prefix, merged, b"\n\n"].concat()),
        );
    }
}

#[test]
fn a_rows_event_with_invalid_utf8_is_read_as_the_standard_decodes_it() {
    // The standard's decoder replaces an invalid byte with U+FFFD: the data
    // is then JSON with rows, stitched (its text as decoded).
    let event = [
        &br#"data: {"choices": [{"index": 0, "text": ""#[..],
        b"\xFF\", \"",
        &ROWS[33..],
        b"\n\n",
    ]
    .concat();
    let (out, result) = run(&prefill(), [&event[..]]);
    assert_eq!(result, Ok(()));
    let expected = "data: {\"choices\": [{\"index\": 0, \"text\": \"\u{FFFD}\", \"routed_experts\": {\"data\": \"AQIDBAUG\", \"shape\": [2,1,3], \"start\": 0, \"dtype\": \"uint8\"}}]}\n\n";
    assert_eq!(String::from_utf8_lossy(&out), expected);
}

#[test]
fn sglang_rows_in_an_array_are_found_and_null_ones_are_not() {
    // Data that is an array (SGLang answers a batch with one): each
    // element's slots are read. Against an object prefill the merge refuses
    // the shapes (Q1), so rows found are an error, and nothing goes out.
    let prefill = br#"{"text": "a", "meta_info": {"prompt_tokens": 2, "completion_tokens": 1, "routed_experts": "AQAAAA=="}}"#;
    for rows in [
        &br#"[{"text": "b", "meta_info": {"prompt_tokens": 2, "completion_tokens": 2, "routed_experts": "AQAAAAIAAAA="}}]"#[..],
        br#"[{"choices": [], "sglext": {"routed_experts": "AQAAAAIAAAA="}}]"#,
        br#"[{"choices": [{"index": 0, "sgl_ext": {"routed_experts": "AQAAAAIAAAA="}}]}]"#,
    ] {
        let event = [b"data: ", rows, b"\n\n"].concat();
        let (out, result) = run(prefill, [&event[..]]);
        assert!(
            matches!(
                result.as_ref().map_err(Error::kind),
                Err(ErrorKind::StreamEvent | ErrorKind::StreamUnstitched)
            ),
            "{}: {result:?}",
            String::from_utf8_lossy(rows)
        );
        assert!(out.is_empty());
    }
    // Null slots are no rows (an escape makes the prefilter parse it).
    let none: &[u8] = br#"data: [{"text": "\u0041", "meta_info": {"routed_experts": null}, "sglext": {"routed_experts": null}, "choices": [{"sgl_ext": {"routed_experts": null}}]}]

"#;
    let (out, result) = run(prefill, [none]);
    assert_eq!(result, Ok(()));
    assert_eq!(out, none);
}

#[test]
fn a_stream_that_starts_like_a_mark_or_with_a_blank_line_counts_its_events() {
    // A blank line first is an event of its own (it dispatches nothing).
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    let stream = b"\ndata: [DONE]\n\n";
    stitcher.feed(stream, &mut out).unwrap();
    assert_eq!((&out[..], stitcher.events()), (&stream[..], 2));
    // The first byte of a mark, then not the rest: it starts the first
    // line, which a line end then ends (it is not a blank line).
    for second in [&b"\ndata: [DONE]\n\n"[..], b"\rdata: [DONE]\r\r"] {
        let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
        let mut out = Vec::new();
        stitcher.feed(b"\xEF", &mut out).unwrap();
        stitcher.feed(second, &mut out).unwrap();
        assert_eq!(out, [&b"\xEF"[..], second].concat());
        assert_eq!(stitcher.events(), 1);
    }
}

#[test]
fn the_buffers_hold_a_rows_event_s_data_and_the_prefill_and_no_more() {
    // A rows event of two data lines, fed whole: its data is joined into the
    // stitcher's scratch buffer, which keeps its capacity after it.
    let (a, b) = (
        &br#"{"choices": [{"index": 0,"#[..],
        &br#""routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}]}"#[..],
    );
    let event = [b"data: ", a, b"\ndata: ", b, b"\n\n"].concat();
    let mut stitcher = StreamStitcher::new(Stitcher::new(), prefill()).unwrap();
    let mut out = Vec::new();
    stitcher.feed(&event, &mut out).unwrap();
    assert_eq!(
        out,
        [
            b"data: ",
            a,
            b"\ndata: ",
            &MERGED[6 + a.len() + 1..],
            b"\n\n"
        ]
        .concat()
    );
    let data = a.len() + 1 + b.len();
    let capacity = stitcher.capacity();
    assert!(capacity >= prefill().len() + data, "{capacity}");
    assert!(capacity <= 2 * event.len() + prefill().len(), "{capacity}");
}

#[test]
fn a_rows_event_over_several_lines_gets_one_piece_a_data_line_in_order() {
    // Five data lines between other lines, with every line end. The merge
    // writes the shape `[2,1,3]` on one line, so the merged text has four
    // pieces: data lines 1-3 take one each, with their own prefix and line
    // end; line 4 (not the last, one piece left) is dropped; line 5, the
    // last, takes the rest (SR2).
    let event: &[u8] = b"data: {\"choices\": [{\"index\": 0,\r\n\
: note\n\
data:\"routed_experts\": {\"data\": \"AAAABAUG\",\r\
id: 4\n\
data: \"shape\": [\n\
data: 2, 1, 3],\r\n\
data: \"start\": 0, \"dtype\": \"uint8\"}}]}\n\
retry: 1\n\
\r";
    let expected: &[u8] = b"data: {\"choices\": [{\"index\": 0,\r\n\
: note\n\
data:\"routed_experts\": {\"data\": \"AQIDBAUG\",\r\
id: 4\n\
data: \"shape\": [2,1,3],\n\
data: \"start\": 0, \"dtype\": \"uint8\"}}]}\n\
retry: 1\n\
\r";
    for chunks in [vec![event], event.chunks(1).collect()] {
        let (out, result) = run(&prefill(), chunks);
        assert_eq!(result, Ok(()));
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(expected)
        );
    }
}

/// `n` streams drawn from `streams(knobs(), framing)` by proptest's
/// deterministic runner.
fn drawn(framing: StreamStyle, n: usize) -> Vec<StreamCase> {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = streams(knobs(), framing);
    (0..n)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

fn contains(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle)
}

/// Whether `event`'s data is JSON with a choice that carries rows.
fn has_rows(event: &pd_stitch::testing::stream::Event) -> bool {
    let data = event.data.as_deref().unwrap_or_default();
    let value: serde_json::Value = serde_json::from_slice(data).unwrap_or_default();
    value["choices"].as_array().is_some_and(|choices| {
        choices
            .iter()
            .any(|c| !c["routed_experts"].is_null() || c["payload"].is_array())
    })
}

#[test]
fn the_generated_streams_hold_every_framing_case_and_not_always() {
    let cases = drawn(StreamStyle::default(), 400);
    let share = |what: &str, test: &dyn Fn(&StreamCase) -> bool| {
        let n = cases.iter().filter(|c| test(c)).count();
        assert!(0 < n && n < cases.len(), "{what}: {n} of {}", cases.len());
    };
    share("a mark", &|c| c.stream.starts_with(b"\xEF\xBB\xBF"));
    share("a prefill with CRLF whitespace", &|c| {
        contains(&c.prefill_body, b"\r\n")
    });
    share("a comment", &|c| contains(&c.stream, b": keep-alive"));
    share("event and id fields", &|c| {
        contains(&c.stream, b"event: chunk")
    });
    share("a retry field", &|c| contains(&c.stream, b"retry: 10"));
    share("data: with its space", &|c| contains(&c.stream, b"data: {"));
    share("data: without its space", &|c| {
        contains(&c.stream, b"data:{")
    });
    share("data over several lines", &|c| {
        [&b"{\n"[..], b"{\r"].iter().any(|end| {
            contains(&c.stream, &[b"data: ", *end].concat())
                || contains(&c.stream, &[b"data:", *end].concat())
        })
    });
    share("a blank line of LF after an LF", &|c| {
        let body = c.stream.len() - b"data: [DONE]\n\n".len();
        contains(&c.stream[..body], b"\n\n")
    });
    for (what, end) in [("CR", b'\r'), ("LF", b'\n')] {
        assert!(
            cases.iter().any(|c| {
                c.stream
                    .windows(2)
                    .any(|w| w[0] == end && (end == b'\n' || w[1] != b'\n') && w != b"\r\n")
            }),
            "a lone {what}"
        );
    }
    assert!(cases.iter().any(|c| contains(&c.stream, b"\r\n")), "CRLF");
    // Token events before each choice's rows event: 0 to `tokens` (3).
    let mut counts = std::collections::BTreeSet::new();
    for case in &cases {
        let (events, _) = events(&case.stream);
        let mut from = 0;
        for &k in &case.rows_events {
            counts.insert(k - from);
            from = k + 1;
        }
        // The numbers given are those of the events with rows; then the
        // usage event and [DONE].
        let with: Vec<usize> = (0..events.len())
            .filter(|&k| has_rows(&events[k]))
            .collect();
        assert_eq!(with, case.rows_events);
        assert_eq!(events.len(), from + 2);
        assert!(
            case.stream.ends_with(b"[DONE]\n\n")
                || case.stream.ends_with(b"[DONE]\r\r")
                || case.stream.ends_with(b"[DONE]\r\n\r\n")
        );
    }
    assert_eq!(counts, (0..=3).collect());
}

#[test]
fn without_variants_a_stream_is_plain_data_lines() {
    for case in drawn(
        StreamStyle {
            line_ends: vec!["\n"],
            variants: false,
            tokens: 0,
        },
        50,
    ) {
        // No mark, no other line, no pretty text: `data: ` and one line of
        // compact JSON an event, one rows event a choice, the usage event,
        // [DONE].
        assert_eq!(
            case.prefill_body,
            serde_json::to_vec(&case.case.prefill).unwrap()
        );
        let text = String::from_utf8(case.stream.clone()).unwrap();
        let lines: Vec<&str> = text.split("\n\n").collect();
        let choices = case.case.decode["choices"].as_array().unwrap().len();
        assert_eq!(lines.len(), choices + 3, "{text}");
        assert_eq!(lines[choices + 1], "data: [DONE]");
        assert_eq!(lines[choices + 2], "");
        for line in &lines[..=choices] {
            let json = line.strip_prefix("data: ").expect(line);
            assert!(!json.contains('\n') && !json.contains('\r'), "{line}");
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(json, serde_json::to_string(&value).unwrap());
        }
        assert_eq!(case.rows_events, (0..choices).collect::<Vec<_>>());
    }
}

proptest! {
    #![proptest_config(crate::support::config("stream"))]

    /// `verify_streamed` refuses an answer wrong in each way it checks: an
    /// event dropped, a byte outside the events changed, an event without
    /// rows changed, a rows event's other lines changed, its data not JSON
    /// or without choices, and the decode's stream passed on unstitched.
    #[test]
    fn verify_streamed_refuses_each_wrong_answer(case in streams(knobs(), StreamStyle::default())) {
        let out = whole(&case);
        prop_assert!(verify_streamed(&case, &out).is_ok());
        let (got, _) = events(&out);
        let message = |output: &[u8]| verify_streamed(&case, output).map_err(|m| m.message);
        let last = got.len() - 1;
        // [DONE] dropped.
        let dropped = &out[..got[last].raw.start];
        prop_assert_eq!(message(dropped), Err(format!("{last} events streamed, expected {}", last + 1)));
        // A mark added or removed.
        let marked = match out.strip_prefix(b"\xEF\xBB\xBF") {
            Some(rest) => rest.to_vec(),
            None => [&b"\xEF\xBB\xBF"[..], &out].concat(),
        };
        prop_assert_eq!(message(&marked), Err("bytes outside the events differ".to_string()));
        // [DONE] changed.
        let mut done = out.clone();
        let at = got[last].raw.start + b"data: [DONE".len() - 1;
        prop_assert_eq!(done[at], b'E');
        done[at] = b'F';
        prop_assert_eq!(message(&done), Err(format!("event {last} (without rows) changed")));
        // A rows event's lines: a comment added, then a data line that makes
        // its data not JSON, then its data without choices.
        let k = case.rows_events[0];
        let start = got[k].raw.start;
        let with = |line: &[u8]| [&out[..start], line, &out[start..]].concat();
        prop_assert_eq!(
            message(&with(b": x\n")),
            Err(format!("event {k}: lines other than data changed"))
        );
        let not_json = message(&with(b"data: x\n")).unwrap_err();
        prop_assert!(not_json.starts_with(&format!("event {k}: data is not JSON")), "{}", not_json);
        // Its data lines replaced by one `data: {}` (its other lines and its
        // blank line kept).
        let end = got[k].raw.end;
        let mut no_choices = out[..start].to_vec();
        no_choices.extend(got[k].other_lines.concat());
        no_choices.extend_from_slice(b"data: {}\n");
        no_choices.push(out[end - 1]);
        no_choices.extend_from_slice(&out[end..]);
        prop_assert_eq!(message(&no_choices), Err(format!("event {k}: no choices")));
        // The decode's own stream: its rows are not the colocated ones.
        prop_assert!(verify_streamed(&case, &case.stream).is_err());
    }
}

/// Compact rows are placed by their own `start`, whatever counts the
/// responses carry: beside a prefill with `token_ids` and
/// `usage.prompt_tokens` the stream counts the decode's tokens, and the
/// compact rows ignore them (only a `.npy` is placed by counts, SPEC
/// section 4a). The stream's rows event stitches exactly as the whole
/// decode response does.
#[test]
fn compact_rows_beside_counts_are_not_placed_by_the_counts() {
    let prefill = br#"{"choices": [{"index": 0, "token_ids": [7], "routed_experts": {"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}"#;
    let first = r#"{"choices": [{"index": 0, "token_ids": [7, 8]}]}"#;
    let rows = r#"{"choices": [{"index": 0, "token_ids": [9], "routed_experts": {"data": "AAAABwgJCgsM", "shape": [3, 1, 3], "start": 1, "dtype": "uint8"}}]}"#;
    let stream = format!("data: {first}\n\ndata: {rows}\n\ndata: [DONE]\n\n");
    let (out, result) = run(prefill, [stream.as_bytes()]);
    assert_eq!(result, Ok(()));

    let prefill_value: serde_json::Value = serde_json::from_slice(prefill).unwrap();
    let mut whole: serde_json::Value = serde_json::from_str(rows).unwrap();
    let merged = Stitcher::new().merge(&prefill_value, &mut whole, Stitch::ForPd);
    assert_eq!(merged, Ok(true));
    let out = String::from_utf8(out).unwrap();
    let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 3, "{out}");
    assert_eq!(events[0], format!("data: {first}"));
    let stitched: serde_json::Value =
        serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(stitched, whole);
    // The prefill's two rows, then the decode's from position 2.
    assert_eq!(
        stitched["choices"][0]["routed_experts"]["start"],
        serde_json::json!(0)
    );
}

/// A `.npy` three rows long, `uint8`, rows of `1 x 3`: ids 0 to 8.
const NPY_3X1X3: &str = "k05VTVBZAQB2AHsnZGVzY3InOiAnfHUxJywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDMsIDEsIDMpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAQIDBAUGBwg=";

/// A decode's `.npy` beside a compact prefill that carries counts fails on
/// the forms, streamed as whole. The stream once read the prefill's counts
/// only beside a `.npy`, so it refused this pair for a
/// `usage.prompt_tokens` that no streamed event carries (found by a
/// mutation run of `end_anchored.rs`).
#[test]
fn a_decode_npy_beside_a_compact_prefill_fails_on_the_forms_as_the_whole_does() {
    let prefill = br#"{"choices": [{"index": 0, "token_ids": [7], "routed_experts": {"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}"#;
    let first = r#"{"choices": [{"index": 0, "token_ids": [7, 8]}]}"#;
    let rows = format!(
        r#"{{"choices": [{{"index": 0, "token_ids": [9], "routed_experts": "{NPY_3X1X3}"}}]}}"#
    );
    let stream = format!("data: {first}\n\ndata: {rows}\n\ndata: [DONE]\n\n");
    let (out, result) = run(prefill, [stream.as_bytes()]);
    let whole_body = format!(
        r#"{{"choices": [{{"index": 0, "token_ids": [7, 8, 9], "routed_experts": "{NPY_3X1X3}"}}], "usage": {{"prompt_tokens": 2, "completion_tokens": 3}}}}"#
    );
    let prefill_value: serde_json::Value = serde_json::from_slice(prefill).unwrap();
    let mut whole: serde_json::Value = serde_json::from_str(&whole_body).unwrap();
    let whole_error = Stitcher::new()
        .merge(&prefill_value, &mut whole, Stitch::ForPd)
        .unwrap_err();
    assert_eq!(whole_error.kind(), ErrorKind::FormMismatch);
    match result.map_err(Error::into_detail) {
        Err(ErrorDetail::StreamEvent { event, error, .. }) => {
            assert_eq!(event, 1);
            assert_eq!(error, whole_error);
        }
        other => panic!("expected the rows event to fail on the forms, got {other:?}"),
    }
    assert_eq!(out, format!("data: {first}\n\n").into_bytes());
}
