//! [`Buffer`]: memory that holds a decode's text and that the bytes merge
//! rewrites in place, whoever owns it.
//!
//! A `Vec<u8>` is one. Another is memory the merge may write but not
//! reallocate itself: a Python `bytearray`, which only the interpreter may
//! resize (and which must not be resized while it is exported), or a
//! region of a larger buffer. The merge reads the decode from the buffer,
//! plans every change, asks the buffer once, before writing anything, to
//! take the merged length, and only then writes; so a buffer that cannot
//! take that length refuses it while its bytes are still the decode's.

use crate::codec::splice::{self, Edit};
use crate::error::Error;

/// A decode's text in memory the bytes merge rewrites in place:
/// [`Stitcher::merge_bytes_in`](crate::Stitcher::merge_bytes_in).
///
/// The merge calls [`bytes`](Buffer::bytes) to read the decode, then
/// [`prepare`](Buffer::prepare) once with the merged length, then writes
/// through [`bytes_mut`](Buffer::bytes_mut), then, when the merged decode is
/// shorter, [`truncate`](Buffer::truncate) once. It calls none of them but
/// `bytes` when there is nothing to stitch or the merge fails, so the
/// buffer is then as it was.
///
/// ```
/// use pd_stitch::{bytes::Buffer, Error, Stitch, Stitcher};
///
/// /// A decode in a fixed region: merged in place when the result fits.
/// struct Region<'a> {
///     memory: &'a mut [u8],
///     len: usize,
/// }
///
/// #[derive(Debug)]
/// enum Failure {
///     Merge(Error),
///     TooLong(usize),
/// }
///
/// impl From<Error> for Failure {
///     fn from(err: Error) -> Failure {
///         Failure::Merge(err)
///     }
/// }
///
/// impl Buffer for Region<'_> {
///     type Error = Failure;
///     fn bytes(&self) -> &[u8] {
///         &self.memory[..self.len]
///     }
///     fn bytes_mut(&mut self) -> &mut [u8] {
///         &mut self.memory[..self.len]
///     }
///     fn prepare(&mut self, len: usize) -> Result<(), Failure> {
///         if len > self.memory.len() {
///             return Err(Failure::TooLong(len));
///         }
///         self.len = self.len.max(len);
///         Ok(())
///     }
///     fn truncate(&mut self, len: usize) {
///         self.len = len;
///     }
/// }
///
/// let prefill = br#"{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;
/// // The decode's rows from position 1 on: the merge adds the prefill's.
/// let decode = br#"{"choices": [{"routed_experts": {"data": "BAUG", "shape": [1, 1, 3], "start": 1, "dtype": "uint8"}}]}"#;
/// let merged = br#"{"choices": [{"routed_experts": {"data": "AQIDBAUG", "shape": [2,1,3], "start": 0, "dtype": "uint8"}}]}"#;
///
/// let mut memory = [0u8; 256];
/// memory[..decode.len()].copy_from_slice(decode);
/// let mut region = Region { memory: &mut memory, len: decode.len() };
/// assert!(Stitcher::new().merge_bytes_in(prefill, &mut region, Stitch::ForPd).unwrap());
/// assert_eq!(region.bytes(), merged);
///
/// // A region with no room to grow: refused before anything is written.
/// let mut memory = decode.to_vec();
/// let mut region = Region { memory: &mut memory, len: decode.len() };
/// let err = Stitcher::new().merge_bytes_in(prefill, &mut region, Stitch::ForPd).unwrap_err();
/// assert!(matches!(err, Failure::TooLong(n) if n == merged.len()));
/// assert_eq!(region.bytes(), decode);
/// ```
pub trait Buffer {
    /// What the merge returns on error: its own [`Error`]s convert into it,
    /// and [`prepare`](Buffer::prepare) may return others.
    type Error: From<Error>;

    /// The text the buffer holds.
    fn bytes(&self) -> &[u8];

    /// The same bytes, to be written.
    fn bytes_mut(&mut self) -> &mut [u8];

    /// Called once, before anything is written, with the merged decode's
    /// length `len`. A buffer shorter than `len` is lengthened to it (the
    /// bytes added may hold anything: the merge writes every one). A buffer
    /// longer than `len` keeps its length until
    /// [`truncate`](Buffer::truncate), and if it could not then be
    /// shortened it says so now. An error here is the merge's, with the
    /// buffer's bytes still the decode's.
    ///
    /// # Errors
    ///
    /// Whatever keeps the buffer from taking `len` bytes.
    fn prepare(&mut self, len: usize) -> Result<(), Self::Error>;

    /// Called once after the merged decode, `len` bytes, is written at the
    /// start of a buffer longer than that: shortens it to `len`.
    fn truncate(&mut self, len: usize);
}

/// A `Vec` grows once, to the exact length, and cannot fail to.
impl Buffer for Vec<u8> {
    type Error = Error;

    fn bytes(&self) -> &[u8] {
        self
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }

    fn prepare(&mut self, len: usize) -> Result<(), Error> {
        if len > self.len() {
            self.reserve_exact(len - self.len());
            self.resize(len, 0);
        }
        Ok(())
    }

    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len);
    }
}

/// Makes `edits` of the text `buf` holds, as [`Buffer`] says: the merged
/// length asked for first, the edits made in place, the buffer shortened
/// last. Edits that read the buffer are written into a new buffer first
/// and copied in.
pub(crate) fn apply<B: Buffer + ?Sized>(buf: &mut B, edits: &[Edit<'_>]) -> Result<(), B::Error> {
    let old_len = buf.bytes().len();
    let new_len = splice::new_len(old_len, edits);
    if splice::reads_buffer(edits) {
        let mut merged = vec![0; new_len];
        splice::write_into(buf.bytes(), edits, &mut merged);
        buf.prepare(new_len)?;
        if let Some(out) = buf.bytes_mut().get_mut(..new_len) {
            out.copy_from_slice(&merged);
        }
    } else {
        buf.prepare(new_len)?;
        splice::apply_in(buf.bytes_mut(), old_len, edits);
    }
    if new_len < buf.bytes().len() {
        buf.truncate(new_len);
    }
    Ok(())
}
