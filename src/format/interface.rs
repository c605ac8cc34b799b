//! What a format is, and what the plan asks of a list of them: the
//! [`Format`] trait every kind of rows implements, [`Formats`] over a list
//! of formats (`(first, rest)`, ending in `()`), which the plan calls,
//! [`Spec`], how a merge is made, and [`Level`], where a format's rows are
//! planned. Below every format, so that a format imports only from here and
//! from the files beside it, never from the table (`mod.rs`) that lists it.
//!
//! The plan calls a list's methods in this order, which fixes the order
//! errors are reported in (SPEC section 6, 14; section 10, Q8): the
//! prefill's rows of every choice-level format are read, then their orphans
//! in the decode are looked for; then the same for response-level formats;
//! then each decode choice is planned by each choice-level format, in the
//! list's order; then the response by each response-level format.

use crate::error::Error;
use crate::response::patch::Patch;
use crate::response::view::View;

use super::end_anchored::Counts;
use super::places::{Place, RowsKind};
use super::stitch::Stitch;

/// How a merge is made: the stitched fields, which rows ([`Stitch`]: every
/// kind, or inline or by-handle rows alone), and whether merged layouts are
/// held against the layout rule ([`strict`](super::strict)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec<'f, S> {
    pub(crate) fields: &'f [S],
    pub(crate) what: Stitch,
    pub(crate) strict: bool,
    /// SGLang's `(layers, top_k)`, when the caller knows it.
    pub(crate) row_shape: Option<(u64, u64)>,
    /// The counts that place each decode choice's `.npy` rows, by choice
    /// position, when they come from elsewhere than the decode (a stream's
    /// events, whose `token_ids` are each event's own).
    pub(crate) decode_counts: Option<&'f [Counts]>,
}

/// Where a format's rows are planned: per decode choice, or once per
/// response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// Rows of each element of `choices`.
    Choice,
    /// Rows of the response (or of each output of a batch array).
    Response,
}

/// One kind of rows. Its methods are called by the plan in the order the
/// module's documentation gives; each reads through a [`View`], so that the
/// `serde_json::Value` and the bytes entry points make the same decisions.
pub(crate) trait Format {
    /// Which kind of rows it is, which [`Stitch`] selects by.
    const KIND: RowsKind;
    /// Where its rows are planned.
    const LEVEL: Level;
    /// Where its rows, and the counts that place them, sit: its rows of the
    /// table of places.
    const PLACES: &'static [Place];

    /// What it read of the prefill, validated: what every decode choice or
    /// the decode response is merged with.
    type Prefill<'p, P: View<'p>>;

    /// Reads and validates the prefill's rows: `None` when it has none.
    fn read<'p, S: AsRef<str>, P: View<'p>>(
        spec: &Spec<'_, S>,
        prefill: P,
    ) -> Result<Option<Self::Prefill<'p, P>>, Error>;

    /// The first rows of this kind in `decode`, as an error, when the
    /// prefill has none: the rows' own validation error, or else
    /// [`ErrorDetail::MissingPrefillField`](crate::ErrorDetail::MissingPrefillField).
    fn first_orphan<'d, S: AsRef<str>, D: View<'d>>(spec: &Spec<'_, S>, decode: D)
        -> Option<Error>;

    /// Whether `prefill` has rows of this kind to stitch.
    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(fields: &[S], prefill: V) -> bool;

    /// Readies the prefill's side for the decode's choices, once, after
    /// every format read its prefill and before any choice is planned.
    fn prepare<'p, S: AsRef<str>, P: View<'p>>(
        _prefill: &mut Self::Prefill<'p, P>,
        _spec: &Spec<'_, S>,
    ) -> Result<(), Error> {
        Ok(())
    }

    /// Validates decode choice `i` (an object) and plans what it gets.
    fn plan_choice<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        _prefill: &mut Self::Prefill<'p, P>,
        _spec: &Spec<'_, S>,
        _decode: D,
        _choice: D,
        _i: usize,
        _out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        Ok(())
    }

    /// Validates the decode response and plans what it gets.
    fn plan_response<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        _prefill: &mut Self::Prefill<'p, P>,
        _spec: &Spec<'_, S>,
        _decode: D,
        _out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        Ok(())
    }
}

/// The places of a list of formats: the first format's, then the rest's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlaceList {
    /// The first format's places.
    pub(crate) first: &'static [Place],
    /// The places of the formats after it.
    pub(crate) rest: Option<&'static PlaceList>,
}

impl PlaceList {
    /// Every place of `list`, in its order.
    pub(crate) fn iter(list: Option<&'static PlaceList>) -> impl Iterator<Item = &'static Place> {
        std::iter::successors(list, |list| list.rest).flat_map(|list| list.first)
    }
}

/// A list of formats run in order: `(first, rest)`, ending in `()`. What
/// the plan calls; each method runs the list's formats in order.
pub(crate) trait Formats {
    /// What each format read of the prefill, `None` for one that read
    /// nothing (or is not stitched).
    type Prefills<'p, P: View<'p>>;

    /// Nothing read yet.
    fn none<'p, P: View<'p>>() -> Self::Prefills<'p, P>;

    /// Every place of the list's formats, each format's in the list's
    /// order, as a constant (`None` for no format), so that what is read
    /// from it can be a constant too.
    const PLACES: Option<&'static PlaceList>;

