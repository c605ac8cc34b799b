//! The episode (`pd_stitch::episode`, SPEC "The episode"): its laws E1-E7
//! against the naive model of `support::episode`, every error by hand, and
//! tests aimed at the mutations a reading of the code suggests (Earliest
//! turned Latest, the boundary not taken from the next turn, rows placed by
//! their count alone, the wrong turn continued, the wrong piece winning).

use pd_stitch::algebra::Dtype;
use pd_stitch::episode::{
    classify, Assembled, Episode, EpisodeError, EpisodeErrorKind, Finding, Owner, Phase, Prefer,
    RowPiece, RowSource, Turn,
};
use proptest::prelude::*;

use crate::support::config;
use crate::support::episode::{
    assert_matches_model, decode, episodes, expected_report, EpisodeSpec, PieceSpec, PrefixModel,
    TurnSpec,
};

const RULES: [Prefer; 2] = [Prefer::Earliest, Prefer::Latest];

/// The episode of `spec`'s turns, each pushed (and accepted) in order.
fn fold(spec: &EpisodeSpec, prefer: Prefer) -> Episode {
    let mut episode = Episode::new(prefer);
    for (k, turn) in spec.turns.iter().enumerate() {
        let pushed = episode.push(turn.to_turn(&spec.row_shape));
        assert_eq!(pushed, Ok(k), "turn {k} of {spec:?}");
    }
    episode
}

/// Each position's values and source, whatever the dtype.
fn values(assembled: &Assembled) -> Vec<(Option<Vec<i64>>, Option<RowSource>)> {
    (0..assembled.len())
        .map(|x| {
            let row = assembled.row(x).map(|r| decode(assembled.dtype(), r));
            (row, assembled.source(x))
        })
        .collect()
}

/// Rows of one uint8 element each, all `value`.
fn ones(value: u8, n: usize) -> RowPiece {
    RowPiece::whole(Dtype::Uint8, vec![1], vec![value; n])
}

/// Rows of one uint8 element each, given.
fn bytes(values: &[u8]) -> RowPiece {
    RowPiece::whole(Dtype::Uint8, vec![1], values.to_vec())
}

// ---------------------------------------------------------------- laws

