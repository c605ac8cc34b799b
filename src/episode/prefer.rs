//! [`Prefer`]: which row a position keeps when turns overlap.

/// Which turn's row a position of the episode keeps when several turns
/// computed it.
///
/// Either way the rows that meet are compared, and the positions where they
/// differ are listed per turn ([`TurnReport`](super::TurnReport)): re-prefill,
/// prefix caching and weight updates make them differ legitimately, so a
/// difference is reported, not refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Prefer {
    /// A position keeps the first row written to it: the rows the policy
    /// was sampled with (prime-rl, NeMo-RL, Miles' "additional R3", slime
    /// with a start). A position no earlier turn computed (the boundary: the
    /// last token of the turn continued, never fed back there) takes the
    /// new turn's.
    #[default]
    Earliest,
    /// A turn's rows replace those already there: every position from the
    /// last turn that computed it (verl, SkyRL, Miles by default, slime with
    /// start 0).
    Latest,
}
