//! Reading rows back: `gather` into a NumPy array, and `check`.

use std::path::PathBuf;

use numpy::PyArray1;
use pd_stitch::gather::{self, Store};
use pd_stitch::Side;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
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

/// The rows of `field` for `choice`: `(start, array)`.
#[pyfunction]
#[pyo3(signature = (response, choice=0, *, field="routed_experts", root=None, allow=None))]
#[pyo3(name = "gather")]
pub(crate) fn gather_rows<'py>(
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