proptest! {
    #![proptest_config(config("episode"))]

    /// The model's laws in one: every path of every generated episode, under
    /// both rules, is the naive model's, and every turn's report (the turn
    /// continued, `L`, the rows compared and those that differed) too.
    #[test]
    fn every_path_is_the_models(spec in episodes(5)) {
        for prefer in RULES {
            let episode = fold(&spec, prefer);
            for t in 0..spec.turns.len() {
                let assembled = episode.assemble(t).expect("a pushed turn");
                assert_matches_model(&assembled, &spec.turns, prefer, t)?;
            }
            for (k, report) in episode.reports().iter().enumerate() {
                let (continues, common, compared, differed) =
                    expected_report(&spec.turns, prefer, k);
                prop_assert_eq!(report.continues, continues.filter(|_| k > 0), "turn {}", k);
                prop_assert_eq!(report.common, common, "turn {}", k);
                prop_assert_eq!(report.compared, compared, "turn {}", k);
                prop_assert_eq!(&report.differed, &differed, "turn {}", k);
                prop_assert_eq!(report.start, spec.turns[k].start.unwrap_or(0));
            }
        }
    }

    /// E1: a one-turn episode is that turn's rows: a whole response's bytes
    /// as they are, then a zero row without a row at the last position.
    #[test]
    fn e1_one_turn_is_its_rows(spec in episodes(1)) {
        for prefer in RULES {
            let assembled = fold(&spec, prefer).finish().expect("one turn");
            assert_matches_model(&assembled, &spec.turns, prefer, 0)?;
            let turn = &spec.turns[0];
            if let [piece] = &turn.pieces[..] {
                let mut want = piece.to_piece(&spec.row_shape).bytes().to_vec();
                want.resize(want.len() + assembled.row_bytes(), 0);
                prop_assert_eq!(assembled.rows(), &want[..]);
            }
        }
    }

    /// E2: under Earliest, turns asking for deltas and the same turns as
    /// full-context responses (rows from 0, whatever they hold below the
    /// delta's start) assemble the same rows from the same turns.
    #[test]
    fn e2_delta_and_full_context_turns_assemble_alike(spec in episodes(5)) {
        let full = EpisodeSpec {
            row_shape: spec.row_shape.clone(),
            turns: spec.turns.iter().map(|turn| TurnSpec {
                start: None,
                pieces: vec![PieceSpec {
                    side: None,
                    first: None,
                    dtype: turn.pieces[0].dtype,
                    rows: turn.full.clone(),
                }],
                ..turn.clone()
            }).collect(),
        };
        let delta = EpisodeSpec {
            row_shape: spec.row_shape.clone(),
            turns: spec.turns.iter().map(|turn| {
                let start = turn.start.unwrap_or(0);
                TurnSpec {
                    start: Some(start),
                    pieces: vec![PieceSpec {
                        side: None,
                        first: None,
                        dtype: turn.pieces[0].dtype,
                        rows: turn.full[start as usize..].to_vec(),
                    }],
                    ..turn.clone()
                }
            }).collect(),
        };
        let (a, b) = (fold(&full, Prefer::Earliest), fold(&delta, Prefer::Earliest));
        for t in 0..spec.turns.len() {
            let (a, b) = (a.assemble(t).unwrap(), b.assemble(t).unwrap());
            prop_assert_eq!(a.rows(), b.rows(), "turn {}", t);
            prop_assert_eq!(a.sources(), b.sources(), "turn {}", t);
        }
    }

    /// E3: under Earliest, pushing a turn changes nothing the trie held
    /// along its path but the boundary: below its common prefix `L`, a
    /// position some earlier path had a row for keeps that row and source;
    /// the one no earlier path had a row for (a turn's last position) takes
    /// the new turn's; and no earlier path moves.
    #[test]
    fn e3_a_turn_changes_only_the_boundary(spec in episodes(5)) {
        let mut episode = Episode::new(Prefer::Earliest);
        for (k, turn) in spec.turns.iter().enumerate() {
            let before: Vec<_> = (0..k).map(|u| values(&episode.assemble(u).unwrap())).collect();
            episode.push(turn.to_turn(&spec.row_shape)).unwrap();
            let report = &episode.reports()[k];
            let after = values(&episode.assemble(k).unwrap());
            let tokens = turn.tokens();
            let mut new_rows = 0;
            for x in 0..report.common as usize {
                let held = before.iter().enumerate().find_map(|(u, path)| {
                    let shares = spec.turns[u].tokens().get(..=x) == Some(&tokens[..=x]);
                    path.get(x).filter(|(_, source)| shares && source.is_some())
                });
                match held {
                    Some(held) => prop_assert_eq!(&after[x], held, "turn {} position {}", k, x),
                    None => {
                        new_rows += 1;
                        prop_assert_eq!(after[x].1.map(|s| s.turn), Some(k), "position {}", x);
                    }
                }
            }
            prop_assert!(new_rows <= 1, "turn {}: {} rows new below L", k, new_rows);
            for (u, held) in before.iter().enumerate() {
                prop_assert_eq!(&values(&episode.assemble(u).unwrap()), held, "path {}", u);
            }
        }
    }

    /// E4: assembling each turn's path as soon as it is pushed gives what
    /// assembling it after every push does (Earliest: a row written stays;
    /// values compared, as a later turn may widen the dtype), assembling
    /// twice gives the same, and `finish` is the last turn's path (both
    /// rules, linear or not).
    #[test]
    fn e4_one_by_one_is_at_once_and_twice_is_once(spec in episodes(5)) {
        let mut episode = Episode::new(Prefer::Earliest);
        let mut one_by_one = Vec::new();
        for turn in &spec.turns {
            let t = episode.push(turn.to_turn(&spec.row_shape)).unwrap();
            one_by_one.push(values(&episode.assemble(t).unwrap()));
        }
        for (t, early) in one_by_one.iter().enumerate() {
            prop_assert_eq!(&values(&episode.assemble(t).unwrap()), early, "path {}", t);
        }
        for prefer in RULES {
            let episode = fold(&spec, prefer);
            let last = spec.turns.len() - 1;
            for t in 0..=last {
                prop_assert_eq!(episode.assemble(t), episode.assemble(t));
            }
            let assembled = episode.assemble(last);
            prop_assert_eq!(Some(episode.finish().unwrap()), assembled);
        }
    }

    /// E5: two turns whose tokens agree up to a position have, below it,
    /// the same rows and sources, under both rules: a row is stored once
    /// per token prefix.
    #[test]
    fn e5_siblings_share_their_prefix_rows(spec in episodes(5)) {
        for prefer in RULES {
            let episode = fold(&spec, prefer);
            let paths: Vec<_> = (0..spec.turns.len())
                .map(|t| values(&episode.assemble(t).unwrap()))
                .collect();
            for (u, a) in spec.turns.iter().enumerate() {
                for (w, b) in spec.turns.iter().enumerate().skip(u + 1) {
                    let shared = a.tokens().iter().zip(b.tokens()).take_while(|(x, y)| *x == y).count();
                    let pairs = paths[u].iter().zip(&paths[w]).take(shared);
                    for (x, (a, b)) in pairs.enumerate() {
                        if a.1.is_some() && b.1.is_some() {
                            prop_assert_eq!(a, b, "turns {} {} position {}", u, w, x);
                        }
                    }
                }
            }
        }
    }

    /// E6: a turn given as its P/D pair (prefill, then decode) assembles as
    /// the turn given as the pair stitched (the prefill's rows below its
    /// end, the decode's after, one dtype both widen to): rows and sources,
    /// under Earliest always, under Latest when no decode reaches below the
    /// turn's start (rows only the pair has).
    #[test]
    fn e6_a_pd_pair_assembles_as_its_stitched_rows(spec in episodes(5)) {
        let stitched = EpisodeSpec {
            row_shape: spec.row_shape.clone(),
            turns: spec.turns.iter().map(|turn| match &turn.pieces[..] {
                [prefill, decode] => {
                    let p = turn.prompt.len();
                    let decode_from = turn.end() as usize - decode.rows.len();
                    let mut rows = prefill.rows.clone();
                    rows.extend_from_slice(&decode.rows[p - decode_from..]);
                    let dtype = crate::support::episode::naive_promote(prefill.dtype, decode.dtype)
                        .unwrap();
                    TurnSpec {
                        pieces: vec![PieceSpec { side: None, first: None, dtype, rows }],
                        ..turn.clone()
                    }
                }
                _ => turn.clone(),
            }).collect(),
        };
        let low_decode = spec.turns.iter().any(|turn| match &turn.pieces[..] {
            [_, decode] => (turn.end() as usize - decode.rows.len()) < turn.start.unwrap_or(0) as usize,
            _ => false,
        });
        for prefer in RULES {
            if prefer == Prefer::Latest && low_decode {
                continue;
            }
            let (a, b) = (fold(&spec, prefer), fold(&stitched, prefer));
            for t in 0..spec.turns.len() {
                let (a, b) = (a.assemble(t).unwrap(), b.assemble(t).unwrap());
                prop_assert_eq!(a.dtype(), b.dtype());
                prop_assert_eq!(a.rows(), b.rows(), "turn {}", t);
                prop_assert_eq!(a.sources(), b.sources(), "turn {}", t);
            }
        }
    }

    /// E7: against the model of rows as a function of (token prefix,
    /// position), whose decode flips chosen positions: a linear episode of
    /// P/D turns (full or delta) assembled under Earliest has the decode's
    /// row exactly at the flipped positions it took from a decode, and the
    /// full-context forward's everywhere else; the classifier sorts those
    /// as decode-sourced and passes. The same episode with one turn asked
    /// from `L` instead of `L - 1` fails at `L - 1`, a boundary.
    #[test]
    fn e7_decode_flips_are_decode_sourced_and_an_off_by_one_is_a_boundary(
        seed in any::<u64>(),
        shapes in proptest::collection::vec((0u64..4, 1usize..5, any::<u32>()), 1..5),
        delta in any::<bool>(),
        stitched in any::<bool>(),
        late in any::<prop::sample::Index>(),
    ) {
        let model = PrefixModel { seed, elements: 4, experts: 8 };
        let mut tokens: Vec<u64> = Vec::new();
        let mut turns = Vec::new();
        let mut decoded = Vec::new(); // positions whose row is a decode's
        let mut flips = Vec::new();
        for (k, &(new, completion, flip_bits)) in shapes.iter().enumerate() {
            // A first turn of one token has no row to size the episode's
            // by (`Unsized`): give it a prompt token.
            let new = if k == 0 && new + completion as u64 == 1 { 1 } else { new };
            // The prompt: the whole episode so far and `new` tokens more.
            let common = tokens.len();
            let mut prompt = tokens.clone();
            prompt.extend((0..new).map(|i| mix_token(seed, k, i)));
            let p = prompt.len();
            let all: Vec<u64> = prompt
                .iter()
                .copied()
                .chain((0..completion as u64).map(|i| mix_token(seed ^ 1, k, i)))
                .collect();
            let end = all.len() - 1;
            let start = if delta { common.saturating_sub(1) } else { 0 };
            // The decode's rows [P - 1, E), some flipped.
            let decode_from = p.saturating_sub(1);
            let flipped = |x: usize| (flip_bits >> ((x - decode_from) % 32)) & 1 == 1;
            let prefill_rows: Vec<Vec<i64>> = (start..p).map(|x| model.row(&all[..=x])).collect();
            let decode_rows: Vec<Vec<i64>> =
                (decode_from..end).map(|x| model.decode_row(&all[..=x], flipped(x))).collect();
            for x in decode_from..end {
                if flipped(x) {
                    flips.push(x as u64);
                }
                if x >= p {
                    decoded.push(x as u64);
                }
            }
            let encode = |rows: &[Vec<i64>]| -> Vec<u8> {
                rows.iter().flatten().map(|&v| v as u8).collect()
            };
            let mut turn = Turn::new(prompt.clone(), all[p..].to_vec());
            if delta {
                turn = turn.with_start(start as u64);
            }
            turn = if stitched {
                let mut rows = prefill_rows.clone();
                rows.extend_from_slice(&decode_rows[p - decode_from..]);
                turn.with_piece(RowPiece::whole(Dtype::Uint8, vec![2, 2], encode(&rows)))
            } else {
                turn.with_piece(RowPiece::prefill(Dtype::Uint8, vec![2, 2], encode(&prefill_rows)))
                    .with_piece(RowPiece::decode(Dtype::Uint8, vec![2, 2], encode(&decode_rows)))
            };
            turns.push((turn, common, p, end));
            tokens = all;
        }
        let mut episode = Episode::new(Prefer::Earliest);
        for (turn, ..) in &turns {
            episode.push(turn.clone()).unwrap();
        }
        let assembled = episode.finish().unwrap();
        let forward = model.forward(&tokens);
        let mut differs = Vec::new();
        for (x, row) in forward.iter().enumerate().take(tokens.len() - 1) {
            let got = decode(Dtype::Uint8, assembled.row(x as u64).unwrap());
            if &got != row {
                differs.push(x as u64);
                prop_assert_eq!(got, model.decode_row(&tokens[..=x], true));
            }
        }
        let want: Vec<u64> = flips.iter().copied().filter(|x| decoded.contains(x)).collect();
        prop_assert_eq!(&differs, &want);
        let full = RowPiece::whole(
            Dtype::Uint8,
            vec![2, 2],
            forward.iter().flatten().map(|&v| v as u8).collect(),
        );
        let classified = classify(&assembled, &full).unwrap();
        prop_assert_eq!(classified.positions(Finding::DecodeSourced), &want[..]);
        prop_assert!(classified.positions(Finding::Boundary).is_empty());
        prop_assert!(classified.positions(Finding::Scattered).is_empty());
        prop_assert_eq!(classified.compared(), tokens.len() as u64 - 1);
        prop_assert!(classified.passes());

        // The planted off-by-one: a later turn asked from L, not L - 1.
        if delta && turns.len() > 1 {
            let k = 1 + late.index(turns.len() - 1);
            let mut episode = Episode::new(Prefer::Earliest);
            for (turn, ..) in &turns[..k] {
                episode.push(turn.clone()).unwrap();
            }
            let (turn, common, p, end) = &turns[k];
            let rows: Vec<u8> = (*common..*end)
                .flat_map(|x| model.row(&tokens[..=x]))
                .map(|v| v as u8)
                .collect();
            let late_turn = Turn::new(turn.prompt().to_vec(), turn.completion().to_vec())
                .with_start(*common as u64)
                .with_piece(RowPiece::whole(Dtype::Uint8, vec![2, 2], rows));
            let err = episode.push(late_turn).unwrap_err();
            prop_assert_eq!(err.kind(), EpisodeErrorKind::RowGap);
            prop_assert_eq!(
                Finding::of_error(&err),
                Some((*common as u64 - 1, Finding::Boundary)),
                "{} (P {})", err, p
            );
        }
    }
}

