//! Real three-turn episodes (tests/fixtures/engines/{vllm,sglang}/episode*,
//! saved from vLLM 0.32 and SGLang 0.5.23 on the CPU by their harnesses'
//! `--save-episode` / `SGLANG_SAVE_EPISODE=1`; their READMEs say how),
//! assembled with `pd_stitch::episode` from every side's answers as
//! `pd-stitch probe --full-context` assembles them, and held to the forward
//! of the whole episode as one prompt through `episode::classify`, with the
//! counts the engines gave. The counts below were read off the fixtures
//! with NumPy, positions laid out naively, not by this crate.

use pd_stitch::episode::{classify, Assembled, Episode, Finding, Phase, Prefer, RowPiece, Turn};
use pd_stitch::gather::{read_piece, Store};
use serde_json::Value;

/// An engine's episode folder, and what its rows need to be read.
struct Fixture {
    dir: &'static str,
    /// SGLang's rows carry no row shape.
    row_shape: Option<(u64, u64)>,
}

const VLLM: Fixture = Fixture {
    dir: "vllm/episode",
    row_shape: None,
};
const SGLANG: Fixture = Fixture {
    dir: "sglang/episode",
    row_shape: Some((3, 2)),
};
/// probe's episode 11 of `--seed 9`: the decode's row of position 94 (turn
/// 0's fourth generated token) differs from a fresh prefill's in one layer.
const SGLANG_FLIP: Fixture = Fixture {
    dir: "sglang/episode-decode-flip",
    row_shape: Some((3, 2)),
};

/// Which answers a turn's rows are taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// The colocated server's answer.
    Colocated,
    /// The example router's, stitched by this crate.
    Stitched,
    /// The prefill's and the decode's answers, as two pieces.
    Pair,
}

const SIDES: [Side; 3] = [Side::Colocated, Side::Stitched, Side::Pair];

impl Fixture {
    fn json(&self, file: &str) -> Value {
        let at = format!(
            "{}/tests/fixtures/engines/{}/{file}",
            env!("CARGO_MANIFEST_DIR"),
            self.dir
        );
        let bytes = std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{at}: {e}"))
    }

    fn piece(&self, file: &str, side: Option<Phase>) -> RowPiece {
        read_piece(&self.json(file), 0, side, &Store::memory(), self.row_shape)
            .unwrap_or_else(|e| panic!("{}/{file}: {e}", self.dir))
    }

    /// Turn `t` as asked in full or as a delta, its rows from `side`.
    fn turn(&self, t: usize, delta: bool, side: Side) -> Turn {
        let prefix = if delta && t > 0 { "delta-" } else { "" };
        let file = |name: &str| format!("t{t}/{prefix}{name}.json");
        let request = self.json(&file("request"));
        let prompt = ids(request.get("token_ids").or(request.get("input_ids")));
        let colocated = self.json(&file("colocated"));
        let completion = ids(colocated["choices"][0]
            .get("token_ids")
            .or(colocated.get("output_ids")));
        let start = request["sampling_params"]
            .get("routed_experts_prompt_start")
            .or(request.get("routed_experts_start_len"))
            .and_then(Value::as_u64);
        let mut turn = Turn::new(prompt, completion);
        if let Some(start) = start {
            turn = turn.with_start(start);
        }
        match side {
            Side::Colocated => turn.with_piece(self.piece(&file("colocated"), None)),
            Side::Stitched => turn.with_piece(self.piece(&file("stitched"), None)),
            Side::Pair => turn
                .with_piece(self.piece(&file("prefill"), Some(Phase::Prefill)))
                .with_piece(self.piece(&file("decode"), Some(Phase::Decode))),
        }
    }

    /// The three turns pushed under `Earliest` and the path finished.
    fn assemble(&self, delta: bool, side: Side) -> Assembled {
        let mut episode = Episode::new(Prefer::Earliest);
        for t in 0..3 {
            let turn = self.turn(t, delta, side);
            episode
                .push(turn)
                .unwrap_or_else(|e| panic!("{} {side:?} delta {delta}: {e}", self.dir));
        }
        episode.finish().expect("three turns")
    }

