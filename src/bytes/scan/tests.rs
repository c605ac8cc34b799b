//! The scanner against `serde_json` and its fast path against its
//! reference reader.

use super::fast::*;
use super::swar::*;
use super::unescape::*;
use super::*;

/// Every byte value at every place after a run of digits, the bytes
/// after it anything: the count is the place exactly when the byte is not
/// a digit.
#[test]
fn first_non_digit_finds_the_first_byte_outside_0_to_9() {
    for place in 0..8 {
        for byte in 0..=255u8 {
            for after in [0x00, 0x35, 0xff] {
                let mut word = [b'7'; 8];
                word[place] = byte;
                for later in word.iter_mut().skip(place + 1) {
                    *later = after;
                }
                let expected = word.iter().position(|b| !b.is_ascii_digit()).unwrap_or(8);
                assert_eq!(
                    first_non_digit(u64::from_le_bytes(word)),
                    expected,
                    "{word:?}"
                );
            }
        }
    }
}

/// The fast path and the reference give the same answer: the same
/// nodes, or the same offset and message.
fn same_as_reference(text: &[u8]) {
    let fast = Doc::scan(text).map(|doc| doc.nodes);
    let reference = Doc::scan_reference(text).map(|doc| doc.nodes);
    assert_eq!(fast, reference, "{:?}", String::from_utf8_lossy(text));
    // The fast path itself, not the reference it falls back on: it
    // accepts the first value of the text exactly when the reference
    // does, and ends where it ends.
    for depth in [0, 1, 100] {
        let mut scanner = Scanner {
            text,
            at: 0,
            nodes: Vec::new(),
            scratch: Vec::new(),
            fast: false,
        };
        let reference = scanner
            .value(Record::Skip, 0..0, false, depth)
            .map(|()| scanner.at);
        let fast = skip(text, 0, depth).map(|(_, end)| end);
        assert_eq!(
            fast.ok(),
            reference.ok(),
            "{:?} at depth {depth}",
            String::from_utf8_lossy(text)
        );
    }
}

fn same_as_serde(text: &[u8]) {
    same_as_reference(text);
    let ours = Doc::scan(text).map(|_| ());
    let theirs = serde_json::from_slice::<serde_json::Value>(text).map(|_| ());
    assert_eq!(
        ours.is_ok(),
        theirs.is_ok(),
        "{:?}: ours {ours:?}, serde_json {theirs:?}",
        String::from_utf8_lossy(text)
    );
}

#[test]
fn accepts_and_refuses_what_serde_json_does() {
    let cases: &[&[u8]] = &[
        b"",
        b" ",
        b"{}",
        b"[]",
        b"[1,]",
        b"{,}",
        b"{\"a\":1,}",
        b"[1 2]",
        b"01",
        b"-0",
        b"-",
        b"1.",
        b"1.e5",
        b"1e",
        b"1e+",
        b"1E-7",
        b"0.5",
        b"-01",
        b"+1",
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"123456789012345678901234567890",
        b"[1e308, 1.8e308]",
        b"tru",
        b"truex",
        b"nul",
        b"\"\\u12\"",
        b"\"\\ud800\"",
        b"\"\\udc00\"",
        b"\"\\ud800\\udc00\"",
        b"\"\\ud800\\u0041\"",
        b"\"\\ud800x\"",
        b"\"\\x\"",
        b"\"a\x01\"",
        b"\"\x7f\"",
        b"\"\xff\"",
        b"\"\xc3\xa9\"",
        b"\"\xc3\"",
        b"\"\xed\xa0\x80\"",
        b"\"\xf4\x90\x80\x80\"",
        b"\xef\xbb\xbf{}",
        b"{} x",
        b"{}\n\t\r ",
        b"{\"a\" 1}",
        b"{1:2}",
        b"[\"\\/\"]",
        b"\"\\u00e9\"",
        b"{\"a\":[{\"b\":null}]}",
        b"\x0c{}",
    ];
    for case in cases {
        same_as_serde(case);
    }
}

