//! Python objects in and out: a response's type (`bytes`, `bytearray`,
//! `str`, `dict`), a dict's skeleton as a `serde_json::Value`, and a merged
//! skeleton back into a shallow copy of the dict.

use std::borrow::Cow;

use pd_stitch::places::{self, Holder, Holds};
use pd_stitch::Side;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use serde_json::{Map, Number, Value};

use crate::errors::stitch_error;

/// Nesting deeper than this in a dict is refused, as `serde_json` refuses it
/// in text; it also keeps the recursive conversions off the end of the stack.
const MAX_DEPTH: usize = 128;

/// A response as the merge takes it.
pub(crate) enum Body<'a> {
    /// JSON text: borrowed from an immutable `bytes`, or copied (a `bytearray`
    /// may change while the GIL is released; a `str` is encoded to UTF-8).
    Text(Cow<'a, [u8]>),
    /// A `dict`.
    Dict,
}

pub(crate) fn body<'a>(obj: &'a Bound<'_, PyAny>, name: &str) -> PyResult<Body<'a>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        Ok(Body::Text(Cow::Borrowed(bytes.as_bytes())))
    } else if let Ok(array) = obj.cast::<PyByteArray>() {
        Ok(Body::Text(Cow::Owned(array.to_vec())))
    } else if let Ok(text) = obj.cast::<PyString>() {
        Ok(Body::Text(Cow::Owned(
            text.to_cow()?.into_owned().into_bytes(),
        )))
    } else if obj.is_instance_of::<PyDict>() {
        Ok(Body::Dict)
    } else {
        Err(PyTypeError::new_err(format!(
            "{name} must be bytes, bytearray, str or dict, not {}",
            obj.get_type().name()?
        )))
    }
}

/// The parts of a response the merge, `gather` and `check` read: `choices`,
/// and the places of `pd_stitch::places::all()` (the one table of where
/// rows and their counts sit), no more. Anything the merge could describe
/// in an error (a response, `choices` or a choice of the wrong type) is
/// converted whole.
pub(crate) fn skeleton(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let Ok(root) = obj.cast::<PyDict>() else {
        return to_value(obj, 0);
    };
    let mut out = Map::new();
    if let Some(choices) = root.get_item("choices")? {
        let value = match choices.cast::<PyList>() {
            Ok(list) => {
                let mut items = Vec::with_capacity(list.len());
                for choice in list.iter() {
                    items.push(choice_skeleton(&choice)?);
                }
                Value::Array(items)
            }
            Err(_) => to_value(&choices, 1)?,
        };
        out.insert("choices".to_owned(), value);
    }
    // The response's objects that hold places: SGLang's rows and counts
    // (SPEC section 10), and `usage`'s counts, which place SGLang's OpenAI
    // rows and vLLM's `.npy` (section 4a).
    for holder in places::object_holders() {
        if let Holder::Member(key) = holder {
            if let Some(value) = root.get_item(key)? {
                out.insert(key.to_owned(), members(&value, holder, 1)?);
            }
        }
    }
    Ok(Value::Object(out))
}

pub(crate) fn choice_skeleton(choice: &Bound<'_, PyAny>) -> PyResult<Value> {
    let Ok(dict) = choice.cast::<PyDict>() else {
        return to_value(choice, 2);
    };
    let mut out = Map::new();
    for place in places::all().filter(|p| p.holder == Holder::Choice) {
        let Some(value) = dict.get_item(place.key)? else {
            continue;
        };
        let value = match (place.holds, value.cast::<PyList>()) {
            // A count of generated tokens, which places a `.npy` (SPEC
            // section 4a): only its length is read, so a list stands as
            // that many nulls.
            (Holds::Count, Ok(list)) => Value::Array(vec![Value::Null; list.len()]),
            _ => to_value(&value, 3)?,
        };
        out.insert(place.key.to_owned(), value);
    }
    // The choice's objects that hold places (SGLang's older `sgl_ext`).
    for holder in places::object_holders() {
        if let Holder::ChoiceMember(key) = holder {
            if let Some(value) = dict.get_item(key)? {
                out.insert(key.to_owned(), members(&value, holder, 3)?);
            }
        }
    }
    Ok(Value::Object(out))
}

/// Of an object, only the members at the places `holder` holds (SGLang's
/// rows and counts).
fn members(obj: &Bound<'_, PyAny>, holder: Holder, depth: usize) -> PyResult<Value> {
    // Not an object: the merge finds no rows or counts there, and names
    // nothing about it in an error.
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Ok(Value::Null);
    };
    let mut out = Map::new();
    for key in places::keys_of(holder) {
        if let Some(value) = dict.get_item(key)? {
            out.insert(key.to_owned(), to_value(&value, depth + 1)?);
        }
    }
    Ok(Value::Object(out))
}

