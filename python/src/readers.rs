//! Reading rows back: `gather` into a NumPy array, and `check`.

use std::path::PathBuf;

use numpy::PyArray1;
use pd_stitch::algebra::{Dtype, Segment};
use pd_stitch::gather::{self, Store};
use pd_stitch::reading::{FieldTable, ReadOptions, Values};
use pd_stitch::{Location, Side};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde_json::Value;

use crate::conversion::{body, value};
use crate::errors::gather_error;

/// The store `gather` and `check` read from.
pub(crate) fn store(root: Option<PathBuf>, allow: Option<Vec<PathBuf>>) -> PyResult<Store> {
    let root = match root {
        Some(root) => root,
        None => std::env::current_dir()?,
    };
    // Reads only inside the root and the allowed directories, symlinks resolved.
    Ok(Store::confined(&root, &allow.unwrap_or_default())?)
}

pub(crate) fn response_value(py: Python<'_>, response: &Bound<'_, PyAny>) -> PyResult<Value> {
    let body = body(response, "response")?;
    value(py, response, body, Side::Response)
}

/// The rows of `field` for `choice`: `(start, array)`. For
/// `routed_experts`, wherever the table of places puts them, whatever their
/// kind (`gather::choice_rows`: SGLang's placed with `row_shape`); another
/// field, from its payload segments.
#[pyfunction]
#[pyo3(signature = (response, choice=0, *, field="routed_experts", root=None, allow=None, row_shape=None))]
#[pyo3(name = "gather")]
pub(crate) fn gather_rows<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyAny>,
    choice: usize,
    field: &str,
    root: Option<PathBuf>,
    allow: Option<Vec<PathBuf>>,
    row_shape: Option<(u64, u64)>,
) -> PyResult<(u64, Bound<'py, PyAny>)> {
    let value = response_value(py, response)?;
    let store = store(root, allow)?;
    let rows = py
        .detach(|| match field {
            pd_stitch::ROUTED_EXPERTS => gather::choice_rows(&value, choice, &store, row_shape),
            _ => gather::gather_from(&value, choice, field, &store),
        })
        .map_err(|e| gather_error(py, &e))?;
    let start = rows.positions().start();
    let (dtype, shape) = (rows.dtype(), rows.shape());
    Ok((start, rows_array(py, rows.into_data(), dtype, &shape)?))
}

/// `data` (little-endian elements of `dtype`) as a NumPy array of `shape`,
/// without copying: the bytes become the array's buffer.
pub(crate) fn rows_array<'py>(
    py: Python<'py>,
    data: Vec<u8>,
    dtype: Dtype,
    shape: &[u64],
) -> PyResult<Bound<'py, PyAny>> {
    let mut dims: Vec<usize> = Vec::new();
    for &dim in shape {
        dims.push(usize::try_from(dim).map_err(|_| PyValueError::new_err("shape too large"))?);
    }
    let dtype = dtype.to_string();
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
    let bytes = PyArray1::<u8>::from_vec(py, data);
    bytes
        .call_method1("view", (np_dtype,))?
        .call_method1("reshape", (dims,))
}

/// What `pd-stitch check` reports: one dict per choice and field (per item,
/// for SGLang's rows, which `row_shape=(layers, top_k)` places).
#[pyfunction]
#[pyo3(signature = (response, *, root=None, allow=None, row_shape=None))]
pub(crate) fn check<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyAny>,
    root: Option<PathBuf>,
    allow: Option<Vec<PathBuf>>,
    row_shape: Option<(u64, u64)>,
) -> PyResult<Bound<'py, PyList>> {
    let value = response_value(py, response)?;
    let store = store(root, allow)?;
    let report = py.detach(|| gather::check_with(&value, &store, row_shape));
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

/// The rows check (`pd_stitch::gather::check_response_rows`): rows no engine
/// produces, in every choice of `response` (SGLang's with `row_shape`).
#[pyfunction]
#[pyo3(signature = (response, *, root=None, allow=None, row_shape=None, experts=None, limit=100))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_rows<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyAny>,
    root: Option<PathBuf>,
    allow: Option<Vec<PathBuf>>,
    row_shape: Option<(u64, u64)>,
    experts: Option<u64>,
    limit: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let value = response_value(py, response)?;
    let store = store(root, allow)?;
    let check = gather::RowsCheck { experts, limit };
    let report = py.detach(|| gather::check_response_rows(&value, &store, row_shape, check));
    crate::conversion::to_python(py, &report.to_json())
}