/// A token of turn `k`, the `i`-th of its new ones: distinct enough that
/// turns do not share them by chance.
fn mix_token(seed: u64, k: usize, i: u64) -> u64 {
    crate::support::episode::mix(seed ^ ((k as u64) << 32) ^ i) % 50_000
}

// ------------------------------------------------------- errors, by hand

/// An episode of one turn: prompt [1, 2, 3], completion [4, 5], rows
/// [0, 4) all `value`.
fn one_turn(prefer: Prefer, value: u8) -> Episode {
    let mut episode = Episode::new(prefer);
    episode
        .push(Turn::new(vec![1, 2, 3], vec![4, 5]).with_piece(ones(value, 4)))
        .unwrap();
    episode
}

/// What can be seen of an episode: every path, every report, the dtype.
fn observed(episode: &Episode) -> (Vec<Option<Assembled>>, Vec<String>, Option<Dtype>) {
    (
        (0..episode.turns()).map(|t| episode.assemble(t)).collect(),
        episode.reports().iter().map(|r| format!("{r:?}")).collect(),
        episode.dtype(),
    )
}

/// Pushes `turn` onto `episode`, expecting `kind` with `message`; the
/// episode must be as it was, and must then take a valid next turn exactly
/// as a copy that never saw the error does.
fn refused(
    episode: &mut Episode,
    turn: Turn,
    kind: EpisodeErrorKind,
    message: &str,
) -> EpisodeError {
    let before = observed(episode);
    let untouched = episode.clone();
    let err = episode.push(turn).unwrap_err();
    assert_eq!(err.kind(), kind, "{err}");
    assert_eq!(err.to_string(), message);
    assert_eq!(observed(episode), before, "the episode changed");
    if episode.turns() == 1 {
        let next = Turn::new(vec![1, 2, 3, 4, 5, 9], vec![8])
            .with_start(4)
            .with_piece(ones(6, 2));
        let (mut after, mut never) = (episode.clone(), untouched);
        assert_eq!(after.push(next.clone()), Ok(1));
        assert_eq!(never.push(next), Ok(1));
        assert_eq!(after.assemble(1), never.assemble(1));
    }
    err
}

#[test]
fn no_completion() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5], vec![]).with_piece(ones(1, 1)),
        EpisodeErrorKind::NoCompletion,
        "turn 1: position 5: no completion token: a turn's rows end before its last \
         completion token, so it needs one",
    );
    assert_eq!(
        (err.owner(), err.position()),
        (Some(Owner::Turn(1)), Some(5))
    );
    let err = Episode::default()
        .push(Turn::new(vec![1], vec![]).with_piece(ones(1, 1)))
        .unwrap_err();
    assert_eq!(err.kind(), EpisodeErrorKind::NoCompletion);
}

#[test]
fn extends_no_turn() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    // Shares [1, 2] with turn 0, whose prompt is [1, 2, 3].
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 7, 8], vec![9]).with_piece(ones(1, 4)),
        EpisodeErrorKind::ExtendsNoTurn,
        "turn 1: position 2: its prompt extends no earlier turn: it shares 2 tokens with \
         turn 0, whose prompt has 3",
    );
    assert_eq!(err.position(), Some(2));
    // Nothing in common at all.
    let err = episode
        .push(Turn::new(vec![9], vec![9]).with_piece(ones(1, 1)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "turn 1: position 0: its prompt extends no earlier turn: it shares 0 tokens with \
         turn 0, whose prompt has 3"
    );
    // A turn with an empty prompt is extended by every later one.
    let mut open = Episode::default();
    open.push(Turn::new(vec![], vec![1, 2]).with_piece(ones(0, 1)))
        .unwrap();
    assert_eq!(
        open.push(Turn::new(vec![5], vec![6]).with_piece(ones(1, 1))),
        Ok(1)
    );
}

#[test]
fn start_beyond_prefix() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    // L = 5 (all of turn 0's tokens); asked from 6.
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5, 6, 7], vec![8])
            .with_start(6)
            .with_piece(ones(1, 1)),
        EpisodeErrorKind::StartBeyondPrefix,
        "turn 1: position 6: asked from 6, beyond the 5 tokens it shares with turn 0: the \
         rows below would be another sequence's",
    );
    assert_eq!(err.position(), Some(6));
    let err = Episode::default()
        .push(
            Turn::new(vec![1, 2], vec![3])
                .with_start(1)
                .with_piece(ones(0, 1)),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "turn 0: position 1: asked from 1, but the first turn continues none, so its rows \
         must start at 0"
    );
}

#[test]
fn no_pieces() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_start(4),
        EpisodeErrorKind::NoPieces,
        "turn 1: position 4: no rows: a turn gives its rows as at least one piece (a \
         response's rows, or the two sides of a P/D pair)",
    );
}

#[test]
fn piece_length() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    let turn = || Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_start(4);
    let shaped = |shape: Vec<u64>, n: usize| RowPiece::whole(Dtype::Uint16, shape, vec![0; n]);
    refused(
        &mut episode,
        turn().with_piece(shaped(vec![1], 3)),
        EpisodeErrorKind::PieceLength,
        "turn 1: piece 0's 3 bytes are not a whole number of rows of 2 bytes (uint16 [1])",
    );
    let err = refused(
        &mut episode,
        turn().with_piece(shaped(vec![0, 8], 0).at(4)),
        EpisodeErrorKind::PieceLength,
        "turn 1: position 4: piece 0's rows of uint16 [0, 8] hold no bytes, so their count \
         cannot be read from its 0 bytes",
    );
    assert_eq!(err.position(), Some(4));
    refused(
        &mut episode,
        turn()
            .with_piece(ones(0, 2))
            .with_piece(shaped(vec![1u64 << 40, 1 << 40], 2)),
        EpisodeErrorKind::PieceLength,
        "turn 1: piece 1's rows of uint16 [1099511627776, 1099511627776] are too large to \
         hold (as 8-byte elements, past isize::MAX bytes)",
    );
    // 2^60 elements fit u64 as bytes, not once widened to 8 bytes each.
    refused(
        &mut episode,
        turn().with_piece(ones(0, 2)).with_piece(RowPiece::whole(
            Dtype::Uint8,
            vec![1 << 30, 1 << 30],
            vec![],
        )),
        EpisodeErrorKind::PieceLength,
        "turn 1: piece 1's rows of uint8 [1073741824, 1073741824] are too large to hold (as \
         8-byte elements, past isize::MAX bytes)",
    );
}

/// A row shape sizes the episode's rows only when a row backs it: a first
/// turn of one token (its only position its last, which has no row) whose
/// piece holds no row but declares rows of 2^24 bytes would have made the
/// episode hold a zero row of that size for that position (and 2^59 bytes,
/// reachable from a response, aborted the process). It is refused, and the
/// push holds no more than the turn's bookkeeping.
#[test]
fn a_row_shape_no_row_backs_sizes_nothing() {
    let rowless = |shape: Vec<u64>| {
        Turn::new(vec![], vec![7]).with_piece(RowPiece::whole(Dtype::Uint8, shape, vec![]))
    };
    let mut episode = Episode::default();
    let (held, pushed) = crate::in_place::peak(|| episode.push(rowless(vec![1 << 24])));
    assert!(held < 64 * 1024, "held {held} bytes for a turn of no row");
    let err = pushed.unwrap_err();
    assert_eq!(err.kind(), EpisodeErrorKind::Unsized, "{err}");
    assert_eq!(
        err.to_string(),
        "turn 0: position 0: no row: its pieces hold none, and the episode holds none yet: \
         its rows are sized by the rows given, not by a row shape no row backs ([16777216] of \
         uint8)"
    );
    assert_eq!(
        (err.owner(), err.position()),
        (Some(Owner::Turn(0)), Some(0))
    );
    assert_eq!(observed(&episode), observed(&Episode::default()));
    // 2^59 elements (2^62 bytes once widened, which `PieceLength` lets
    // through): refused alike, before anything is sized by them.
    let err = episode.push(rowless(vec![1 << 29, 1 << 30])).unwrap_err();
    assert_eq!(err.kind(), EpisodeErrorKind::Unsized, "{err}");
    // Rows given size the episode; a piece of no row beside them is held
    // to their shape, and then takes no memory of its own.
    let mut sized = Episode::default();
    let turn = Turn::new(vec![1], vec![2, 3])
        .with_piece(RowPiece::prefill(Dtype::Uint8, vec![2], vec![5, 6]))
        .with_piece(RowPiece::decode(Dtype::Uint8, vec![2], vec![7, 8]).at(1));
    assert_eq!(sized.push(turn), Ok(0));
    let (held, pushed) = crate::in_place::peak(|| {
        sized.push(
            Turn::new(vec![1, 2], vec![9])
                .with_start(2)
                .with_piece(RowPiece::whole(Dtype::Uint8, vec![2], vec![])),
        )
    });
    assert_eq!(pushed, Ok(1));
    assert!(held < 64 * 1024, "held {held} bytes");
    let err = sized
        .push(
            Turn::new(vec![1, 2], vec![4])
                .with_start(2)
                .with_piece(RowPiece::whole(Dtype::Uint8, vec![1 << 24], vec![])),
        )
        .unwrap_err();
    assert_eq!(err.kind(), EpisodeErrorKind::PieceRowShape, "{err}");
}

