//! `pd_stitch` for Python: the P/D merges of the `pd-stitch` crate on the
//! types a Python proxy or trainer holds (`bytes`, `bytearray`, `str`,
//! `dict`), and `gather`/`check` to read rows back into NumPy.
//!
//! Why each path is shaped the way it is:
//!
//! - `bytes`, `bytearray` and `str` go through `pd_stitch::bytes`, so a proxy
//!   that holds both bodies as bytes never builds a Python object tree.
//! - A `dict` is never serialized whole: the merge reads only `choices`,
//!   `choices[i].payload` and `choices[i].routed_experts`, so only those
//!   values are converted into a `serde_json::Value` *skeleton* of the
//!   response (every other key left out), merged with the `Value` API, and
//!   converted back into a shallow copy of the input. Errors name the same
//!   places, because every value an error can describe is in the skeleton.
//! - The GIL is released around every merge, read and check (PyO3's
//!   `Python::detach`), so other threads of a proxy keep running.
//! - `gather` hands the bytes it read to NumPy without copying them (a
//!   `Vec<u8>` becomes the array's buffer, viewed as the rows' dtype).
//!
//! One function needs `unsafe`, and it stays in this file:
//! [`bytes_written_detached`], which creates a `bytes` object and fills it
//! with the GIL released. PyO3's safe constructor zeroes the new buffer with
//! the GIL held, which for the tens of megabytes of inline rows is tens of
//! milliseconds (mostly page faults) in which no other thread of a proxy
//! runs. Everything else goes through PyO3's and the `numpy` crate's safe
//! interfaces.

#![deny(unsafe_code)]

use std::borrow::Cow;
use std::path::PathBuf;

use numpy::PyArray1;
use pd_stitch::Stitch;
use pd_stitch::gather::{self, GatherError, Store};
use pd_stitch::{Error, ErrorKind, Side, Stitcher};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use serde_json::{Map, Number, Value};

pyo3::create_exception!(
    pd_stitch,
    StitchError,
    PyValueError,
    "Why a merge, gather or check failed. `.kind` is the Rust error's variant \
     (e.g. \"MissingPrefillField\"), `.location` the JSON path it names (e.g. \
     \"decode choices[1].payload[3].rows\") or None."
);

/// Nesting deeper than this in a dict is refused, as `serde_json` refuses it
/// in text; it also keeps the recursive conversions off the end of the stack.
const MAX_DEPTH: usize = 128;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

fn raise(py: Python<'_>, message: String, kind: &str, location: Option<String>) -> PyErr {
    let err = StitchError::new_err(message);
    let value = err.value(py);
    // Setting attributes on a fresh exception instance does not fail; if it
    // did, the error raised is the attribute error, which still says why.
    if let Err(e) = value
        .setattr("kind", kind)
        .and_then(|()| value.setattr("location", location))
    {
        return e;
    }
    err
}

/// A merge error as a `StitchError`. `Error::Json` is about a whole text, at
/// a byte offset, so it has no JSON path: its `.location` is None.
fn stitch_error(py: Python<'_>, err: &Error) -> PyErr {
    let location = match err.kind() {
        ErrorKind::Json => None,
        _ => Some(err.location().to_string()),
    };
    raise(py, err.to_string(), err.kind().as_str(), location)
}

fn gather_error(py: Python<'_>, err: &GatherError) -> PyErr {
    match err {
        GatherError::Json(inner) => stitch_error(py, inner),
        other => raise(
            py,
            other.to_string(),
            other.kind().as_str(),
            other.location().map(ToString::to_string),
        ),
    }
}

// ---------------------------------------------------------------------------
// Python objects in
// ---------------------------------------------------------------------------

/// A response as the merge takes it.
enum Body<'a> {
    /// JSON text: borrowed from an immutable `bytes`, or copied (a `bytearray`
    /// may change while the GIL is released; a `str` is encoded to UTF-8).
    Text(Cow<'a, [u8]>),
    /// A `dict`.
    Dict,
}

