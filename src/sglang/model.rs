//! What SGLang answers, modelled over one truth: a colocated server, and a
//! 1P1D pair whose decode follows either convention (SPEC section 10, F2,
//! F6). The simulator and `pd_stitch::testing` write their SGLang responses
//! with it.

use serde_json::{json, Value};

use super::Convention;
use crate::inline::encode_base64;

/// Which API the responses come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// `/generate`: `meta_info.routed_experts`; an array of outputs for a
    /// batch.
    Generate,
    /// OpenAI `chat/completions`: `sglext.routed_experts`.
    Sglext,
    /// OpenAI, older builds: `choices[0].sgl_ext.routed_experts`.
    SglExt,
}

impl Api {
    /// Every API, in report order.
    pub const ALL: [Api; 3] = [Api::Generate, Api::Sglext, Api::SglExt];

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Api::Generate => "generate",
            Api::Sglext => "sglext",
            Api::SglExt => "sgl_ext",
        }
    }
}

/// The rows' geometry and the expert ids they draw from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Layers.
    pub layers: u64,
    /// Experts per token.
    pub top_k: u64,
    /// Experts per layer: ids are below this.
    pub experts: u64,
}

impl Shape {
    /// Ids per row.
    pub fn width(self) -> u64 {
        self.layers * self.top_k
    }
}

/// One request of an SGLang deployment: its lengths, where its rows start,
/// how the decode answers, and the seed of its truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Draw {
    /// Prompt tokens `P` (at least 1).
    pub prompt: u64,
    /// Generated tokens `C` (at least 1): rows end at `P + C - 1`.
    pub completion: u64,
    /// `routed_experts_start_len`, in `[0, P]`.
    pub start: u64,
    /// How the decode's rows start.
    pub convention: Convention,
    /// The truth's seed.
    pub seed: u64,
}

/// SplitMix64's output from state `z` (the crate's one generator,
/// `sim::rng`): the truth's ids, and the simulator's draws.
pub(super) use crate::sim::rng::splitmix as mix;

impl Draw {
    /// Where the rows end.
    pub fn end(&self) -> u64 {
        self.prompt + self.completion - 1
    }

    /// The true ids of position `x`.
    pub fn truth_row(&self, shape: Shape, x: u64) -> Vec<i32> {
        // Distinct in each layer, as a router's top-k is: the k-th draw of
        // the position's stream.
        let mut k = 0u64;
        let draw = || {
            k += 1;
            mix(self.seed ^ mix(x << 24 ^ k))
        };
        crate::sim::rng::top_k_row(shape.layers, shape.top_k, shape.experts, draw)
            .into_iter()
            .map(|id| i32::try_from(id).unwrap_or(0))
            .collect()
    }

    /// The true ids of positions `[from, to)`, back to back.
    pub fn truth(&self, shape: Shape, from: u64, to: u64) -> Vec<i32> {
        (from..to).flat_map(|x| self.truth_row(shape, x)).collect()
    }

    /// What a decode holds for a prompt position it never ran: not the
    /// truth (SGLang leaves zeros; the model shifts each id, so that a row
    /// taken from there is always wrong).
    fn wrong_row(&self, shape: Shape, x: u64) -> Vec<i32> {
        let experts = i32::try_from(shape.experts.max(1)).unwrap_or(i32::MAX);
        self.truth_row(shape, x)
            .into_iter()
            .map(|id| (id + 1) % experts)
            .collect()
    }

    /// A colocated server's ids: `[start, end)`.
    pub fn colocated(&self, shape: Shape) -> Vec<i32> {
        self.truth(shape, self.start, self.end())
    }

    /// The prefill's ids: `[start, P)`, which it computed.
    pub fn prefill(&self, shape: Shape) -> Vec<i32> {
        self.truth(shape, self.start, self.prompt)
    }

