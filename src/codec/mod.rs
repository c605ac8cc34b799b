//! The codecs of rows, below every format: strict base64 (`base64`), the
//! `.npy` header (`npy`), dtype widening (`widen`), the renderer of decoded
//! runs (`decoded`) and merged rows text as pieces to write (`text`), with
//! what they refuse (`error`: [`Base64Error`], [`NpyError`]) and the two
//! forms inline rows come in (`form`: [`Form`]).
//!
//! They know bytes and text, not responses: nothing here imports a format,
//! the plan or the crate's `Error`, which builds on `error` and `form`.

pub(crate) mod base64;
pub(crate) mod decoded;
pub(crate) mod error;
pub(crate) mod form;
pub(crate) mod npy;
pub(crate) mod splice;
pub(crate) mod text;
pub(crate) mod widen;

pub use error::{Base64Error, NpyError};
pub use form::Form;
