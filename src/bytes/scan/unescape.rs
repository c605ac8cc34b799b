//! A validated string's escapes undone, as `serde_json` undoes them.

/// Appends the unescaped content of the validated string text `raw` (quotes
/// excluded) to `out`.
pub(crate) fn unescape(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let Some(&e) = raw.get(i + 1) else {
            return;
        };
        i += 2;
        let byte = match e {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hex = |at: usize| {
                    raw.get(at..at + 4)
                        .and_then(|h| std::str::from_utf8(h).ok())
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .unwrap_or(0xFFFD)
                };
                let first = hex(i);
                i += 4;
                let code = if (0xD800..=0xDBFF).contains(&first) {
                    // Validated: `\uDCxx` follows.
                    let second = hex(i + 2);
                    i += 6;
                    0x10000 + ((first - 0xD800) << 10) + (second.wrapping_sub(0xDC00) & 0x3FF)
                } else {
                    first
                };
                let c = char::from_u32(code).unwrap_or('\u{FFFD}');
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            _ => e,
        };
        out.push(byte);
    }
}
