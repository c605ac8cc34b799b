//! Where in a response an error is: a side and a JSON path.

use std::fmt;

/// Which response a [`Location`] is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The prefill instance's response.
    Prefill,
    /// The decode instance's response (the one the merge writes into).
    Decode,
    /// A response read on its own, by [`gather`](crate::gather) or
    /// [`check`](crate::gather::check).
    Response,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Prefill => "prefill",
            Side::Decode => "decode",
            Side::Response => "response",
        })
    }
}

/// One step of a JSON path: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `.key` (or the first key of a path).
    Key(String),
    /// `[index]`.
    Index(usize),
}

/// A place in one of the two responses: a side and a JSON path from its root.
///
/// Displays as `decode choices[1].payload[3].rows`; the root itself displays
/// as `decode response` (or `response`, for a response read on its own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    side: Side,
    path: Vec<Step>,
}

impl Location {
    /// The root of the response of `side`.
    pub fn root(side: Side) -> Location {
        Location {
            side,
            path: Vec::new(),
        }
    }

    /// This location extended by the object key `key`.
    pub fn key(mut self, key: &str) -> Location {
        self.path.push(Step::Key(key.to_owned()));
        self
    }

    /// This location extended by the array index `index`.
    pub fn index(mut self, index: usize) -> Location {
        self.path.push(Step::Index(index));
        self
    }

    /// The side.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The steps from the root.
    pub fn path(&self) -> &[Step] {
        &self.path
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.side)?;
        if self.path.is_empty() && self.side != Side::Response {
            return f.write_str(" response");
        }
        for (i, step) in self.path.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, " {key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) if i == 0 => write!(f, " [{index}]")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// The root of each side's response, for errors about a response as a whole.
pub(crate) fn root_of(side: Side) -> &'static Location {
    static PREFILL: Location = Location {
        side: Side::Prefill,
        path: Vec::new(),
    };
    static DECODE: Location = Location {
        side: Side::Decode,
        path: Vec::new(),
    };
    static RESPONSE: Location = Location {
        side: Side::Response,
        path: Vec::new(),
    };
    match side {
        Side::Prefill => &PREFILL,
        Side::Decode => &DECODE,
        Side::Response => &RESPONSE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_read_like_json_paths() {
        let at = Location::root(Side::Decode)
            .key("choices")
            .index(1)
            .key("payload")
            .index(3)
            .key("rows");
        assert_eq!(at.to_string(), "decode choices[1].payload[3].rows");
        assert_eq!(
            Location::root(Side::Prefill).to_string(),
            "prefill response"
        );
    }

    /// `<side> <json path>`: the path's first step follows the side after a
    /// space whether it is a key or an index, and a later index has none;
    /// a response read on its own is just `response` at its root.
    #[test]
    fn a_path_may_start_with_an_index() {
        let at = Location::root(Side::Response).index(2).key("rows").index(0);
        assert_eq!(at.to_string(), "response [2].rows[0]");
        assert_eq!(
            at.path(),
            [Step::Index(2), Step::Key("rows".into()), Step::Index(0)]
        );
        assert_eq!(Location::root(Side::Response).to_string(), "response");
        assert_eq!(
            Location::root(Side::Decode).index(0).to_string(),
            "decode [0]"
        );
    }
}
