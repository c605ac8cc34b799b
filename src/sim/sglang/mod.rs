//! SGLang under simulation: a model of the engine's answers ([`model`]),
//! checked against its saved real answers, and a simulated run over it
//! ([`run`]).

pub mod model;
pub mod run;
