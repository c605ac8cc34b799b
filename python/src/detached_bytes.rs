//! A new `bytes` object filled with the GIL released: the crate's one
//! `unsafe` function, alone in this file.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A new `bytes` object of `len` bytes, written by `fill` with the GIL
/// released: only the allocation holds the GIL.
#[allow(unsafe_code)]
pub(crate) fn bytes_written_detached<'py>(
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