#[test]
fn counts() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    // P = 6, N = 2: rows end at E = 7; the prefill's at 6.
    let turn = || Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8]).with_start(4);
    refused(
        &mut episode,
        turn().with_piece(ones(0, 3).at(3)),
        EpisodeErrorKind::Counts,
        "turn 1: position 3: piece 0 (whole): 3 rows from 3 end at 6, but they must end at \
         7, before the turn's last token, which is never fed back: the counts fit neither a \
         full nor a delta response",
    );
    refused(
        &mut episode,
        turn().with_piece(ones(0, 8)),
        EpisodeErrorKind::Counts,
        "turn 1: piece 0 (whole): 8 rows, more than the 7 positions before 7, before the \
         turn's last token, which is never fed back: the counts fit neither a full nor a \
         delta response",
    );
    let prefill = |n, first: u64| RowPiece::prefill(Dtype::Uint8, vec![1], vec![0; n]).at(first);
    let decode = RowPiece::decode(Dtype::Uint8, vec![1], vec![0; 2]);
    let err = refused(
        &mut episode,
        turn().with_piece(prefill(3, 4)).with_piece(decode.clone()),
        EpisodeErrorKind::Counts,
        "turn 1: position 4: piece 0 (prefill): 3 rows from 4 end at 7, but they must end at \
         6, where the prompt ends: the counts fit neither a full nor a delta response",
    );
    assert_eq!(err.position(), Some(4));
    refused(
        &mut episode,
        turn()
            .with_piece(prefill(2, 4))
            .with_piece(decode.clone().at(6)),
        EpisodeErrorKind::Counts,
        "turn 1: position 6: piece 1 (decode): 2 rows from 6 end at 8, but they must end at \
         7, before the turn's last token, which is never fed back: the counts fit neither a \
         full nor a delta response",
    );
    // A first position near u64::MAX: the end does not wrap.
    refused(
        &mut episode,
        turn().with_piece(ones(0, 3).at(u64::MAX)),
        EpisodeErrorKind::Counts,
        "turn 1: position 18446744073709551615: piece 0 (whole): 3 rows from \
         18446744073709551615 end at 18446744073709551618, but they must end at 7, before \
         the turn's last token, which is never fed back: the counts fit neither a full nor a \
         delta response",
    );
}

#[test]
fn start_not_asked() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    let turn = || Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8]).with_start(4);
    // A full response to a delta request: 7 rows placed at [0, 7).
    let err = refused(
        &mut episode,
        turn().with_piece(ones(0, 7)),
        EpisodeErrorKind::StartNotAsked,
        "turn 1: position 0: piece 0's 7 rows start at 0, but turn 1 asked from 4: a delta \
         start other than the one asked",
    );
    assert_eq!(err.position(), Some(0));
    // A prefill answering from another start than asked (its wire agrees
    // with its counts).
    refused(
        &mut episode,
        turn()
            .with_piece(RowPiece::prefill(Dtype::Uint8, vec![1], vec![0; 3]).at(3))
            .with_piece(RowPiece::decode(Dtype::Uint8, vec![1], vec![0; 2])),
        EpisodeErrorKind::StartNotAsked,
        "turn 1: position 3: piece 0's 3 rows start at 3, but turn 1 asked from 4: a delta \
         start other than the one asked",
    );
    // No start asked means 0.
    let err = Episode::default()
        .push(Turn::new(vec![1, 2], vec![3]).with_piece(ones(0, 1)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "turn 0: position 1: piece 0's 1 rows start at 1, but turn 0 asked from 0: a delta \
         start other than the one asked"
    );
}

#[test]
fn piece_row_shape() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7])
            .with_start(4)
            .with_piece(RowPiece::whole(Dtype::Uint8, vec![2], vec![0; 4])),
        EpisodeErrorKind::PieceRowShape,
        "turn 1: position 4: piece 0's rows have shape [2], but the episode's have [1]",
    );
    assert_eq!(err.owner(), Some(Owner::Turn(1)));
    // Within the first turn: against its first piece.
    let err = Episode::default()
        .push(
            Turn::new(vec![1, 2], vec![3, 4])
                .with_piece(RowPiece::prefill(Dtype::Uint8, vec![1, 2], vec![0; 4]))
                .with_piece(RowPiece::decode(Dtype::Uint8, vec![2, 1], vec![0; 4])),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "turn 0: position 1: piece 1's rows have shape [2, 1], but the episode's have [1, 2]"
    );
}

#[test]
fn piece_dtype() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    let turn = |dtype: Dtype| {
        Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7])
            .with_start(4)
            .with_piece(RowPiece::whole(
                dtype,
                vec![1],
                vec![0; 2 * dtype.itemsize() as usize],
            ))
    };
    let tail = "(integers widen as NumPy promotes them, floats likewise; integers and floats, \
                bool and another dtype, or uint64 and a signed integer do not mix)";
    for (dtype, name) in [(Dtype::Float32, "float32"), (Dtype::Bool, "bool")] {
        refused(
            &mut episode,
            turn(dtype),
            EpisodeErrorKind::PieceDtype,
            &format!(
                "turn 1: position 4: piece 0's rows are {name}, which does not widen with the \
                 episode's uint8 {tail}"
            ),
        );
    }
    // uint64 and int64: NumPy makes float64.
    let mut wide = Episode::default();
    wide.push(
        Turn::new(vec![1, 2, 3], vec![4, 5]).with_piece(RowPiece::whole(
            Dtype::Uint64,
            vec![1],
            vec![0; 32],
        )),
    )
    .unwrap();
    refused(
        &mut wide,
        turn(Dtype::Int64),
        EpisodeErrorKind::PieceDtype,
        &format!(
            "turn 1: position 4: piece 0's rows are int64, which does not widen with the \
             episode's uint64 {tail}"
        ),
    );
    // Those that widen are taken, their values kept.
    assert_eq!(wide.push(turn(Dtype::Uint8)), Ok(1));
}

#[test]
fn row_gap() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    // Asked from L = 5 instead of L - 1 = 4: turn 0's last position has no row.
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7])
            .with_start(5)
            .with_piece(ones(1, 1)),
        EpisodeErrorKind::RowGap,
        "turn 1: position 4 has no row: turn 1 asked from 5 but its common prefix with turn \
         0 is 5 (turn 0's rows end at 4)",
    );
    assert!(err.is_boundary());
    assert_eq!(Finding::of_error(&err), Some((4, Finding::Boundary)));
    // A P/D pair whose decode starts past the prompt's end: position 6.
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9])
            .with_start(4)
            .with_piece(RowPiece::prefill(Dtype::Uint8, vec![1], vec![0; 2]))
            .with_piece(RowPiece::decode(Dtype::Uint8, vec![1], vec![0; 1]).at(7)),
        EpisodeErrorKind::RowGap,
        "turn 1: position 6 has no row: none of turn 1's pieces covers it (asked from 4, its \
         rows must cover [4, 8))",
    );
    assert!(!err.is_boundary());
    assert_eq!(Finding::of_error(&err), None);
    // At L itself (a prefill missing, the decode only from its own start):
    // a boundary too.
    let err = refused(
        &mut episode,
        Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8])
            .with_start(4)
            .with_piece(RowPiece::decode(Dtype::Uint8, vec![1], vec![0; 1])),
        EpisodeErrorKind::RowGap,
        "turn 1: position 4 has no row: none of turn 1's pieces covers it (asked from 4, its \
         rows must cover [4, 7))",
    );
    assert!(err.is_boundary());
}

/// A turn whose rows stop before its end: the gap is at the end of what
/// it must cover, after the last row it has (a missing decode), not only
/// between two pieces.
#[test]
fn a_gap_at_the_end_is_a_row_gap() {
    let mut episode = Episode::new(Prefer::Earliest);
    // Prompt 6, 3 generated: rows must cover [0, 8); the prefill's 6 alone.
    let err = episode
        .push(
            Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]).with_piece(RowPiece::prefill(
                Dtype::Uint8,
                vec![1],
                vec![0; 6],
            )),
        )
        .unwrap_err();
    assert_eq!(err.kind(), EpisodeErrorKind::RowGap, "{err}");
    assert_eq!(err.position(), Some(6), "{err}");
    assert_eq!(episode.turns(), 0);
}