    /// The decode's ids: full-length `[start, end)` with its own (wrong)
    /// prompt rows, or suffix-only `[P, end)`.
    pub fn decode(&self, shape: Shape) -> Vec<i32> {
        let own = self.truth(shape, self.prompt, self.end());
        match self.convention {
            Convention::SuffixOnly => own,
            Convention::FullLength => (self.start..self.prompt)
                .flat_map(|x| self.wrong_row(shape, x))
                .chain(own)
                .collect(),
        }
    }
}

/// The base64 of ids, as SGLang writes them (`int32`, little-endian).
pub fn encode_ids(ids: &[i32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    encode_base64(&bytes)
}

/// The three responses of one SGLang request: prefill, decode, colocated.
#[derive(Clone, Debug, PartialEq)]
pub struct Responses {
    /// The prefill instance's.
    pub prefill: Value,
    /// The decode instance's, before any merge.
    pub decode: Value,
    /// A colocated server's.
    pub colocated: Value,
}

/// The responses of `draws` through `api`: one output each; for
/// [`Api::Generate`] with `batch`, an array of them. The OpenAI APIs take
/// the first draw only (one choice: SPEC Q3).
pub fn responses(api: Api, draws: &[Draw], shape: Shape, batch: bool) -> Responses {
    let one = |d: &Draw, role: Role| -> Value {
        let (completion, ids) = match role {
            Role::Prefill => (1, d.prefill(shape)),
            Role::Decode => (d.completion, d.decode(shape)),
            Role::Colocated => (d.completion, d.colocated(shape)),
        };
        output(api, d.prompt, completion, &encode_ids(&ids), role)
    };
    let side = |role: Role| -> Value {
        if api == Api::Generate && batch {
            Value::Array(draws.iter().map(|d| one(d, role)).collect())
        } else {
            draws.first().map_or(Value::Null, |d| one(d, role))
        }
    };
    Responses {
        prefill: side(Role::Prefill),
        decode: side(Role::Decode),
        colocated: side(Role::Colocated),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Prefill,
    Decode,
    Colocated,
}

/// One output, with the keys SGLang writes around the rows.
fn output(api: Api, prompt: u64, completion: u64, rows: &str, role: Role) -> Value {
    let text = match role {
        Role::Prefill => "",
        _ => "The answer is 42.\n\"quoted\" \u{e9}",
    };
    match api {
        Api::Generate => json!({
            "text": text,
            "output_ids": (0..completion).collect::<Vec<_>>(),
            "meta_info": {
                "id": "req-0",
                "finish_reason": {"type": "length", "length": completion},
                "prompt_tokens": prompt,
                "weight_version": "default",
                "completion_tokens": completion,
                "cached_tokens": 0,
                "routed_experts": rows,
                "e2e_latency": 0.125,
            },
        }),
        Api::Sglext | Api::SglExt => {
            let mut choice = json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            });
            if api == Api::SglExt {
                choice["sgl_ext"] = json!({"routed_experts": rows});
            }
            let mut response = json!({
                "id": "chatcmpl-0",
                "object": "chat.completion",
                "created": 1_764_547_200u64,
                "model": "moe",
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            });
            if api == Api::Sglext {
                response["sglext"] = json!({"routed_experts": rows});
            }
            response
        }
    }
}

/// The model's parts against references that are not its code: SplitMix64's
/// published outputs, the names written out, and the properties the truth
/// must have for a wrong row to show (ids in range, differing by position,
/// by id within a row and by seed, whatever the seed).
#[cfg(test)]
mod tests {
    use super::*;

    /// `mix(z)` is SplitMix64's output from state `z` (Steele, Lea and
    /// Flood; Vigna's `splitmix64.c`): from 0, `mix` of 0, then of one and
    /// two steps of the golden gamma, are its first three outputs.
    #[test]
    fn mix_is_splitmix64() {
        let gamma = 0x9e37_79b9_7f4a_7c15u64;
        let got = [0, gamma, gamma.wrapping_mul(2)].map(mix);
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }

    #[test]
    fn apis_are_named_by_their_slots() {
        assert_eq!(Api::ALL.map(Api::name), ["generate", "sglext", "sgl_ext"]);
    }

    /// `int32` little-endian, then base64: 1 is `01 00 00 00`, -1 is
    /// `ff ff ff ff`.
    #[test]
    fn ids_are_encoded_as_sglang_writes_them() {
        assert_eq!(encode_ids(&[1, -1]), "AQAAAP////8=");
        assert_eq!(encode_ids(&[]), "");
    }

    /// Each role's response: the prompt, its own count of generated tokens
    /// (the prefill's one), its rows, and text only where tokens were
    /// decoded. A prompt of 3 from position 1, 4 generated, rows of 2 ids:
    /// the prefill has `[1, 3)`, the suffix-only decode `[3, 6)`, the
    /// colocated server `[1, 6)`.
    #[test]
    fn each_role_answers_its_counts_rows_and_text() {
        let shape = Shape {
            layers: 1,
            top_k: 2,
            experts: 256,
        };
        let d = Draw {
            prompt: 3,
            completion: 4,
            start: 1,
            convention: Convention::SuffixOnly,
            seed: 7,
        };
        let r = responses(Api::Generate, &[d], shape, false);
        for (response, completion, ids, has_text) in [
            (&r.prefill, 1, d.truth(shape, 1, 3), false),
            (&r.decode, 4, d.truth(shape, 3, 6), true),
            (&r.colocated, 4, d.truth(shape, 1, 6), true),
        ] {
            let meta = &response["meta_info"];
            assert_eq!(meta["prompt_tokens"], 3, "{response}");
            assert_eq!(meta["completion_tokens"], completion, "{response}");
            assert_eq!(meta["routed_experts"], encode_ids(&ids), "{response}");
            let text = response["text"].as_str().unwrap();
            assert_eq!(!text.is_empty(), has_text, "{response}");
        }
    }

    fn draw(seed: u64) -> Draw {
        Draw {
            prompt: 5,
            completion: 40,
            start: 2,
            convention: Convention::FullLength,
            seed,
        }
    }

    /// Every seed, even one with no bit or every bit set, draws rows whose
    /// ids are below `experts` and spread over them, differ from position
    /// to position and from id to id within a row, and differ between
    /// seeds; a wrong row differs from the true one at every id.
    #[test]
    fn truth_rows_are_spread_and_wrong_rows_differ_everywhere() {
        let shape = Shape {
            layers: 4,
            top_k: 4,
            experts: 256,
        };
        for seed in [0, u64::MAX, 0x5c1a_5eed] {
            let d = draw(seed);
            let rows: Vec<Vec<i32>> = (0..d.end()).map(|x| d.truth_row(shape, x)).collect();
            let mut distinct = std::collections::BTreeSet::new();
            for (x, row) in rows.iter().enumerate() {
                assert_eq!(row.len(), 16, "seed {seed}");
                assert!(row.iter().all(|&id| (0..256).contains(&id)), "{row:?}");
                distinct.extend(row.iter().copied());
                let first = row.first().copied();
                assert!(
                    row.iter().any(|&id| Some(id) != first),
                    "seed {seed} at {x}: {row:?}"
                );
                let wrong = d.wrong_row(shape, x as u64);
                assert_eq!(wrong.len(), row.len());
                for (t, w) in row.iter().zip(&wrong) {
                    assert!(
                        t != w && (0..256).contains(w),
                        "seed {seed} at {x}: {t} {w}"
                    );
                }
                if x > 0 {
                    assert_ne!(rows[x - 1], *row, "seed {seed} at {x}");
                }
            }
            // 704 ids drawn from 256: all but a few of them occur.
            assert!(distinct.len() > 200, "seed {seed}: {}", distinct.len());
            let other = draw(seed ^ 1);
            assert_ne!(other.truth_row(shape, 3), rows[3], "seed {seed}");
            assert_eq!(d.truth(shape, 2, 5), rows[2..5].concat());
        }
    }
}