/// A JSON-like Python value as a `Value`, read as `serde_json` reads the text
/// `json.dumps` writes for it: an int beyond `i64`/`u64` becomes a float.
pub(crate) fn to_value(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "nesting deeper than {MAX_DEPTH} levels"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(n) = obj.extract::<u64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = obj.extract::<i64>() {
            return Ok(Value::from(n));
        }
        return float_value(obj.extract::<f64>()?);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return float_value(f.value());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list
            .iter()
            .map(|item| to_value(&item, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return tuple
            .iter()
            .map(|item| to_value(&item, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut out = Map::new();
        for (key, value) in dict.iter() {
            let key = key
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err("keys of a response's objects must be str"))?;
            out.insert(key.to_cow()?.into_owned(), to_value(&value, depth + 1)?);
        }
        return Ok(Value::Object(out));
    }
    Err(PyTypeError::new_err(format!(
        "a response must hold only JSON values (dict, list, tuple, str, int, float, bool, None), not {}",
        obj.get_type().name()?
    )))
}

pub(crate) fn float_value(f: f64) -> PyResult<Value> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| PyValueError::new_err(format!("{f} is not a JSON number")))
}

/// The text of a `Body` or, for a dict, of its skeleton.
pub(crate) fn text<'a>(obj: &Bound<'_, PyAny>, body: Body<'a>) -> PyResult<Cow<'a, [u8]>> {
    match body {
        Body::Text(text) => Ok(text),
        Body::Dict => serde_json::to_vec(&skeleton(obj)?)
            .map(Cow::Owned)
            .map_err(|e| PyValueError::new_err(e.to_string())),
    }
}

/// The `Value` of a `Body`: parsed text (an `ErrorDetail::Json` of `side` when it
/// is not JSON), or a dict's skeleton.
pub(crate) fn value(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    body: Body<'_>,
    side: Side,
) -> PyResult<Value> {
    match body {
        Body::Dict => skeleton(obj),
        Body::Text(text) => py
            .detach(|| pd_stitch::bytes::parse(side, &text))
            .map_err(|e| stitch_error(py, &e)),
    }
}

pub(crate) fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, to_python(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A new dict: `original` with `choices` a new list whose choices are copies
/// with `payload` and `routed_experts` taken from the merged skeleton. Values
/// the merge does not write are shared with `original`, as `copy.copy` shares
/// them; `original` itself is not modified.
pub(crate) fn merged_dict<'py>(
    py: Python<'py>,
    original: &Bound<'py, PyAny>,
    merged: &Value,
) -> PyResult<Bound<'py, PyAny>> {
    let original = original.cast::<PyDict>()?;
    let out = original.copy()?;
    for holder in places::object_holders() {
        if let Holder::Member(key) = holder {
            if let Some(value) = merged.get(key) {
                set_rows(py, &out, holder, value)?;
            }
        }
    }
    let (Some(old), Some(Value::Array(new))) =
        (original.get_item("choices")?, merged.get("choices"))
    else {
        return Ok(out.into_any());
    };
    let old = old.cast::<PyList>()?;
    let choices = PyList::empty(py);
    for (choice, merged_choice) in old.iter().zip(new) {
        let (Ok(choice), Some(fields)) = (choice.cast::<PyDict>(), merged_choice.as_object())
        else {
            choices.append(choice)?;
            continue;
        };
        let copy = choice.copy()?;
        // Only what the merge writes: the skeleton's other members (a
        // `token_ids` of nulls, which only counts) are not the choice's.
        for place in places::all() {
            match (place.holder, place.holds) {
                (Holder::Choice, Holds::Rows(_)) => {
                    if let Some(value) = fields.get(place.key) {
                        copy.set_item(place.key, to_python(py, value)?)?;
                    }
                }
                (Holder::ChoiceMember(key), Holds::Rows(_)) => {
                    if let Some(value) = fields.get(key) {
                        set_rows(py, &copy, place.holder, value)?;
                    }
                }
                _ => {}
            }
        }
        choices.append(copy)?;
    }
    out.set_item("choices", choices)?;
    Ok(out.into_any())
}

/// Gives `dict[key]`, the object `holder` names (`meta_info`, `sglext`,
/// `sgl_ext`), the merged rows of `merged` at each of its places, in a copy
/// of that object: its other members shared.
fn set_rows<'py>(
    py: Python<'py>,
    dict: &Bound<'py, PyDict>,
    holder: Holder,
    merged: &Value,
) -> PyResult<()> {
    let (Holder::Member(key) | Holder::ChoiceMember(key)) = holder else {
        return Ok(());
    };
    let Some(old) = dict.get_item(key)? else {
        return Ok(());
    };
    let Ok(old) = old.cast::<PyDict>() else {
        return Ok(());
    };
    let copy = old.copy()?;
    let mut changed = false;
    for place in places::all().filter(|p| p.holder == holder) {
        if let (Holds::Rows(_), Some(rows)) = (place.holds, merged.get(place.key)) {
            copy.set_item(place.key, to_python(py, rows)?)?;
            changed = true;
        }
    }
    if changed {
        dict.set_item(key, copy)?;
    }
    Ok(())
}
