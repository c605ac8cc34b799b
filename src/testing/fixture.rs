//! The committed response pairs, `tests/fixtures/pairs/`: the seed example
//! and each error case, embedded with the files their segments name.

use serde_json::Value;

use crate::gather::Store;

/// A committed response pair: `prefill.json` and `decode.json` of a case
/// under `tests/fixtures/pairs/`, with the files their segments name.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// The case's name.
    pub name: &'static str,
    /// What it shows.
    pub about: &'static str,
    /// The prefill response.
    pub prefill: Value,
    /// The decode response.
    pub decode: Value,
    /// The files.
    pub store: Store,
}

macro_rules! fixtures {
    ($($name:literal: $about:literal, [$($file:literal),*];)*) => {
        /// The names of the committed fixtures.
        pub const FIXTURES: &[&str] = &[$($name),*];

        /// The committed fixture `name` (see [`FIXTURES`]), or `None`.
        pub fn fixture(name: &str) -> Option<Fixture> {
            match name {
                $($name => {
                    #[allow(unused_mut)] // fixtures without files
                    let mut store = Store::memory();
                    $(let _ = store.write($file, include_bytes!(concat!("../../tests/fixtures/pairs/", $name, "/", $file)).to_vec());)*
                    Some(Fixture {
                        name: $name,
                        about: $about,
                        prefill: serde_json::from_str(include_str!(concat!("../../tests/fixtures/pairs/", $name, "/prefill.json"))).ok()?,
                        decode: serde_json::from_str(include_str!(concat!("../../tests/fixtures/pairs/", $name, "/decode.json"))).ok()?,
                        store,
                    })
                })*
                _ => None,
            }
        }
    };
}

fixtures! {
    "seed": "prefill rows [0, 3) and decode rows [2, 5) of uint16 (2, 4), two choices, one preempted", ["p.bin", "d.bin", "m.bin"];
    "inline": "the seed example as inline compact rows", [];
    "missing-prefill-rows": "decode rows by handle, prefill without any: MissingPrefillField", [];
    "bad-rows": "a decode segment with rows -1: Integer", [];
    "gap": "inline decode rows starting after the cut: Coverage", [];
}
