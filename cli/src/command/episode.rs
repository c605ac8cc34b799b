//! `pd-stitch episode`: a multi-turn episode's rows, assembled from a JSONL
//! of its turns by `pd_stitch::episode`, as a table of the turns (or one
//! JSON object) and, with `--npy`, the rows.
//!
//! A line is a turn in the form `pd_stitch.assemble_episode` takes a turn's
//! dict: `prompt_token_ids`, `completion_token_ids`, `start` (absent or
//! null: 0), and its rows as `response` (a JSON object, or a string of JSON
//! text) or a P/D pair's `prefill` and `decode`; each of the three may
//! instead be `KEY_file`, a path relative to the JSONL's folder. The turns
//! are read through `pd_stitch::gather::read_turn` and pushed one at a time,
//! so the memory is the episode's rows and one turn, and the errors are the
//! Python binding's text.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use pd_stitch::episode::{Assembled, Episode, Phase, Prefer, Turn, TurnReport};
use pd_stitch::gather::{npy_file, read_turn, GatherError, Store, TurnReadError, TurnResponses};
use pd_stitch::Side;
use serde_json::{json, Map, Value};

use super::confined;

// What `episode` takes; the command's help is on `Command::Episode`.
#[derive(clap::Args)]
pub struct EpisodeArgs {
    /// The turns, one JSON object a line: "prompt_token_ids",
    /// "completion_token_ids", "start" (optional), and "response" (or a P/D
    /// pair's "prefill" and "decode"), each inline or in a file named by
    /// "response_file" ("prefill_file", "decode_file") relative to this
    /// file's folder.
    #[arg(value_name = "TURNS.jsonl")]
    turns: PathBuf,
    /// Which row a position keeps where turns overlap: the first computed
    /// (the boundary, a turn's last token, takes the next turn's), or the
    /// last turn's.
    #[arg(
        long,
        default_value = "earliest",
        value_parser = PossibleValuesParser::new(["earliest", "latest"])
            .map(|s| if s == "latest" { Prefer::Latest } else { Prefer::Earliest })
    )]
    prefer: Prefer,
    /// Also write the rows as a .npy file, (positions, layers, top_k) in the
    /// turns' widest dtype; the last position, which has no row, is zeros.
    #[arg(long, value_name = "OUT.npy")]
    npy: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Resolve the relative file names of rows by handle against this
    /// directory; only files inside it (or an --allow directory) are read.
    #[arg(long, value_name = "DIR", default_value = ".")]
    root: PathBuf,
    /// Also read rows by handle inside this directory (symlinks resolved);
    /// repeatable.
    #[arg(long = "allow", value_name = "DIR")]
    allow: Vec<PathBuf>,
    /// Read SGLang's rows with this row shape, LAYERSxTOP_K.
    #[arg(long, value_name = "LxK", value_parser = super::row_shape)]
    row_shape: Option<(u64, u64)>,
}

/// One line, as read: the turn's tokens and start, and its responses.
struct TurnLine {
    prompt: Vec<u64>,
    completion: Vec<u64>,
    start: Option<u64>,
    /// A whole response, or a P/D pair's (prefill, decode).
    responses: (Value, Option<Value>),
}

/// Where a line is, for the errors of its own form: the file, the line's
/// number (from 1) and the turn's index (from 0, blank lines skipped).
struct At<'a> {
    file: &'a Path,
    line: usize,
    turn: usize,
}

impl At<'_> {
    fn error(&self, what: impl std::fmt::Display) -> String {
        format!(
            "{} line {}: turn {}: {what}",
            self.file.display(),
            self.line,
            self.turn
        )
    }
}

/// Token ids under `key`.
fn token_ids(at: &At<'_>, object: &Map<String, Value>, key: &str) -> Result<Vec<u64>, String> {
    let ids = object
        .get(key)
        .ok_or_else(|| at.error(format!("no {key:?}")))?;
    let bad = || {
        at.error(format!(
            "{key} must be a sequence of non-negative integers (token ids)"
        ))
    };
    ids.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|id| id.as_u64().ok_or_else(bad))
        .collect()
}

