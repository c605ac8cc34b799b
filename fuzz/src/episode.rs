//! The oracle of the `episode` target: arbitrary turns pushed into a
//! `pd_stitch::episode::Episode`.
//!
//! **Input format.** Turns separated by NUL bytes (0x00). A turn is a JSON
//! header, then one or two pieces of rows, each after a 0x01 byte:
//!
//! ```text
//! {"prompt": [ids], "completion": [ids], "start": N or null,
//!  "row_shape": [layers, top_k] (SGLang's), "prefer": "latest"}
//! 0x01 piece [0x01 piece]
//! ```
//!
//! One piece is a whole response's rows, two are a P/D pair (prefill, then
//! decode). A piece is JSON: raw rows, `{"raw": {"dtype": K, "shape": [..],
//! "bytes": [..], "first": N}}` (K an index of `Dtype::ALL`, any integer;
//! `first` optional), or a response of any form the crate reads (compact,
//! `.npy`, SGLang's, by handle; read with `gather::read_piece` from an empty
//! store). JSON never holds a raw 0x00 or 0x01, so the splits are
//! unambiguous; a header or piece that is not JSON, or a piece that cannot
//! be read, skips that turn (reading must not panic either). `"prefer"` of
//! the first turn sets the rule.
//!
//! **What is asserted**, for any input (docs/SPEC.md, "The episode"):
//!
//! - no panic, pushing, assembling or classifying (libFuzzer reports it);
//! - a push's error names the turn being pushed (`owner()` and the message's
//!   opening `turn K:`), and the episode is after it what it was before:
//!   the same turns, reports and dtype, and every path assembles the same;
//! - after a push, its path has `P + N` positions, a row at each but the
//!   last, rows of the episode's size, `finish` equals the last path (E4),
//!   and the path compared with its own rows as the full-context forward
//!   differs nowhere (`classify`).

use pd_stitch::algebra::Dtype;
use pd_stitch::episode::{classify, Assembled, Episode, Owner, Phase, Prefer, RowPiece, Turn};
use pd_stitch::gather::{read_piece, Store};
use serde_json::Value;

/// The separator of turns.
const TURN: u8 = 0x00;
/// The separator of a turn's header and its pieces.
const PIECE: u8 = 0x01;

/// Runs the oracle on one input.
pub fn check_episode(data: &[u8]) {
    let mut episode: Option<Episode> = None;
    for record in data.split(|&b| b == TURN) {
        let Some((turn, prefer)) = turn_of(record) else {
            continue;
        };
        let episode = episode.get_or_insert_with(|| Episode::new(prefer));
        push_and_check(episode, turn);
    }
}

/// The turn a record describes, and the rule its header asks for.
fn turn_of(record: &[u8]) -> Option<(Turn, Prefer)> {
    let mut parts = record.split(|&b| b == PIECE);
    let header: Value = serde_json::from_slice(parts.next()?).ok()?;
    let ids = |key: &str| -> Option<Vec<u64>> {
        header
            .get(key)?
            .as_array()?
            .iter()
            .map(Value::as_u64)
            .collect()
    };
    let mut turn = Turn::new(ids("prompt")?, ids("completion")?);
    if let Some(start) = header.get("start").and_then(Value::as_u64) {
        turn = turn.with_start(start);
    }
    let row_shape = header
        .get("row_shape")
        .and_then(Value::as_array)
        .and_then(|shape| Some((shape.first()?.as_u64()?, shape.get(1)?.as_u64()?)));
    let pieces: Vec<&[u8]> = parts.collect();
    let sides = match pieces.len() {
        1 => vec![None],
        2 => vec![Some(Phase::Prefill), Some(Phase::Decode)],
        _ => return None,
    };
    for (bytes, side) in pieces.into_iter().zip(sides) {
        turn = turn.with_piece(piece_of(bytes, side, row_shape)?);
    }
    let prefer = match header.get("prefer").and_then(Value::as_str) {
        Some("latest") => Prefer::Latest,
        _ => Prefer::Earliest,
    };
    Some((turn, prefer))
}

