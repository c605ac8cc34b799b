//! `pd_stitch` for Python: the P/D merges of the `pd-stitch` crate on the
//! types a Python proxy or trainer holds (`bytes`, `bytearray`, `str`,
//! `dict`), `gather`/`check` to read rows back into NumPy, and
//! `assemble_episode` for a multi-turn episode's rows.
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
//! Two things need `unsafe`, each alone in one file, the only places with
//! `#[allow(unsafe_code)]` under this root's `deny`:
//!
//! - `detached_bytes.rs`: [`detached_bytes::bytes_written_detached`]
//!   creates a `bytes` object and fills it with the GIL released. PyO3's
//!   safe constructor zeroes the new buffer with the GIL held, which for
//!   the tens of megabytes of inline rows is tens of milliseconds (mostly
//!   page faults) in which no other thread of a proxy runs.
//! - `bytearray_buffer.rs`: [`bytearray_buffer::PinnedByteArray`] lets the
//!   merge rewrite a `bytearray` decode where it is, with the GIL released,
//!   its storage pinned by a `memoryview` of it; PyO3 has no safe access to
//!   a bytearray's bytes that outlives the GIL.
//!
//! Everything else goes through PyO3's and the `numpy` crate's safe
//! interfaces.

//! The modules: `errors` (`StitchError`), `conversion` (Python objects in
//! and out), `merges` (the four merge functions), `readers` (`gather`,
//! `check` and `check_rows`), `episode` (`assemble_episode`), `places`
//! (the table of places), `stream` (`StreamStitcher`), `detached_bytes` and
//! `bytearray_buffer`
//! (the unsafe code); this file holds the
//! module definition.

#![deny(unsafe_code)]

mod bytearray_buffer;
mod conversion;
mod detached_bytes;
mod episode;
mod errors;
mod merges;
mod places;
mod readers;
mod stream;

use pyo3::prelude::*;

#[pymodule(name = "pd_stitch")]
fn python_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("StitchError", py.get_type::<errors::StitchError>())?;
    m.add_function(wrap_pyfunction!(merges::merge_routed_experts_for_pd, m)?)?;
    m.add_function(wrap_pyfunction!(merges::merge_routed_payload_in_json, m)?)?;
    m.add_function(wrap_pyfunction!(merges::merge_routed_experts_in_json, m)?)?;
    m.add_function(wrap_pyfunction!(merges::prefill_has_routed_experts, m)?)?;
    m.add_function(wrap_pyfunction!(readers::gather_rows, m)?)?;
    m.add_function(wrap_pyfunction!(readers::check, m)?)?;
    m.add_function(wrap_pyfunction!(readers::check_rows, m)?)?;
    m.add_class::<stream::StreamStitcher>()?;
    m.add_function(wrap_pyfunction!(readers::read_field, m)?)?;
    m.add_function(wrap_pyfunction!(episode::assemble_episode, m)?)?;
    m.add_function(wrap_pyfunction!(places::table, m)?)?;
    Ok(())
}