/// The response under `key` (a side's, for a pair), taken out of the line:
/// inline as a JSON value (an object, or an SGLang batch's array) or as
/// JSON text, or in the file `KEY_file` names. `None` when neither is
/// given.
fn response(
    at: &At<'_>,
    object: &mut Map<String, Value>,
    key: &str,
    side: Option<Phase>,
    folder: &Path,
) -> Result<Option<Value>, String> {
    let file_key = format!("{key}_file");
    match (object.remove(key), object.get(&file_key)) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(at.error(format!("give {key:?} or {file_key:?}, not both"))),
        (Some(Value::String(text)), None) => {
            // JSON text, as Python's str: not JSON is the turn's reading
            // error, as there.
            let json_side = match side {
                None => Side::Response,
                Some(Phase::Prefill) => Side::Prefill,
                Some(Phase::Decode) => Side::Decode,
            };
            pd_stitch::bytes::parse(json_side, text.as_bytes())
                .map(Some)
                .map_err(|err| {
                    TurnReadError::new(at.turn, side, GatherError::from(err)).to_string()
                })
        }
        (Some(value @ (Value::Object(_) | Value::Array(_))), None) => Ok(Some(value)),
        (Some(_), None) => Err(at.error(format!(
            "{key} must be a response (a JSON object), or a string of its JSON text"
        ))),
        (None, Some(Value::String(name))) => {
            let path = folder.join(name);
            let bytes = fs::read(&path)
                .map_err(|e| at.error(format!("{file_key} {}: {e}", path.display())))?;
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| at.error(format!("{file_key} {}: not JSON: {e}", path.display())))
        }
        (None, Some(_)) => Err(at.error(format!("{file_key} must be a path (a string)"))),
    }
}

/// The turn of one line.
fn line(at: &At<'_>, text: &str, folder: &Path) -> Result<TurnLine, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| at.error(format!("not JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(at.error("a turn is a JSON object"));
    };
    let prompt = token_ids(at, &object, "prompt_token_ids")?;
    let completion = token_ids(at, &object, "completion_token_ids")?;
    let start = match object.get("start") {
        None | Some(Value::Null) => None,
        Some(start) => Some(
            start
                .as_u64()
                .ok_or_else(|| at.error("start must be None or a non-negative integer"))?,
        ),
    };
    let whole = response(at, &mut object, "response", None, folder)?;
    let prefill = response(at, &mut object, "prefill", Some(Phase::Prefill), folder)?;
    let decode = response(at, &mut object, "decode", Some(Phase::Decode), folder)?;
    let responses = match (whole, prefill, decode) {
        (Some(whole), None, None) => (whole, None),
        (None, Some(prefill), Some(decode)) => (prefill, Some(decode)),
        (Some(_), _, _) => {
            return Err(at.error("give \"response\", or \"prefill\" and \"decode\", not both"))
        }
        (None, None, None) => {
            return Err(at.error("no \"response\" (or \"prefill\" and \"decode\", a P/D pair's)"))
        }
        (None, _, _) => return Err(at.error("a P/D pair needs both \"prefill\" and \"decode\"")),
    };
    Ok(TurnLine {
        prompt,
        completion,
        start,
        responses,
    })
}

/// Reads `line`'s rows and pushes it onto `episode` as turn `turn`.
fn push(
    episode: &mut Episode,
    turn: usize,
    line: TurnLine,
    store: &Store,
    row_shape: Option<(u64, u64)>,
) -> Result<(), String> {
    let responses = match &line.responses {
        (whole, None) => TurnResponses::Whole(whole),
        (prefill, Some(decode)) => TurnResponses::Pair { prefill, decode },
    };
    let pieces = read_turn(turn, responses, store, row_shape).map_err(|e| e.to_string())?;
    let mut next = Turn::new(line.prompt, line.completion);
    if let Some(start) = line.start {
        next = next.with_start(start);
    }
    let next = pieces.into_iter().fold(next, Turn::with_piece);
    episode.push(next).map(drop).map_err(|e| e.to_string())
}