    /// Reads the prefill's rows of the stitched formats of `level`.
    fn read<'p, S: AsRef<str>, P: View<'p>>(
        level: Level,
        spec: &Spec<'_, S>,
        prefill: P,
        read: &mut Self::Prefills<'p, P>,
    ) -> Result<(), Error>;

    /// The first orphan of the stitched formats of `level` the prefill has
    /// no rows of.
    fn orphans<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        level: Level,
        spec: &Spec<'_, S>,
        decode: D,
        read: &Self::Prefills<'p, P>,
    ) -> Result<(), Error>;

    /// Whether a format of `level` read rows.
    fn any<'p, P: View<'p>>(level: Level, read: &Self::Prefills<'p, P>) -> bool;

    /// Whether `prefill` has rows of any format.
    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(fields: &[S], prefill: V) -> bool;

    /// [`Format::prepare`], for each format that read rows.
    fn prepare<'p, S: AsRef<str>, P: View<'p>>(
        read: &mut Self::Prefills<'p, P>,
        spec: &Spec<'_, S>,
    ) -> Result<(), Error>;

    /// [`Format::plan_choice`], for each format that read rows.
    fn plan_choice<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        read: &mut Self::Prefills<'p, P>,
        spec: &Spec<'_, S>,
        decode: D,
        choice: D,
        i: usize,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error>;

    /// [`Format::plan_response`], for each format that read rows.
    fn plan_response<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        read: &mut Self::Prefills<'p, P>,
        spec: &Spec<'_, S>,
        decode: D,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error>;
}

impl Formats for () {
    type Prefills<'p, P: View<'p>> = ();

    fn none<'p, P: View<'p>>() {}

    const PLACES: Option<&'static PlaceList> = None;

    fn read<'p, S: AsRef<str>, P: View<'p>>(
        _: Level,
        _: &Spec<'_, S>,
        _: P,
        _: &mut (),
    ) -> Result<(), Error> {
        Ok(())
    }

    fn orphans<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        _: Level,
        _: &Spec<'_, S>,
        _: D,
        _: &(),
    ) -> Result<(), Error> {
        Ok(())
    }

    fn any<'p, P: View<'p>>(_: Level, _: &()) -> bool {
        false
    }

    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(_: &[S], _: V) -> bool {
        false
    }

    fn prepare<'p, S: AsRef<str>, P: View<'p>>(_: &mut (), _: &Spec<'_, S>) -> Result<(), Error> {
        Ok(())
    }

    fn plan_choice<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        _: &mut (),
        _: &Spec<'_, S>,
        _: D,
        _: D,
        _: usize,
        _: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        Ok(())
    }

    fn plan_response<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        _: &mut (),
        _: &Spec<'_, S>,
        _: D,
        _: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        Ok(())
    }
}

impl<F: Format, R: Formats> Formats for (F, R) {
    type Prefills<'p, P: View<'p>> = (Option<F::Prefill<'p, P>>, R::Prefills<'p, P>);

    fn none<'p, P: View<'p>>() -> Self::Prefills<'p, P> {
        (None, R::none())
    }

    const PLACES: Option<&'static PlaceList> = Some(&PlaceList {
        first: F::PLACES,
        rest: R::PLACES,
    });

    fn read<'p, S: AsRef<str>, P: View<'p>>(
        level: Level,
        spec: &Spec<'_, S>,
        prefill: P,
        read: &mut Self::Prefills<'p, P>,
    ) -> Result<(), Error> {
        if F::LEVEL == level && spec.what.stitches(F::KIND) {
            read.0 = F::read(spec, prefill)?;
        }
        R::read(level, spec, prefill, &mut read.1)
    }

    fn orphans<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        level: Level,
        spec: &Spec<'_, S>,
        decode: D,
        read: &Self::Prefills<'p, P>,
    ) -> Result<(), Error> {
        if F::LEVEL == level && spec.what.stitches(F::KIND) && read.0.is_none() {
            if let Some(err) = F::first_orphan(spec, decode) {
                return Err(err);
            }
        }
        R::orphans(level, spec, decode, &read.1)
    }

    fn any<'p, P: View<'p>>(level: Level, read: &Self::Prefills<'p, P>) -> bool {
        (F::LEVEL == level && read.0.is_some()) || R::any(level, &read.1)
    }

    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(fields: &[S], prefill: V) -> bool {
        F::has_rows(fields, prefill) || R::has_rows(fields, prefill)
    }

    fn prepare<'p, S: AsRef<str>, P: View<'p>>(
        read: &mut Self::Prefills<'p, P>,
        spec: &Spec<'_, S>,
    ) -> Result<(), Error> {
        if let Some(prefill) = &mut read.0 {
            F::prepare(prefill, spec)?;
        }
        R::prepare(&mut read.1, spec)
    }

    fn plan_choice<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        read: &mut Self::Prefills<'p, P>,
        spec: &Spec<'_, S>,
        decode: D,
        choice: D,
        i: usize,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        if let Some(prefill) = &mut read.0 {
            F::plan_choice(prefill, spec, decode, choice, i, out)?;
        }
        R::plan_choice(&mut read.1, spec, decode, choice, i, out)
    }

    fn plan_response<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        read: &mut Self::Prefills<'p, P>,
        spec: &Spec<'_, S>,
        decode: D,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        if let Some(prefill) = &mut read.0 {
            F::plan_response(prefill, spec, decode, out)?;
        }
        R::plan_response(&mut read.1, spec, decode, out)
    }
}
