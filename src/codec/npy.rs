//! The NumPy `.npy` format, as far as routed-experts rows need it.
//!
//! A `.npy` file is a magic string, a version, a header length, a header that
//! is a Python dict literal (`{'descr': '<u2', 'fortran_order': False,
//! 'shape': (3, 2, 4), }`), padding, and then the raw array data. Versions 1.0
//! (16-bit header length), 2.0 (32-bit) and 3.0 (32-bit, UTF-8 header) are
//! read; version 1.0 is written, padded exactly as NumPy pads it, so that a
//! merged array is byte for byte what `numpy.save` would write.
//!
//! Only what a row array can be is accepted: a plain numeric or bool dtype,
//! little-endian or without byte order, in C order. Anything else (Fortran
//! order, big-endian, object or structured dtypes) is an error, never a guess.

use super::error::NpyError;
use crate::algebra::Dtype;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// NumPy aligns the data to this many bytes.
const ALIGN: usize = 64;

/// NumPy leaves room for the first axis to grow to this many digits.
const GROWTH_DIGITS: usize = 21;

/// The parsed header of a `.npy` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
    /// Where the array data starts.
    pub(crate) data_offset: usize,
}

/// How many bytes of a file [`header_end`] needs: magic, version, length.
pub(crate) const PREFIX: usize = 12;

/// Where the header of the `.npy` file starting with `prefix` (its first
/// [`PREFIX`] bytes, or all of a shorter file) ends and the data starts.
pub(crate) fn header_end(prefix: &[u8]) -> Result<usize, NpyError> {
    let (start, len) = header_span(prefix)?;
    start.checked_add(len).ok_or(NpyError::Truncated)
}

/// The header's start and length, from the magic, version and length fields.
fn header_span(bytes: &[u8]) -> Result<(usize, usize), NpyError> {
    if bytes.get(..6) != Some(MAGIC.as_slice()) {
        return Err(NpyError::Magic);
    }
    let (major, minor) = match bytes.get(6..8) {
        Some(&[major, minor]) => (major, minor),
        _ => return Err(NpyError::Truncated),
    };
    let (len_bytes, start): (usize, usize) = match (major, minor) {
        (1, 0) => (2, 10),
        (2, 0) | (3, 0) => (4, 12),
        _ => return Err(NpyError::Version(major, minor)),
    };
    let len = match bytes.get(8..8 + len_bytes) {
        Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
        Some(&[a, b, c, d]) => {
            usize::try_from(u32::from_le_bytes([a, b, c, d])).map_err(|_| NpyError::Truncated)?
        }
        _ => return Err(NpyError::Truncated),
    };
    Ok((start, len))
}

/// Reads the header of the `.npy` file `bytes`.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header, NpyError> {
    let (start, header_len) = header_span(bytes)?;
    let end = start.checked_add(header_len).ok_or(NpyError::Truncated)?;
    let text = bytes.get(start..end).ok_or(NpyError::Truncated)?;
    // Versions 1 and 2 are latin-1; a valid dict literal of ours is ASCII, so
    // reading all three as UTF-8 rejects nothing NumPy would write for rows.
    let text = std::str::from_utf8(text).map_err(|_| NpyError::Syntax("header is not text"))?;
    let dict = Dict::parse(text)?;
    let (order, descr) = descr_parts(dict.descr)?;
    let dtype = descr_dtype(descr).ok_or_else(|| NpyError::Descr(dict.descr.to_owned()))?;
    match order {
        b'>' if dtype.itemsize() > 1 => return Err(NpyError::BigEndian(dict.descr.to_owned())),
        // `|` ("not applicable") on a multi-byte dtype is read by NumPy as
        // native order, as ambiguous as `=`.
        b'=' | b'|' if dtype.itemsize() > 1 => {
            return Err(NpyError::NativeOrder(dict.descr.to_owned()))
        }
        _ => {}
    }
    if dict.fortran_order {
        return Err(NpyError::FortranOrder);
    }
    Ok(Header {
        dtype,
        shape: dict.shape,
        data_offset: end,
    })
}

