//! Where SGLang's rows are: the positions of the two sides of a P/D pair,
//! derived from their token counts and their lengths, or the reason they
//! cannot be (no JSON here: numbers in, a [`Solution`] or a [`Fault`] out).
//!
//! A side's rows end at `e = prompt + completion - 1` (the last token never
//! runs a forward) and start `R` rows earlier, `R = ids / width`. The width
//! (`layers * top_k` ids) is not on the wire: given, it places both sides;
//! not given, every width and decode convention that places both sides is a
//! *reading*, and the pair is determined when all readings give the same
//! merged rows (SPEC section 10, Q4-Q5).

use crate::algebra::{Convention, PositionProblem};
use crate::error::Side;

/// What the token counts and the rows of one side say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Facts {
    /// `prompt_tokens`.
    pub(crate) prompt: u64,
    /// `completion_tokens`.
    pub(crate) completion: u64,
    /// The decoded length of the rows, in bytes.
    pub(crate) bytes: u64,
}

/// Which value a [`Fault`] is about, on its side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// The rows string.
    Rows,
    /// `prompt_tokens`.
    Prompt,
    /// `completion_tokens`.
    Completion,
}

/// Why a pair has no solution, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A position problem of one side's value.
    Positions(Side, Value, PositionProblem),
    /// The decode does not contain the cut.
    Coverage {
        /// The prefill's end.
        cut: u64,
        /// The decode's rows.
        start: u64,
        /// Their end.
        end: u64,
    },
}

/// What of the decode's rows the merge keeps, the pair being placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Solution {
    /// The decode's bytes the merge skips (its rows before the cut); it
    /// keeps the rest.
    pub(crate) skip: u64,
}

/// The ids of a side, or [`PositionProblem::NotWholeRows`] of 4 bytes.
fn ids(side: Side, facts: Facts) -> Result<u64, Fault> {
    if facts.bytes % 4 == 0 {
        Ok(facts.bytes / 4)
    } else {
        Err(Fault::Positions(
            side,
            Value::Rows,
            PositionProblem::NotWholeRows {
                bytes: facts.bytes,
                row_bytes: 4,
            },
        ))
    }
}

/// One past a side's last row.
fn end(side: Side, facts: Facts) -> Result<u64, Fault> {
    facts
        .prompt
        .checked_add(facts.completion)
        .and_then(|n| n.checked_sub(1))
        .ok_or(Fault::Positions(
            side,
            Value::Completion,
            PositionProblem::Counts {
                prompt: facts.prompt,
                completion: facts.completion,
            },
        ))
}

/// The ids per row of a row shape, or [`PositionProblem::RowShape`].
pub(crate) fn width(layers: u64, top_k: u64) -> Result<u64, PositionProblem> {
    layers
        .checked_mul(top_k)
        .filter(|&w| w > 0 && w.checked_mul(4).is_some())
        .ok_or(PositionProblem::RowShape { layers, top_k })
}

/// Places both sides of a pair: with `width` (ids per row) when given,
/// else by the readings that agree.
pub(crate) fn solve(prefill: Facts, decode: Facts, width: Option<u64>) -> Result<Solution, Fault> {
    let cut = end(Side::Prefill, prefill)?;
    let e_d = end(Side::Decode, decode)?;
    if prefill.prompt != decode.prompt {
        return Err(Fault::Positions(
            Side::Decode,
            Value::Prompt,
            PositionProblem::PromptMismatch {
                prefill: prefill.prompt,
                decode: decode.prompt,
            },
        ));
    }
    let prompt = decode.prompt;
    let i_p = ids(Side::Prefill, prefill)?;
    let i_d = ids(Side::Decode, decode)?;
    match width {
        Some(w) => given(prompt, (i_p, cut), (i_d, e_d), w),
        None => read(prompt, (i_p, cut), (i_d, e_d)),
    }
}

