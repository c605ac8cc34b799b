//! What the scanner records of a response: the paths a merge reads, as
//! the table of places ([`crate::format`]) names them, and nothing deeper.

use crate::format as places;

/// What to record of a value and its children.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    /// The response: its members, and `choices` one level further.
    Root,
    /// `choices`: its elements, as choices.
    Choices,
    /// One choice: its members, those that hold rows (by [`places`]) in
    /// full, those that are objects holding places one level further.
    Choice,
    /// An element of a response that is an array (an SGLang batch): as the
    /// response's members.
    Item,
    /// An object that holds places (by [`places`]): its members; those that
    /// hold rows in full (an object of compact rows has members of its
    /// own), the others not their children.
    Members,
    /// Everything below.
    Deep,
    /// The value itself, not its children.
    Opaque,
    /// Nothing: validate only.
    Skip,
}

impl Record {
    /// What to record of the member `key` of an object recorded as `self`.
    pub(super) fn member(self, key: &[u8]) -> Record {
        match self {
            Record::Root | Record::Item if key == b"choices" => Record::Choices,
            // What holds rows or their counts, as the table of places says.
            Record::Root | Record::Item if places::is_member_holder(key) => Record::Members,
            Record::Choice if places::is_choice_rows(key) => Record::Deep,
            Record::Choice if places::is_choice_member_holder(key) => Record::Members,
            Record::Members if places::is_member_rows(key) => Record::Deep,
            Record::Root | Record::Item | Record::Choice | Record::Members => Record::Opaque,
            Record::Deep => Record::Deep,
            Record::Choices | Record::Opaque | Record::Skip => Record::Skip,
        }
    }

    /// What to record of an element of an array recorded as `self`.
    pub(super) fn element(self) -> Record {
        match self {
            Record::Root => Record::Item,
            Record::Choices => Record::Choice,
            Record::Deep => Record::Deep,
            _ => Record::Skip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Record;

    /// Rows in an object that holds places are recorded in full, as a
    /// choice's are: compact rows there are an object whose members the
    /// merge reads. Recorded as the value alone, the bytes path found no
    /// `data` where the `Value` path did.
    #[test]
    fn rows_held_by_a_member_object_are_recorded_in_full() {
        let members = Record::Root.member(b"meta_info");
        assert!(members == Record::Members);
        assert!(members.member(b"routed_experts") == Record::Deep);
        assert!(members.member(b"prompt_tokens") == Record::Opaque);
        assert!(Record::Choice.member(b"routed_experts") == Record::Deep);
        let sgl_ext = Record::Choice.member(b"sgl_ext");
        assert!(sgl_ext == Record::Members && sgl_ext.member(b"routed_experts") == Record::Deep);
    }
}
