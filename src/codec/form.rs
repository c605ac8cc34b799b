//! [`Form`]: the two inline forms of `routed_experts`.

use std::fmt;

/// The two inline forms of `routed_experts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// `{"data", "shape", "start", "dtype"}`: an object.
    Compact,
    /// The base64 of a `.npy` file: a string.
    Npy,
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Form::Compact => "compact (an object)",
            Form::Npy => "npy (a string)",
        })
    }
}
