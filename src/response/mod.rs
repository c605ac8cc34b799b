//! A response as the formats read it and the adapters write it, below both:
//! the field names ([`fields`]); [`view::View`], the read-only window
//! either representation offers; typed values read out of it with their
//! locations ([`json`]); where a response's choices sit
//! ([`paths`]); and what a merge writes into the decode ([`patch`]).

pub(crate) mod fields;
pub(crate) mod json;
pub(crate) mod patch;
pub(crate) mod paths;
pub(crate) mod view;