/// Where `ids` ids of rows of `w` ids, ending at `end`, start, or why not.
fn start(side: Side, ids: u64, end: u64, w: u64, prompt: u64) -> Result<u64, Fault> {
    if ids % w != 0 {
        return Err(Fault::Positions(
            side,
            Value::Rows,
            PositionProblem::NotWholeRows {
                bytes: ids.saturating_mul(4),
                row_bytes: w.saturating_mul(4),
            },
        ));
    }
    let rows = ids / w;
    end.checked_sub(rows)
        .filter(|&s| s <= prompt)
        .ok_or(Fault::Positions(
            side,
            Value::Rows,
            PositionProblem::OutOfRange { rows, end, prompt },
        ))
}

/// Q4: the width is known.
fn given(
    prompt: u64,
    (i_p, cut): (u64, u64),
    (i_d, e_d): (u64, u64),
    w: u64,
) -> Result<Solution, Fault> {
    let (_, s_d) = starts(prompt, (i_p, cut), (i_d, e_d), w)?;
    Ok(Solution {
        // (cut - s_d) rows of w ids of 4 bytes: within the decode's bytes.
        skip: (cut - s_d) * w * 4,
    })
}

/// Q4's starts of the prefill's and the decode's rows with width `w`, when
/// they place the pair: both in `[0, prompt]`, the decode's by a convention,
/// the decode covering the cut.
fn starts(
    prompt: u64,
    (i_p, cut): (u64, u64),
    (i_d, e_d): (u64, u64),
    w: u64,
) -> Result<(u64, u64), Fault> {
    let s_p = start(Side::Prefill, i_p, cut, w, prompt)?;
    let s_d = start(Side::Decode, i_d, e_d, w, prompt)?;
    if s_d != s_p && s_d != prompt {
        return Err(Fault::Positions(
            Side::Decode,
            Value::Rows,
            PositionProblem::Convention {
                start: s_d,
                prefill_start: s_p,
                prompt,
            },
        ));
    }
    if !(s_d <= cut && cut <= e_d) {
        return Err(Fault::Coverage {
            cut,
            start: s_d,
            end: e_d,
        });
    }
    Ok((s_p, s_d))
}

/// One candidate reading of a pair without its width: the decode's ids
/// after the cut (what the merge keeps of it), and the width when it is
/// fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Candidate {
    convention: Convention,
    width: Option<u64>,
    kept: u64,
}

/// Q5: every reading, then their agreement.
fn read(prompt: u64, (i_p, cut): (u64, u64), (i_d, e_d): (u64, u64)) -> Result<Solution, Fault> {
    let readings = readings(prompt, (i_p, cut), (i_d, e_d));
    let no_reading = || {
        Fault::Positions(
            Side::Decode,
            Value::Rows,
            PositionProblem::NoReading {
                prefill_ids: i_p,
                decode_ids: i_d,
                prompt,
                cut,
                end: e_d,
            },
        )
    };
    let first = *readings.first().ok_or_else(no_reading)?;
    if let Some(other) = readings.iter().find(|r| r.kept != first.kept) {
        // Disagreeing readings keep different numbers of ids, so both fix a
        // width (a free width keeps none).
        let (full, suffix) = match first.convention {
            Convention::FullLength => (first, *other),
            Convention::SuffixOnly => (*other, first),
        };
        return Err(Fault::Positions(
            Side::Decode,
            Value::Rows,
            PositionProblem::Ambiguous {
                full_length_width: full.width.unwrap_or(0),
                suffix_only_width: suffix.width.unwrap_or(0),
            },
        ));
    }
    Ok(Solution {
        // kept <= i_d: the reading's decode covers the cut.
        skip: (i_d - first.kept) * 4,
    })
}