/// Each case also where the fast path reads it: not recorded, an opaque
/// member of a choice, an element of an opaque array, and recorded in
/// full (the reference alone).
fn in_every_place(value: &[u8]) -> Vec<Vec<u8>> {
    let places: [(&[u8], &[u8]); 5] = [
        (b"", b""),
        (br#"{"usage": "#, b"}"),
        (br#"{"choices": [{"logprobs": "#, b"}]}"),
        (br#"{"choices": [{"logprobs": [1, "#, b", 2]}]}"),
        (br#"{"choices": [{"payload": [{"x": "#, b"}]}]}"),
    ];
    places
        .iter()
        .map(|(before, after)| [*before, value, *after].concat())
        .collect()
}

/// [`same_as_serde`] of `value` in each of [`in_every_place`]'s places.
fn same_as_serde_in_every_place(value: &[u8]) {
    for text in in_every_place(value) {
        same_as_serde(&text);
    }
}

#[test]
fn the_fast_path_refuses_where_the_reference_does() {
    let cases: &[&[u8]] = &[
        b"[1,2,3]",
        b"[1,2,]",
        b"[1,,2]",
        b"[-]",
        b"[1,-]",
        b"[1,02]",
        b"[1.5e+07,-0.25,0e0]",
        b"[1,2 , 3 ,4]",
        b"[1,\"a\",2]",
        b"{\"a\":1,\"b\":[1,2,{\"c\":null}]}",
        b"{\"a\" :1 , \"b\" : 2}",
        b"{\"a\":1,}",
        b"{\"a\"}",
        b"{\"a\":}",
        b"{1:1}",
        b"[true,false,null]",
        b"[tru]",
        b"[nulll]",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud83d\\u0041\"",
        b"\"\\ud83d\"",
        b"\"\\ud83d\\",
        b"\"\\ud83d\\u",
        b"\"\\ude00\"",
        b"\"\\u00zz\"",
        b"\"\\u00\"",
        b"\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"",
        b"\"\\q\"",
        b"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
        b"\"\xc3\\n\"",
        b"\"\xc3\"",
        b"\"\xe2\x82\"",
        b"\"\xf5\x80\x80\x80\"",
        b"\"\xed\xb0\x80\"",
        b"\"a\tb\"",
        b"\"a\x1fb\"",
        b"\"a\x7fb\"",
        // The greatest byte exactly 0x80 (a continuation byte alone): a
        // run is ASCII only below it.
        b"\"\x80\"",
        b"\"ab\x80\"",
        b"\"ab\x80cdefghijklmnopqrstuvwxyz0123\"",
        b"\"abc",
        b"\"abc\\",
        b"[1e400]",
        b"[1E-400]",
        b"[1e99]",
        b"[1e999]",
        b"[",
        b"[1",
        b"[1,",
        b"{",
        b"{\"a\"",
        b"{\"a\":",
        b"{\"a\":1",
        b"]",
        b"}",
        b"[}",
        b"{]",
        b"[[[]]]",
        b"[[[]]",
    ];
    for case in cases {
        same_as_serde_in_every_place(case);
    }
    same_as_serde_in_every_place(format!("[{}]", "1".repeat(400)).as_bytes());
    same_as_serde_in_every_place(format!("[1.{}e5]", "0".repeat(400)).as_bytes());
}

/// Where the scanner refuses a text for the reason serde_json gives, it
/// says so in serde_json's words, in every place (the message is taken
/// from serde_json's error, its location cut off): a control character
/// in a string (a byte below 0x20, never the space), a leading
/// surrogate followed by something other than an escape (but for the
/// end of the text), bytes that are not UTF-8.
#[test]
fn messages_are_serde_jsons_where_the_reason_is_the_same() {
    let cases: &[&[u8]] = &[
        b"\"a\x01\"",
        b"\"\x00\"",
        b"\"abc\x1f\"",
        b"\"\x0a\"",
        b"\"\\ud800x\"",
        b"\"\\ud800\"",
        b"\"\\ud800\\n\"",
        b"\"\xff\"",
        b"\"\xc3\"",
        b"\"\xed\xa0\x80\"",
        b"\"\\x\"",
        b"[1 2]",
        b"{\"a\" 1}",
    ];
    // The text's end inside a string: only where nothing follows.
    let at_the_end: &[&[u8]] = &[b"\"\\ud800", b"\"\\ud83d\\", b"\"abc", b"\"abc\\"];
    let texts = cases
        .iter()
        .flat_map(|case| in_every_place(case))
        .chain(at_the_end.iter().map(|case| case.to_vec()));
    for text in texts {
        let theirs = serde_json::from_slice::<serde_json::Value>(&text).unwrap_err();
        let theirs = theirs.to_string();
        let theirs = theirs.split(" at line ").next().unwrap();
        for ours in [Doc::scan(&text), Doc::scan_reference(&text)] {
            assert_eq!(
                ours.map(|_| ()).unwrap_err().message,
                theirs,
                "{:?}",
                String::from_utf8_lossy(&text)
            );
        }
    }
}

/// Texts that are JSON but for one closing bracket, one member, or one
/// letter of a literal, and their valid neighbours: where a container
/// closes and what is open after it (an array, or an object whose
/// members are keyed), and the literals' letters, all of which the fast
/// path tracks itself. Every one is decided by serde_json as well.
#[test]
fn the_fast_path_closes_what_it_opened() {
    let cases: &[&[u8]] = &[
        // A number then a number in an object: not an array's element.
        b"{\"a\":1,2}",
        b"{\"a\":1,2,\"b\":3}",
        b"[{\"a\":1,2}]",
        b"{\"a\":[1,2],\"b\":3,4}",
        b"{\"a\":1,\"b\":2}",
        // The wrong closing bracket after a value.
        b"{\"a\":1]",
        b"[1}",
        b"[[1}]",
        b"{\"a\":{\"b\":1]}",
        b"[\"x\"}",
        b"{\"a\":\"x\"]",
        // Empty containers, then more members or elements.
        b"[[],1]",
        b"[{},1]",
        b"[[],[]]",
        b"{\"a\":[],\"b\":1}",
        b"{\"a\":{},\"b\":1}",
        b"[[1],2]",
        b"[{\"a\":1},2]",
        b"{\"a\":[1],\"b\":[2]}",
        b"[[],}",
        b"[{},]",
        // A literal with one letter wrong.
        b"[trux]",
        b"[fals3]",
        b"[nul1]",
        b"{\"a\":truE}",
        b"[true,falsE]",
    ];
    for case in cases {
        same_as_serde_in_every_place(case);
    }
}

#[test]
fn the_fast_path_counts_nesting_as_the_reference_does() {
    // The limit is reached inside a value the fast path reads, at every
    // depth of the place it starts from.
    for depth in [125, 126, 127, 128] {
        for open in [b"[", b"{\"k\":".as_slice()] {
            let close = if open == b"[" { b"]" } else { b"}" };
            let value = [open.repeat(depth), b"0".to_vec(), close.repeat(depth)].concat();
            same_as_serde_in_every_place(&value);
        }
    }
}

/// Text near JSON: a value written from a small grammar with odd
/// spellings, whitespace and strings, then perhaps broken at one place.
fn near_json() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let string = proptest::collection::vec(
        prop_oneof![
            Just(b"a".to_vec()),
            Just(b"\\\"".to_vec()),
            Just(b"\\\\".to_vec()),
            Just(b"\\u00e9".to_vec()),
            Just(b"\\ud83d\\ude00".to_vec()),
            Just(b"\\ud83d".to_vec()),
            Just(b"\\udc00".to_vec()),
            Just("\u{e9}\u{20ac}\u{1f600}".as_bytes().to_vec()),
            Just(b"\xc3".to_vec()),
            Just(b"\x1f".to_vec()),
            Just(b"\\x".to_vec()),
            Just(b"routed_experts".to_vec()),
            "[ -~]{0,40}".prop_map(String::into_bytes),
        ],
        0..6,
    )
    .prop_map(|parts| [b"\"".to_vec(), parts.concat(), b"\"".to_vec()].concat());
    let number = (
        "-?(0|[1-9][0-9]{0,20})",
        proptest::option::of("\\.[0-9]{1,20}"),
        proptest::option::of("[eE][+-]?[0-9]{1,4}"),
    )
        .prop_map(|(int, frac, exp)| {
            format!(
                "{int}{}{}",
                frac.unwrap_or_default(),
                exp.unwrap_or_default()
            )
            .into_bytes()
        });
    let ws = "[ \t\n\r]{0,2}".prop_map(String::into_bytes);
    let leaf = prop_oneof![
        string.clone(),
        number,
        Just(b"true".to_vec()),
        Just(b"false".to_vec()),
        Just(b"null".to_vec()),
    ];
    let value = leaf.prop_recursive(4, 48, 8, move |inner| {
        prop_oneof![
            (proptest::collection::vec((inner.clone(), ws.clone()), 0..8)).prop_map(|items| {
                let items: Vec<Vec<u8>> = items
                    .into_iter()
                    .map(|(v, w)| [w.clone(), v, w].concat())
                    .collect();
                [b"[".to_vec(), items.join(&b","[..]), b"]".to_vec()].concat()
            }),
            (proptest::collection::vec((string.clone(), inner, ws.clone()), 0..6)).prop_map(
                |members| {
                    let members: Vec<Vec<u8>> = members
                        .into_iter()
                        .map(|(k, v, w)| [k, w.clone(), b":".to_vec(), w, v].concat())
                        .collect();
                    [b"{".to_vec(), members.join(&b","[..]), b"}".to_vec()].concat()
                }
            ),
        ]
    });
    let breakage = proptest::option::of((
        any::<proptest::sample::Index>(),
        0..3u8,
        proptest::sample::select(b"\"\\{}[],:0-.eE+u \x00\x1f\x80\xc3\xed\xff".to_vec()),
    ));
    (value, breakage).prop_map(|(mut text, breakage)| {
        if let Some((at, how, byte)) = breakage {
            let at = at.index(text.len() + 1);
            match how {
                0 => text.insert(at, byte),
                1 if at < text.len() => {
                    text.remove(at);
                }
                _ if at < text.len() => text[at] = byte,
                _ => text.push(byte),
            }
        }
        text
    })
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512).max(512),
        ..proptest::test_runner::Config::default()
    })]

    /// The fast path gives the reference's answer (nodes, or offset and
    /// message) and accepts what serde_json accepts, in every place.
    #[test]
    fn the_fast_path_is_the_reference(value in near_json()) {
        same_as_serde_in_every_place(&value);
    }
}

