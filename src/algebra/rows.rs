//! Half-open intervals of token positions.
//!
//! A [`Rows`] is the set of positions `[start, end)` over `u64`. It is the only
//! interval type in the crate: segments, cuts, coverage and gaps are all stated
//! in it.
//!
//! # Invariant
//!
//! `start <= end`, always. Every constructor checks it (or the arithmetic that
//! would produce it) and returns `None` instead of wrapping, so a value of this
//! type never describes positions past `u64::MAX`. An interval may be empty
//! (`start == end`): a writer may emit a segment of zero rows, and it still has a
//! place (`start`) that decides whether a cut drops it.

use std::fmt;

/// The positions `[start, end)`, with `start <= end`.
///
/// ```
/// use pd_stitch::algebra::Rows;
///
/// let prompt = Rows::new(0, 17).unwrap();
/// let decode = Rows::with_len(16, 5).unwrap(); // [16, 21)
/// assert_eq!(prompt.intersection(decode), Rows::new(16, 17));
/// assert_eq!(decode.clip_from(prompt.end()), Rows::new(17, 21));
/// assert_eq!(Rows::with_len(u64::MAX, 1), None); // would pass u64::MAX
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rows {
    start: u64,
    end: u64,
}

impl Rows {
    /// `[start, end)`, or `None` when `start > end`.
    pub const fn new(start: u64, end: u64) -> Option<Rows> {
        if start <= end {
            Some(Rows { start, end })
        } else {
            None
        }
    }

    /// `[start, start + len)`, or `None` when `start + len` overflows `u64`.
    pub const fn with_len(start: u64, len: u64) -> Option<Rows> {
        match start.checked_add(len) {
            Some(end) => Some(Rows { start, end }),
            None => None,
        }
    }

    /// The first position (or, when empty, where the interval sits).
    pub const fn start(self) -> u64 {
        self.start
    }

    /// One past the last position.
    pub const fn end(self) -> u64 {
        self.end
    }

    /// The number of positions, `end - start`.
    pub const fn len(self) -> u64 {
        // Cannot underflow: the invariant is start <= end.
        self.end - self.start
    }

    /// Whether the interval holds no position.
    pub const fn is_empty(self) -> bool {
        self.start == self.end
    }

    /// Whether `position` lies in `[start, end)`.
    pub const fn contains(self, position: u64) -> bool {
        self.start <= position && position < self.end
    }

    /// The positions in both intervals, or `None` when they share none.
    pub fn intersection(self, other: Rows) -> Option<Rows> {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        if start < end {
            Some(Rows { start, end })
        } else {
            None
        }
    }

    /// The positions of `self` that are not in `other`, as the part before
    /// `other` and the part after it; each is `None` when it holds no position.
    ///
    /// ```
    /// use pd_stitch::algebra::Rows;
    ///
    /// let all = Rows::new(0, 10).unwrap();
    /// let hole = Rows::new(3, 5).unwrap();
    /// assert_eq!(all.difference(hole), (Rows::new(0, 3), Rows::new(5, 10)));
    /// assert_eq!(hole.difference(all), (None, None));
    /// ```
    pub fn difference(self, other: Rows) -> (Option<Rows>, Option<Rows>) {
        if self.intersection(other).is_none() {
            return (self.non_empty(), None);
        }
        // They overlap, so other.start < self.end and other.end > self.start.
        let before = Rows {
            start: self.start,
            end: other.start.max(self.start),
        };
        let after = Rows {
            start: other.end.min(self.end),
            end: self.end,
        };
        (before.non_empty(), after.non_empty())
    }

    /// The part of `self` at positions `>= cut`: `None` when `end <= cut` (so an
    /// empty interval at `cut` or before it is dropped), `[max(start, cut), end)`
    /// otherwise.
    ///
    /// This is the rule the P/D merge applies to the decode side: everything the
    /// prefill computed (positions below `cut`) is taken from the prefill.
    pub fn clip_from(self, cut: u64) -> Option<Rows> {
        if self.end <= cut {
            None
        } else {
            Some(Rows {
                start: self.start.max(cut),
                end: self.end,
            })
        }
    }

    fn non_empty(self) -> Option<Rows> {
        if self.is_empty() {
            None
        } else {
            Some(self)
        }
    }
}

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_reject_what_would_break_the_invariant() {
        assert_eq!(Rows::new(3, 2), None);
        assert_eq!(Rows::with_len(u64::MAX, 1), None);
        assert_eq!(Rows::with_len(u64::MAX, 0), Rows::new(u64::MAX, u64::MAX));
        let full = Rows::new(0, u64::MAX).unwrap();
        assert_eq!(full.len(), u64::MAX);
        assert!(!full.contains(u64::MAX));
    }

    #[test]
    fn clip_from_drops_empty_intervals_at_or_before_the_cut_only() {
        let empty = Rows::new(5, 5).unwrap();
        assert_eq!(empty.clip_from(4), Some(empty));
        assert_eq!(empty.clip_from(5), None);
        assert_eq!(empty.clip_from(6), None);
        assert_eq!(Rows::new(2, 5).unwrap().clip_from(5), None);
        assert_eq!(Rows::new(2, 5).unwrap().clip_from(4), Rows::new(4, 5));
        assert_eq!(Rows::new(2, 5).unwrap().clip_from(0), Rows::new(2, 5));
    }

    #[test]
    fn display_is_half_open() {
        assert_eq!(Rows::new(1, 4).unwrap().to_string(), "[1, 4)");
    }
}
