//! `places()`: the table of where rows and their counts sit
//! (`pd_stitch::places::all()`), as Python reads it, so that a test (or a
//! tool) walks every place the merge stitches without a list of its own.

use pd_stitch::places::{all, Holder, Holds, RowsKind};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Every place of the table, in its order: one dict each, `holder`
/// (`"choice"`, `"choice_member"` or `"member"`), `member` (the key of the
/// object that holds the place, `None` for a choice), `key`, and `holds`
/// (`"inline"`, `"by_handle"`, `"sglang"` or `"count"`).
#[pyfunction]
#[pyo3(name = "places")]
pub(crate) fn table(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for place in all() {
        let (holder, member) = match place.holder {
            Holder::Choice => ("choice", None),
            Holder::ChoiceMember(member) => ("choice_member", Some(member)),
            Holder::Member(member) => ("member", Some(member)),
        };
        let holds = match place.holds {
            Holds::Rows(RowsKind::Inline) => "inline",
            Holds::Rows(RowsKind::ByHandle) => "by_handle",
            Holds::Rows(RowsKind::Sglang) => "sglang",
            Holds::Count => "count",
        };
        let dict = PyDict::new(py);
        dict.set_item("holder", holder)?;
        dict.set_item("member", member)?;
        dict.set_item("key", place.key)?;
        dict.set_item("holds", holds)?;
        out.append(dict)?;
    }
    Ok(out)
}