/// One payload segment from Python: a dict, or the 7-item list
/// `[field, file, offset, pos, rows, dtype, shape]` (msgspec's array-like
/// encoding).
fn segment_of(item: &Bound<'_, PyAny>, k: usize) -> PyResult<Segment<String>> {
    let bad = |what: &str| PyValueError::new_err(format!("segments[{k}]: {what}"));
    let get = |key: &str, index: usize| -> PyResult<Bound<'_, PyAny>> {
        if let Ok(dict) = item.cast::<PyDict>() {
            dict.get_item(key)?
                .ok_or_else(|| bad(&format!("no {key:?}")))
        } else if item.is_instance_of::<PyList>() || item.is_instance_of::<PyTuple>() {
            if item.len()? != 7 {
                return Err(bad("a list segment has 7 items"));
            }
            item.get_item(index)
        } else {
            Err(PyTypeError::new_err(format!(
                "segments[{k}]: a dict or a 7-item list"
            )))
        }
    };
    let int = |key: &str, index: usize| -> PyResult<u64> {
        get(key, index)?
            .extract::<u64>()
            .map_err(|_| bad(&format!("{key} must be a non-negative integer")))
    };
    let field: String = get("field", 0)?.extract()?;
    let file: String = get("file", 1)?.extract()?;
    let dtype: String = get("dtype", 5)?.extract()?;
    let dtype: Dtype = dtype
        .parse()
        .map_err(|_| bad(&format!("no dtype {dtype:?}")))?;
    let shape: Vec<u64> = get("shape", 6)?
        .extract()
        .map_err(|_| bad("shape must be a list of non-negative integers"))?;
    Segment::new(
        field,
        file,
        int("offset", 2)?,
        int("pos", 3)?,
        int("rows", 4)?,
        dtype,
        shape,
    )
    .map_err(|e| bad(&e.to_string()))
}

/// The trainer's reading of `field` over `[lo, hi)` from `segments` (a
/// payload list): exactly prime-rl's `read_field`, or `None` when no segment
/// carries the field. Files are read inside `root` and `allow` only,
/// concurrently, with the GIL released.
#[pyfunction]
#[pyo3(signature = (segments, field, lo, hi, *, root=None, allow=None))]
pub(crate) fn read_field<'py>(
    py: Python<'py>,
    segments: &Bound<'py, PyAny>,
    field: &str,
    lo: i64,
    hi: i64,
    root: Option<PathBuf>,
    allow: Option<Vec<PathBuf>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut list = Vec::new();
    for (k, item) in segments.try_iter()?.enumerate() {
        list.push(segment_of(&item?, k)?);
    }
    let table = FieldTable::trainer();
    if list.iter().all(|s| s.field() != field) {
        return Ok(None);
    }
    if table.get(field).is_none() {
        return Err(PyKeyError::new_err(field.to_owned()));
    }
    if hi < lo || lo < 0 {
        return Err(PyValueError::new_err(format!(
            "window [{lo}, {hi}): negative dimensions are not allowed"
        )));
    }
    let store = store(root, allow)?;
    let at = |k: usize| Location::root(Side::Response).key("segments").index(k);
    let reading = py
        .detach(|| {
            gather::read_field(
                &list,
                field,
                lo as u64,
                hi as u64,
                &table,
                ReadOptions::default(),
                &store,
                &at,
            )
        })
        .map_err(|e| gather_error(py, &e))?;
    let Some(reading) = reading else {
        return Ok(None);
    };
    let mut shape: Vec<usize> = Vec::new();
    for &dim in reading.shape() {
        shape.push(usize::try_from(dim).map_err(|_| PyValueError::new_err("shape too large"))?);
    }
    let dtype = match reading.values() {
        Values::Int32 => "<i4",
        Values::Float32 => "<f4",
    };
    let numpy = py.import("numpy")?;
    let np_dtype = numpy.getattr("dtype")?.call1((dtype,))?;
    let bytes = PyArray1::<u8>::from_vec(py, reading.into_data());
    let array = bytes
        .call_method1("view", (np_dtype,))?
        .call_method1("reshape", (shape,))?;
    Ok(Some(array))
}