/// The boundary (turn 0's last token, rowless) lies below a later turn's
/// start when that turn asks from its whole common prefix: its decode's
/// rows, placed from the prompt's last position, cover it.
#[test]
fn rows_below_the_start_fill_a_rowless_position() {
    let mut episode = Episode::new(Prefer::Earliest);
    episode
        .push(Turn::new(vec![1, 2], vec![3]).with_piece(ones(0, 2)))
        .unwrap();
    let assembled = episode.assemble(0).unwrap();
    assert!(!assembled.has_row(2));
    // Turn 1 repeats the 3 tokens, asks from 3, and its decode's 2 rows
    // start at P - 1 = 2.
    let pushed = episode.push(
        Turn::new(vec![1, 2, 3], vec![4, 5])
            .with_start(3)
            .with_piece(RowPiece::decode(Dtype::Uint8, vec![1], vec![7, 8])),
    );
    assert_eq!(pushed, Ok(1));
    let assembled = episode.finish().unwrap();
    assert_eq!(
        row_bytes(&assembled),
        [Some(0), Some(0), Some(7), Some(8), None]
    );
    assert_eq!(assembled.source(2), source(1, Phase::Decode));
}

/// What the accessors say of an episode and its assembly, each held to
/// what was pushed.
#[test]
fn the_accessors_say_what_was_pushed_and_assembled() {
    for prefer in RULES {
        let mut episode = Episode::new(prefer);
        assert_eq!((episode.prefer(), episode.turns()), (prefer, 0));
        episode
            .push(Turn::new(vec![1, 2, 3], vec![4, 5]).with_piece(ones(3, 4)))
            .unwrap();
        assert_eq!(episode.turns(), 1);
        episode
            .push(Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_piece(ones(3, 6)))
            .unwrap();
        assert_eq!((episode.prefer(), episode.turns()), (prefer, 2));
        let assembled = episode.finish().unwrap();
        assert!(!assembled.is_empty());
        assert_eq!(assembled.len(), 7);
        let rows = assembled.rows().to_vec();
        assert_eq!(rows, [3, 3, 3, 3, 3, 3, 0]);
        assert_eq!(assembled.into_rows(), rows);
    }
    let names = [
        Finding::Boundary,
        Finding::DecodeSourced,
        Finding::Scattered,
    ]
    .map(Finding::name);
    assert_eq!(names, ["boundary", "decode-sourced", "scattered"]);
}

#[test]
fn no_turns() {
    let err = Episode::new(Prefer::Latest).finish().unwrap_err();
    assert_eq!(err.kind(), EpisodeErrorKind::NoTurns);
    assert_eq!(err.to_string(), "the episode has no turn to assemble");
    assert_eq!((err.owner(), err.position()), (None, None));
    assert!(Episode::default().assemble(0).is_none());
    assert!(one_turn(Prefer::Earliest, 0).assemble(1).is_none());
}

#[test]
fn the_full_context_forward_is_checked_like_a_piece() {
    let assembled = one_turn(Prefer::Earliest, 3).finish().unwrap();
    let check = |piece: RowPiece| classify(&assembled, &piece).unwrap_err();
    let err = check(ones(3, 3));
    assert_eq!(err.kind(), EpisodeErrorKind::Counts);
    assert_eq!(err.owner(), Some(Owner::FullContext));
    assert_eq!(
        err.to_string(),
        "the full-context forward: piece 0: 3 rows from 0, but the episode's 5 positions need \
         rows [0, 4) or [0, 5)"
    );
    assert_eq!(
        check(ones(3, 6)).to_string(),
        "the full-context forward: piece 0: 6 rows from 0, but the episode's 5 positions need \
         rows [0, 4) or [0, 5)"
    );
    assert_eq!(check(ones(3, 4).at(1)).kind(), EpisodeErrorKind::Counts);
    assert_eq!(
        check(RowPiece::whole(Dtype::Uint8, vec![2], vec![3; 8])).to_string(),
        "the full-context forward: position 0: piece 0's rows have shape [2], but the \
         episode's have [1]"
    );
    assert_eq!(
        check(RowPiece::whole(Dtype::Float16, vec![1], vec![0; 8])).kind(),
        EpisodeErrorKind::PieceDtype
    );
    assert_eq!(
        check(RowPiece::whole(Dtype::Uint16, vec![1], vec![0; 7])).kind(),
        EpisodeErrorKind::PieceLength
    );
    // Rows [0, 4) or [0, 5), from 0 said or not, in a dtype both widen to.
    for piece in [
        ones(3, 4),
        ones(3, 5).at(0),
        RowPiece::whole(Dtype::Int16, vec![1], [3u8, 0].repeat(4)),
    ] {
        let classified = classify(&assembled, &piece).unwrap();
        assert_eq!((classified.compared(), classified.differed()), (4, 0));
        assert!(classified.passes());
    }
}

/// Faults injected into the last turn of a generated episode fail with
/// their kind, naming that turn, and leave the episode as it was.
#[test]
fn every_fault_leaves_the_episode_as_it_was() {
    let mut runner = proptest::test_runner::TestRunner::new(config("episode_faults"));
    runner
        .run(&(episodes(4), 0usize..6), |(spec, fault)| {
            let (last, earlier) = spec.turns.split_last().unwrap();
            let mut episode = Episode::new(Prefer::Earliest);
            for turn in earlier {
                episode.push(turn.to_turn(&spec.row_shape)).unwrap();
            }
            let mut bad = last.clone();
            let mut row_shape = spec.row_shape.clone();
            let piece = &mut bad.pieces[0];
            // Where the first piece's rows end by the counts.
            let end = if piece.side == Some(Phase::Prefill) {
                last.prompt.len() as u64
            } else {
                last.end()
            };
            let natural = end - piece.rows.len() as u64;
            let kind = match fault {
                0 => {
                    bad.completion.clear();
                    EpisodeErrorKind::NoCompletion
                }
                1 => {
                    bad.pieces.clear();
                    EpisodeErrorKind::NoPieces
                }
                // One row fewer, placed from the counts: one start later.
                2 if piece.side != Some(Phase::Decode) && !piece.rows.is_empty() => {
                    piece.rows.pop();
                    piece.first = None;
                    EpisodeErrorKind::StartNotAsked
                }
                3 => {
                    piece.first = Some(natural + 1);
                    EpisodeErrorKind::Counts
                }
                4 => {
                    bad.start = Some(bad.prompt.len() as u64 + 1);
                    EpisodeErrorKind::StartBeyondPrefix
                }
                5 if !earlier.is_empty() => {
                    row_shape = row_shape.iter().map(|d| d + 1).collect();
                    for piece in &mut bad.pieces {
                        for row in &mut piece.rows {
                            row.resize(row_shape.iter().product::<u64>() as usize, 0);
                        }
                    }
                    EpisodeErrorKind::PieceRowShape
                }
                _ => return Ok(()),
            };
            let before = observed(&episode);
            let err = episode.push(bad.to_turn(&row_shape)).unwrap_err();
            prop_assert_eq!(err.kind(), kind, "{}", err);
            prop_assert_eq!(err.owner(), Some(Owner::Turn(earlier.len())));
            prop_assert_eq!(observed(&episode), before);
            Ok(())
        })
        .unwrap();
}

// ------------------------------------------- aimed at plausible mutations

/// The rows of a path as one byte each (rows of one uint8), `None` where
/// none.
fn row_bytes(assembled: &Assembled) -> Vec<Option<u8>> {
    (0..assembled.len())
        .map(|x| assembled.row(x).map(|row| row[0]))
        .collect()
}

fn source(turn: usize, phase: Phase) -> Option<RowSource> {
    Some(RowSource { turn, phase })
}

/// Turn 0 ([1, 2, 3] then [4, 5], rows 0) and turn 1 repeating it with
/// one more token, as a full-context response of rows 1.
fn recomputed(prefer: Prefer) -> Episode {
    let mut episode = one_turn(prefer, 0);
    episode
        .push(Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_piece(ones(1, 6)))
        .unwrap();
    episode
}