#[test]
fn nesting_stops_where_serde_json_stops() {
    for depth in [1, 126, 127, 128, 129, 100_000] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        same_as_serde(text.as_bytes());
        let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        same_as_serde(text.as_bytes());
    }
    // Unclosed, a million deep: an error, not a stack overflow.
    assert!(Doc::scan("[".repeat(1_000_000).as_bytes()).is_err());
}

#[test]
fn long_numbers_are_decided_by_serde_json() {
    for case in [
        format!("1{}", "0".repeat(400)),
        format!("0.{}1", "0".repeat(400)),
        "1e99999999999999999999".to_owned(),
        "0e99999999999999999999".to_owned(),
        "1e-99999999999999999999".to_owned(),
        "17976931348623157e292".to_owned(),
        "17976931348623159e292".to_owned(),
    ] {
        same_as_serde(case.as_bytes());
    }
}

/// A number shorter than 300 characters with a two-digit exponent can
/// still overflow an `f64`: 250 digits times `1e99` is about `1e348`,
/// 211 digits `1e309`, while 210 digits times `1e99` (`1e308`) fits.
/// serde_json decides; both readers agree with it, in every place.
#[test]
fn a_short_number_with_a_two_digit_exponent_can_overflow() {
    for (int_digits, exponent) in [
        (250, "e99"),
        (211, "e99"),
        (210, "e99"),
        (209, "e99"),
        (211, "E+98"),
        (250, "e-99"),
        (290, "e19"),
    ] {
        for fraction in ["", ".5"] {
            let number = format!("1{}{fraction}{exponent}", "0".repeat(int_digits - 1));
            for sign in ["", "-"] {
                let value = format!("{sign}{number}");
                same_as_serde_in_every_place(value.as_bytes());
                let array = format!("[{value}]");
                same_as_serde_in_every_place(array.as_bytes());
            }
        }
    }
}