/// The readings of a pair: at most one per convention (its equation fixes
/// the width, or leaves it free and keeps nothing).
fn readings(prompt: u64, (i_p, cut): (u64, u64), (i_d, e_d): (u64, u64)) -> Vec<Candidate> {
    let mut out = Vec::new();
    if e_d < cut {
        return out; // the decode ends before the cut: no convention covers it
    }
    let after = e_d - cut; // positions after the cut
                           // Full-length: s_d = s_p, so i_d - i_p = w * (e_d - cut).
    if after == 0 {
        if i_d == i_p && free_prefill(i_p, cut, prompt) {
            out.push(Candidate {
                convention: Convention::FullLength,
                width: None,
                kept: 0,
            });
        }
    } else if let Some(w) = i_d
        .checked_sub(i_p)
        .filter(|diff| diff % after == 0)
        .map(|diff| diff / after)
    {
        push_fixed(
            &mut out,
            Convention::FullLength,
            w,
            prompt,
            (i_p, cut),
            (i_d, e_d),
        );
    }
    // Suffix-only: s_d = prompt, so i_d = w * (e_d - prompt).
    if let Some(own) = e_d.checked_sub(prompt) {
        if own == 0 {
            if i_d == 0 && cut == prompt && free_prefill(i_p, cut, prompt) {
                out.push(Candidate {
                    convention: Convention::SuffixOnly,
                    width: None,
                    kept: 0,
                });
            }
        } else if i_d % own == 0 {
            push_fixed(
                &mut out,
                Convention::SuffixOnly,
                i_d / own,
                prompt,
                (i_p, cut),
                (i_d, e_d),
            );
        }
    }
    out
}

/// Adds the reading of `convention` with width `w` when it places both
/// sides (Q4 with that width).
fn push_fixed(
    out: &mut Vec<Candidate>,
    convention: Convention,
    w: u64,
    prompt: u64,
    (i_p, cut): (u64, u64),
    (i_d, e_d): (u64, u64),
) {
    if w == 0 || w.checked_mul(4).is_none() {
        return;
    }
    if let Ok((s_p, s_d)) = starts(prompt, (i_p, cut), (i_d, e_d), w) {
        let fits = match convention {
            Convention::FullLength => s_d == s_p,
            Convention::SuffixOnly => s_d == prompt,
        };
        if fits {
            out.push(Candidate {
                convention,
                width: Some(w),
                kept: w * (e_d - cut),
            });
        }
    }
}