    /// The forward of the whole episode as one prompt.
    fn forward(&self) -> RowPiece {
        self.piece("full-context.json", None)
    }
}

/// A JSON array of token ids.
fn ids(value: Option<&Value>) -> Vec<u64> {
    value
        .and_then(Value::as_array)
        .expect("token ids")
        .iter()
        .map(|id| id.as_u64().expect("a token id"))
        .collect()
}

/// Where, in one assembly, a turn's rows met earlier rows and differed:
/// `(turn, position)` each.
struct Met {
    side: Side,
    delta: bool,
    differed: &'static [(usize, u64)],
}

/// What each assembly of `fixture` must show: the episode's length, the
/// positions where it differs from the forward (all decode-sourced), and
/// the assemblies whose turns' rows met earlier rows and differed (none
/// where not listed).
fn holds(fixture: &Fixture, len: u64, decode_sourced: &[u64], overlaps: &[Met]) {
    let forward = fixture.forward();
    for side in SIDES {
        for delta in [false, true] {
            let what = format!("{} {side:?} delta {delta}", fixture.dir);
            let assembled = fixture.assemble(delta, side);
            assert_eq!(assembled.len(), len, "{what}");
            let classified =
                classify(&assembled, &forward).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(classified.compared(), len - 1, "{what}");
            assert_eq!(
                classified.positions(Finding::DecodeSourced),
                decode_sourced,
                "{what}"
            );
            assert_eq!(classified.positions(Finding::Boundary), [0u64; 0], "{what}");
            assert_eq!(
                classified.positions(Finding::Scattered),
                [0u64; 0],
                "{what}"
            );
            assert!(classified.passes(), "{what}");
            let differed: Vec<(usize, u64)> = assembled
                .turns()
                .iter()
                .enumerate()
                .flat_map(|(t, report)| report.differed.iter().map(move |&x| (t, x)))
                .collect();
            let expected = overlaps
                .iter()
                .find(|met| met.side == side && met.delta == delta)
                .map_or(&[][..], |met| met.differed);
            assert_eq!(differed, expected, "{what}");
        }
    }
}

/// The turns each continue the one before at the common prefix the saver
/// wrote down, and each delta turn asked from one before it.
fn continues_as_saved(fixture: &Fixture) {
    let manifest = fixture.json("manifest.json");
    let assembled = fixture.assemble(true, Side::Colocated);
    let reports = assembled.turns();
    assert_eq!(reports[0].continues, None);
    for t in 1..3 {
        let saved = &manifest["turns"][t];
        assert_eq!(reports[t].continues, Some(t - 1), "{}", fixture.dir);
        assert_eq!(Some(reports[t].common), saved["common_prefix"].as_u64());
        assert_eq!(Some(reports[t].start), saved["delta_start"].as_u64());
        assert_eq!(reports[t].start + 1, reports[t].common);
        // A delta turn's rows meet none already there: the boundary is new.
        assert_eq!(reports[t].compared, 0, "{}", fixture.dir);
    }
    assert_eq!(
        Some(assembled.len()),
        manifest["full_context_tokens"].as_u64()
    );
}

/// Every assembly of an episode is the same rows: full or delta (E2), a
/// stitched pair or its two pieces (E6), or the colocated server's (turn
/// 0's rows are the same on both deployments, and Earliest keeps them);
/// each position from the turn that first computed it.
fn assemble_alike(fixture: &Fixture) {
    let reference = fixture.assemble(false, Side::Colocated);
    for side in SIDES {
        for delta in [false, true] {
            let assembled = fixture.assemble(delta, side);
            assert_eq!(
                assembled.dtype(),
                reference.dtype(),
                "{} {side:?}",
                fixture.dir
            );
            assert_eq!(assembled.row_shape(), [3, 2]);
            assert_eq!(
                assembled.rows(),
                reference.rows(),
                "{} {side:?} {delta}",
                fixture.dir
            );
            // Each position's row comes from the turn that first computed
            // it, and from its prefill below that turn's prompt.
            let turns = assembled.turns();
            for (x, source) in assembled.sources().iter().enumerate() {
                let x = x as u64;
                let Some(source) = source else {
                    assert_eq!(x, assembled.len() - 1);
                    continue;
                };
                let first = (0..turns.len())
                    .find(|&t| x < turns[t].end())
                    .expect("a turn computed it");
                assert_eq!(source.turn, first, "{} {side:?} position {x}", fixture.dir);
                let phase = if x < turns[first].prompt {
                    Phase::Prefill
                } else {
                    Phase::Decode
                };
                assert_eq!(source.phase, phase, "{} position {x}", fixture.dir);
            }
        }
    }
}