/// The byte-order character and the type code of a descr such as `<u2`.
fn descr_parts(descr: &str) -> Result<(u8, &str), NpyError> {
    match descr.as_bytes().first() {
        Some(&order @ (b'<' | b'>' | b'|' | b'=')) => {
            Ok((order, descr.get(1..).unwrap_or_default()))
        }
        _ => Err(NpyError::Descr(descr.to_owned())),
    }
}

fn descr_dtype(code: &str) -> Option<Dtype> {
    Some(match code {
        "b1" => Dtype::Bool,
        "i1" => Dtype::Int8,
        "u1" => Dtype::Uint8,
        "i2" => Dtype::Int16,
        "u2" => Dtype::Uint16,
        "f2" => Dtype::Float16,
        "i4" => Dtype::Int32,
        "u4" => Dtype::Uint32,
        "f4" => Dtype::Float32,
        "i8" => Dtype::Int64,
        "u8" => Dtype::Uint64,
        "f8" => Dtype::Float64,
        _ => return None,
    })
}

/// The descr NumPy writes for `dtype` on a little-endian machine; `None` for
/// `bfloat16`, which has no `.npy` type code.
fn descr(dtype: Dtype) -> Option<&'static str> {
    Some(match dtype {
        Dtype::Bool => "|b1",
        Dtype::Int8 => "|i1",
        Dtype::Uint8 => "|u1",
        Dtype::Int16 => "<i2",
        Dtype::Uint16 => "<u2",
        Dtype::Float16 => "<f2",
        Dtype::Bfloat16 => return None,
        Dtype::Int32 => "<i4",
        Dtype::Uint32 => "<u4",
        Dtype::Float32 => "<f4",
        Dtype::Int64 => "<i8",
        Dtype::Uint64 => "<u8",
        Dtype::Float64 => "<f8",
    })
}

/// The version 1.0 header NumPy writes for a C-order array of `dtype` and
/// `shape`, padding included: magic, version, length, dict, spaces, newline.
pub(crate) fn header(dtype: Dtype, shape: &[u64]) -> Result<Vec<u8>, NpyError> {
    let descr = descr(dtype).ok_or_else(|| NpyError::Descr(dtype.name().to_owned()))?;
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_repr = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_repr}, }}");
    // Room for the first axis to grow in place, as NumPy leaves it.
    if let Some(first) = dims.first() {
        dict.extend(std::iter::repeat_n(
            ' ',
            GROWTH_DIGITS.saturating_sub(first.len()),
        ));
    }
    let with_newline = dict.len() + 1;
    let pad = ALIGN - (MAGIC.len() + 2 + 2 + with_newline) % ALIGN;
    let header_len =
        u16::try_from(with_newline + pad).map_err(|_| NpyError::Syntax("header too long"))?;
    let mut out = Vec::with_capacity(10 + usize::from(header_len));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    Ok(out)
}

/// The three keys of a `.npy` header dict.
struct Dict<'a> {
    descr: &'a str,
    fortran_order: bool,
    shape: Vec<u64>,
}

