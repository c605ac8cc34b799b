//! `assemble_episode`: a multi-turn episode's rows, assembled by
//! `pd_stitch::episode` from its turns' responses, into NumPy arrays.
//!
//! Each turn is read and pushed as soon as it is converted, with the GIL
//! released (a turn's conversion, the only part that reads Python objects,
//! holds it): the memory is the episode's rows and one turn's response, not
//! every turn's at once. The responses are read through
//! `pd_stitch::gather::read_turn`, as `pd-stitch episode` reads them, so the
//! errors are the same text.

use std::path::PathBuf;

use numpy::PyArray1;
use pd_stitch::episode::{Assembled, Episode, EpisodeError, Phase, Prefer, Turn};
use pd_stitch::gather::{read_turn, GatherError, Store, TurnReadError, TurnResponses};
use pd_stitch::Side;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

use crate::conversion::{body, skeleton, Body};
use crate::errors::{episode_error, turn_read_error};
use crate::readers::{rows_array, store};

/// A turn as the dict gave it: its tokens, the start it asked for, and its
/// response(s) as values.
struct TurnInput {
    prompt: Vec<u64>,
    completion: Vec<u64>,
    start: Option<u64>,
    /// A whole response, or a P/D pair's (prefill, decode).
    responses: (Value, Option<Value>),
}

/// Why a turn could not join the episode: its reading, or the episode.
enum Refused {
    Read(TurnReadError),
    Episode(EpisodeError),
}

impl Refused {
    fn raise(self, py: Python<'_>) -> PyErr {
        match self {
            Refused::Read(err) => turn_read_error(py, &err),
            Refused::Episode(err) => episode_error(py, &err),
        }
    }
}

/// A malformed turn dict: what is wrong, after the turn's name.
fn malformed(turn: usize, what: &str) -> PyErr {
    PyValueError::new_err(format!("turn {turn}: {what}"))
}

/// A list of token ids.
fn token_ids(turn: usize, dict: &Bound<'_, PyDict>, key: &str) -> PyResult<Vec<u64>> {
    let Some(value) = dict.get_item(key)? else {
        return Err(malformed(turn, &format!("no {key:?}")));
    };
    value.extract::<Vec<u64>>().map_err(|_| {
        malformed(
            turn,
            &format!("{key} must be a sequence of non-negative integers (token ids)"),
        )
    })
}

/// A response (`dict`, `bytes`, `bytearray` or `str`) as a value: a dict's
/// skeleton (the parts the readers read), a text parsed with the GIL
/// released. Text that is not JSON is the turn's reading error (`Json`).
fn response_of(
    py: Python<'_>,
    turn: usize,
    side: Option<Phase>,
    response: &Bound<'_, PyAny>,
) -> PyResult<Value> {
    let name = match side {
        None => format!("turn {turn}: response"),
        Some(side) => format!("turn {turn}: {}", side.name()),
    };
    match body(response, &name)? {
        Body::Dict => skeleton(response),
        Body::Text(text) => {
            let json_side = match side {
                None => Side::Response,
                Some(Phase::Prefill) => Side::Prefill,
                Some(Phase::Decode) => Side::Decode,
            };
            py.detach(|| pd_stitch::bytes::parse(json_side, &text))
                .map_err(|err| {
                    turn_read_error(py, &TurnReadError::new(turn, side, GatherError::from(err)))
                })
        }
    }
}

impl TurnInput {
    /// Turn `turn` out of its dict.
    fn from_python(py: Python<'_>, turn: usize, item: &Bound<'_, PyAny>) -> PyResult<TurnInput> {
        let dict = item.cast::<PyDict>().map_err(|_| {
            let type_name = item
                .get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string());
            PyTypeError::new_err(format!("turn {turn}: a turn is a dict, not {type_name}"))
        })?;
        let prompt = token_ids(turn, dict, "prompt_token_ids")?;
        let completion = token_ids(turn, dict, "completion_token_ids")?;
        let bad_start = |_| malformed(turn, "start must be None or a non-negative integer");
        let start = match dict.get_item("start")? {
            Some(start) if !start.is_none() => Some(start.extract::<u64>().map_err(bad_start)?),
            _ => None,
        };
        let given = |key: &str| dict.get_item(key);
        let responses = match (given("response")?, given("prefill")?, given("decode")?) {
            (Some(response), None, None) => (response_of(py, turn, None, &response)?, None),
            (None, Some(prefill), Some(decode)) => (
                response_of(py, turn, Some(Phase::Prefill), &prefill)?,
                Some(response_of(py, turn, Some(Phase::Decode), &decode)?),
            ),
            (Some(_), _, _) => {
                return Err(malformed(
                    turn,
                    "give \"response\", or \"prefill\" and \"decode\", not both",
                ))
            }
            (None, None, None) => {
                return Err(malformed(
                    turn,
                    "no \"response\" (or \"prefill\" and \"decode\", a P/D pair's)",
                ))
            }
            (None, _, _) => {
                return Err(malformed(
                    turn,
                    "a P/D pair needs both \"prefill\" and \"decode\"",
                ))
            }
        };
        Ok(TurnInput {
            prompt,
            completion,
            start,
            responses,
        })
    }

    /// Reads the turn's rows and pushes it onto `episode` (with the GIL
    /// released).
    fn push(
        self,
        turn: usize,
        episode: &mut Episode,
        store: &Store,
        row_shape: Option<(u64, u64)>,
    ) -> Result<(), Refused> {
        let responses = match &self.responses {
            (whole, None) => TurnResponses::Whole(whole),
            (prefill, Some(decode)) => TurnResponses::Pair { prefill, decode },
        };
        let pieces = read_turn(turn, responses, store, row_shape).map_err(Refused::Read)?;
        let mut next = Turn::new(self.prompt, self.completion);
        if let Some(start) = self.start {
            next = next.with_start(start);
        }
        let next = pieces.into_iter().fold(next, Turn::with_piece);
        episode.push(next).map(drop).map_err(Refused::Episode)
    }
}