#[test]
fn earliest_keeps_the_first_row_and_latest_the_last() {
    let earliest = recomputed(Prefer::Earliest).finish().unwrap();
    let some = |v: &[u8]| v.iter().map(|&b| Some(b)).chain([None]).collect::<Vec<_>>();
    assert_eq!(row_bytes(&earliest), some(&[0, 0, 0, 0, 1, 1]));
    let latest = recomputed(Prefer::Latest).finish().unwrap();
    assert_eq!(row_bytes(&latest), some(&[1, 1, 1, 1, 1, 1]));
    assert_eq!(earliest.source(2), source(0, Phase::Prefill));
    assert_eq!(earliest.source(3), source(0, Phase::Decode));
    assert_eq!(latest.source(3), source(1, Phase::Prefill));
    for assembled in [&earliest, &latest] {
        let report = &assembled.turns()[1];
        assert_eq!(
            (report.compared, &report.differed[..]),
            (4, &[0, 1, 2, 3][..])
        );
        assert_eq!((report.continues, report.common), (Some(0), 5));
    }
    assert_eq!(earliest.turns()[1].written, 2);
    assert_eq!(latest.turns()[1].written, 6);
    // Rows that agree are compared, and not listed.
    let mut agree = one_turn(Prefer::Earliest, 1);
    agree
        .push(Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_piece(ones(1, 6)))
        .unwrap();
    let report = &agree.reports()[1];
    assert_eq!((report.compared, report.differed.len()), (4, 0));
}

#[test]
fn the_boundary_takes_the_next_turns_row() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    let before = episode.assemble(0).unwrap();
    // Asked from L - 1 = 4: the boundary (turn 0's last token) and [5, 7).
    episode
        .push(
            Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8])
                .with_start(4)
                .with_piece(bytes(&[40, 50, 60])),
        )
        .unwrap();
    let assembled = episode.assemble(1).unwrap();
    assert_eq!(
        row_bytes(&assembled),
        [
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(40),
            Some(50),
            Some(60),
            None
        ]
    );
    assert_eq!(assembled.source(4), source(1, Phase::Prefill));
    assert_eq!(assembled.source(6), source(1, Phase::Decode));
    assert_eq!(assembled.turns()[1].compared, 0);
    // Turn 0's path is as it was: its last position has no row in it.
    assert_eq!(episode.assemble(0).unwrap(), before);
    // Under Latest too: nothing was there to replace.
    let mut latest = one_turn(Prefer::Latest, 0);
    latest
        .push(
            Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8])
                .with_start(4)
                .with_piece(bytes(&[40, 50, 60])),
        )
        .unwrap();
    assert_eq!(latest.finish().unwrap(), assembled);
}

#[test]
fn rows_are_placed_from_the_counts_not_from_their_number() {
    // Turn 1: P = 6, N = 3, so E = 8; 4 rows asked from 4 are [4, 8).
    let mut episode = one_turn(Prefer::Earliest, 0);
    let turn = Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]).with_start(4);
    episode
        .push(turn.clone().with_piece(bytes(&[10, 11, 12, 13])))
        .unwrap();
    let placed = row_bytes(&episode.assemble(1).unwrap());
    assert_eq!(
        &placed[3..],
        [Some(0), Some(10), Some(11), Some(12), Some(13), None]
    );
    // A decode's rows end at E whatever their number: 8 of them, from a
    // decode that recomputed the prompt, are [0, 8), and meet turn 0's
    // rows at [0, 4) (the prefill wins [4, 6)).
    let decode = |n: usize| RowPiece::decode(Dtype::Uint8, vec![1], (0..n as u8).collect());
    let prefill = RowPiece::prefill(Dtype::Uint8, vec![1], vec![20, 21]);
    let mut episode = one_turn(Prefer::Earliest, 9);
    episode
        .push(
            turn.clone()
                .with_piece(prefill.clone())
                .with_piece(decode(8)),
        )
        .unwrap();
    let assembled = episode.finish().unwrap();
    assert_eq!(
        row_bytes(&assembled),
        [
            Some(9),
            Some(9),
            Some(9),
            Some(9),
            Some(20),
            Some(21),
            Some(6),
            Some(7),
            None
        ]
    );
    assert_eq!(assembled.turns()[1].compared, 4);
    assert_eq!(assembled.turns()[1].differed, [0, 1, 2, 3]);
    // 3 of them are [5, 8): vLLM's decode from P - 1.
    let mut episode = one_turn(Prefer::Earliest, 9);
    episode
        .push(turn.with_piece(prefill).with_piece(decode(3)))
        .unwrap();
    let assembled = episode.finish().unwrap();
    assert_eq!(
        &row_bytes(&assembled)[4..],
        [Some(20), Some(21), Some(1), Some(2), None]
    );
    assert_eq!(assembled.turns()[1].compared, 0);
}

#[test]
fn the_first_piece_wins_where_pieces_overlap() {
    // P = 3, N = 3 (E = 5): prefill [0, 3) of 1s, decode [2, 5) of 2s.
    let turn = Turn::new(vec![1, 2, 3], vec![4, 5, 6]);
    let prefill = RowPiece::prefill(Dtype::Uint8, vec![1], vec![1; 3]);
    let decode = RowPiece::decode(Dtype::Uint8, vec![1], vec![2; 3]);
    let mut episode = Episode::default();
    episode
        .push(
            turn.clone()
                .with_piece(prefill.clone())
                .with_piece(decode.clone()),
        )
        .unwrap();
    let stitched = episode.finish().unwrap();
    assert_eq!(
        row_bytes(&stitched),
        [Some(1), Some(1), Some(1), Some(2), Some(2), None]
    );
    assert_eq!(stitched.source(2), source(0, Phase::Prefill));
    assert_eq!(stitched.source(3), source(0, Phase::Decode));
    let mut episode = Episode::default();
    episode
        .push(turn.with_piece(decode).with_piece(prefill))
        .unwrap();
    let reversed = episode.finish().unwrap();
    assert_eq!(
        row_bytes(&reversed),
        [Some(1), Some(1), Some(2), Some(2), Some(2), None]
    );
    assert_eq!(reversed.source(2), source(0, Phase::Decode));
}

#[test]
fn the_turn_continued_is_the_longest_prefix_then_the_earliest() {
    let mut episode = Episode::default();
    let mut push = |prompt: &[u64], completion: &[u64], start: u64, rows: usize| {
        let value = episode.turns() as u8;
        let turn = Turn::new(prompt.to_vec(), completion.to_vec())
            .with_start(start)
            .with_piece(ones(value, rows));
        episode.push(turn)
    };
    push(&[1], &[2, 3], 0, 2).unwrap(); // 0: [1, 2, 3]
    push(&[1, 2, 3, 4], &[5], 2, 2).unwrap(); // 1: continues 0, L = 3
    push(&[1, 2, 9], &[6], 2, 1).unwrap(); // 2: [1, 2] with 0 and 1: 0
    push(&[1, 2, 3, 4, 5, 7], &[8], 4, 2).unwrap(); // 3: L = 5 with 1
    push(&[1, 2, 9, 6, 1], &[0], 3, 2).unwrap(); // 4: L = 4 with 2
                                                 // A late start names the turn continued, and its end.
    let err = push(&[1, 2, 3, 4, 5, 7, 8, 9], &[1], 7, 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "turn 5: position 6 has no row: turn 5 asked from 7 but its common prefix with turn 3 \
         is 7 (turn 3's rows end at 6)"
    );
    let continued: Vec<_> = episode
        .reports()
        .iter()
        .map(|r| (r.continues, r.common))
        .collect();
    assert_eq!(
        continued,
        [
            (None, 0),
            (Some(0), 3),
            (Some(0), 2),
            (Some(1), 5),
            (Some(2), 4)
        ]
    );
    // Turn 4's path: [0, 2) are turn 0's rows, 2 turn 2's, and 3 (turn 2's
    // last token, the boundary) and 4 turn 4's.
    let path = episode.assemble(4).unwrap();
    let turns: Vec<_> = path.sources().iter().map(|s| s.map(|s| s.turn)).collect();
    assert_eq!(turns, [Some(0), Some(0), Some(2), Some(4), Some(4), None]);
}

#[test]
fn boundaries_are_those_of_the_path_not_of_a_sibling() {
    // Turn 0: [1, 2] then [3, 4]; turn 1: [1, 2, 3, 4, 5] then [6] (L = 4);
    // turn 2 branches at 2: [1, 2, 7, 7, 7] then [8, 8] (L = 2).
    let mut episode = Episode::default();
    episode
        .push(Turn::new(vec![1, 2], vec![3, 4]).with_piece(ones(0, 3)))
        .unwrap();
    episode
        .push(
            Turn::new(vec![1, 2, 3, 4, 5], vec![6])
                .with_start(3)
                .with_piece(ones(1, 2)),
        )
        .unwrap();
    episode
        .push(
            Turn::new(vec![1, 2, 7, 7, 7], vec![8, 8])
                .with_start(1)
                .with_piece(ones(2, 5)),
        )
        .unwrap();
    let path = episode.finish().unwrap();
    assert_eq!(
        row_bytes(&path),
        [Some(0), Some(0), Some(2), Some(2), Some(2), Some(2), None]
    );
    // A forward differing everywhere: 1 and 2 are the path's boundaries
    // (turn 2's L - 1 and L); 3 and 4 (turn 1's, on another branch) and 5,
    // the decode's, are not.
    let classified = classify(&path, &ones(7, 6)).unwrap();
    assert_eq!(classified.positions(Finding::Boundary), [1, 2]);
    assert_eq!(classified.positions(Finding::Scattered), [0, 3, 4]);
    assert_eq!(classified.positions(Finding::DecodeSourced), [5]);
    assert_eq!((classified.compared(), classified.differed()), (6, 6));
    assert!(!classified.passes());
}

