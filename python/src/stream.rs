//! `StreamStitcher`: `pd_stitch::stream` for a Python proxy that relays a
//! decode's server-sent events.

use std::borrow::Cow;

use pd_stitch::stream::StreamStitcher as Inner;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::conversion::{body, text};
use crate::errors::stitch_error;
use crate::merges::stitcher;

/// Stitches one decode stream (a `text/event-stream` body) with the
/// prefill's whole response: `feed` each chunk of the decode's body as it
/// arrives and send on the bytes it returns, then `finish`. Every event goes
/// out as soon as it is complete, byte for byte, except the one that carries
/// rows, whose data is merged with the prefill (as `merge_routed_experts_for_pd`
/// merges, SGLang's rows read with `row_shape=(layers, top_k)`). The GIL is
/// released while a chunk is read and stitched.
///
/// Made without a prefill (`StreamStitcher(None)`), it awaits one: events
/// pass through at once, the one that carries rows and what follows it wait
/// until `give_prefill`, and `finish` before it raises `StreamPrefillMissing`.
#[pyclass(name = "StreamStitcher", module = "pd_stitch")]
pub struct StreamStitcher {
    // Boxed: the stitcher's substring searchers hold 32-byte-aligned SIMD
    // state, and Python allocates a class's objects aligned to 16 bytes
    // only, so held inline it would be read misaligned (a segfault in
    // memchr's AVX2 search). The box is Rust's allocation, aligned as the
    // type needs.
    inner: Box<Inner>,
    /// An error met after some events of the same chunk were stitched: those
    /// are returned first, and the error is raised by the next call, so no
    /// byte the stream would have sent before it is lost.
    deferred: Option<pd_stitch::Error>,
}

// Whatever the stitcher comes to hold, the Python object stays within the
// alignment Python's allocator gives.
const _: () = assert!(std::mem::align_of::<StreamStitcher>() <= 16);

impl StreamStitcher {
    /// Raises the error a previous call met after returning what came before it.
    fn raise_deferred(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.deferred.take() {
            Some(err) => Err(stitch_error(py, &err)),
            None => Ok(()),
        }
    }

    /// What a call returns: the bytes stitched, and an error raised now when
    /// nothing came before it, else by the next call.
    fn answer<'py>(
        &mut self,
        py: Python<'py>,
        result: Result<(), pd_stitch::Error>,
        out: Vec<u8>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        match result {
            Err(err) if out.is_empty() => Err(stitch_error(py, &err)),
            Err(err) => {
                self.deferred = Some(err);
                Ok(PyBytes::new(py, &out))
            }
            Ok(()) => Ok(PyBytes::new(py, &out)),
        }
    }
}

#[pymethods]
impl StreamStitcher {
    #[new]
    #[pyo3(signature = (prefill=None, *, fields=None, strict=false, row_shape=None))]
    fn new(
        py: Python<'_>,
        prefill: Option<&Bound<'_, PyAny>>,
        fields: Option<&Bound<'_, PyAny>>,
        strict: bool,
        row_shape: Option<(u64, u64)>,
    ) -> PyResult<StreamStitcher> {
        let stitcher = stitcher(fields, strict, row_shape)?;
        let inner = match prefill {
            None => Inner::awaiting_prefill(stitcher),
            Some(prefill) => {
                let text = prefill_text(prefill)?;
                py.detach(|| Inner::new(stitcher, text))
                    .map_err(|e| stitch_error(py, &e))?
            }
        };
        Ok(StreamStitcher {
            inner: Box::new(inner),
            deferred: None,
        })
    }

    /// Gives the prefill's whole response to a stitcher made without one;
    /// returns what waited for it (the rows event, stitched, and what came
    /// after it). Raises `StitchError`: `Json` when it is not JSON,
    /// `StreamPrefillRepeated` when a prefill was given already, or the
    /// errors of `feed` met by the events that waited (after returning what
    /// came before them, as `feed` does).
    fn give_prefill<'py>(
        &mut self,
        py: Python<'py>,
        prefill: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let text = prefill_text(prefill)?;
        self.raise_deferred(py)?;
        let inner = &mut self.inner;
        let mut out = Vec::new();
        let result = py.detach(|| inner.give_prefill(text, &mut out));
        self.answer(py, result, out)
    }

    /// Whether the prefill's response has been given.
    #[getter]
    fn has_prefill(&self) -> bool {
        self.inner.has_prefill()
    }

    /// Reads the next chunk of the decode's stream (`bytes`); returns what can
    /// be sent now (possibly `b""`). Raises `StitchError` when an event
    /// cannot be stitched: when events before it in the same chunk were
    /// stitched, they are returned first and the next call raises. What was
    /// returned is then a prefix of the stitched stream, and every later call
    /// raises too.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        chunk: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        if chunk.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err("chunk must be bytes, not str"));
        }
        let chunk = chunk
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("chunk must be bytes"))?;
        let bytes = chunk.as_bytes();
        self.raise_deferred(py)?;
        let inner = &mut self.inner;
        let mut out = Vec::new();
        let result = py.detach(|| inner.feed(bytes, &mut out));
        self.answer(py, result, out)
    }

    /// Ends the stream; returns the bytes of an unfinished event without rows
    /// (`b""` usually). Raises `StitchError` (`StreamUnfinished`) when the
    /// stream ended inside an event that may carry rows.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.raise_deferred(py)?;
        let inner = &mut self.inner;
        let mut out = Vec::new();
        let result = py.detach(|| inner.finish(&mut out));
        self.answer(py, result, out)
    }

    /// How many bytes it holds: of the event being read, and while the
    /// prefill is awaited, from the rows event on.
    #[getter]
    fn buffered(&self) -> usize {
        self.inner.buffered()
    }
}

/// A prefill response's JSON text, from any type a response comes in: a
/// dict as the merges read one, its skeleton.
fn prefill_text(prefill: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    text(prefill, body(prefill, "prefill")?).map(Cow::into_owned)
}