fn body<'a>(obj: &'a Bound<'_, PyAny>, name: &str) -> PyResult<Body<'a>> {
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
/// and of each choice `payload` and `routed_experts`. Anything the merge
/// could describe in an error (a response, `choices` or a choice of the wrong
/// type) is converted whole.
fn skeleton(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
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
    Ok(Value::Object(out))
}

fn choice_skeleton(choice: &Bound<'_, PyAny>) -> PyResult<Value> {
    let Ok(dict) = choice.cast::<PyDict>() else {
        return to_value(choice, 2);
    };
    let mut out = Map::new();
    for key in ["payload", "routed_experts"] {
        if let Some(value) = dict.get_item(key)? {
            out.insert(key.to_owned(), to_value(&value, 3)?);
        }
    }
    Ok(Value::Object(out))
}

/// A JSON-like Python value as a `Value`, read as `serde_json` reads the text
/// `json.dumps` writes for it: an int beyond `i64`/`u64` becomes a float.
fn to_value(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
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

fn float_value(f: f64) -> PyResult<Value> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| PyValueError::new_err(format!("{f} is not a JSON number")))
}

/// The text of a `Body` or, for a dict, of its skeleton.
fn text<'a>(obj: &Bound<'_, PyAny>, body: Body<'a>) -> PyResult<Cow<'a, [u8]>> {
    match body {
        Body::Text(text) => Ok(text),
        Body::Dict => serde_json::to_vec(&skeleton(obj)?)
            .map(Cow::Owned)
            .map_err(|e| PyValueError::new_err(e.to_string())),
    }
}

/// The `Value` of a `Body`: parsed text (an `Error::Json` of `side` when it
/// is not JSON), or a dict's skeleton.
fn value(py: Python<'_>, obj: &Bound<'_, PyAny>, body: Body<'_>, side: Side) -> PyResult<Value> {
    match body {
        Body::Dict => skeleton(obj),
        Body::Text(text) => py
            .detach(|| pd_stitch::bytes::parse(side, &text))
            .map_err(|e| stitch_error(py, &e)),
    }
}

// ---------------------------------------------------------------------------
// Python objects out
// ---------------------------------------------------------------------------

fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
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
fn merged_dict<'py>(
    py: Python<'py>,
    original: &Bound<'py, PyAny>,
    merged: &Value,
) -> PyResult<Bound<'py, PyAny>> {
    let original = original.cast::<PyDict>()?;
    let out = original.copy()?;
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
        for (key, value) in fields {
            copy.set_item(key, to_python(py, value)?)?;
        }
        choices.append(copy)?;
    }
    out.set_item("choices", choices)?;
    Ok(out.into_any())
}

// ---------------------------------------------------------------------------
// The stitcher of the keyword arguments
// ---------------------------------------------------------------------------

fn field_names(fields: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
    let Some(fields) = fields.filter(|f| !f.is_none()) else {
        return Ok(None);
    };
    if fields.is_instance_of::<PyString>() || fields.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "fields must be an iterable of field names, not a single name",
        ));
    }
    let mut names = Vec::new();
    for name in fields.try_iter()? {
        let name = name?;
        let name = name
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("fields must hold str field names"))?;
        let name = name.to_cow()?.into_owned();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(Some(names))
}

/// The `Stitcher` for `fields=` and `strict=`.
fn stitcher(fields: Option<&Bound<'_, PyAny>>, strict: bool) -> PyResult<Stitcher> {
    let stitcher = match field_names(fields)? {
        None => Stitcher::new(),
        Some(names) => Stitcher::with_fields(names),
    };
    Ok(if strict { stitcher.strict() } else { stitcher })
}

// ---------------------------------------------------------------------------
// The merges
// ---------------------------------------------------------------------------

/// The merge of the rows `kind` names, on any of the types a response may
/// come in; the result in the decode's own type.
fn merge<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
    kind: Stitch,
) -> PyResult<Bound<'py, PyAny>> {
    let stitcher = stitcher(fields, strict)?;
    let prefill_body = body(prefill, "prefill")?;
    match body(decode, "decode")? {
        Body::Text(decode_text) if decode.is_instance_of::<PyString>() => {
            let prefill_text = text(prefill, prefill_body)?;
            let mut out = decode_text.into_owned();
            let merged = py
                .detach(|| stitcher.merge_bytes(&prefill_text, &mut out, kind))
                .map_err(|e| stitch_error(py, &e))?;
            if !merged {
                return Ok(decode.clone());
            }
            let text = String::from_utf8(out).map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok(PyString::new(py, &text).into_any())
        }
        Body::Text(decode_text) => {
            // Bytes out: the merged decode is written once, straight into the
            // new `bytes` object, from the decode where it is.
            let prefill_text = text(prefill, prefill_body)?;
            let merged = py
                .detach(|| {
                    stitcher.merge_bytes_with(&prefill_text, &decode_text, kind, |stitched| {
                        Python::attach(|py| {
                            bytes_written_detached(py, stitched.len(), |buf| {
                                stitched.write_into(buf);
                            })
                            .map(Bound::unbind)
                        })
                    })
                })
                .map_err(|e| stitch_error(py, &e))?;
            match merged {
                None => Ok(decode.clone()),
                Some(bytes) => Ok(bytes?.into_bound(py).into_any()),
            }
        }
        Body::Dict => {
            let prefill_value = value(py, prefill, prefill_body, Side::Prefill)?;
            let mut decode_value = skeleton(decode)?;
            let merged = py
                .detach(|| stitcher.merge(&prefill_value, &mut decode_value, kind))
                .map_err(|e| stitch_error(py, &e))?;
            if merged {
                merged_dict(py, decode, &decode_value)
            } else {
                Ok(decode.clone())
            }
        }
    }
}