pub fn run(args: EpisodeArgs) -> Result<ExitCode, String> {
    let EpisodeArgs {
        turns,
        prefer,
        npy,
        json,
        root,
        allow,
        row_shape,
    } = args;
    let store = confined(&root, &allow)?;
    let text = fs::read_to_string(&turns).map_err(|e| format!("{}: {e}", turns.display()))?;
    let folder = turns.parent().unwrap_or(Path::new("."));
    let mut episode = Episode::new(prefer);
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, text)| !text.trim().is_empty());
    for (turn, (number, text)) in lines.enumerate() {
        let at = At {
            file: &turns,
            line: number + 1,
            turn,
        };
        push(
            &mut episode,
            turn,
            line(&at, text, folder)?,
            &store,
            row_shape,
        )?;
    }
    let assembled = episode.finish().map_err(|e| e.to_string())?;
    if let Some(out) = &npy {
        let mut shape = vec![assembled.len()];
        shape.extend_from_slice(assembled.row_shape());
        let file = npy_file(assembled.dtype(), &shape, assembled.rows())
            .map_err(|e| format!("{}: {e}", out.display()))?;
        fs::write(out, file).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    if json {
        println!("{}", report_json(&assembled, prefer));
    } else {
        print!("{}", table(&assembled, prefer));
    }
    Ok(ExitCode::SUCCESS)
}

fn prefer_name(prefer: Prefer) -> &'static str {
    match prefer {
        Prefer::Earliest => "earliest",
        Prefer::Latest => "latest",
    }
}

/// Up to `most` positions, then how many more.
fn positions(list: &[u64], most: usize) -> String {
    let mut out = list
        .iter()
        .take(most)
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > most {
        let _ = write!(out, ", ... ({} more)", list.len() - most);
    }
    out
}

/// The turns, a line each, and a total line.
fn table(assembled: &Assembled, prefer: Prefer) -> String {
    let mut out = format!(
        "{:<6}{:<11}{:>6}{:>11}{:>7}{:>12}{:>10}{:>11}  {}\n",
        "turn",
        "continues",
        "common",
        "positions",
        "start",
        "rows taken",
        "compared",
        "differing",
        "differing at"
    );
    for (k, report) in assembled.turns().iter().enumerate() {
        let continues = report
            .continues
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        let _ = writeln!(
            out,
            "{k:<6}{continues:<11}{:>6}{:>11}{:>7}{:>12}{:>10}{:>11}  {}",
            report.common,
            report.prompt + report.completion,
            report.start,
            report.written,
            report.compared,
            report.differed.len(),
            if report.differed.is_empty() {
                "-".to_owned()
            } else {
                positions(&report.differed, 8)
            }
        );
    }
    let (compared, differing) = totals(assembled.turns());
    let with_row = assembled.sources().iter().filter(|s| s.is_some()).count();
    let _ = writeln!(
        out,
        "total: {} turn(s), {} positions, {with_row} with a row (the last has none), {} {:?}, \
         {}; {compared} compared, {differing} differing",
        assembled.turns().len(),
        assembled.len(),
        assembled.dtype(),
        assembled.row_shape(),
        prefer_name(prefer),
    );
    out
}

/// Positions compared and positions that differed, over every turn.
fn totals(turns: &[TurnReport]) -> (u64, usize) {
    turns.iter().fold((0, 0), |(compared, differing), report| {
        (
            compared + report.compared,
            differing + report.differed.len(),
        )
    })
}

/// The report as one JSON object.
fn report_json(assembled: &Assembled, prefer: Prefer) -> Value {
    let turns: Vec<Value> = assembled
        .turns()
        .iter()
        .enumerate()
        .map(|(k, report)| {
            json!({
                "turn": k,
                "continues": report.continues,
                "common": report.common,
                "prompt": report.prompt,
                "completion": report.completion,
                "positions": report.prompt + report.completion,
                "start": report.start,
                "rows_taken": report.written,
                "compared": report.compared,
                "differed": report.differed,
            })
        })
        .collect();
    let (compared, differing) = totals(assembled.turns());
    json!({
        "len": assembled.len(),
        "with_row": assembled.sources().iter().filter(|s| s.is_some()).count(),
        "dtype": assembled.dtype().to_string(),
        "row_shape": assembled.row_shape(),
        "prefer": prefer_name(prefer),
        "turns": turns,
        "compared": compared,
        "differing": differing,
    })
}
