//! [`Stitch`]: which kinds of rows a merge stitches. It sits below the plan,
//! which reads it, and the entry points, which take it.

use crate::format::places::RowsKind;

/// Which rows a merge stitches: those of the entry point of the same name.
/// The argument of [`Stitcher::merge`](crate::Stitcher::merge),
/// [`Stitcher::merge_bytes`](crate::Stitcher::merge_bytes) and
/// [`Stitcher::merge_bytes_with`](crate::Stitcher::merge_bytes_with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stitch {
    /// Every kind of rows at once, atomically, as
    /// [`merge_routed_experts_for_pd`](crate::merge_routed_experts_for_pd):
    /// what a router calls.
    ForPd,
    /// Rows by handle only, as
    /// [`merge_routed_payload_in_json`](crate::merge_routed_payload_in_json).
    ByHandle,
    /// Inline rows only, as
    /// [`merge_routed_experts_in_json`](crate::merge_routed_experts_in_json).
    Inline,
}

impl Stitch {
    /// [`Stitch::ByHandle`], by its name before 0.4: it selects rows by
    /// handle, of which a payload is only the list. A constant, so that
    /// `Stitch::Payload` still reads in an expression and in a pattern,
    /// with a warning:
    ///
    /// ```compile_fail
    /// #![deny(deprecated)]
    /// let what = pd_stitch::Stitch::Payload;
    /// ```
    ///
    /// ```compile_fail
    /// #![deny(deprecated)]
    /// use pd_stitch::Stitch;
    /// assert!(matches!(Stitch::ByHandle, Stitch::Payload));
    /// ```
    ///
    /// ```
    /// #![allow(deprecated)]
    /// use pd_stitch::Stitch;
    /// let what = Stitch::Payload;
    /// assert!(matches!(what, Stitch::ByHandle) && matches!(Stitch::ByHandle, Stitch::Payload));
    /// ```
    #[deprecated(since = "0.4.0", note = "use `Stitch::ByHandle`")]
    #[allow(non_upper_case_globals)]
    pub const Payload: Stitch = Stitch::ByHandle;

    /// Whether rows of `kind` are stitched.
    pub(crate) fn stitches(self, kind: RowsKind) -> bool {
        match kind {
            RowsKind::Inline => self.inline(),
            RowsKind::ByHandle => self.by_handle(),
            RowsKind::Sglang => self.sglang(),
        }
    }

    /// Whether inline rows are stitched.
    pub(crate) fn inline(self) -> bool {
        matches!(self, Stitch::ForPd | Stitch::Inline)
    }

    /// Whether rows by handle are stitched.
    pub(crate) fn by_handle(self) -> bool {
        matches!(self, Stitch::ForPd | Stitch::ByHandle)
    }

    /// Whether SGLang's rows are stitched: by the P/D merge, so that a
    /// router calls one function whatever its engine.
    pub(crate) fn sglang(self) -> bool {
        matches!(self, Stitch::ForPd)
    }
}
