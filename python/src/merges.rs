//! The merges, on any of the types a response may come in, and the
//! `Stitcher` their keyword arguments (`fields=`, `strict=`) make.

use pd_stitch::{Side, Stitch, Stitcher};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::bytearray_buffer::{InPlaceError, PinnedByteArray};
use crate::conversion::{body, merged_dict, skeleton, text, value, Body};
use crate::detached_bytes::bytes_written_detached;
use crate::errors::stitch_error;

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

/// The `Stitcher` for `fields=`, `strict=` and `row_shape=`.
pub(crate) fn stitcher(
    fields: Option<&Bound<'_, PyAny>>,
    strict: bool,
    row_shape: Option<(u64, u64)>,
) -> PyResult<Stitcher> {
    let mut stitcher = match field_names(fields)? {
        None => Stitcher::new(),
        Some(names) => Stitcher::with_fields(names),
    };
    if let Some((layers, top_k)) = row_shape {
        stitcher = stitcher.row_shape(layers, top_k);
    }
    Ok(if strict { stitcher.strict() } else { stitcher })
}

/// The merge of the rows `kind` names, on any of the types a response may
/// come in; the result in the decode's own type.
fn merge<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
    row_shape: Option<(u64, u64)>,
    kind: Stitch,
) -> PyResult<Bound<'py, PyAny>> {
    let stitcher = stitcher(fields, strict, row_shape)?;
    let prefill_body = body(prefill, "prefill")?;
    if let Ok(array) = decode.cast::<PyByteArray>() {
        // Merged where it is, grown or shortened, and returned: no second
        // copy of a decode that may be tens of megabytes. The prefill was
        // copied above if it is a bytearray (it may be this one).
        let prefill_text = text(prefill, prefill_body)?;
        let mut pinned = PinnedByteArray::new(array)?;
        let merged = py.detach(|| stitcher.merge_bytes_in(&prefill_text, &mut pinned, kind));
        let released = pinned.release(py);
        return match merged {
            Ok(_) => released.map(|()| decode.clone()),
            Err(InPlaceError::Stitch(err)) => Err(stitch_error(py, &err)),
            Err(InPlaceError::Python(err)) => Err(err),
        };
    }
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

/// Stitches `prefill` into `decode`: inline rows, rows by handle and
/// SGLang's rows at once. `row_shape=(layers, top_k)` places SGLang's rows,
/// which carry no shape.
#[pyfunction]
#[pyo3(signature = (prefill, decode, *, fields=None, strict=false, row_shape=None))]
pub(crate) fn merge_routed_experts_for_pd<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
    row_shape: Option<(u64, u64)>,
) -> PyResult<Bound<'py, PyAny>> {
    merge(
        py,
        prefill,
        decode,
        fields,
        strict,
        row_shape,
        Stitch::ForPd,
    )
}

/// Stitches the payload segments (rows by handle) of `prefill` into `decode`.
#[pyfunction]
#[pyo3(signature = (prefill, decode, *, fields=None, strict=false))]
pub(crate) fn merge_routed_payload_in_json<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    merge(py, prefill, decode, fields, strict, None, Stitch::ByHandle)
}

/// Stitches the inline `routed_experts` (compact or npy) of `prefill` into `decode`.
#[pyfunction]
#[pyo3(signature = (prefill, decode, *, fields=None, strict=false))]
pub(crate) fn merge_routed_experts_in_json<'py>(
    py: Python<'py>,
    prefill: &Bound<'py, PyAny>,
    decode: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyAny>>,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    merge(py, prefill, decode, fields, strict, None, Stitch::Inline)
}

/// Whether `prefill.choices[0]` carries rows to stitch.
#[pyfunction]
#[pyo3(signature = (prefill, *, fields=None))]
pub(crate) fn prefill_has_routed_experts(
    py: Python<'_>,
    prefill: &Bound<'_, PyAny>,
    fields: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    let stitcher = stitcher(fields, false, None)?;
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