#[test]
fn a_decode_flip_at_a_boundary_is_decode_sourced() {
    // Turn 1 adds no prompt token: its first new position, 5, is its
    // decode's.
    let mut episode = one_turn(Prefer::Earliest, 0);
    episode
        .push(
            Turn::new(vec![1, 2, 3, 4, 5], vec![6, 7])
                .with_start(4)
                .with_piece(ones(0, 2)),
        )
        .unwrap();
    let path = episode.finish().unwrap();
    assert_eq!(path.source(5), source(1, Phase::Decode));
    let full = bytes(&[0, 0, 0, 0, 0, 1, 0]);
    let classified = classify(&path, &full).unwrap();
    assert_eq!(classified.positions(Finding::DecodeSourced), [5]);
    assert!(classified.passes());
    // The same difference at 4, the prefill's boundary row, fails.
    let classified = classify(&path, &bytes(&[0, 0, 0, 0, 1, 0])).unwrap();
    assert_eq!(classified.positions(Finding::Boundary), [4]);
    assert!(!classified.passes());
}

/// Every turn's boundary is one, not only the last turn's: a difference at
/// turn 1's boundary in a three-turn episode is a boundary (the walk back
/// along the path must go past the last turn).
#[test]
fn an_earlier_turns_boundary_is_a_boundary() {
    let mut episode = one_turn(Prefer::Earliest, 0);
    episode
        .push(Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_piece(ones(1, 6)))
        .unwrap();
    episode
        .push(Turn::new(vec![1, 2, 3, 4, 5, 6, 7, 8], vec![9]).with_piece(ones(2, 8)))
        .unwrap();
    let path = episode.finish().unwrap();
    assert_eq!(
        row_bytes(&path),
        [0, 0, 0, 0, 1, 1, 2, 2]
            .map(Some)
            .into_iter()
            .chain([None])
            .collect::<Vec<_>>()
    );
    assert_eq!(path.source(4), source(1, Phase::Prefill));
    // Turn 1's first new position, 5, and the one before it, 4; turn 2's,
    // 7 and 6.
    for (x, differs) in [
        (4, Finding::Boundary),
        (5, Finding::Boundary),
        (6, Finding::Boundary),
        (7, Finding::Boundary),
        (2, Finding::Scattered),
    ] {
        let mut full = [0, 0, 0, 0, 1, 1, 2, 2, 2];
        full[x] = 9;
        let classified = classify(&path, &bytes(&full)).unwrap();
        assert_eq!(classified.positions(differs), [x as u64], "at {x}");
        assert!(!classified.passes());
    }
}

#[test]
fn dtypes_widen_keeping_values() {
    let mut episode = Episode::default();
    episode
        .push(Turn::new(vec![1, 2], vec![3]).with_piece(bytes(&[255, 128])))
        .unwrap();
    assert_eq!(episode.dtype(), Some(Dtype::Uint8));
    // int8 -1 joins uint8 rows: int16 holds both.
    episode
        .push(
            Turn::new(vec![1, 2, 3, 4], vec![5])
                .with_start(2)
                .with_piece(RowPiece::whole(Dtype::Int8, vec![1], vec![0xff, 0x7f])),
        )
        .unwrap();
    let assembled = episode.finish().unwrap();
    assert_eq!(assembled.dtype(), Dtype::Int16);
    assert_eq!(assembled.row_bytes(), 2);
    assert_eq!(
        decode(Dtype::Int16, assembled.rows()),
        [255, 128, -1, 127, 0]
    );
    // Rows compared once widened: int8 -1 against uint8 255 differ.
    let mut episode = Episode::default();
    episode
        .push(Turn::new(vec![1], vec![2]).with_piece(bytes(&[255])))
        .unwrap();
    episode
        .push(Turn::new(vec![1, 2], vec![3]).with_piece(RowPiece::whole(
            Dtype::Int8,
            vec![1],
            vec![0xff, 0xff],
        )))
        .unwrap();
    assert_eq!(episode.reports()[1].differed, [0]);
    // And uint16 1 against uint8 1 agree.
    let mut episode = Episode::default();
    episode
        .push(Turn::new(vec![1], vec![2]).with_piece(bytes(&[1])))
        .unwrap();
    episode
        .push(Turn::new(vec![1, 2], vec![3]).with_piece(RowPiece::whole(
            Dtype::Uint16,
            vec![1],
            vec![1, 0, 7, 0],
        )))
        .unwrap();
    assert_eq!(episode.reports()[1].compared, 1);
    assert_eq!(episode.reports()[1].differed, [] as [u64; 0]);
    assert_eq!(
        decode(Dtype::Uint16, episode.finish().unwrap().rows()),
        [1, 7, 0]
    );
}

// ---------------------------------------------------------------- memory

/// A linear episode of delta turns, 48 x 8 uint8 rows: turn `k`'s tokens
/// are the first `(k + 1) * new` of one sequence, its last `completion`
/// generated, asked from `L - 1`.
fn linear_turn(k: usize, new: usize, completion: usize) -> Turn {
    let length = (k + 1) * new;
    let tokens: Vec<u64> = (0..length as u64).map(|i| i * 7 + 1).collect();
    let prompt = tokens[..length - completion].to_vec();
    let turn = Turn::new(prompt, tokens[length - completion..].to_vec());
    let (turn, rows) = if k == 0 {
        (turn, new - 1)
    } else {
        (turn.with_start((k * new - 1) as u64), new)
    };
    let bytes = (0..rows * 384).map(|i| (i % 251) as u8).collect();
    turn.with_piece(RowPiece::whole(Dtype::Uint8, vec![48, 8], bytes))
}

/// Peak memory, as the allocator sees it: pushing 24 delta turns of a
/// linear episode (each made just before it is pushed) and finishing holds
/// at most the output (its rows and sources), one turn (its rows and its
/// tokens) and the trie's bookkeeping (a node of 32 bytes and a path entry
/// of 8 a position): the arena grows by what each turn adds, not by
/// doubling, and `finish` moves it out rather than copying it.
#[test]
fn peak_memory_is_the_output_and_one_turn() {
    // 24 turns: an arena doubling its capacity would reach 32 turns' worth.
    let (turns, new, completion) = (24, 256, 16);
    let (held, assembled) = crate::in_place::peak(|| {
        let mut episode = Episode::default();
        for k in 0..turns {
            episode.push(linear_turn(k, new, completion)).unwrap();
        }
        episode.finish().unwrap()
    });
    let positions = turns * new;
    assert_eq!(assembled.len(), positions as u64);
    let rows = assembled.rows().len();
    assert_eq!(rows, positions * 384);
    let output = rows + positions * std::mem::size_of::<Option<RowSource>>();
    let one_turn = new * 384 + positions * 8;
    let bookkeeping = positions * (32 + 8);
    let bound = output + one_turn + bookkeeping + 64 * 1024;
    assert!(
        held <= bound,
        "held {held} bytes at the peak; output {output}, one turn {one_turn}, bookkeeping \
         {bookkeeping}: bound {bound}"
    );
    // A copy of the rows at the end would have held twice them.
    assert!(held < 2 * rows, "held {held}, rows {rows}");
}

// ------------------------------------------- turns read from responses

/// Turns read out of their responses (`gather::read_turn`) in every form
/// the table's readers take, checked against the model's rows, and the
/// regression of `Unsized` through a response.
#[cfg(feature = "verify")]
mod read {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use pd_stitch::algebra::Dtype;
    use pd_stitch::episode::{Episode, EpisodeErrorKind, Phase, Prefer, Turn};
    use pd_stitch::gather::{read_turn, Store, TurnResponses};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use crate::support::config;
    use crate::support::episode::{decode, encode, PrefixModel};
    use crate::support::npy_write;

