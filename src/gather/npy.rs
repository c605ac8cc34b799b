//! Rows as a `.npy` file, for whoever writes rows out that are not a
//! [`Gathered`](super::Gathered) (which has its own `to_npy`): the
//! episode's assembled rows (`pd-stitch episode --npy`).

use crate::algebra::Dtype;
use crate::codec::NpyError;
use crate::format::inline;

/// The version 1.0 `.npy` file of a C-order array of `dtype` and `shape`
/// holding `data` (little-endian), as `numpy.save` writes it.
///
/// ```
/// use pd_stitch::algebra::Dtype;
/// use pd_stitch::gather::npy_file;
///
/// let file = npy_file(Dtype::Uint16, &[2, 1, 2], &[1, 0, 2, 0, 3, 0, 4, 0])?;
/// assert!(file.starts_with(b"\x93NUMPY\x01\x00"));
/// assert!(file.ends_with(&[1, 0, 2, 0, 3, 0, 4, 0]));
/// # Ok::<(), pd_stitch::NpyError>(())
/// ```
///
/// # Errors
///
/// [`NpyError::Descr`] for `bfloat16`, which has no `.npy` type code.
pub fn npy_file(dtype: Dtype, shape: &[u64], data: &[u8]) -> Result<Vec<u8>, NpyError> {
    inline::npy_file(dtype, shape, data)
}