/// A piece's rows: raw rows, or a response read by `read_piece`.
fn piece_of(bytes: &[u8], side: Option<Phase>, row_shape: Option<(u64, u64)>) -> Option<RowPiece> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let Some(raw) = value.get("raw") else {
        return read_piece(&value, 0, side, &Store::memory(), row_shape).ok();
    };
    let dtype = raw.get("dtype")?.as_u64()?;
    let dtype = Dtype::ALL[(dtype % Dtype::ALL.len() as u64) as usize];
    let numbers = |key: &str| -> Option<Vec<u64>> {
        raw.get(key)?
            .as_array()?
            .iter()
            .map(Value::as_u64)
            .collect()
    };
    let shape = numbers("shape")?;
    let rows = numbers("bytes")?
        .into_iter()
        .map(|b| u8::try_from(b).ok())
        .collect::<Option<Vec<u8>>>()?;
    let piece = match side {
        None => RowPiece::whole(dtype, shape, rows),
        Some(Phase::Prefill) => RowPiece::prefill(dtype, shape, rows),
        Some(Phase::Decode) => RowPiece::decode(dtype, shape, rows),
    };
    Some(match raw.get("first").and_then(Value::as_u64) {
        Some(first) => piece.at(first),
        None => piece,
    })
}

/// What can be observed of an episode: its turns' reports, its dtype, and
/// every path.
fn observed(
    episode: &Episode,
) -> (
    Vec<pd_stitch::episode::TurnReport>,
    Option<Dtype>,
    Vec<Option<Assembled>>,
) {
    let paths = (0..episode.turns()).map(|t| episode.assemble(t)).collect();
    (episode.reports().to_vec(), episode.dtype(), paths)
}