impl<'a> Dict<'a> {
    /// Parses the dict literal: `{'descr': ..., 'fortran_order': ...,
    /// 'shape': (...), }` in any key order, with Python's white space, an
    /// optional trailing comma, and Python 2's `L` suffix on integers.
    fn parse(text: &'a str) -> Result<Dict<'a>, NpyError> {
        let mut p = Parser { rest: text };
        p.expect('{')?;
        let (mut descr, mut fortran_order, mut shape) = (None, None, None);
        loop {
            if p.eat('}') {
                break;
            }
            let key = p.string()?;
            p.expect(':')?;
            match key {
                "descr" if descr.is_none() => descr = Some(p.descr()?),
                "fortran_order" if fortran_order.is_none() => fortran_order = Some(p.boolean()?),
                "shape" if shape.is_none() => shape = Some(p.tuple()?),
                "descr" | "fortran_order" | "shape" => {
                    return Err(NpyError::Syntax("a key appears twice"))
                }
                _ => return Err(NpyError::Syntax("unknown key in header")),
            }
            if !p.eat(',') {
                p.expect('}')?;
                break;
            }
        }
        if !p.rest.trim().is_empty() {
            return Err(NpyError::Syntax("text after the header dict"));
        }
        Ok(Dict {
            descr: descr.ok_or(NpyError::MissingKey("descr"))?,
            fortran_order: fortran_order.ok_or(NpyError::MissingKey("fortran_order"))?,
            shape: shape.ok_or(NpyError::MissingKey("shape"))?,
        })
    }
}

/// A cursor over the header text.
struct Parser<'a> {
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> Result<(), NpyError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(NpyError::Syntax(match c {
                '{' => "header must start with '{'",
                '}' => "expected ',' or '}' in header",
                ':' => "expected ':' after a key",
                _ => "unexpected character in header",
            }))
        }
    }

    /// A quoted string without escapes.
    fn string(&mut self) -> Result<&'a str, NpyError> {
        self.skip_space();
        let quote = match self.rest.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(NpyError::Syntax("expected a quoted string")),
        };
        let body = self.rest.get(1..).unwrap_or_default();
        let end = body
            .find(quote)
            .ok_or(NpyError::Syntax("unterminated string"))?;
        let value = body.get(..end).unwrap_or_default();
        if value.contains('\\') {
            return Err(NpyError::Syntax(
                "escapes in header strings are not supported",
            ));
        }
        self.rest = body.get(end + 1..).unwrap_or_default();
        Ok(value)
    }

    /// The descr value: a string. A list is a structured dtype.
    fn descr(&mut self) -> Result<&'a str, NpyError> {
        self.skip_space();
        if self.rest.starts_with('[') {
            return Err(NpyError::Descr("a structured dtype".to_owned()));
        }
        self.string()
    }

    fn boolean(&mut self) -> Result<bool, NpyError> {
        self.skip_space();
        for (word, value) in [("True", true), ("False", false)] {
            if let Some(rest) = self.rest.strip_prefix(word) {
                self.rest = rest;
                return Ok(value);
            }
        }
        Err(NpyError::Syntax("fortran_order must be True or False"))
    }

    /// `()`, `(n,)`, `(a, b, ...)` with an optional trailing comma.
    fn tuple(&mut self) -> Result<Vec<u64>, NpyError> {
        if !self.eat('(') {
            return Err(NpyError::Syntax("shape must be a tuple"));
        }
        let mut dims = Vec::new();
        loop {
            if self.eat(')') {
                return Ok(dims);
            }
            dims.push(self.integer()?);
            if !self.eat(',') {
                if self.eat(')') {
                    return Ok(dims);
                }
                return Err(NpyError::Syntax("expected ',' or ')' in shape"));
            }
        }
    }

    fn integer(&mut self) -> Result<u64, NpyError> {
        self.skip_space();
        let digits = self.rest.bytes().take_while(u8::is_ascii_digit).count();
        let text = self.rest.get(..digits).unwrap_or_default();
        let value = text
            .parse::<u64>()
            .map_err(|_| NpyError::Syntax("shape entries must be integers in u64"))?;
        self.rest = self.rest.get(digits..).unwrap_or_default();
        self.rest = self.rest.strip_prefix('L').unwrap_or(self.rest);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dict: &str) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&u16::try_from(dict.len()).unwrap().to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out
    }

    #[test]
    fn header_matches_numpy_byte_for_byte() {
        // As numpy.save(np.arange(24, dtype='u1').reshape(3, 2, 4)) writes it.
        let h = header(Dtype::Uint8, &[3, 2, 4]).unwrap();
        let mut expected =
            b"\x93NUMPY\x01\x00v\x00{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 4), }"
                .to_vec();
        expected.extend(std::iter::repeat_n(b' ', 55));
        expected.push(b'\n');
        assert_eq!(h, expected);
        assert_eq!(h.len() % 64, 0);
    }

    #[test]
    fn parse_reads_what_header_writes() {
        for dtype in Dtype::ALL.into_iter().filter(|&d| d != Dtype::Bfloat16) {
            for shape in [
                vec![0, 48, 8],
                vec![123_456, 48, 8],
                vec![u64::MAX, 1, 1],
                vec![7],
                vec![],
            ] {
                let h = header(dtype, &shape).unwrap();
                assert_eq!(h.len() % 64, 0);
                let parsed = parse_header(&h).unwrap();
                assert_eq!(
                    parsed,
                    Header {
                        dtype,
                        shape,
                        data_offset: h.len()
                    }
                );
            }
        }
        assert_eq!(
            header(Dtype::Bfloat16, &[1, 1, 1]),
            Err(NpyError::Descr("bfloat16".into()))
        );
    }

    #[test]
    fn parse_accepts_python_variations() {
        let h = parse_header(&file(
            "{\"shape\":(3L,2L,4L),'fortran_order':False,'descr':'<u2'}   \n",
        ))
        .unwrap();
        assert_eq!((h.dtype, h.shape), (Dtype::Uint16, vec![3, 2, 4]));
        let h = parse_header(&file(
            "{'descr': '>u1', 'fortran_order': False, 'shape': (1, 1, 1,), }\n",
        ))
        .unwrap();
        assert_eq!(h.dtype, Dtype::Uint8); // byte order means nothing for one byte
    }

    #[test]
    fn parse_rejects_what_is_not_rows() {
        let cases: [(&str, NpyError); 10] = [
            (
                "{'descr': '>u2', 'fortran_order': False, 'shape': (1, 1, 1), }",
                NpyError::BigEndian(">u2".into()),
            ),
            (
                "{'descr': '=u2', 'fortran_order': False, 'shape': (1, 1, 1), }",
                NpyError::NativeOrder("=u2".into()),
            ),
            (
                "{'descr': '|O', 'fortran_order': False, 'shape': (1, 1, 1), }",
                NpyError::Descr("|O".into()),
            ),
            (
                "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (1,), }",
                NpyError::Descr("a structured dtype".into()),
            ),
            (
                "{'descr': '<u2', 'fortran_order': True, 'shape': (1, 1, 1), }",
                NpyError::FortranOrder,
            ),
            (
                "{'descr': '<u2', 'shape': (1, 1, 1), }",
                NpyError::MissingKey("fortran_order"),
            ),
            (
                "{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (1,), }",
                NpyError::Syntax("a key appears twice"),
            ),
            (
                "{'descr': '<u2', 'fortran_order': False, 'shape': (1, 1, 1), 'x': 1}",
                NpyError::Syntax("unknown key in header"),
            ),
            (
                "{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999, 1), }",
                NpyError::Syntax("shape entries must be integers in u64"),
            ),
            (
                "{'descr': '<u2', 'fortran_order': False, 'shape': (1, 1, 1), } x",
                NpyError::Syntax("text after the header dict"),
            ),
        ];
        for (dict, err) in cases {
            assert_eq!(parse_header(&file(dict)), Err(err), "{dict}");
        }
        assert_eq!(parse_header(b"\x93NUMPZ\x01\x00"), Err(NpyError::Magic));
        assert_eq!(
            parse_header(b"\x93NUMPY\x04\x00\x00\x00"),
            Err(NpyError::Version(4, 0))
        );
        assert_eq!(
            parse_header(b"\x93NUMPY\x01\x00\xff\x00{}"),
            Err(NpyError::Truncated)
        );
        assert_eq!(
            parse_header(b"\x93NUMPY\x02\x00\xff\xff\xff\xff"),
            Err(NpyError::Truncated)
        );
        assert_eq!(parse_header(b"\x93NUMPY"), Err(NpyError::Truncated));
    }

    /// NumPy writes the shape as Python's tuple repr: `()`, `(7,)` (a
    /// one-tuple keeps its comma; `(7)` would be the integer 7), `(3, 2, 4)`.
    #[test]
    fn header_writes_the_shape_as_a_python_tuple() {
        let dict_of = |shape: &[u64]| {
            let h = header(Dtype::Uint8, shape).unwrap();
            String::from_utf8(h[10..].to_vec()).unwrap()
        };
        assert!(dict_of(&[]).contains("'shape': (), }"));
        assert!(dict_of(&[7]).contains("'shape': (7,), }"));
        assert!(dict_of(&[3, 2, 4]).contains("'shape': (3, 2, 4), }"));
    }

    /// SPEC rule 13: a repeated key is refused, whichever key it is.
    #[test]
    fn every_repeated_key_is_refused() {
        for dict in [
            "{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (1, 1, 1), }",
            "{'descr': '<u2', 'fortran_order': False, 'fortran_order': False, 'shape': (1, 1, 1), }",
            "{'descr': '<u2', 'fortran_order': False, 'shape': (1, 1, 1), 'shape': (1, 1, 1), }",
        ] {
            assert_eq!(
                parse_header(&file(dict)),
                Err(NpyError::Syntax("a key appears twice")),
                "{dict}"
            );
        }
    }

    /// Each syntax fault of the dict says what was expected there.
    #[test]
    fn syntax_errors_say_what_was_expected() {
        for (dict, what) in [
            ("['descr', '<u2']", "header must start with '{'"),
            ("{'descr' '<u2'}", "expected ':' after a key"),
            (
                "{'descr': '<u2' 'fortran_order': False}",
                "expected ',' or '}' in header",
            ),
            ("{'descr': '<u2', 7: 1}", "expected a quoted string"),
            ("{'descr: '<u2'}", "expected ':' after a key"),
            ("{'descr': '<u2", "unterminated string"),
            (
                "{'descr': '<u2', 'fortran_order': 0}",
                "fortran_order must be True or False",
            ),
            ("{'shape': [1, 2]}", "shape must be a tuple"),
            ("{'shape': (1; 2)}", "expected ',' or ')' in shape"),
        ] {
            assert_eq!(
                parse_header(&file(dict)),
                Err(NpyError::Syntax(what)),
                "{dict}"
            );
        }
    }

    #[test]
    fn messages() {
        let cases = [
            (NpyError::Magic, "not a .npy file (no \\x93NUMPY magic)"),
            (
                NpyError::Version(4, 1),
                "unsupported .npy format version 4.1",
            ),
            (NpyError::Truncated, "the .npy header is truncated"),
            (
                NpyError::Syntax("shape must be a tuple"),
                "bad .npy header: shape must be a tuple",
            ),
            (
                NpyError::MissingKey("shape"),
                "the .npy header has no \"shape\"",
            ),
            (
                NpyError::Descr("|O".into()),
                "unsupported .npy dtype \"|O\"",
            ),
            (
                NpyError::BigEndian(">u2".into()),
                "big-endian .npy dtype \">u2\" is not supported",
            ),
            (
                NpyError::NativeOrder("=u2".into()),
                "native-order .npy dtype \"=u2\" does not say its byte order",
            ),
            (
                NpyError::FortranOrder,
                "Fortran-order .npy arrays are not supported",
            ),
            (
                NpyError::Dimensions(2),
                "the array has 2 dimensions; rows need 3 (seq, layers, topk)",
            ),
            (
                NpyError::DataLength {
                    expected: 24,
                    got: 3,
                },
                "the array data is 3 bytes; its shape and dtype need 24",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }

    fn dict(descr: &str) -> String {
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1, 1, 1), }}")
    }

    /// SPEC rule 13: for one byte the byte-order mark means nothing, so all
    /// four are read; a multi-byte dtype is read only as little-endian `<`.
    #[test]
    fn byte_order_marks_follow_rule_13() {
        for (code, dtype) in [
            ("b1", Dtype::Bool),
            ("i1", Dtype::Int8),
            ("u1", Dtype::Uint8),
        ] {
            for order in ['|', '<', '>', '='] {
                let descr = format!("{order}{code}");
                let h = parse_header(&file(&dict(&descr)));
                assert_eq!(h.map(|h| h.dtype), Ok(dtype), "{descr}");
            }
        }
        for (code, dtype) in [
            ("u2", Dtype::Uint16),
            ("f4", Dtype::Float32),
            ("i8", Dtype::Int64),
        ] {
            let little = format!("<{code}");
            assert_eq!(
                parse_header(&file(&dict(&little))).map(|h| h.dtype),
                Ok(dtype)
            );
            let big = format!(">{code}");
            assert_eq!(
                parse_header(&file(&dict(&big))),
                Err(NpyError::BigEndian(big.clone()))
            );
            // `=` and `|` both leave a multi-byte dtype in the writer's
            // native order (NumPy reads `|u2` as `=u2`): neither says which.
            for order in ['=', '|'] {
                let descr = format!("{order}{code}");
                assert_eq!(
                    parse_header(&file(&dict(&descr))),
                    Err(NpyError::NativeOrder(descr.clone()))
                );
            }
        }
    }
}
