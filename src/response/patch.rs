//! What a merge writes, as patches of the decode response: the one interface
//! between the formats, which decide what to write, and the adapters, which
//! write it into a `serde_json::Value` (`merge/value.rs`) or into the
//! decode's text (`bytes/write.rs`) without knowing any kind of rows.
//!
//! There are three patches, and every kind of rows is written with them:
//!
//! - [`Patch::Text`]: merged rows text over a rows string (an inline `.npy`,
//!   a compact object's `data`, SGLang's ids);
//! - [`Patch::Members`]: members of an object set to numbers or names (a
//!   compact object's `shape`, `start` and `dtype`);
//! - [`Patch::Array`]: an array rebuilt from the prefill's values and the
//!   decode's own elements, some of them with number members rewritten (a
//!   payload).
//!
//! A patch finds its value by a [`Path`] from the decode's root, the path
//! the plan read it at. Patches never overlap, and each names a value the
//! plan read (or, for a member or an array that is added, the object that
//! gets it), so applying them cannot fail.

use std::rc::Rc;

use crate::codec::text::Text;
use crate::error::{Location, Side};
use crate::response::view::View;

/// One step of a [`Path`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    /// The member of an object with this key.
    Key(&'static str),
    /// The element of an array at this index.
    Index(usize),
}

/// The most steps a path takes: `[item].choices[i].sgl_ext.routed_experts`
/// and `choices[i].routed_experts.data` take five.
const MAX_HOPS: usize = 6;

/// Where a value is in a response: the steps from its root. Fixed-size, so
/// that a plan of many choices allocates nothing per path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    hops: [Hop; MAX_HOPS],
    len: usize,
}

impl Path {
    /// The response itself.
    pub(crate) const ROOT: Path = Path {
        hops: [Hop::Index(0); MAX_HOPS],
        len: 0,
    };

    /// The path one step further. A format's paths are a few steps deep,
    /// fixed by its code and not by its input: a step beyond [`MAX_HOPS`]
    /// is a bug of the format. Debug builds (every test) stop on it; a
    /// release build drops the step rather than panicking.
    #[must_use]
    pub(crate) fn then(mut self, hop: Hop) -> Path {
        debug_assert!(
            self.len < MAX_HOPS,
            "a path deeper than MAX_HOPS ({MAX_HOPS}): raise it"
        );
        if let Some(slot) = self.hops.get_mut(self.len) {
            *slot = hop;
            self.len += 1;
        }
        self
    }

    /// The member `key` of the value here.
    #[must_use]
    pub(crate) fn key(self, key: &'static str) -> Path {
        self.then(Hop::Key(key))
    }

    /// The element `i` of the array here.
    #[must_use]
    pub(crate) fn index(self, i: usize) -> Path {
        self.then(Hop::Index(i))
    }

    /// The steps, from the root.
    pub(crate) fn hops(&self) -> &[Hop] {
        self.hops.get(..self.len).unwrap_or_default()
    }

    /// The value at this path under `root`, when every step is there.
    pub(crate) fn find<'a, V: View<'a>>(&self, root: V) -> Option<V> {
        self.hops().iter().try_fold(root, |value, hop| match *hop {
            Hop::Key(key) => value.get(key),
            Hop::Index(i) => value.index(i),
        })
    }

    /// Where this path leads in a response on `side`, for errors.
    pub(crate) fn location(&self, side: Side) -> Location {
        self.hops()
            .iter()
            .fold(Location::root(side), |at, hop| match *hop {
                Hop::Key(key) => at.key(key),
                Hop::Index(i) => at.index(i),
            })
    }

    /// The path to the value that holds this one, and the last step: `None`
    /// for the root.
    pub(crate) fn split_last(&self) -> Option<(Path, Hop)> {
        let (&last, _) = self.hops().split_last()?;
        let mut parent = *self;
        parent.len -= 1;
        Some((parent, last))
    }
}

/// Two paths are equal when their steps are: the slots past the last step
/// are not part of the path.
impl PartialEq for Path {
    fn eq(&self, other: &Path) -> bool {
        self.hops() == other.hops()
    }
}

impl Eq for Path {}

/// A value a [`Patch::Members`] sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    /// A non-negative integer.
    Int(u64),
    /// An array of non-negative integers.
    Ints([u64; 3]),
    /// A string, written as it is (the names a format writes need no
    /// escapes).
    Name(&'static str),
}

/// What becomes of one element of the decode's array in a [`Patch::Array`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// It stays as it is.
    Keep,
    /// It is left out.
    Drop,
    /// It stays, with the patch's number members set to these (the last
    /// occurrence of a repeated key, the one a JSON reader keeps; added
    /// when missing).
    Set([u64; 3]),
}

/// One change to the decode response. `P` is a value of the prefill, as the
/// plan read it: the adapter copies it, or reads its rows text.
pub(crate) enum Patch<P> {
    /// Merged rows text over the string at `at`. Its runs name the
    /// prefill's rows text, the string `prefill`, and the decode's own, the
    /// string being written over.
    Text {
        at: Path,
        text: Text,
        prefill: Option<P>,
    },
    /// Members of the object at `at` set: replaced where they are, added
    /// after the last member where they are not.
    Members {
        at: Path,
        members: Vec<(&'static str, Scalar)>,
    },
    /// The array at `at` (a member of an object; added as its last member
    /// when missing, replacing it when null) becomes the values `prefix`,
    /// then the decode's own elements as `items` says, an [`Item::Set`]
    /// setting the members `numbers` names.
    Array {
        at: Path,
        prefix: Rc<[P]>,
        items: Vec<Item>,
        numbers: [&'static str; 3],
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_its_steps_and_splits_at_the_last() {
        let path = Path::ROOT.key("choices").index(2).key("routed_experts");
        assert_eq!(
            path.hops(),
            [
                Hop::Key("choices"),
                Hop::Index(2),
                Hop::Key("routed_experts")
            ]
        );
        let (parent, last) = path.split_last().unwrap();
        // Equal by its steps alone: `parent` still holds the dropped step in
        // a slot past its end.
        assert_eq!(parent, Path::ROOT.key("choices").index(2));
        assert_ne!(parent, path);
        assert_ne!(parent, Path::ROOT.key("choices").index(3));
        assert_ne!(parent, Path::ROOT.key("choice").index(2));
        assert_ne!(Path::ROOT.key("0"), Path::ROOT.index(0));
        assert_eq!(last, Hop::Key("routed_experts"));
        assert_eq!(Path::ROOT.split_last(), None);
        let deepest = (0..MAX_HOPS).fold(Path::ROOT, |p, i| p.index(i));
        assert_eq!(deepest.hops().len(), MAX_HOPS);
        assert_eq!(deepest.hops().last(), Some(&Hop::Index(MAX_HOPS - 1)));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "deeper than MAX_HOPS")]
    fn a_step_beyond_the_deepest_path_is_a_bug_tests_stop_on() {
        let deepest = (0..MAX_HOPS).fold(Path::ROOT, |p, i| p.index(i));
        let _ = deepest.key("routed_experts");
    }
}
