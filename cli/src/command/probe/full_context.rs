//! `probe --full-context`: an episode's turns assembled with
//! [`pd_stitch::episode`], once from the colocated server's answers and once
//! from the P/D deployment's, and each assembly held to the forward of the
//! episode's whole token sequence as one prompt, position by position
//! ([`pd_stitch::episode::classify`]).
//!
//! A difference is **boundary** (a prefill's row at a turn's first new
//! position or the one before it), **decode-sourced** (a row the episode
//! took from a decode: another batch than a prefill, so a rare flip is
//! legitimate, counted and not failed) or **scattered** (a prefill's row
//! elsewhere). A scattered position is **recomputed** instead, counted and
//! not failed, when the colocated server, asked the prompt of the turn
//! whose row the episode took there once more as a fresh forward of its own
//! ([`confirm`]), answers that same row: the engine's rows of a prefix then
//! depend on the length of the forward that computes them, not on the
//! assembly. Seen on a real SGLang 0.5.23 (CPU, AMD): with no prefix cache
//! and one request at a time, a prompt position's row differed in one layer
//! between a 224-token prompt and the longer ones that repeat it (its later
//! turns, and the forward). A row placed off, or a P/D row the colocated
//! server does not compute for that prompt, is not what the confirming
//! forward answers there, and stays scattered. A turn the episode refuses stops that side's assembly: a
//! position left without a row at a boundary (a delta asked one position
//! late) is a boundary finding ([`Finding::of_error`]); any other refusal
//! (rows that fit neither the counts nor the start asked) fails the check
//! with the episode's message. The check passes when no prefill-sourced row
//! differs but the recomputed ones, and nothing was refused.

use pd_stitch::algebra::Dtype;
use pd_stitch::episode::{classify, Episode, Finding, Prefer, RowPiece, Turn};
use pd_stitch::gather::{read_piece, Store};
use serde_json::{json, Value};

/// One turn as one side answered it: the prompt sent, the start asked
/// (`None`: a full response), the tokens the side generated for choice 0,
/// and its rows ([`turn_rows`]), or why they could not be read.
pub struct SideTurn<'a> {
    pub prompt: &'a [u64],
    pub start: Option<u64>,
    pub completion: &'a [u64],
    pub rows: &'a Result<RowPiece, String>,
}

/// The rows of choice 0 of a turn's answer, read as soon as it is answered
/// (rows by handle live in files a later request may replace).
pub fn turn_rows(
    response: &Value,
    store: &Store,
    row_shape: Option<(u64, u64)>,
) -> Result<RowPiece, String> {
    read_piece(response, 0, None, store, row_shape).map_err(|e| e.to_string())
}

/// What the check found on one side of one episode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SideCheck {
    /// The positions compared with the forward (every one with a row).
    pub compared: u64,
    /// The positions of each finding, in position order.
    pub boundary: Vec<u64>,
    pub decode_sourced: Vec<u64>,
    /// Prefill-sourced, not at a boundary, and the colocated server's fresh
    /// forward of the turn's prompt answers the side's row again
    /// ([`confirm`]): counted.
    pub recomputed: Vec<u64>,
    pub scattered: Vec<u64>,
    /// Why the episode refused a turn, or the forward's rows could not be
    /// compared: the check stopped there (a boundary refusal also lists its
    /// position under `boundary`).
    pub refused: Option<String>,
    /// Where a turn's rows met rows already there (re-prefill of earlier
    /// turns' positions): the positions compared, and `(turn, position)` of
    /// those that differed.
    pub overlap_compared: u64,
    pub overlap_differed: Vec<(usize, u64)>,
}

impl SideCheck {
    /// No boundary or scattered difference and nothing refused.
    pub fn passes(&self) -> bool {
        self.boundary.is_empty() && self.scattered.is_empty() && self.refused.is_none()
    }