/// A new `bytes` object of `len` bytes, written by `fill` with the GIL
/// released: only the allocation holds the GIL.
#[allow(unsafe_code)]
fn bytes_written_detached<'py>(
    py: Python<'py>,
    len: usize,
    fill: impl FnOnce(&mut [u8]) + Send,
) -> PyResult<Bound<'py, PyBytes>> {
    let size = pyo3::ffi::Py_ssize_t::try_from(len)
        .map_err(|_| PyValueError::new_err(format!("{len} bytes do not fit a bytes object")))?;
    // SAFETY: with a null pointer, PyBytes_FromStringAndSize returns a new
    // reference to a new bytes object of `size` bytes left for the caller to
    // fill, or null with an exception set, which `from_owned_ptr_or_err`
    // turns into the error.
    let object = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
        )?
    };
    let object = object.cast_into::<PyBytes>()?;
    // SAFETY: the buffer of that bytes object: `len` writable bytes that
    // nothing else can reach until the object is returned (it is in no
    // container and no other thread has it), so writing them without the
    // GIL races with nothing. Zeroed through the raw pointer before the
    // slice is made, so the slice never covers uninitialized memory.
    let buffer = unsafe { pyo3::ffi::PyBytes_AsString(object.as_ptr()) }.cast::<u8>();
    if buffer.is_null() {
        return Err(PyErr::fetch(py));
    }
    let address = buffer as usize; // a plain number, so the closure is Send
    py.detach(move || {
        let buffer = address as *mut u8;
        // SAFETY: as above; `buffer` points at `len` bytes of this object.
        let out = unsafe {
            std::ptr::write_bytes(buffer, 0, len);
            std::slice::from_raw_parts_mut(buffer, len)
        };
        fill(out);
    });
    Ok(object)
}

/// Stitches `prefill` into `decode`, inline rows and rows by handle at once.
#[pyfunction]
#[pyo3(signature = (prefill, decode, *, fields=None, strict=false))]
fn merge_routed_experts_for_pd<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    merge(py, prefill, decode, fields, strict, Stitch::ForPd)
}

/// Stitches the payload segments (rows by handle) of `prefill` into `decode`.
#[pyfunction]
#[pyo3(signature = (prefill, decode, *, fields=None, strict=false))]
fn merge_routed_payload_in_json<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    merge(py, prefill, decode, fields, strict, Stitch::Payload)
}

/// Stitches the inline `routed_experts` (compact or npy) of `prefill` into `decode`.
#[pyfunction]
#[pyo3(signature = (prefill, decode, *, fields=None, strict=false))]
fn merge_routed_experts_in_json<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    merge(py, prefill, decode, fields, strict, Stitch::Inline)
}

/// Whether `prefill.choices[0]` carries rows to stitch.
#[pyfunction]
#[pyo3(signature = (prefill, *, fields=None))]
fn prefill_has_routed_experts(
    py: Python<'_>,
    prefill: &Bound<'_, PyAny>,
    fields: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    let stitcher = stitcher(fields, false)?;
    match body(prefill, "prefill")? {
        Body::Text(text) => py
            .detach(|| stitcher.prefill_bytes_has_routed_experts(&text))
            .map_err(|e| stitch_error(py, &e)),
        Body::Dict => {
            let value = skeleton(prefill)?;
            Ok(py.detach(|| stitcher.prefill_has_routed_experts(&value)))
        }
    }
}

// ---------------------------------------------------------------------------
// Reading rows back
// ---------------------------------------------------------------------------

/// The store `gather` and `check` read from.
fn store(root: Option<PathBuf>, allow: Option<Vec<PathBuf>>) -> PyResult<Store> {
    let root = match root {
        Some(root) => root,
        None => std::env::current_dir()?,
    };
    // Reads only inside the root and the allowed directories, symlinks resolved.
    Ok(Store::confined(&root, &allow.unwrap_or_default())?)
}