/// Whether some width places the prefill's `i_p` ids, ending at `cut`, at a
/// start in `[0, prompt]`: some row count `r` dividing `i_p` (0 when there
/// are no ids) with `cut - prompt <= r <= cut`.
fn free_prefill(i_p: u64, cut: u64, prompt: u64) -> bool {
    let low = cut.saturating_sub(prompt);
    if i_p == 0 {
        return low == 0;
    }
    // Divisors come in pairs (d, i_p / d) with d <= sqrt(i_p): at most
    // sqrt(ids) steps, and ids are bounded by the input's length.
    let mut d = 1u64;
    while d.saturating_mul(d) <= i_p {
        if i_p % d == 0 {
            for r in [d, i_p / d] {
                if low <= r && r <= cut {
                    return true;
                }
            }
        }
        d += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(prompt: u64, completion: u64, ids: u64) -> Facts {
        Facts {
            prompt,
            completion,
            bytes: ids * 4,
        }
    }

    /// The readings by brute force: every width up to `max_w`, every
    /// convention, Q4 held literally.
    fn brute(prompt: u64, p: Facts, d: Facts, max_w: u64) -> std::collections::BTreeSet<u64> {
        let (cut, e_d) = (p.prompt + p.completion - 1, d.prompt + d.completion - 1);
        let (i_p, i_d) = (p.bytes / 4, d.bytes / 4);
        let mut kept = std::collections::BTreeSet::new();
        for w in 1..=max_w {
            if i_p % w != 0 || i_d % w != 0 {
                continue;
            }
            let (r_p, r_d) = (i_p / w, i_d / w);
            if r_p > cut || r_d > e_d {
                continue;
            }
            let (s_p, s_d) = (cut - r_p, e_d - r_d);
            if s_p > prompt || s_d > prompt {
                continue;
            }
            if s_d != s_p && s_d != prompt {
                continue;
            }
            if s_d <= cut && cut <= e_d {
                kept.insert(w * (e_d - cut));
            }
        }
        kept
    }

    /// Q5 against the brute force, on every small pair (the prefill's
    /// completion 0..=4, ids up to 24): determined exactly when every
    /// reading keeps the same ids, keeping those.
    #[test]
    fn readings_agree_with_the_brute_force() {
        let mut checked = 0;
        for prompt in 0..=6u64 {
            for c_p in 0..=4u64 {
                for c_d in 0..=6u64 {
                    if prompt + c_p == 0 || prompt + c_d == 0 {
                        continue;
                    }
                    for i_p in 0..=24u64 {
                        for i_d in 0..=24u64 {
                            let (p, d) = (facts(prompt, c_p, i_p), facts(prompt, c_d, i_d));
                            let expected = brute(prompt, p, d, 64);
                            match solve(p, d, None) {
                                Ok(solution) => {
                                    assert_eq!(expected.len(), 1, "{p:?} {d:?} {expected:?}");
                                    let kept = i_d - solution.skip / 4;
                                    assert!(expected.contains(&kept), "{p:?} {d:?}");
                                }
                                Err(Fault::Positions(_, _, PositionProblem::NoReading { .. })) => {
                                    assert!(expected.is_empty(), "{p:?} {d:?} {expected:?}")
                                }
                                Err(Fault::Positions(_, _, PositionProblem::Ambiguous { .. })) => {
                                    assert!(expected.len() > 1, "{p:?} {d:?} {expected:?}")
                                }
                                Err(other) => panic!("{p:?} {d:?}: {other:?}"),
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 140_000, "{checked}");
    }

    /// Q4 against the definition: with the width, a pair is placed exactly
    /// when both sides start in [0, prompt], by a convention, covering the
    /// cut.
    #[test]
    fn a_given_width_places_exactly_the_pairs_of_q4() {
        for prompt in 0..=5u64 {
            for c_d in 1..=5u64 {
                for w in 1..=3u64 {
                    for i_p in 0..=12u64 {
                        for i_d in 0..=15u64 {
                            let (p, d) = (facts(prompt, 1, i_p), facts(prompt, c_d, i_d));
                            let got = solve(p, d, Some(w)).ok().map(|s| i_d - s.skip / 4);
                            assert_eq!(got, brute_one(prompt, p, d, w), "{p:?} {d:?} w {w}");
                        }
                    }
                }
            }
        }
    }

    fn brute_one(prompt: u64, p: Facts, d: Facts, w: u64) -> Option<u64> {
        let (cut, e_d) = (p.prompt + p.completion - 1, d.prompt + d.completion - 1);
        let (i_p, i_d) = (p.bytes / 4, d.bytes / 4);
        if i_p % w != 0 || i_d % w != 0 || i_p / w > cut || i_d / w > e_d {
            return None;
        }
        let (s_p, s_d) = (cut - i_p / w, e_d - i_d / w);
        (s_p <= prompt
            && s_d <= prompt
            && (s_d == s_p || s_d == prompt)
            && s_d <= cut
            && cut <= e_d)
            .then_some(w * (e_d - cut))
    }

    #[test]
    fn each_fault_names_its_side_and_value() {
        let ok = facts(3, 1, 6);
        assert_eq!(
            solve(facts(0, 0, 0), ok, None),
            Err(Fault::Positions(
                Side::Prefill,
                Value::Completion,
                PositionProblem::Counts {
                    prompt: 0,
                    completion: 0
                }
            ))
        );
        assert_eq!(
            solve(ok, facts(4, 2, 6), None),
            Err(Fault::Positions(
                Side::Decode,
                Value::Prompt,
                PositionProblem::PromptMismatch {
                    prefill: 3,
                    decode: 4
                }
            ))
        );
        let odd = Facts {
            prompt: 3,
            completion: 2,
            bytes: 6,
        };
        assert_eq!(
            solve(ok, odd, None),
            Err(Fault::Positions(
                Side::Decode,
                Value::Rows,
                PositionProblem::NotWholeRows {
                    bytes: 6,
                    row_bytes: 4
                }
            ))
        );
        // Width 2: 6 ids are 3 rows ending at 3, from 0; the decode's 5 ids
        // are not whole rows.
        assert!(matches!(
            solve(ok, facts(3, 3, 5), Some(2)),
            Err(Fault::Positions(
                Side::Decode,
                Value::Rows,
                PositionProblem::NotWholeRows {
                    bytes: 20,
                    row_bytes: 8
                }
            ))
        ));
        // 8 rows cannot end at 3.
        assert!(matches!(
            solve(facts(3, 1, 16), facts(3, 2, 2), Some(2)),
            Err(Fault::Positions(
                Side::Prefill,
                Value::Rows,
                PositionProblem::OutOfRange {
                    rows: 8,
                    end: 3,
                    prompt: 3
                }
            ))
        ));
        // The decode's rows from 1: neither 0 nor 3.
        assert!(matches!(
            solve(ok, facts(3, 3, 8), Some(2)),
            Err(Fault::Positions(
                Side::Decode,
                Value::Rows,
                PositionProblem::Convention {
                    start: 1,
                    prefill_start: 0,
                    prompt: 3
                }
            ))
        ));
        // A prefill that generated more than the decode: the cut is past
        // the decode's end.
        assert_eq!(
            solve(facts(3, 3, 10), facts(3, 2, 8), Some(2)),
            Err(Fault::Coverage {
                cut: 5,
                start: 0,
                end: 4
            })
        );
        // Suffix-only from 3 with width 2 (2 rows [3, 5)), or full-length
        // from 0 with width ... : 4 ids after 6 fit only suffix-only.
        assert_eq!(solve(ok, facts(3, 3, 4), None), Ok(Solution { skip: 0 }));
        assert_eq!(
            width(0, 8),
            Err(PositionProblem::RowShape {
                layers: 0,
                top_k: 8
            })
        );
        assert_eq!(width(48, 8), Ok(384));
        assert!(width(u64::MAX, 2).is_err());
        assert!(width(u64::MAX / 4 + 1, 1).is_err());
    }

    /// A prefill reporting 4 generated tokens (SGLang's P/D prefill reports
    /// one; the counts are still the response's): its rows end at the cut
    /// `prompt + 3`, so they are between `3` and `prompt + 3` rows. Of the
    /// row counts dividing its 8 ids (1, 2, 4, 8) only 4 (width 2, from
    /// `prompt - 1`) is one for a prompt of 1 to 4 tokens; none for a
    /// prompt of 0 (3 rows). A full-length decode that reports the same 4
    /// tokens ends at the cut: it has the same 8 ids and the merge keeps
    /// none of them, whatever the width.
    #[test]
    fn a_free_width_is_found_among_the_larger_divisors() {
        for prompt in 1..=4u64 {
            let (p, d) = (facts(prompt, 4, 8), facts(prompt, 4, 8));
            assert_eq!(solve(p, d, None), Ok(Solution { skip: 32 }), "{prompt}");
            assert_eq!(solve(p, d, Some(2)), Ok(Solution { skip: 32 }), "{prompt}");
        }
        let (p, d) = (facts(0, 4, 8), facts(0, 4, 8));
        assert!(
            matches!(
                solve(p, d, None),
                Err(Fault::Positions(
                    Side::Decode,
                    Value::Rows,
                    PositionProblem::NoReading { .. }
                ))
            ),
            "{:?}",
            solve(p, d, None)
        );
    }

    /// The example of SPEC section 10: a prompt of 2 tokens from 0, 3
    /// generated, rows of 1 id: full-length reads also as suffix-only with
    /// rows of 2 ids.
    #[test]
    fn the_spec_example_is_ambiguous() {
        let (p, d) = (facts(2, 1, 2), facts(2, 3, 4));
        assert_eq!(
            solve(p, d, None),
            Err(Fault::Positions(
                Side::Decode,
                Value::Rows,
                PositionProblem::Ambiguous {
                    full_length_width: 1,
                    suffix_only_width: 2
                }
            ))
        );
        assert_eq!(solve(p, d, Some(1)).map(|s| s.skip), Ok(8));
        assert_eq!(solve(p, d, Some(2)).map(|s| s.skip), Ok(0));
    }
}
