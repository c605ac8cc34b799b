//! The bytes entry points (`pd_stitch::bytes`, SPEC section 8): laws B1-B4.
//!
//! Every generated pair is written out as text in a random style (compact or
//! indented, shuffled keys, escaped keys, `\/` in strings, a duplicate key
//! before the real one, a canary object of awkward spellings) by a writer of
//! this file's own, then merged through the bytes function and through the
//! `Value` function on what `serde_json` parses from the same texts:
//!
//! - B1: the same `Ok(bool)` or an error of the same variant at the same
//!   place; on `Ok(true)`, the new decode text parses to the `Value` result;
//! - B2: outside the replaced `payload` and `routed_experts` values of each
//!   choice, the output is the input byte for byte (found by walking both
//!   texts with the spans this file's writer recorded, and reading each
//!   replaced value with `serde_json`'s stream reader);
//! - B3: broken texts give an `ErrorDetail::Json`, the decode unchanged;
//! - B4: nothing panics, and anything but `Ok(true)` leaves the decode's bytes
//!   as they were.

use std::ops::Range;

use crate::support::*;
use pd_stitch::bytes::Buffer;
use pd_stitch::testing::{cases, Knobs};
use pd_stitch::Stitch;
use pd_stitch::{Error, ErrorDetail, ErrorKind, Stitcher};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

/// The canary: awkward spellings that a parse-and-serialize round trip would
/// change, and that must come out byte for byte.
const CANARY: &str =
    r#"{"n": 1.50E+2, "big": 18446744073709551616, "s": "caf\u00e9", "u": "\ud83d\ude00"}"#;
/// A string value that the writer replaces by [`CANARY`]'s text.
const CANARY_MARK: &str = "\u{1}canary";

/// How a text is written.
#[derive(Clone, Debug)]
struct Style {
    indent: bool,
    /// Object keys in a random order (by this seed) rather than sorted.
    shuffle: Option<u64>,
    /// Keys written with their first character as a `\u` escape.
    escape_keys: bool,
    /// `/` in strings written as `\/`.
    escape_slash: bool,
    /// Every object member preceded by the same key with a junk value.
    duplicate_keys: bool,
}

fn style() -> impl Strategy<Value = Style> {
    (
        any::<bool>(),
        proptest::option::of(any::<u64>()),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(indent, shuffle, escape_keys, escape_slash, duplicate_keys)| Style {
                indent,
                shuffle,
                escape_keys,
                escape_slash,
                duplicate_keys,
            },
        )
}

/// Where the stitched values of a decode choice are in the written text: the
/// last `payload` and `routed_experts` members' value spans, and the choice
/// object's span.
#[derive(Clone, Debug, Default)]
struct ChoiceSpans {
    object: Range<usize>,
    payload: Option<Range<usize>>,
    routed_experts: Option<Range<usize>>,
}

struct Writer<'s> {
    style: &'s Style,
    out: Vec<u8>,
    choices: Vec<ChoiceSpans>,
}

/// Where a value being written sits: what spans the writer records.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Root,
    Choices,
    Choice,
    Other,
}