    /// The forms a turn's rows come in: a whole response's inline compact
    /// rows, `.npy` with and without its choice's `token_ids`, rows by
    /// handle, SGLang's ids, and a P/D pair's two responses, compact or by
    /// handle.
    const FORMS: [&str; 7] = [
        "compact",
        "npy counted",
        "npy bare",
        "by handle",
        "sglang",
        "pair compact",
        "pair by handle",
    ];

    /// Rows `[from, from + rows.len())` as `form`'s one response, their
    /// files written into `store` under `name`.
    fn response(
        form: &str,
        rows: &[Vec<i64>],
        from: u64,
        counts: (u64, &[u64]),
        store: &mut Store,
        name: &str,
    ) -> Value {
        let (prompt, completion) = counts;
        let n = rows.len() as u64;
        let uint16: Vec<u8> = rows.iter().flat_map(|r| encode(Dtype::Uint16, r)).collect();
        match form {
            "compact" => json!({"choices": [{"routed_experts": {"data": STANDARD.encode(&uint16),
                "shape": [n, 2, 2], "start": from, "dtype": "uint16"}}]}),
            "npy counted" | "npy bare" => {
                let file = STANDARD.encode(npy_write("<u2", &[n, 2, 2], &uint16));
                let mut choice = json!({"routed_experts": file});
                if form == "npy counted" {
                    choice["token_ids"] = json!(completion);
                }
                json!({"usage": {"prompt_tokens": prompt}, "choices": [choice]})
            }
            "by handle" => {
                store.write(name, uint16).unwrap();
                json!({"choices": [{"payload": [{"field": "routed_experts", "file": name,
                    "offset": 0, "pos": from, "rows": n, "dtype": "uint16", "shape": [2, 2]}]}]})
            }
            "sglang" => {
                let ids: Vec<u8> = rows.iter().flat_map(|r| encode(Dtype::Int32, r)).collect();
                json!({"text": "", "meta_info": {"prompt_tokens": prompt,
                    "completion_tokens": completion.len(), "routed_experts": STANDARD.encode(ids)}})
            }
            _ => unreachable!("{form}"),
        }
    }

    proptest! {
        #![proptest_config(config("episode_read"))]

        /// A linear episode of 1-4 turns, full or delta from `L - 1`, each
        /// turn's rows in a form of its own, read with `read_turn` and
        /// assembled under `Earliest`: every row is the model's
        /// full-context row (the decode's own row for the prompt's last
        /// position, which differs, loses to the prefill's), each from the
        /// side that computed it, in the dtype the forms widen to.
        #[test]
        fn every_form_reads_into_the_models_rows(
            seed in any::<u64>(),
            shapes in proptest::collection::vec((1u64..4, 1usize..4, 0..FORMS.len()), 1..5),
            delta in any::<bool>(),
        ) {
            let model = PrefixModel { seed, elements: 4, experts: 40 };
            let mut store = Store::memory();
            let mut episode = Episode::new(Prefer::Earliest);
            let mut tokens: Vec<u64> = Vec::new();
            let mut dtype = Dtype::Uint16;
            for (k, &(new, completion, form)) in shapes.iter().enumerate() {
                let form = FORMS[form];
                let common = tokens.len();
                let mut prompt = tokens.clone();
                prompt.extend((0..new).map(|i| seed.wrapping_add(i) % 5));
                let p = prompt.len();
                let all: Vec<u64> = prompt
                    .iter()
                    .copied()
                    .chain((0..completion as u64).map(|i| (seed >> 8).wrapping_add(i) % 5))
                    .collect();
                let end = all.len() - 1;
                // SGLang has no way to say a start but its counts, which
                // place any delta; the others say theirs or are placed so.
                let start = if delta { common.saturating_sub(1) } else { 0 };
                let rows = |from: usize, to: usize| -> Vec<Vec<i64>> {
                    (from..to).map(|x| model.row(&all[..=x])).collect()
                };
                let counts = (p as u64, &all[p..]);
                let name = |side: &str| format!("t{k}.{side}.bin");
                let responses = if let Some(pair) = form.strip_prefix("pair ") {
                    let pair = if pair == "compact" { "compact" } else { "by handle" };
                    // The decode's rows from P - 1, its own row there not
                    // the prompt's.
                    let mut decoded = rows(p - 1, end);
                    decoded[0][0] = (decoded[0][0] + 1) % 40;
                    let prefill = response(pair, &rows(start, p), start as u64, counts, &mut store, &name("p"));
                    let decode = response(pair, &decoded, p as u64 - 1, counts, &mut store, &name("d"));
                    (Some(prefill), decode)
                } else {
                    (None, response(form, &rows(start, end), start as u64, counts, &mut store, &name("w")))
                };
                let read = match &responses {
                    (Some(prefill), decode) => TurnResponses::Pair { prefill, decode },
                    (None, whole) => TurnResponses::Whole(whole),
                };
                let pieces = read_turn(k, read, &store, Some((2, 2))).unwrap();
                prop_assert_eq!(pieces.len(), if responses.0.is_some() { 2 } else { 1 });
                let mut turn = Turn::new(prompt.clone(), all[p..].to_vec());
                if delta {
                    turn = turn.with_start(start as u64);
                }
                prop_assert_eq!(episode.push(pieces.into_iter().fold(turn, Turn::with_piece)), Ok(k));
                if form == "sglang" {
                    dtype = Dtype::Int32;
                }
                tokens = all;
            }
            let assembled = episode.finish().unwrap();
            prop_assert_eq!(assembled.dtype(), dtype);
            prop_assert_eq!(assembled.row_shape(), &[2, 2][..]);
            let forward = model.forward(&tokens);
            for (x, row) in forward.iter().enumerate().take(tokens.len() - 1) {
                let got = assembled.row(x as u64).map(|r| decode(dtype, r));
                prop_assert_eq!(got.as_ref(), Some(row), "position {}", x);
            }
            prop_assert!(!assembled.has_row(tokens.len() as u64 - 1));
            // The last turn's own prompt rows are the prefill's.
            let p = tokens.len() - shapes.last().unwrap().1;
            let phase = assembled.source(p as u64 - 1).map(|s| s.phase);
            prop_assert_eq!(phase, Some(Phase::Prefill));
        }
    }

    /// A turn's response given as text that is not JSON (as the Python
    /// binding parses bytes and str): the turn named once, the response
    /// once ("response response" before), a pair's side as the side.
    #[test]
    fn text_that_is_not_json_names_the_turn_and_the_response_once() {
        use pd_stitch::gather::{GatherError, TurnReadError};
        use pd_stitch::Side;
        let err = |side: Side, phase: Option<Phase>| {
            let json = pd_stitch::bytes::parse(side, b"{").unwrap_err();
            TurnReadError::new(2, phase, GatherError::from(json)).to_string()
        };
        assert_eq!(
            err(Side::Response, None),
            "turn 2: response: invalid JSON at byte 0: EOF while parsing an object at line 1 \
             column 1"
        );
        assert_eq!(
            err(Side::Prefill, Some(Phase::Prefill)),
            "turn 2 (prefill): prefill response: invalid JSON at byte 0: EOF while parsing an \
             object at line 1 column 1"
        );
    }

    /// A response declaring rows of 2^59 elements and holding none, for a
    /// first turn of one token, is `Unsized`, not an abort; any later
    /// turn's such piece is held to the episode's row shape.
    #[test]
    fn a_declared_row_shape_without_rows_sizes_nothing() {
        let rowless = json!({"choices": [{"routed_experts": {"data": "",
            "shape": [0, 1u64 << 29, 1u64 << 30], "start": 0, "dtype": "uint8"}}]});
        let pieces = read_turn(0, TurnResponses::Whole(&rowless), &Store::memory(), None).unwrap();
        let turn = pieces
            .into_iter()
            .fold(Turn::new(vec![], vec![1]), Turn::with_piece);
        let err = Episode::default().push(turn).unwrap_err();
        assert_eq!(err.kind(), EpisodeErrorKind::Unsized, "{err}");
        // SGLang's ids with a row shape from the caller: the same.
        let sglang = json!({"meta_info": {"prompt_tokens": 0, "completion_tokens": 1,
            "routed_experts": ""}});
        let pieces = read_turn(
            0,
            TurnResponses::Whole(&sglang),
            &Store::memory(),
            Some((1 << 29, 1 << 30)),
        )
        .unwrap();
        assert_eq!(pieces[0].row_shape(), [1 << 29, 1 << 30]);
        let turn = pieces
            .into_iter()
            .fold(Turn::new(vec![], vec![1]), Turn::with_piece);
        let err = Episode::default().push(turn).unwrap_err();
        assert_eq!(err.kind(), EpisodeErrorKind::Unsized, "{err}");
    }
}