/// Pushes `turn` and holds the episode to the oracle's statements.
fn push_and_check(episode: &mut Episode, turn: Turn) {
    let index = episode.turns();
    let before = observed(episode);
    let (prompt, completion) = (turn.prompt().len() as u64, turn.completion().len() as u64);
    match episode.push(turn) {
        Err(err) => {
            assert_eq!(
                err.owner(),
                Some(Owner::Turn(index)),
                "an error names the turn pushed: {err}"
            );
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("turn {index}:")),
                "the message names turn {index}: {message}"
            );
            assert!(
                observed(episode) == before,
                "the episode changed on an error: {message}"
            );
        }
        Ok(pushed) => {
            assert_eq!(pushed, index, "a push returns the turn's index");
            let path = episode.assemble(index).expect("the path of a pushed turn");
            let len = prompt + completion;
            assert_eq!(path.len(), len, "a path has P + N positions");
            for x in 0..len {
                assert_eq!(
                    path.has_row(x),
                    x + 1 < len,
                    "a row at every position but the last"
                );
            }
            assert_eq!(path.rows().len() as u64, len * path.row_bytes() as u64);
            let finished = episode.clone().finish().expect("a pushed turn");
            assert!(finished == path, "finish is the last pushed turn's path");
            // The path as its own full-context forward: nothing differs.
            let own = RowPiece::whole(
                path.dtype(),
                path.row_shape().to_vec(),
                path.rows().to_vec(),
            )
            .at(0);
            let classified = classify(&path, &own).expect("a path's own rows fit it");
            assert_eq!(classified.compared(), len - 1);
            assert_eq!(classified.differed(), 0, "a path differs from its own rows");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/episode");
        let mut seeds: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
            .collect();
        seeds.sort();
        seeds
    }

    /// The committed seeds pass, and most of their turns are read and
    /// pushed: the fuzzer starts deep in the episode, not at its parser.
    #[test]
    fn seeds_pass_and_their_turns_are_pushed() {
        let seeds = seeds();
        assert!(seeds.len() >= 10, "{} seeds", seeds.len());
        let (mut read, mut pushed) = (0, 0);
        for (name, data) in &seeds {
            check_episode(data);
            let mut episode: Option<Episode> = None;
            for record in data.split(|&b| b == TURN) {
                let Some((turn, prefer)) = turn_of(record) else {
                    continue;
                };
                read += 1;
                let episode = episode.get_or_insert_with(|| Episode::new(prefer));
                pushed += usize::from(episode.push(turn).is_ok());
            }
            assert!(episode.is_some(), "{name}: no turn read");
        }
        assert!(pushed * 2 > read, "{pushed} of {read} turns pushed");
    }

    /// A raw piece of rows of one element each, after its 0x01.
    fn raw(dtype: usize, rows: &[u8]) -> Vec<u8> {
        let piece = serde_json::json!({"raw": {"dtype": dtype, "shape": [1, 1], "bytes": rows}});
        let mut bytes = vec![PIECE];
        bytes.extend(piece.to_string().into_bytes());
        bytes
    }

    fn turn(header: &str, pieces: &[Vec<u8>]) -> Vec<u8> {
        let mut record = header.as_bytes().to_vec();
        for piece in pieces {
            record.extend_from_slice(piece);
        }
        record
    }

    /// A refused turn goes through the oracle (its error names turn 1 and
    /// the episode is unchanged), and the oracle's comparison of episodes
    /// can fail: it tells an episode from the same with one more turn.
    #[test]
    fn a_refused_turn_passes_and_a_changed_episode_is_seen() {
        let uint8 = Dtype::ALL.iter().position(|&d| d == Dtype::Uint8).unwrap();
        let first = turn(
            r#"{"prompt": [1, 2], "completion": [3]}"#,
            &[raw(uint8, &[7, 8])],
        );
        // Turn 1 asks from 4, beyond its common prefix with turn 0 (3).
        let late = turn(
            r#"{"prompt": [1, 2, 3, 4], "completion": [5], "start": 4}"#,
            &[raw(uint8, &[9])],
        );
        let mut data = first.clone();
        data.push(TURN);
        data.extend_from_slice(&late);
        check_episode(&data);
        let mut episode = Episode::new(Prefer::Earliest);
        push_and_check(&mut episode, turn_of(&first).unwrap().0);
        let before = observed(&episode);
        let err = episode.clone().push(turn_of(&late).unwrap().0).unwrap_err();
        assert_eq!(err.owner(), Some(Owner::Turn(1)), "{err}");
        push_and_check(&mut episode, turn_of(&late).unwrap().0);
        assert!(observed(&episode) == before);
        let next = turn(
            r#"{"prompt": [1, 2, 3, 4], "completion": [5], "start": 2}"#,
            &[raw(uint8, &[9, 10])],
        );
        push_and_check(&mut episode, turn_of(&next).unwrap().0);
        assert_eq!(episode.turns(), 2);
        assert!(observed(&episode) != before);
    }

    /// Input that is not a turn is skipped, and a turn's pieces of every
    /// form are read: a raw piece, a response, a P/D pair.
    #[test]
    fn turns_are_read_from_every_form() {
        assert!(turn_of(b"not json").is_none());
        assert!(turn_of(br#"{"prompt": [1]}"#).is_none());
        let compact = br#"{"choices": [{"routed_experts": {"data": "AQI=", "shape": [2, 1, 1], "start": 0, "dtype": "uint8"}}]}"#;
        let mut record = br#"{"prompt": [1, 2], "completion": [3]}"#.to_vec();
        record.push(PIECE);
        record.extend_from_slice(compact);
        let (turn, _) = turn_of(&record).unwrap();
        assert_eq!(turn.pieces()[0].bytes(), [1, 2]);
        assert_eq!(turn.pieces()[0].first(), Some(0));
        let mut pair = br#"{"prompt": [1, 2], "completion": [3], "prefer": "latest"}"#.to_vec();
        pair.extend_from_slice(&raw(2, &[1]));
        pair.extend_from_slice(&raw(2, &[2]));
        let (turn, prefer) = turn_of(&pair).unwrap();
        assert_eq!(prefer, Prefer::Latest);
        assert_eq!(
            turn.pieces().iter().map(RowPiece::side).collect::<Vec<_>>(),
            [Some(Phase::Prefill), Some(Phase::Decode)]
        );
    }
}