impl Writer<'_> {
    fn newline(&mut self, depth: usize) {
        if self.style.indent {
            self.out.push(b'\n');
            self.out.extend(std::iter::repeat_n(b' ', 2 * depth));
        }
    }

    fn string(&mut self, s: &str, key: bool) {
        let text = serde_json::to_string(s).unwrap();
        let mut text = if self.style.escape_slash {
            text.replace('/', "\\/")
        } else {
            text
        };
        if key && self.style.escape_keys && s.is_ascii() && !s.is_empty() {
            let first = s.as_bytes()[0];
            if first != b'"' && first != b'\\' && first >= 0x20 {
                text = format!("\"\\u{:04x}{}", first, &text[2..]);
            }
        }
        self.out.extend_from_slice(text.as_bytes());
    }

    fn value(&mut self, v: &Value, place: Place, depth: usize) {
        match v {
            Value::String(s) if s == CANARY_MARK => self.out.extend_from_slice(CANARY.as_bytes()),
            Value::String(s) => self.string(s, false),
            Value::Array(items) => {
                self.out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.newline(depth + 1);
                    let start = self.out.len();
                    let child = if place == Place::Choices {
                        Place::Choice
                    } else {
                        Place::Other
                    };
                    if child == Place::Choice {
                        self.choices.push(ChoiceSpans::default());
                    }
                    self.value(item, child, depth + 1);
                    if child == Place::Choice {
                        if let Some(spans) = self.choices.last_mut() {
                            spans.object = start..self.out.len();
                        }
                    }
                }
                if !items.is_empty() {
                    self.newline(depth);
                }
                self.out.push(b']');
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                if let Some(seed) = self.style.shuffle {
                    keys.sort_by_key(|k| {
                        k.bytes().fold(seed, |h, b| {
                            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                        })
                    });
                }
                self.out.push(b'{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.newline(depth + 1);
                    if self.style.duplicate_keys {
                        // The same key first, with a junk value: a reader
                        // that takes the first one goes wrong.
                        self.string(key, true);
                        self.out.extend_from_slice(b": \"junk\",");
                        self.newline(depth + 1);
                    }
                    self.string(key, true);
                    self.out.push(b':');
                    if self.style.indent {
                        self.out.push(b' ');
                    }
                    let child = match (place, key.as_str()) {
                        (Place::Root, "choices") => Place::Choices,
                        _ => Place::Other,
                    };
                    let start = self.out.len();
                    self.value(&map[*key], child, depth + 1);
                    let span = start..self.out.len();
                    if place == Place::Choice {
                        if let Some(spans) = self.choices.last_mut() {
                            match key.as_str() {
                                "payload" => spans.payload = Some(span),
                                "routed_experts" => spans.routed_experts = Some(span),
                                _ => {}
                            }
                        }
                    }
                }
                if !map.is_empty() {
                    self.newline(depth);
                }
                self.out.push(b'}');
            }
            other => self
                .out
                .extend_from_slice(serde_json::to_string(other).unwrap().as_bytes()),
        }
    }
}

/// `value` as text in `style`, with the spans of the decode choices.
fn write(value: &Value, style: &Style) -> (Vec<u8>, Vec<ChoiceSpans>) {
    let mut writer = Writer {
        style,
        out: Vec::new(),
        choices: Vec::new(),
    };
    writer.value(value, Place::Root, 0);
    (writer.out, writer.choices)
}

/// The decode with the canary added at its root and in each choice (where a
/// decode is an object with a `choices` array).
fn with_canary(mut decode: Value) -> Value {
    if let Some(root) = decode.as_object_mut() {
        root.insert("canary".into(), json!(CANARY_MARK));
    }
    if let Some(choices) = decode.get_mut("choices").and_then(Value::as_array_mut) {
        for choice in choices {
            if let Some(choice) = choice.as_object_mut() {
                choice.insert("canary".into(), json!(CANARY_MARK));
            }
        }
    }
    decode
}