    /// Every class of difference with its positions, in the order the
    /// report lists them: the library's findings, recomputed after
    /// decode-sourced (both counted, not failed).
    pub fn classes(&self) -> [(&'static str, &[u64]); 4] {
        [
            (Finding::Boundary.name(), &self.boundary),
            (Finding::DecodeSourced.name(), &self.decode_sourced),
            ("recomputed", &self.recomputed),
            (Finding::Scattered.name(), &self.scattered),
        ]
    }

    fn positions_mut(&mut self, finding: Finding) -> &mut Vec<u64> {
        match finding {
            Finding::Boundary => &mut self.boundary,
            Finding::DecodeSourced => &mut self.decode_sourced,
            Finding::Scattered => &mut self.scattered,
        }
    }
}

/// The findings, in the order the report lists them.
pub const FINDINGS: [Finding; 3] = [
    Finding::Boundary,
    Finding::DecodeSourced,
    Finding::Scattered,
];

/// One side of an episode: held to the forward, or not comparable with it
/// because its tokens are not the forward's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SideResult {
    /// Assembled (or refused) and compared.
    Checked(SideCheck),
    /// The side generated other tokens than the colocated server from this
    /// turn on: its episode is another sequence than the forward's (the
    /// request's comparison reports the divergence).
    Diverged { turn: usize },
}

impl SideResult {
    /// Checked and passing, or diverged (which the request's comparison
    /// fails on its own).
    pub fn passes(&self) -> bool {
        match self {
            SideResult::Checked(check) => check.passes(),
            SideResult::Diverged { .. } => true,
        }
    }
}

/// The rows of the forward's prompt positions, `[0, len)`, out of its
/// answer: the forward asked for one generated token, and any row of a
/// position beyond the prompt (an engine, or a mock, that generated more)
/// is not the episode's and is cut. Rows that start elsewhere than 0, or
/// are fewer, are left for [`classify`] to refuse.
pub fn forward_rows(
    name: &str,
    response: &Value,
    len: u64,
    store: &Store,
    row_shape: Option<(u64, u64)>,
) -> Result<RowPiece, String> {
    let piece = read_piece(response, 0, None, store, row_shape)
        .map_err(|e| format!("{name}'s rows: {e}"))?;
    let keep = row_size(&piece).and_then(|size| size.checked_mul(usize::try_from(len).ok()?));
    match keep {
        Some(keep) if piece.first().unwrap_or(0) == 0 && piece.bytes().len() > keep => {
            let cut = piece.bytes()[..keep].to_vec();
            Ok(RowPiece::whole(piece.dtype(), piece.row_shape().to_vec(), cut).at(0))
        }
        _ => Ok(piece),
    }
}

/// A scattered position as found: the turn whose row the side's episode
/// took there, and that row, for [`confirm`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suspect {
    pub position: u64,
    pub turn: usize,
    pub dtype: Dtype,
    pub row: Vec<u8>,
}

/// Moves each suspect of `turn` from scattered to recomputed where `rows`,
/// the colocated server's fresh forward of that turn's prompt alone (rows
/// from 0), answers the suspect's own row again: same dtype, same bytes.
pub fn confirm(check: &mut SideCheck, suspects: &[Suspect], turn: usize, rows: &RowPiece) {
    for suspect in suspects.iter().filter(|s| s.turn == turn) {
        let again = forward_row(rows, suspect.position);
        if rows.dtype() != suspect.dtype || again != Some(suspect.row.as_slice()) {
            continue;
        }
        if let Some(index) = check.scattered.iter().position(|&x| x == suspect.position) {
            check.scattered.remove(index);
            let at = check.recomputed.partition_point(|&x| x < suspect.position);
            check.recomputed.insert(at, suspect.position);
        }
    }
}

/// A side's turn as the episode takes it.
fn side_turn(turn: &SideTurn<'_>, piece: RowPiece) -> Turn {
    let pushed = Turn::new(turn.prompt.to_vec(), turn.completion.to_vec()).with_piece(piece);
    match turn.start {
        Some(start) => pushed.with_start(start),
        None => pushed,
    }
}