/// The per-position arrays of a path: whether it has a row, the turn it
/// came from (-1 where none), whether a decode computed it.
struct Sources {
    has_row: Vec<bool>,
    turn: Vec<i32>,
    from_decode: Vec<bool>,
}

fn sources(assembled: &Assembled) -> Sources {
    let sources = assembled.sources();
    Sources {
        has_row: sources.iter().map(Option::is_some).collect(),
        // A turn index past i32 would need 2^31 turns of at least one token
        // each in memory; saturate rather than fail.
        turn: sources
            .iter()
            .map(|s| s.map_or(-1, |s| i32::try_from(s.turn).unwrap_or(i32::MAX)))
            .collect(),
        from_decode: sources
            .iter()
            .map(|s| s.is_some_and(|s| s.phase == Phase::Decode))
            .collect(),
    }
}

/// The rows of a multi-turn episode, one per position, assembled from its
/// turns' responses by one rule.
///
/// Each turn is a dict: ``prompt_token_ids`` (all of them, the earlier
/// turns' included), ``completion_token_ids`` (choice 0's), ``start`` (the
/// start it asked the engine for; None or absent: 0), and its rows as
/// ``response`` (dict, bytes, bytearray or str; stitched, or colocated) or as
/// a P/D pair's ``prefill`` and ``decode`` (the prefill wins where they
/// overlap). ``prefer="earliest"`` keeps the first row computed for a
/// position, ``"latest"`` the last turn's. Rows by handle are read inside
/// ``root`` and ``allow`` only; SGLang's need ``row_shape=(layers, top_k)``.
///
/// Returns ``{"rows", "has_row", "turn", "from_decode", "overlaps", "len"}``
/// (see ``pd_stitch.pyi``). Raises ``StitchError`` naming the turn.
#[pyfunction]
#[pyo3(signature = (turns, *, prefer="earliest", row_shape=None, allow=Vec::new(), root=PathBuf::from(".")))]
#[pyo3(text_signature = "(turns, *, prefer='earliest', row_shape=None, allow=(), root='.')")]
pub(crate) fn assemble_episode<'py>(
    py: Python<'py>,
    turns: &Bound<'py, PyAny>,
    prefer: &str,
    row_shape: Option<(u64, u64)>,
    allow: Vec<PathBuf>,
    root: PathBuf,
) -> PyResult<Bound<'py, PyDict>> {
    let prefer = match prefer {
        "earliest" => Prefer::Earliest,
        "latest" => Prefer::Latest,
        other => {
            return Err(PyValueError::new_err(format!(
                "prefer must be \"earliest\" or \"latest\", not {other:?}"
            )))
        }
    };
    let store = store(Some(root), Some(allow))?;
    let mut episode = Episode::new(prefer);
    for (k, item) in turns.try_iter()?.enumerate() {
        let input = TurnInput::from_python(py, k, &item?)?;
        py.detach(|| input.push(k, &mut episode, &store, row_shape))
            .map_err(|refused| refused.raise(py))?;
    }
    let (assembled, sources) = py
        .detach(|| {
            let assembled = episode.finish()?;
            let sources = sources(&assembled);
            Ok((assembled, sources))
        })
        .map_err(|err| episode_error(py, &err))?;
    let out = PyDict::new(py);
    out.set_item("len", assembled.len())?;
    let overlaps = PyList::empty(py);
    for report in assembled.turns() {
        let turn = PyDict::new(py);
        turn.set_item("compared", report.compared)?;
        turn.set_item("differed", report.differed.clone())?;
        overlaps.append(turn)?;
    }
    out.set_item("overlaps", overlaps)?;
    out.set_item("has_row", PyArray1::from_vec(py, sources.has_row))?;
    out.set_item("turn", PyArray1::from_vec(py, sources.turn))?;
    out.set_item("from_decode", PyArray1::from_vec(py, sources.from_decode))?;
    let mut shape = vec![assembled.len()];
    shape.extend_from_slice(assembled.row_shape());
    let dtype = assembled.dtype();
    out.set_item(
        "rows",
        rows_array(py, assembled.into_rows(), dtype, &shape)?,
    )?;
    Ok(out)
}
