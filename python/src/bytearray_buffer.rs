//! A `bytearray` as a [`Buffer`] the merge rewrites in place with the GIL
//! released: the crate's second `unsafe` code, alone in this file.
//!
//! The merge reads and writes the bytearray's own storage through a raw
//! pointer, so that storage must neither move nor be freed while it runs.
//! A `memoryview` of the bytearray, held for as long as the pointer is used,
//! ensures that: CPython refuses to resize a bytearray while it is exported
//! (`PyByteArray_Resize` checks `ob_exports` before it changes anything,
//! `Objects/bytearrayobject.c`), so no other thread can move it, and only
//! this file, with the GIL held and the view dropped, resizes it. (PyO3's
//! `PyBuffer`, the direct way to export it, is not in the abi3-py39 limited
//! API this module is built for; `PyMemoryView_FromObject` is.)
//!
//! What the view cannot stop is another thread *writing* the bytearray's
//! bytes meanwhile; the docs of the merges say the caller must not, as
//! NumPy says of an array an operation works on with the GIL released.

#![allow(unsafe_code)]

use pd_stitch::bytes::Buffer;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyMemoryView};

/// Why a merge into a bytearray failed: the merge's own error, or the
/// interpreter's when the bytearray could not take the merged length.
pub(crate) enum InPlaceError {
    Stitch(pd_stitch::Error),
    Python(PyErr),
}

impl From<pd_stitch::Error> for InPlaceError {
    fn from(err: pd_stitch::Error) -> InPlaceError {
        InPlaceError::Stitch(err)
    }
}

/// A bytearray whose storage is pinned by a `memoryview` of it: `data` and
/// `len` are its address and length while `view` is held.
pub(crate) struct PinnedByteArray {
    array: Py<PyByteArray>,
    view: Option<Py<PyMemoryView>>,
    /// The storage's address, as a number so that the struct is `Send` and
    /// can cross into the code that runs with the GIL released.
    data: usize,
    len: usize,
    /// A failure of [`Buffer::truncate`], which cannot return one.
    truncate_failed: Option<PyErr>,
}

impl PinnedByteArray {
    pub(crate) fn new(array: &Bound<'_, PyByteArray>) -> PyResult<PinnedByteArray> {
        let mut pinned = PinnedByteArray {
            array: array.clone().unbind(),
            view: None,
            data: 0,
            len: 0,
            truncate_failed: None,
        };
        pinned.pin(array)?;
        Ok(pinned)
    }

    /// Exports the bytearray again and reads where its storage now is.
    fn pin(&mut self, array: &Bound<'_, PyByteArray>) -> PyResult<()> {
        self.view = Some(PyMemoryView::from(array.as_any())?.unbind());
        self.data = array.data() as usize;
        self.len = array.len();
        Ok(())
    }

    /// Drops the view (with the GIL held, so at once), resizes the
    /// bytearray to `len` and pins it again. Bytes added by growing are
    /// zeroed, so that no slice ever covers memory CPython left
    /// uninitialized.
    fn resize(&mut self, py: Python<'_>, len: usize) -> PyResult<()> {
        let array = self.array.bind(py).clone();
        self.view = None;
        let old = array.len();
        let resized = array.resize(len);
        self.pin(&array)?;
        resized?;
        if len > old {
            // SAFETY: the bytearray is pinned and `len` bytes long, so its
            // bytes `old..len` are inside its storage.
            unsafe { std::ptr::write_bytes((self.data as *mut u8).add(old), 0, len - old) };
        }
        Ok(())
    }

    /// Whether the bytearray could be shortened now, found by shortening it
    /// by one byte and lengthening it again: CPython refuses either while
    /// another `memoryview` or NumPy view of it is alive, before changing
    /// anything. Both are O(1) for a bytearray that fills most of its
    /// allocation (CPython only moves its end marker); the one byte the end
    /// marker overwrites is put back.
    fn can_shorten(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(last) = self.len.checked_sub(1) else {
            return Ok(());
        };
        // SAFETY: the bytearray is pinned and `self.len` bytes long.
        let byte = unsafe { *(self.data as *const u8).add(last) };
        let len = self.len;
        self.resize(py, last)?;
        // Lengthening back stays within the allocation, so it allocates
        // nothing and cannot fail, unless shortening had reallocated a
        // bytearray that used less than half of its allocation; then a
        // failure loses the last byte, and is raised.
        self.resize(py, len)?;
        // SAFETY: pinned again at `len` bytes by `resize`.
        unsafe { *(self.data as *mut u8).add(last) = byte };
        Ok(())
    }

    /// Unpins the bytearray (with the GIL held, so at once); the error of
    /// a shortening that failed, if one did.
    pub(crate) fn release(mut self, _py: Python<'_>) -> PyResult<()> {
        self.view = None;
        self.truncate_failed.take().map_or(Ok(()), Err)
    }
}

impl Buffer for PinnedByteArray {
    type Error = InPlaceError;

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `data` is the storage of the bytearray `self.array` holds
        // alive, `len` bytes long and initialized, and the view pins it: no
        // one resizes it until this struct does, which takes `&mut self`,
        // so not while this slice lives. (No other thread writes it: the
        // merges' documented contract.)
        unsafe { std::slice::from_raw_parts(self.data as *const u8, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as for `bytes`; `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.data as *mut u8, self.len) }
    }

    fn prepare(&mut self, len: usize) -> Result<(), InPlaceError> {
        Python::attach(|py| {
            if len > self.len {
                self.resize(py, len)
            } else if len < self.len {
                self.can_shorten(py)
            } else {
                Ok(())
            }
        })
        .map_err(InPlaceError::Python)
    }

    fn truncate(&mut self, len: usize) {
        // `prepare` found that the bytearray could be shortened; only
        // another thread exporting it since, which the merges' contract
        // forbids, makes this fail. The error is then kept for the caller.
        if let Err(err) = Python::attach(|py| self.resize(py, len)) {
            self.truncate_failed = Some(err);
        }
    }
}