fn response_value(py: Python<'_>, response: &Bound<'_, PyAny>) -> PyResult<Value> {
    let body = body(response, "response")?;
    value(py, response, body, Side::Response)
}

/// The rows of `field` for `choice`: `(start, array)`.
#[pyfunction]
#[pyo3(signature = (response, choice=0, *, field="routed_experts", root=None, allow=None))]
#[pyo3(name = "gather")]
fn gather_rows<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyAny>,
    choice: usize,
    field: &str,
    root: Option<PathBuf>,
    allow: Option<Vec<PathBuf>>,
) -> PyResult<(u64, Bound<'py, PyAny>)> {
    let value = response_value(py, response)?;
    let store = store(root, allow)?;
    let rows = py
        .detach(|| gather::gather_from(&value, choice, field, &store))
        .map_err(|e| gather_error(py, &e))?;
    let start = rows.positions().start();
    let mut shape: Vec<usize> = Vec::new();
    for dim in rows.shape() {
        shape.push(usize::try_from(dim).map_err(|_| PyValueError::new_err("shape too large"))?);
    }
    let dtype = rows.dtype().to_string();
    let numpy = py.import("numpy")?;
    let np_dtype = numpy
        .getattr("dtype")?
        .call1((dtype.as_str(),))
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "NumPy has no dtype {dtype} (import ml_dtypes for bfloat16)"
            ))
        })?
        .call_method1("newbyteorder", ("<",))?;
    // The bytes read become the array's buffer: no copy.
    let bytes = PyArray1::<u8>::from_vec(py, rows.into_data());
    let array = bytes
        .call_method1("view", (np_dtype,))?
        .call_method1("reshape", (shape,))?;
    Ok((start, array))
}

/// What `pd-stitch check` reports: one dict per choice and field.
#[pyfunction]
#[pyo3(signature = (response, *, root=None, allow=None))]
fn check<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyAny>,
    root: Option<PathBuf>,
    allow: Option<Vec<PathBuf>>,
) -> PyResult<Bound<'py, PyList>> {
    let value = response_value(py, response)?;
    let store = store(root, allow)?;
    let report = py.detach(|| gather::check_from(&value, &store));
    let out = PyList::empty(py);
    let ranges = |rows: &[pd_stitch::algebra::Rows]| -> Vec<(u64, u64)> {
        rows.iter().map(|r| (r.start(), r.end())).collect()
    };
    for field in &report.fields {
        let dict = PyDict::new(py);
        dict.set_item("choice", field.choice)?;
        dict.set_item("field", &field.field)?;
        dict.set_item("segments", field.segments)?;
        dict.set_item("coverage", ranges(&field.coverage))?;
        dict.set_item("gaps", ranges(&field.gaps))?;
        dict.set_item("overlaps", ranges(&field.overlaps))?;
        dict.set_item("dtype", field.dtype.map(|d| d.to_string()))?;
        dict.set_item("shape", field.shape.clone())?;
        dict.set_item("problems", field.problems.clone())?;
        dict.set_item("ok", field.problems.is_empty())?;
        out.append(dict)?;
    }
    if !report.problems.is_empty() {
        // Problems of the response's structure belong to no choice or field.
        let dict = PyDict::new(py);
        dict.set_item("choice", py.None())?;
        dict.set_item("field", py.None())?;
        dict.set_item("segments", 0)?;
        dict.set_item("coverage", PyList::empty(py))?;
        dict.set_item("gaps", PyList::empty(py))?;
        dict.set_item("overlaps", PyList::empty(py))?;
        dict.set_item("dtype", py.None())?;
        dict.set_item("shape", py.None())?;
        dict.set_item("problems", report.problems.clone())?;
        dict.set_item("ok", false)?;
        out.append(dict)?;
    }
    Ok(out)
}

#[pymodule(name = "pd_stitch")]
fn python_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("StitchError", py.get_type::<StitchError>())?;
    m.add_function(wrap_pyfunction!(merge_routed_experts_for_pd, m)?)?;
    m.add_function(wrap_pyfunction!(merge_routed_payload_in_json, m)?)?;
    m.add_function(wrap_pyfunction!(merge_routed_experts_in_json, m)?)?;
    m.add_function(wrap_pyfunction!(prefill_has_routed_experts, m)?)?;
    m.add_function(wrap_pyfunction!(gather_rows, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    Ok(())
}