/// vLLM 0.32: 77 positions, every one with a row equal to the forward's,
/// from every side, full and delta; no overlap differed.
#[test]
fn a_vllm_episode_holds_to_its_full_context_forward() {
    holds(&VLLM, 77, &[], &[]);
    continues_as_saved(&VLLM);
    assemble_alike(&VLLM);
}

/// SGLang 0.5.23: the same, 77 positions, no difference.
#[test]
fn an_sglang_episode_holds_to_its_full_context_forward() {
    holds(&SGLANG, 77, &[], &[]);
    continues_as_saved(&SGLANG);
    assemble_alike(&SGLANG);
}

/// SGLang 0.5.23, probe's episode that showed a decode flip: position 94,
/// turn 0's fourth generated token, has the decode's row in every assembly
/// (Earliest keeps it), which differs from the forward's in one layer:
/// decode-sourced, so the check passes. The colocated server's full turns
/// 1 and 2 recompute it in their prefill, as the forward does, and their
/// rows meet the decode's and differ there; the P/D pair's prefill, whose
/// radix cache holds turn 0's prompt, recomputes it over that cached prefix
/// as the decode did, and its row meets the decode's unchanged.
#[test]
fn an_sglang_decode_flip_is_decode_sourced() {
    holds(
        &SGLANG_FLIP,
        123,
        &[94],
        &[Met {
            side: Side::Colocated,
            delta: false,
            differed: &[(1, 94), (2, 94)],
        }],
    );
    continues_as_saved(&SGLANG_FLIP);
    assemble_alike(&SGLANG_FLIP);
    // The rows differ from the forward's at 94 and nowhere else.
    let assembled = SGLANG_FLIP.assemble(true, Side::Stitched);
    let forward = SGLANG_FLIP.forward();
    let row = assembled.row_bytes();
    let differing: Vec<usize> = (0..122)
        .filter(|&x| {
            assembled.rows()[x * row..(x + 1) * row] != forward.bytes()[x * row..(x + 1) * row]
        })
        .collect();
    assert_eq!(differing, [94]);
    assert_eq!(
        assembled.source(94).map(|s| (s.turn, s.phase)),
        Some((0, Phase::Decode))
    );
}

/// A delta asked one position late (from L instead of L - 1) leaves turn
/// 0's last position without a row: refused, a boundary finding at L - 1,
/// on the real answers (turn 1's delta rows with their first one dropped).
#[test]
fn a_delta_one_position_late_is_a_boundary_on_real_answers() {
    for fixture in [&VLLM, &SGLANG] {
        let mut episode = Episode::new(Prefer::Earliest);
        episode
            .push(fixture.turn(0, true, Side::Colocated))
            .expect("turn 0");
        let turn = fixture.turn(1, true, Side::Colocated);
        let full = &turn.pieces()[0];
        let row = full.bytes().len() / 12;
        let late = RowPiece::whole(
            full.dtype(),
            full.row_shape().to_vec(),
            full.bytes()[row..].to_vec(),
        );
        let common = 53;
        let late = Turn::new(turn.prompt().to_vec(), turn.completion().to_vec())
            .with_start(common)
            .with_piece(late);
        let err = episode.push(late).expect_err("a gap at L - 1");
        assert_eq!(
            Finding::of_error(&err),
            Some((common - 1, Finding::Boundary)),
            "{}: {err}",
            fixture.dir
        );
    }
}