/// The bytes of one row of `piece`, if they fit in memory.
fn row_size(piece: &RowPiece) -> Option<usize> {
    let bytes = piece
        .row_shape()
        .iter()
        .try_fold(piece.dtype().itemsize(), |size, &d| size.checked_mul(d))?;
    usize::try_from(bytes).ok()
}

/// The row of `full` at `position` (its dtype's bytes), if it has one.
fn forward_row(full: &RowPiece, position: u64) -> Option<&[u8]> {
    let size = row_size(full)?;
    let index = usize::try_from(position.checked_sub(full.first().unwrap_or(0))?).ok()?;
    full.bytes()
        .get(index.checked_mul(size)?..index.checked_add(1)?.checked_mul(size)?)
}

/// Assembles one side's turns under `Prefer::Earliest` and holds the
/// episode to `full`, the forward's rows; each scattered position is also a
/// [`Suspect`], for [`confirm`].
pub fn check_side(turns: &[SideTurn<'_>], full: &RowPiece) -> (SideCheck, Vec<Suspect>) {
    let mut check = SideCheck::default();
    let mut episode = Episode::new(Prefer::Earliest);
    for (index, turn) in turns.iter().enumerate() {
        let piece = match turn.rows {
            Ok(piece) => piece.clone(),
            Err(e) => {
                check.refused = Some(format!("turn {index}: {e}"));
                return (check, Vec::new());
            }
        };
        if let Err(err) = episode.push(side_turn(turn, piece)) {
            if let Some((position, finding)) = Finding::of_error(&err) {
                check.positions_mut(finding).push(position);
            }
            check.refused = Some(err.to_string());
            return (check, Vec::new());
        }
    }
    for (index, report) in episode.reports().iter().enumerate() {
        check.overlap_compared += report.compared;
        check
            .overlap_differed
            .extend(report.differed.iter().map(|&position| (index, position)));
    }
    let classified = episode
        .finish()
        .map_err(|e| e.to_string())
        .and_then(|assembled| {
            let classified = classify(&assembled, full).map_err(|e| e.to_string())?;
            Ok((assembled, classified))
        });
    match classified {
        Ok((assembled, classified)) => {
            check.compared = classified.compared();
            for finding in FINDINGS {
                check
                    .positions_mut(finding)
                    .extend_from_slice(classified.positions(finding));
            }
            let suspects = check
                .scattered
                .iter()
                .filter_map(|&position| {
                    Some(Suspect {
                        position,
                        turn: assembled.source(position)?.turn,
                        dtype: assembled.dtype(),
                        row: assembled.row(position)?.to_vec(),
                    })
                })
                .collect();
            return (check, suspects);
        }
        Err(message) => check.refused = Some(message),
    }
    (check, Vec::new())
}

/// The first turn whose completion on one side is not the other's.
pub fn diverged(ours: &[&[u64]], theirs: &[&[u64]]) -> Option<usize> {
    ours.iter().zip(theirs).position(|(a, b)| a != b)
}

/// At most this many positions of a finding are listed in a text line (the
/// JSON lists all).
const LISTED: usize = 12;

/// `boundary at 44, 45; decode-sourced at 69`: a side's findings and
/// refusal, for its line of the report (empty when it has none).
pub fn details(result: &SideResult) -> String {
    let check = match result {
        SideResult::Diverged { turn } => {
            return format!(
                "tokens diverged from the colocated answer at turn {turn}: not held to the forward"
            );
        }
        SideResult::Checked(check) => check,
    };
    let mut parts = Vec::new();
    for (name, positions) in check.classes() {
        if positions.is_empty() {
            continue;
        }
        let mut listed: Vec<String> = positions.iter().take(LISTED).map(u64::to_string).collect();
        if positions.len() > LISTED {
            listed.push(format!("... ({} more)", positions.len() - LISTED));
        }
        parts.push(format!("{name} at {}", listed.join(", ")));
    }
    if !check.overlap_differed.is_empty() {
        parts.push(format!(
            "overlaps differing at {}",
            check
                .overlap_differed
                .iter()
                .take(LISTED)
                .map(|(turn, position)| format!("{position} (turn {turn})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(refused) = &check.refused {
        parts.push(format!("refused: {refused}"));
    }
    parts.join("; ")
}

/// A side as JSON: its status, the positions compared, each finding's
/// positions, the refusal, and the overlaps.
pub fn side_json(result: &SideResult) -> Value {
    match result {
        SideResult::Diverged { turn } => json!({"status": "diverged", "turn": turn}),
        SideResult::Checked(check) => json!({
            "status": if check.passes() { "passed" } else { "failed" },
            "compared": check.compared,
            "boundary": check.boundary,
            "decode_sourced": check.decode_sourced,
            "recomputed": check.recomputed,
            "scattered": check.scattered,
            "refused": check.refused,
            "overlaps": {
                "compared": check.overlap_compared,
                "differed": check.overlap_differed
                    .iter()
                    .map(|(turn, position)| json!({"turn": turn, "position": position}))
                    .collect::<Vec<_>>(),
            },
        }),
    }
}

/// The full-context check's counts over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FullContextCounts {
    /// Sides checked (two an episode whose turns and forward were answered).
    pub sides: usize,
    pub compared: u64,
    pub boundary: u64,
    pub decode_sourced: u64,
    pub recomputed: u64,
    pub scattered: u64,
    /// Sides whose episode refused a turn or the forward.
    pub refused: usize,
    /// Sides whose tokens diverged.
    pub diverged: usize,
    /// Sides that failed: a boundary or scattered difference or a refusal.
    pub failed: usize,
    /// Episodes whose check could not run (a request failed).
    pub errors: usize,
    pub overlap_compared: u64,
    pub overlap_differed: u64,
}

impl FullContextCounts {
    /// Adds one side.
    pub fn add(&mut self, result: &SideResult) {
        self.sides += 1;
        let check = match result {
            SideResult::Diverged { .. } => {
                self.diverged += 1;
                return;
            }
            SideResult::Checked(check) => check,
        };
        self.compared += check.compared;
        self.boundary += check.boundary.len() as u64;
        self.decode_sourced += check.decode_sourced.len() as u64;
        self.recomputed += check.recomputed.len() as u64;
        self.scattered += check.scattered.len() as u64;
        self.refused += usize::from(check.refused.is_some());
        self.failed += usize::from(!check.passes());
        self.overlap_compared += check.overlap_compared;
        self.overlap_differed += check.overlap_differed.len() as u64;
    }

    /// Whether any side failed or any episode's check could not run.
    pub fn passes(&self) -> bool {
        self.failed == 0 && self.errors == 0
    }

    /// The total line's counts: `boundary 0, decode-sourced 1, recomputed
    /// 0, scattered 0, refused 0`.
    pub fn summary(&self) -> String {
        format!(
            "{} position(s) compared: boundary {}, decode-sourced {}, recomputed {}, scattered {}, refused {}, diverged {}; overlaps {} of {} differing",
            self.compared,
            self.boundary,
            self.decode_sourced,
            self.recomputed,
            self.scattered,
            self.refused,
            self.diverged,
            self.overlap_differed,
            self.overlap_compared
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "passes": self.passes(),
            "sides": self.sides,
            "compared": self.compared,
            "boundary": self.boundary,
            "decode_sourced": self.decode_sourced,
            "recomputed": self.recomputed,
            "scattered": self.scattered,
            "refused": self.refused,
            "diverged": self.diverged,
            "failed": self.failed,
            "errors": self.errors,
            "overlaps": {"compared": self.overlap_compared, "differed": self.overlap_differed},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use pd_stitch::algebra::Dtype;

    /// The model's row of `position`: one uint8, a function of the position.
    fn truth(position: u64) -> u8 {
        (position * 7 + 3) as u8
    }

    /// Rows of positions `[from, to)`, each the model's but those at
    /// `flips`, whose bit 7 is flipped.
    fn rows(from: u64, to: u64, flips: &[u64]) -> Vec<u8> {
        (from..to)
            .map(|x| truth(x) ^ if flips.contains(&x) { 0x80 } else { 0 })
            .collect()
    }

    fn whole(from: u64, to: u64, flips: &[u64]) -> Result<RowPiece, String> {
        Ok(RowPiece::whole(
            Dtype::Uint8,
            vec![1, 1],
            rows(from, to, flips),
        ))
    }

    /// Three turns: prompt 5 and 3 generated (rows end at 7); then the 8
    /// tokens and 2 new (P 10, L 8), 2 generated (end 11); then the 12
    /// tokens and 1 new (P 13, L 12), 2 generated (end 14). The episode is
    /// 15 tokens.
    struct Episode3 {
        prompts: [Vec<u64>; 3],
        completions: [Vec<u64>; 3],
    }

    impl Episode3 {
        /// Its turns as a side's, each with its start and rows.
        fn sides<'a>(
            &'a self,
            turns: &'a [(Option<u64>, Result<RowPiece, String>); 3],
        ) -> Vec<SideTurn<'a>> {
            turns
                .iter()
                .enumerate()
                .map(|(t, (start, rows))| SideTurn {
                    prompt: &self.prompts[t],
                    start: *start,
                    completion: &self.completions[t],
                    rows,
                })
                .collect()
        }
    }

    fn episode3() -> Episode3 {
        Episode3 {
            prompts: [(1..=5).collect(), (1..=10).collect(), (1..=13).collect()],
            completions: [vec![6, 7, 8], vec![11, 12], vec![14, 15]],
        }
    }

    /// Each turn's start (None: full) and rows, checked against the forward
    /// of 15 rows flipped at `forward_flips`.
    fn check(
        turns: [(Option<u64>, Result<RowPiece, String>); 3],
        forward_flips: &[u64],
    ) -> SideCheck {
        check_found(turns, forward_flips).0
    }

    /// The same, with the suspects found.
    fn check_found(
        turns: [(Option<u64>, Result<RowPiece, String>); 3],
        forward_flips: &[u64],
    ) -> (SideCheck, Vec<Suspect>) {
        let episode = episode3();
        let sides = episode.sides(&turns);
        let full = RowPiece::whole(Dtype::Uint8, vec![1, 1], rows(0, 15, forward_flips)).at(0);
        check_side(&sides, &full)
    }

    /// Full turns, each with rows from 0 and the flips given.
    fn full_turns(flips: [&[u64]; 3]) -> [(Option<u64>, Result<RowPiece, String>); 3] {
        [
            (None, whole(0, 7, flips[0])),
            (None, whole(0, 11, flips[1])),
            (None, whole(0, 14, flips[2])),
        ]
    }

    /// Delta turns from L - 1 (7, then 11).
    fn delta_turns(flips: [&[u64]; 3]) -> [(Option<u64>, Result<RowPiece, String>); 3] {
        [
            (None, whole(0, 7, flips[0])),
            (Some(7), whole(7, 11, flips[1])),
            (Some(11), whole(11, 14, flips[2])),
        ]
    }

    #[test]
    fn rows_that_agree_pass_full_and_delta() {
        let full = check(full_turns([&[], &[], &[]]), &[]);
        // Positions 0..14 compared (the last has no row); turn 1 met turn
        // 0's 7 rows, turn 2 the 11 of turn 1's path.
        let expected = SideCheck {
            compared: 14,
            overlap_compared: 7 + 11,
            ..SideCheck::default()
        };
        assert_eq!(full, expected);
        assert!(full.passes());
        let delta = check(delta_turns([&[], &[], &[]]), &[]);
        assert_eq!(
            delta,
            SideCheck {
                compared: 14,
                ..SideCheck::default()
            }
        );
    }

    #[test]
    fn a_decode_flip_is_counted_and_passes() {
        // Position 6 is turn 0's generated token's (P = 5): its decode.
        let full = check(full_turns([&[6], &[], &[]]), &[]);
        assert_eq!(full.decode_sourced, [6]);
        assert_eq!((full.boundary.len(), full.scattered.len()), (0, 0));
        // The later turns' prefill rows there met the decode's and differed.
        assert_eq!(full.overlap_differed, [(1, 6), (2, 6)]);
        assert!(full.passes());
        let delta = check(delta_turns([&[6], &[], &[]]), &[]);
        assert_eq!(delta.decode_sourced, [6]);
        assert!(delta.overlap_differed.is_empty() && delta.passes());
        // The forward's own flip at a decode's position is the same finding.
        // (Position 13 is turn 2's first generated token: P = 13.)
        let forward = check(delta_turns([&[], &[], &[]]), &[13]);
        assert_eq!(forward.decode_sourced, [13]);
    }

    #[test]
    fn a_prefill_row_off_at_a_boundary_is_boundary_and_fails() {
        // Turn 1's L - 1 = 7 (turn 0's last token, first computed here) and
        // L = 8 (its first new token), both prefill rows of turn 1.
        for position in [7, 8] {
            let checked = check(delta_turns([&[], &[position], &[]]), &[]);
            assert_eq!(checked.boundary, [position]);
            assert!(checked.decode_sourced.is_empty() && checked.scattered.is_empty());
            assert!(!checked.passes());
        }
        // Turn 2's: 11 and 12.
        let checked = check(delta_turns([&[], &[], &[11, 12]]), &[]);
        assert_eq!(checked.boundary, [11, 12]);
    }

    #[test]
    fn a_prefill_row_off_elsewhere_is_scattered_and_fails() {
        let (checked, suspects) = check_found(full_turns([&[2], &[], &[]]), &[]);
        assert_eq!(checked.scattered, [2]);
        assert!(checked.recomputed.is_empty() && !checked.passes());
        // The row the episode took there, turn 0's, is the suspect.
        let suspect = Suspect {
            position: 2,
            turn: 0,
            dtype: Dtype::Uint8,
            row: vec![truth(2) ^ 0x80],
        };
        assert_eq!(suspects, [suspect]);
        // The forward differing there is the same finding, turn 1's row
        // the suspect (it alone computed position 9).
        let (checked, suspects) = check_found(delta_turns([&[], &[], &[]]), &[9]);
        assert_eq!(checked.scattered, [9]);
        assert_eq!((suspects.len(), suspects[0].turn), (1, 1));
        // Boundaries and decodes are never suspects.
        let (checked, suspects) = check_found(full_turns([&[6], &[8], &[]]), &[]);
        assert_eq!(
            (
                checked.boundary.as_slice(),
                checked.decode_sourced.as_slice()
            ),
            (&[8][..], &[6][..])
        );
        assert!(suspects.is_empty());
    }

    #[test]
    fn a_row_the_turns_prompt_gives_again_is_recomputed_and_passes() {
        // As SGLang did: turn 0's prompt (5 tokens) gave position 2 one
        // row, the longer prompts of turns 1 and 2, and the forward, another.
        let again =
            |flips: &[u64]| RowPiece::whole(Dtype::Uint8, vec![1, 1], rows(0, 5, flips)).at(0);
        let (mut checked, suspects) = check_found(full_turns([&[2, 3], &[], &[]]), &[]);
        assert_eq!(checked.scattered, [2, 3]);
        // The colocated server asked turn 0's prompt again answers 3 as the
        // side did, 2 as the forward did: 3 is recomputed, 2 stays.
        confirm(&mut checked, &suspects, 0, &again(&[3]));
        assert_eq!(
            (checked.scattered.as_slice(), checked.recomputed.as_slice()),
            (&[2][..], &[3][..])
        );
        assert!(!checked.passes());
        confirm(&mut checked, &suspects, 0, &again(&[2, 3]));
        assert_eq!(
            (checked.scattered.len(), checked.recomputed.as_slice()),
            (0, &[2, 3][..])
        );
        assert!(checked.passes());
        // Another turn's forward confirms nothing of turn 0's.
        let (mut checked, suspects) = check_found(full_turns([&[2], &[], &[]]), &[]);
        let turn1 = RowPiece::whole(Dtype::Uint8, vec![1, 1], rows(0, 10, &[2])).at(0);
        confirm(&mut checked, &suspects, 1, &turn1);
        assert_eq!(checked.scattered, [2]);
        // Nor does a forward of another dtype, or one without the position.
        let wide = RowPiece::whole(
            Dtype::Uint16,
            vec![1, 1],
            rows(0, 5, &[2]).iter().flat_map(|&b| [b, 0]).collect(),
        )
        .at(0);
        confirm(&mut checked, &suspects, 0, &wide);
        let short = RowPiece::whole(Dtype::Uint8, vec![1, 1], rows(0, 2, &[])).at(0);
        confirm(&mut checked, &suspects, 0, &short);
        assert_eq!(
            (checked.scattered.as_slice(), checked.recomputed.len()),
            (&[2][..], 0)
        );
    }

    #[test]
    fn a_delta_asked_one_position_late_is_a_boundary_refusal() {
        // Turn 1 asked from L = 8 instead of L - 1 = 7: position 7 has no
        // row, and the assembly stops there.
        let turns = [
            (None, whole(0, 7, &[])),
            (Some(8), whole(8, 11, &[])),
            (Some(11), whole(11, 14, &[])),
        ];
        let checked = check(turns, &[]);
        assert_eq!(checked.boundary, [7]);
        assert_eq!(checked.compared, 0);
        let refused = checked.refused.as_deref().unwrap_or_default();
        assert!(
            refused.starts_with("turn 1: position 7 has no row"),
            "{refused}"
        );
        assert!(!checked.passes());
    }

    #[test]
    fn rows_that_ignore_the_start_asked_are_refused() {
        // An engine that dropped the start: turn 1 asked from 7, answered
        // all 11 rows.
        let turns = [
            (None, whole(0, 7, &[])),
            (Some(7), whole(0, 11, &[])),
            (Some(11), whole(11, 14, &[])),
        ];
        let checked = check(turns, &[]);
        assert!(checked.boundary.is_empty());
        let refused = checked.refused.clone().unwrap_or_default();
        assert!(refused.starts_with("turn 1: "), "{refused}");
        assert!(!checked.passes());
    }

    #[test]
    fn unreadable_rows_and_a_short_forward_are_refused() {
        let mut turns = delta_turns([&[], &[], &[]]);
        turns[2].1 = Err("no rows here".into());
        let checked = check(turns, &[]);
        assert_eq!(checked.refused.as_deref(), Some("turn 2: no rows here"));
        assert!(!checked.passes());
        // A forward of 13 rows for 15 tokens: it cannot be compared.
        let episode = episode3();
        let turns = delta_turns([&[], &[], &[]]);
        let sides = episode.sides(&turns);
        let short = RowPiece::whole(Dtype::Uint8, vec![1, 1], rows(0, 13, &[]));
        let (checked, suspects) = check_side(&sides, &short);
        assert!(suspects.is_empty());
        let refused = checked.refused.unwrap_or_default();
        assert!(refused.starts_with("the full-context forward"), "{refused}");
    }

    const FULL: &str = "the full-context forward";

    /// A response with compact rows of positions `[start, start + count)`.
    fn compact(start: u64, count: u64) -> Value {
        let data = STANDARD.encode(rows(start, start + count, &[]));
        json!({"choices": [{"routed_experts":
            {"data": data, "shape": [count, 1, 1], "start": start, "dtype": "uint8"}}]})
    }

    #[test]
    fn the_forward_keeps_the_rows_of_its_prompt() {
        let store = Store::memory();
        // 17 rows for a 15-token prompt: an answer that generated more
        // than one token; the prompt's 15 are kept.
        let cut = forward_rows(FULL, &compact(0, 17), 15, &store, None).unwrap();
        assert_eq!((cut.first(), cut.bytes()), (Some(0), &rows(0, 15, &[])[..]));
        let exact = forward_rows(FULL, &compact(0, 15), 15, &store, None).unwrap();
        assert_eq!(exact.bytes(), &rows(0, 15, &[])[..]);
        // Rows from elsewhere than 0 are left as they are, for classify.
        let late = forward_rows(FULL, &compact(2, 17), 15, &store, None).unwrap();
        assert_eq!((late.first(), late.bytes().len()), (Some(2), 17));
        let err = forward_rows(FULL, &json!({"choices": [{}]}), 15, &store, None).unwrap_err();
        assert!(
            err.starts_with("the full-context forward's rows: "),
            "{err}"
        );
        assert!(turn_rows(&json!({"choices": [{}]}), &store, None).is_err());
        assert_eq!(
            turn_rows(&compact(3, 2), &store, None).unwrap().first(),
            Some(3)
        );
    }

    #[test]
    fn divergence_is_the_first_turn_whose_tokens_differ() {
        let a: [&[u64]; 3] = [&[1, 2], &[3], &[4]];
        let b: [&[u64]; 3] = [&[1, 2], &[3, 9], &[4]];
        assert_eq!(diverged(&a, &a), None);
        assert_eq!(diverged(&a, &b), Some(1));
        assert!(SideResult::Diverged { turn: 1 }.passes());
    }

    #[test]
    fn details_list_the_findings_and_the_refusal() {
        assert_eq!(details(&SideResult::Checked(SideCheck::default())), "");
        let check = SideCheck {
            compared: 40,
            boundary: vec![7],
            decode_sourced: (10..24).collect(),
            recomputed: vec![30],
            scattered: vec![],
            refused: Some("turn 1: why".into()),
            overlap_compared: 3,
            overlap_differed: vec![(1, 6)],
        };
        assert_eq!(
            details(&SideResult::Checked(check)),
            "boundary at 7; decode-sourced at 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, ... (2 more); \
             recomputed at 30; overlaps differing at 6 (turn 1); refused: turn 1: why"
        );
        assert_eq!(
            details(&SideResult::Diverged { turn: 2 }),
            "tokens diverged from the colocated answer at turn 2: not held to the forward"
        );
    }

    #[test]
    fn counts_add_up_and_fail_on_a_prefill_sourced_difference() {
        let mut counts = FullContextCounts::default();
        counts.add(&SideResult::Checked(SideCheck {
            compared: 14,
            decode_sourced: vec![6],
            recomputed: vec![2],
            overlap_compared: 18,
            overlap_differed: vec![(1, 6), (2, 6)],
            ..SideCheck::default()
        }));
        counts.add(&SideResult::Diverged { turn: 0 });
        assert!(counts.passes());
        assert_eq!(
            counts.summary(),
            "14 position(s) compared: boundary 0, decode-sourced 1, recomputed 1, scattered 0, refused 0, diverged 1; overlaps 2 of 18 differing"
        );
        counts.add(&SideResult::Checked(SideCheck {
            compared: 14,
            scattered: vec![2],
            ..SideCheck::default()
        }));
        assert!(!counts.passes());
        assert_eq!((counts.sides, counts.failed, counts.scattered), (3, 1, 1));
        let json = counts.to_json();
        assert_eq!(json["passes"], false);
        assert_eq!(
            (&json["decode_sourced"], &json["recomputed"]),
            (&json!(1), &json!(1))
        );
        let errors = FullContextCounts {
            errors: 1,
            ..FullContextCounts::default()
        };
        assert!(!errors.passes());
    }

    #[test]
    fn a_side_as_json_has_every_finding_with_its_positions() {
        let check = SideCheck {
            compared: 14,
            boundary: vec![7],
            overlap_differed: vec![(2, 6)],
            ..SideCheck::default()
        };
        assert_eq!(
            side_json(&SideResult::Checked(check)),
            json!({"status": "failed", "compared": 14, "boundary": [7], "decode_sourced": [],
                   "recomputed": [], "scattered": [], "refused": null,
                   "overlaps": {"compared": 0, "differed": [{"turn": 2, "position": 6}]}})
        );
        assert_eq!(
            side_json(&SideResult::Diverged { turn: 1 }),
            json!({"status": "diverged", "turn": 1})
        );
    }
}