/// A number of at most 300 characters whose exponent has two digits
/// can still overflow an `f64`: a long integer part adds to the
/// exponent (10^210 x 10^99 is past f64::MAX). serde_json refuses it.
#[test]
fn a_long_mantissa_with_a_short_exponent_is_decided_by_serde_json() {
    for case in [
        format!("1{}e99", "0".repeat(210)),
        format!("1{}e99", "0".repeat(205)),
        format!("-1{}e99", "0".repeat(210)),
        format!("1{}.5e99", "0".repeat(210)),
        format!("1{}E+99", "0".repeat(210)),
        format!("1{}e-99", "0".repeat(210)),
        format!("1{}e9", "0".repeat(299)),
        format!("1{}e9", "0".repeat(290)),
        format!("0.{}e99", "0".repeat(250)),
    ] {
        same_as_serde_in_every_place(format!("[{case}]").as_bytes());
        same_as_serde(case.as_bytes());
    }
}

#[test]
fn unescape_matches_serde_json() {
    for text in [
        r#""plain""#,
        r#""a\"b\\c\/d\be\ff\ng\rh\ti""#,
        r#""caf\u00e9 \ud83d\ude00 \u0000""#,
    ] {
        let expected: String = serde_json::from_str(text).unwrap();
        let raw = &text.as_bytes()[1..text.len() - 1];
        let mut out = Vec::new();
        unescape(raw, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }
}

/// SGLang's slots: each element of a response that is an array, and
/// the members (not deeper) of `meta_info`, `sglext` and `sgl_ext`.
#[test]
fn records_sglang_slots_and_only_their_members() {
    let text = br#"[{"text": "t", "meta_info": {"prompt_tokens": 2, "routed_experts": "AAAA", "logs": [1]}}, 7]"#;
    let doc = Doc::scan(text).unwrap();
    let spans: Vec<&str> = doc
        .nodes
        .iter()
        .map(|n| std::str::from_utf8(&text[n.span.clone()]).unwrap())
        .collect();
    assert_eq!(
        spans,
        [
            std::str::from_utf8(text).unwrap(),
            r#"{"text": "t", "meta_info": {"prompt_tokens": 2, "routed_experts": "AAAA", "logs": [1]}}"#,
            "\"t\"",
            r#"{"prompt_tokens": 2, "routed_experts": "AAAA", "logs": [1]}"#,
            "2",
            "\"AAAA\"",
            "[1]",
            "7",
        ]
    );
    assert!(!doc.nodes[6].indexed, "a member of meta_info is opaque");
    let text = br#"{"choices": [{"sgl_ext": {"routed_experts": "AAAA", "x": {"y": 1}}}]}"#;
    let doc = Doc::scan(text).unwrap();
    assert_eq!(
        doc.nodes.len(),
        6,
        "root, choices, choice, sgl_ext, its two members"
    );
}

/// The spans of the nodes a scan records, and whether each is indexed.
fn recorded(text: &[u8]) -> Vec<(&str, bool)> {
    let doc = Doc::scan(text).unwrap();
    assert_eq!(doc.nodes, Doc::scan_reference(text).unwrap().nodes);
    doc.nodes
        .iter()
        .map(|n| {
            (
                std::str::from_utf8(&text[n.span.clone()]).unwrap(),
                n.indexed,
            )
        })
        .collect()
}

/// A member of the response (or of a batch's element) that is not one of
/// SGLang's slots is opaque, an object or array included: recorded, its
/// children not.
#[test]
fn other_members_of_a_response_are_opaque_even_when_containers() {
    let text = br#"{"id": {"a": [1]}, "logs": [{"b": 2}], "usage": {"c": 3}}"#;
    assert_eq!(
        recorded(text),
        [
            (std::str::from_utf8(text).unwrap(), true),
            (r#"{"a": [1]}"#, false),
            (r#"[{"b": 2}]"#, false),
            (r#"{"c": 3}"#, true),
            ("3", false),
        ]
    );
    let text = br#"[{"id": {"a": 1}, "meta_info": {"d": [4]}}]"#;
    assert_eq!(
        recorded(text),
        [
            (std::str::from_utf8(text).unwrap(), true),
            (r#"{"id": {"a": 1}, "meta_info": {"d": [4]}}"#, true),
            (r#"{"a": 1}"#, false),
            (r#"{"d": [4]}"#, true),
            ("[4]", false),
        ]
    );
}

/// An escaped key chooses what is recorded as its unescaped text does,
/// at every level whose keys choose: `"\u0069d"` is `id` (opaque),
/// `"ch\u006fices"` is `choices`, `"l\u006fgprobs"` is `logprobs`
/// (opaque) and `"p\u0061yload"` is `payload` (in full).
#[test]
fn escaped_keys_choose_what_is_recorded_as_their_text() {
    let text =
        br#"{"\u0069d": {"a": 1}, "ch\u006fices": [{"l\u006fgprobs": [1], "p\u0061yload": [2]}]}"#;
    assert_eq!(
        recorded(text),
        [
            (std::str::from_utf8(text).unwrap(), true),
            (r#"{"a": 1}"#, false),
            (r#"[{"l\u006fgprobs": [1], "p\u0061yload": [2]}]"#, true),
            (r#"{"l\u006fgprobs": [1], "p\u0061yload": [2]}"#, true),
            ("[1]", false),
            ("[2]", true),
            ("2", false),
        ]
    );
}

#[test]
fn records_the_merge_paths_and_only_them() {
    let text = br#"{"id": "x", "choices": [{"logprobs": [1, 2], "payload": [{"pos": 1}], "routed_experts": null}], "usage": {"a": 1}}"#;
    let doc = Doc::scan(text).unwrap();
    let spans: Vec<&str> = doc
        .nodes
        .iter()
        .map(|n| std::str::from_utf8(&text[n.span.clone()]).unwrap())
        .collect();
    assert_eq!(
        spans,
        [
            std::str::from_utf8(text).unwrap(),
            "\"x\"",
            r#"[{"logprobs": [1, 2], "payload": [{"pos": 1}], "routed_experts": null}]"#,
            r#"{"logprobs": [1, 2], "payload": [{"pos": 1}], "routed_experts": null}"#,
            "[1, 2]",
            r#"[{"pos": 1}]"#,
            r#"{"pos": 1}"#,
            "1",
            "null",
            // usage's members place SGLang's rows (its counts).
            r#"{"a": 1}"#,
            "1",
        ]
    );
    assert!(!doc.nodes[4].indexed, "logprobs is opaque");
    assert!(doc.nodes[5].indexed, "payload is recorded in full");
}