/// The three merges, as (name, what to stitch): each is run through
/// `Stitcher::merge`, `Stitcher::merge_bytes` and `Stitcher::merge_bytes_with`.
fn merges() -> [(&'static str, Stitch); 3] {
    [
        ("for_pd", Stitch::ForPd),
        ("payload", Stitch::ByHandle),
        ("inline", Stitch::Inline),
    ]
}

/// B2: `out` is `input` with only the recorded stitched values replaced, each
/// by a value equal to the one in `merged` (the Value path's result).
fn only_stitched_values_changed(
    input: &[u8],
    spans: &[ChoiceSpans],
    out: &[u8],
    merged: &Value,
) -> Result<(), TestCaseError> {
    // The replaced places in text order: a value span, or (payload absent)
    // the empty span before the choice's closing brace, where a member is
    // added.
    let mut places: Vec<(Range<usize>, usize, &str)> = Vec::new();
    for (i, choice) in spans.iter().enumerate() {
        if let Some(span) = &choice.routed_experts {
            places.push((span.clone(), i, "routed_experts"));
        }
        match &choice.payload {
            Some(span) => places.push((span.clone(), i, "payload")),
            None => {
                let end = choice.object.end - 1;
                places.push((end..end, i, "payload"));
            }
        }
    }
    places.sort_by_key(|(span, _, _)| span.start);
    let (mut at_in, mut at_out) = (0, 0);
    for (span, choice, key) in places {
        let expected = &merged["choices"][choice][key];
        if span.is_empty() && merged["choices"][choice].get(key).is_none() {
            continue; // nothing added where nothing was stitched
        }
        let kept = &input[at_in..span.start];
        prop_assert_eq!(
            out.get(at_out..at_out + kept.len()),
            Some(kept),
            "bytes before choices[{}].{} changed",
            choice,
            key
        );
        at_out += kept.len();
        if span.is_empty() {
            // An added member: `,"payload":` (or without the comma) and a value.
            let rest = &out[at_out..];
            let skip = if rest.first() == Some(&b',') { 1 } else { 0 };
            let head = br#""payload":"#;
            prop_assert_eq!(&rest[skip..skip + head.len()], &head[..]);
            at_out += skip + head.len();
        }
        let mut stream = serde_json::Deserializer::from_slice(&out[at_out..]).into_iter::<Value>();
        let value = stream.next();
        prop_assert!(
            matches!(value, Some(Ok(_))),
            "no value at choices[{}].{}",
            choice,
            key
        );
        prop_assert_eq!(
            &value.unwrap().unwrap(),
            expected,
            "choices[{}].{}",
            choice,
            key
        );
        at_out += stream.byte_offset();
        at_in = span.end;
    }
    prop_assert_eq!(
        &out[at_out..],
        &input[at_in..],
        "bytes after the last stitched value changed"
    );
    Ok(())
}

/// A decode at the start of a region of memory whose other bytes are junk,
/// as a [`Buffer`] the merge rewrites in place: it records what the merge
/// asks of it, and refuses lengths past `refuse_past`.
struct Region {
    memory: Vec<u8>,
    len: usize,
    refuse_past: usize,
    prepared: Vec<usize>,
    truncated: Vec<usize>,
    written: bool,
}

#[derive(Debug, PartialEq)]
enum RegionError {
    Merge(Error),
    Refused(usize),
}

impl From<Error> for RegionError {
    fn from(err: Error) -> RegionError {
        RegionError::Merge(err)
    }
}

impl Region {
    /// `decode` in memory of room for `room` bytes and more.
    fn new(decode: &[u8], room: usize, refuse_past: usize) -> Region {
        // Junk after the decode that a merge must never leave in its output.
        let mut memory = decode.to_vec();
        memory.resize(decode.len().max(room) + 64, b'#');
        Region {
            memory,
            len: decode.len(),
            refuse_past,
            prepared: Vec::new(),
            truncated: Vec::new(),
            written: false,
        }
    }
}

impl Buffer for Region {
    type Error = RegionError;
    fn bytes(&self) -> &[u8] {
        &self.memory[..self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.written = true;
        &mut self.memory[..self.len]
    }
    fn prepare(&mut self, len: usize) -> Result<(), RegionError> {
        self.prepared.push(len);
        if len > self.refuse_past || len > self.memory.len() {
            return Err(RegionError::Refused(len));
        }
        self.len = self.len.max(len);
        Ok(())
    }
    fn truncate(&mut self, len: usize) {
        self.truncated.push(len);
        self.len = len;
    }
}

/// `merge_bytes_in` on a [`Region`] gives what `merge_bytes` gives, `got`
/// and `out`: asked for the merged length once before anything is written,
/// shortened only when the merge is shorter, and untouched (nothing asked,
/// nothing written) when there is nothing to stitch or on error. A region
/// that refuses the merged length gets that refusal back, its bytes the
/// decode's.
fn check_in_place(
    stitcher: &Stitcher,
    ptext: &[u8],
    dtext: &[u8],
    what: Stitch,
    got: &Result<bool, Error>,
    out: &[u8],
    name: &str,
) -> Result<(), TestCaseError> {
    let mut region = Region::new(dtext, out.len(), usize::MAX);
    let result = stitcher.merge_bytes_in(ptext, &mut region, what);
    prop_assert_eq!(
        &result,
        &got.clone().map_err(RegionError::Merge),
        "{}",
        name
    );
    prop_assert_eq!(region.bytes(), out, "{}", name);
    if *got == Ok(true) {
        prop_assert_eq!(&region.prepared, &vec![out.len()], "{}", name);
        let shorter: Vec<usize> = (out.len() < dtext.len())
            .then_some(out.len())
            .into_iter()
            .collect();
        prop_assert_eq!(&region.truncated, &shorter, "{}", name);
        // Refused: the refusal, and the decode's bytes as they were.
        let mut tight = Region::new(dtext, out.len(), out.len() - 1);
        prop_assert_eq!(
            stitcher.merge_bytes_in(ptext, &mut tight, what),
            Err(RegionError::Refused(out.len())),
            "{}",
            name
        );
        prop_assert_eq!(tight.bytes(), dtext, "{}", name);
        prop_assert!(!tight.written && tight.truncated.is_empty(), "{}", name);
    } else {
        prop_assert!(
            region.prepared.is_empty() && region.truncated.is_empty() && !region.written,
            "{}: the buffer was asked or written without Ok(true)",
            name
        );
    }
    Ok(())
}

/// Checks B1, B2 and B4 for one pair written in two styles.
fn check(
    prefill: &Value,
    decode: &Value,
    ps: &Style,
    ds: &Style,
    stitcher: &Stitcher,
) -> Result<(), TestCaseError> {
    let decode = with_canary(decode.clone());
    let (ptext, _) = write(prefill, ps);
    let (dtext, spans) = write(&decode, ds);
    // The reference reads the same texts.
    let pvalue: Value = serde_json::from_slice(&ptext).expect("the writer writes JSON");
    let dvalue: Value = serde_json::from_slice(&dtext).expect("the writer writes JSON");
    for (name, what) in merges() {
        let mut merged = dvalue.clone();
        let expected = stitcher.merge(&pvalue, &mut merged, what);
        let mut out = dtext.clone();
        let got = stitcher.merge_bytes(&ptext, &mut out, what);
        // Into a buffer of the caller's: the same answer, the same bytes.
        let written = stitcher.merge_bytes_with(&ptext, &dtext, what, |stitched| {
            let mut buf = vec![0; stitched.len()];
            let wrong = vec![0; stitched.len() + 1];
            (
                stitched.write_into(&mut buf),
                buf,
                stitched.write_into(&mut wrong.clone()),
            )
        });
        check_in_place(stitcher, &ptext, &dtext, what, &got, &out, name)?;
        match (&got, written) {
            (Ok(true), Ok(Some((true, buf, false)))) => prop_assert_eq!(&buf, &out, "{}", name),
            (Ok(false), Ok(None)) => {}
            (Err(a), Err(b)) => prop_assert_eq!(a, &b, "{}", name),
            (got, written) => prop_assert!(
                false,
                "{}: {:?} vs {:?}",
                name,
                got,
                written.map(|w| w.map(|(ok, _, wrong)| (ok, wrong)))
            ),
        }
        match (&expected, &got) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{}", name),
            (Err(a), Err(b)) => {
                prop_assert_eq!(variant(a), variant(b), "{}: {} vs {}", name, a, b);
                prop_assert_eq!(a.location(), b.location(), "{}", name);
                prop_assert_eq!(a.to_string(), b.to_string(), "{}", name);
            }
            _ => prop_assert!(
                false,
                "{}: Value gives {:?}, bytes {:?}",
                name,
                expected,
                got
            ),
        }
        if got == Ok(true) {
            let reread: Value = serde_json::from_slice(&out).expect("the output is JSON");
            prop_assert_eq!(&reread, &merged, "{}", name);
            only_stitched_values_changed(&dtext, &spans, &out, &merged)?;
            prop_assert!(
                String::from_utf8_lossy(&out).matches(CANARY).count()
                    >= String::from_utf8_lossy(&dtext).matches(CANARY).count(),
                "{}: the canary changed",
                name
            );
        } else {
            prop_assert_eq!(
                &out,
                &dtext,
                "{}: the decode changed without Ok(true)",
                name
            );
        }
    }
    let has_value = stitcher.prefill_has_routed_experts(&pvalue);
    prop_assert_eq!(
        stitcher.prefill_bytes_has_routed_experts(&ptext),
        Ok(has_value)
    );
    Ok(())
}

/// Ways to break a text, each of which `serde_json` refuses too.
fn broken(text: &[u8], how: u8, at: prop::sample::Index) -> Vec<u8> {
    match how % 5 {
        0 => text[..at.index(text.len())].to_vec(),
        1 => [text, b" x"].concat(),
        2 => [&b"\xef\xbb\xbf"[..], text].concat(),
        3 => {
            let mut t = text.to_vec();
            if let Some(i) = t.iter().position(|&b| b == b':') {
                t[i] = b' ';
            }
            t
        }
        _ => [text, b"\xff"].concat(),
    }
}

fn writer_cases() -> impl Strategy<Value = (Value, Value)> {
    writer_pair().prop_map(|pair| (pair.prefill_json(), pair.decode_json()))
}

fn arbitrary_cases() -> impl Strategy<Value = (Value, Value)> {
    arbitrary_pair(false).prop_map(|pair| (pair.prefill_json(), pair.decode_json()))
}

/// The testing feature's cases: by handle, compact and npy, with hostile
/// extras; uint8 and uint16 rows.
fn row_cases() -> impl Strategy<Value = (Value, Value)> {
    cases(Knobs {
        prompt: 1..=24,
        completion: 1..=16,
        ..Knobs::engine(pd_stitch::sim::Engine::Vllm)
    })
    .prop_map(|case| (case.prefill, case.decode))
}

proptest! {
    #![proptest_config(config("bytes"))]

    #[test]
    fn b1_b2_by_handle_writer(pair in writer_cases(), ps in style(), ds in style()) {
        check(&pair.0, &pair.1, &ps, &ds, &Stitcher::new())?;
    }

    #[test]
    fn b1_b2_by_handle_arbitrary(pair in arbitrary_cases(), ps in style(), ds in style()) {
        check(&pair.0, &pair.1, &ps, &ds, &Stitcher::new().field(W))?;
    }

    #[test]
    fn b1_b2_every_form_with_hostile_extras(pair in row_cases(), ps in style(), ds in style()) {
        check(&pair.0, &pair.1, &ps, &ds, &Stitcher::new())?;
    }

    #[test]
    fn b1_b4_arbitrary_json(p in json_tree(), d in json_tree(), ps in style(), ds in style()) {
        check(&p, &d, &ps, &ds, &Stitcher::new().field(W))?;
    }

    #[test]
    fn b3_broken_text_is_a_json_error_and_changes_nothing(
        pair in row_cases(),
        ps in style(),
        ds in style(),
        on_decode in any::<bool>(),
        how in any::<u8>(),
        at in any::<prop::sample::Index>(),
    ) {
        let (mut ptext, _) = write(&pair.0, &ps);
        let (mut dtext, _) = write(&pair.1, &ds);
        let side = if on_decode {
            dtext = broken(&dtext, how, at);
            pd_stitch::Side::Decode
        } else {
            ptext = broken(&ptext, how, at);
            pd_stitch::Side::Prefill
        };
        let text = if on_decode { &dtext } else { &ptext };
        prop_assume!(serde_json::from_slice::<Value>(text).is_err());
        for (name, what) in merges() {
            let mut out = dtext.clone();
            let got = Stitcher::new().merge_bytes(&ptext, &mut out, what);
            let is_json_error = matches!(got.as_ref().map_err(Error::detail), Err(ErrorDetail::Json { side: s, .. }) if *s == side);
            prop_assert!(is_json_error, "{}: {:?}", name, got);
            prop_assert_eq!(&out, &dtext, "{}", name);
            check_in_place(&Stitcher::new(), &ptext, &dtext, what, &got, &dtext, name)?;
            let with = Stitcher::new().merge_bytes_with(&ptext, &dtext, what, |s| s.len());
            prop_assert_eq!(with, got.map(|_| None), "{}", name);
        }
        if !on_decode {
            let got = Stitcher::new().prefill_bytes_has_routed_experts(&ptext);
            prop_assert_eq!(got.map_err(|e| e.kind()), Err(ErrorKind::Json));
        }
    }
}

#[test]
fn the_canary_and_everything_else_come_out_byte_for_byte() {
    let prefill = br#"{"choices": [{"payload": [{"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3, "dtype": "uint8", "shape": [2]}]}]}"#;
    let decode = format!(
        r#"{{ "canary" : {CANARY},
  "choices": [ {{"pay\u006coad": [{{"field": "routed\u005fexperts", "file": "d\/x.bin", "offset": 0, "pos": 2, "rows": 3, "dtype": "uint8", "shape": [2]}}], "z": 1.50E+2}} ] }}"#
    );
    let mut out = decode.clone().into_bytes();
    assert_eq!(
        pd_stitch::bytes::merge_routed_experts_for_pd(prefill, &mut out),
        Ok(true)
    );
    let expected = format!(
        r#"{{ "canary" : {CANARY},
  "choices": [ {{"pay\u006coad": [{{"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3, "dtype": "uint8", "shape": [2]}},{{"field": "routed\u005fexperts", "file": "d\/x.bin", "offset": 2, "pos": 3, "rows": 2, "dtype": "uint8", "shape": [2]}}], "z": 1.50E+2}} ] }}"#
    );
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn duplicate_keys_resolve_to_the_last_as_in_serde_json() {
    let prefill = br#"{"choices": [{"payload": [{"field": "routed_experts", "file": "p", "offset": 0, "pos": 0, "rows": 2, "dtype": "uint8", "shape": [1]}]}]}"#;
    // A first `choices` with a segment that would be clipped, then the real
    // one; a first `payload` that is not an array; a `pos` given twice.
    let decode = br#"{"choices": [{"payload": [{"field": "routed_experts", "file": "x", "offset": 0, "pos": 0, "rows": 9, "dtype": "uint8", "shape": [1]}]}],
                      "choices": [{"payload": 5, "payload": [{"field": "routed_experts", "file": "d", "offset": 0, "pos": 0, "pos": 1, "rows": 3, "dtype": "uint8", "shape": [1]}]}]}"#;
    let mut by_value: Value = serde_json::from_slice(decode).unwrap();
    let prefill_value: Value = serde_json::from_slice(prefill).unwrap();
    assert_eq!(
        pd_stitch::merge_routed_experts_for_pd(&prefill_value, &mut by_value),
        Ok(true)
    );
    let mut out = decode.to_vec();
    assert_eq!(
        pd_stitch::bytes::merge_routed_experts_for_pd(prefill, &mut out),
        Ok(true)
    );
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), by_value);
    // The clipped segment: position 2, one row, offset 1.
    assert_eq!(by_value["choices"][0]["payload"][1]["pos"], 2);
    assert_eq!(by_value["choices"][0]["payload"][1]["offset"], 1);
}

#[test]
fn errors_are_the_value_errors_at_the_same_place() {
    let prefill = br#"{"choices": [{"payload": [{"field": "routed_experts", "file": "p", "offset": 0, "pos": 0, "rows": 2, "dtype": "uint8", "shape": [1]}]}]}"#;
    let decode = br#"{"choices": [{"index": 0}, {"payload": [{"field": "routed_experts", "file": "d", "offset": 0, "pos": 1, "rows": -1, "dtype": "uint8", "shape": [1]}]}]}"#;
    let mut out = decode.to_vec();
    let err = pd_stitch::bytes::merge_routed_payload_in_json(prefill, &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "decode choices[1].payload[0].rows: must be a non-negative integer, got -1"
    );
    assert_eq!(out, decode);
}

#[test]
fn not_json_names_the_side_and_the_offset() {
    let good = br#"{"choices": []}"#;
    for (prefill, decode, side, offset) in [
        (
            &b"{\"choices\": [}"[..],
            &good[..],
            pd_stitch::Side::Prefill,
            13,
        ),
        (
            &good[..],
            &b"{\"choices\": []} x"[..],
            pd_stitch::Side::Decode,
            16,
        ),
        (
            &good[..],
            &b"\xef\xbb\xbf{}"[..],
            pd_stitch::Side::Decode,
            0,
        ),
        (
            &good[..],
            &b"{\"a\": \"\xff\"}"[..],
            pd_stitch::Side::Decode,
            7,
        ),
        (&good[..], &b""[..], pd_stitch::Side::Decode, 0),
    ] {
        let mut out = decode.to_vec();
        match pd_stitch::bytes::merge_routed_experts_for_pd(prefill, &mut out)
            .map_err(Error::into_detail)
        {
            Err(ErrorDetail::Json {
                side: s,
                offset: o,
                message,
                ..
            }) => {
                assert_eq!((s, o), (side, offset), "{message}");
                assert!(!message.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out, decode);
    }
}

#[test]
fn a_million_nested_brackets_are_an_error_not_a_crash() {
    let good = br#"{"choices": []}"#;
    for deep in ["[".repeat(1_000_000), "{\"a\":".repeat(1_000_000)] {
        let mut out = deep.clone().into_bytes();
        let got = pd_stitch::bytes::merge_routed_experts_for_pd(good, &mut out);
        assert_eq!(got.map_err(|e| e.kind()), Err(ErrorKind::Json));
        assert_eq!(out, deep.as_bytes());
        assert_eq!(
            pd_stitch::bytes::prefill_has_routed_experts(deep.as_bytes()).map_err(|e| e.kind()),
            Err(ErrorKind::Json)
        );
    }
}
