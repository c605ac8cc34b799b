//! What can be simulated: the engines, and the wire forms each answers
//! rows in.

use std::fmt;
use std::str::FromStr;

use crate::algebra::Dtype;
use crate::format::sglang::Api;

/// An engine whose deployments the simulator plays (what `pd-stitch
/// simulate --engine` takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// vLLM: rows by handle, inline compact, and vLLM 0.32's counted `.npy`.
    Vllm,
    /// SGLang: `meta_info`, `sglext` and `sgl_ext` rows, placed by counts.
    Sglang,
    /// NVIDIA Dynamo: compact rows on its token API, `nvext` on its OpenAI
    /// API.
    Dynamo,
}

impl Engine {
    /// Every engine, in report order.
    pub const ALL: [Engine; 3] = [Engine::Vllm, Engine::Sglang, Engine::Dynamo];

    /// The name the command takes: `vllm`, `sglang` or `dynamo`.
    pub const fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::Dynamo => "dynamo",
        }
    }

    /// The engine's own spelling, in reports.
    pub const fn label(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
            Engine::Dynamo => "Dynamo",
        }
    }

    /// The wire forms it answers rows in, in report order.
    pub const fn wires(self) -> &'static [Wire] {
        match self {
            Engine::Vllm => &[Wire::ByHandle, Wire::Compact, Wire::Npy],
            Engine::Sglang => &[
                Wire::Sglang(Api::Generate),
                Wire::Sglang(Api::ResponseExt),
                Wire::Sglang(Api::ChoiceExt),
            ],
            Engine::Dynamo => &[Wire::DynamoToken, Wire::DynamoOpenAi],
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> Result<Engine, String> {
        Engine::ALL
            .into_iter()
            .find(|engine| engine.name() == s)
            .ok_or_else(|| format!("unknown engine {s:?}: expected vllm, sglang or dynamo"))
    }
}

/// A wire form of rows: where an engine's responses carry them and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// vLLM: `payload` segments pointing into files.
    ByHandle,
    /// vLLM (and prime-rl): inline compact `routed_experts`, with a start.
    Compact,
    /// vLLM 0.32: an inline `.npy` per choice, placed by the choice's
    /// `token_ids` and `usage.prompt_tokens`.
    Npy,
    /// SGLang, through one of its APIs.
    Sglang(Api),
    /// Dynamo's token API: compact rows per choice, from the start asked.
    DynamoToken,
    /// Dynamo's OpenAI API: compact rows once per response at
    /// `nvext.routed_experts`, from 0.
    DynamoOpenAi,
}

impl Wire {
    /// Every wire, in report order.
    pub const ALL: [Wire; 8] = [
        Wire::ByHandle,
        Wire::Compact,
        Wire::Npy,
        Wire::Sglang(Api::Generate),
        Wire::Sglang(Api::ResponseExt),
        Wire::Sglang(Api::ChoiceExt),
        Wire::DynamoToken,
        Wire::DynamoOpenAi,
    ];

    /// The engine that answers in it.
    pub const fn engine(self) -> Engine {
        match self {
            Wire::ByHandle | Wire::Compact | Wire::Npy => Engine::Vllm,
            Wire::Sglang(_) => Engine::Sglang,
            Wire::DynamoToken | Wire::DynamoOpenAi => Engine::Dynamo,
        }
    }

    /// The name used in reports (SGLang's: its API's, the key that holds
    /// the rows).
    pub fn name(self) -> &'static str {
        match self {
            Wire::ByHandle => "by-handle",
            Wire::Compact => "inline compact",
            Wire::Npy => "inline npy",
            Wire::Sglang(api) => api.name(),
            Wire::DynamoToken => "token api",
            Wire::DynamoOpenAi => "openai nvext",
        }
    }

    /// The stem of its files' names (`{stem}.merged.json`).
    pub fn file_stem(self) -> &'static str {
        match self {
            Wire::ByHandle => "by-handle",
            Wire::Compact => "compact",
            Wire::Npy => "npy",
            Wire::Sglang(api) => api.name(),
            Wire::DynamoToken => "token",
            Wire::DynamoOpenAi => "nvext",
        }
    }

    /// The rows' element type on this wire for a request of `dtype`:
    /// SGLang's are always `int32`.
    pub const fn dtype(self, dtype: Dtype) -> Dtype {
        match self {
            Wire::Sglang(_) => Dtype::Int32,
            _ => dtype,
        }
    }

    /// Whether it answers every choice of a request (else the first only:
    /// the OpenAI APIs' rows are one per response).
    pub const fn answers_every_choice(self) -> bool {
        !matches!(self, Wire::Sglang(_) | Wire::DynamoOpenAi)
    }

    /// Whether its rows start where the request asks (Dynamo's OpenAI
    /// API takes no start: its rows start at 0).
    pub const fn takes_a_start(self) -> bool {
        !matches!(self, Wire::DynamoOpenAi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_and_wires_are_named_and_parted() {
        assert_eq!(Engine::ALL.map(Engine::name), ["vllm", "sglang", "dynamo"]);
        for engine in Engine::ALL {
            assert_eq!(engine.name().parse::<Engine>(), Ok(engine));
            assert_eq!(engine.to_string(), engine.name());
            assert!(engine.wires().iter().all(|w| w.engine() == engine));
        }
        assert!("tgi"
            .parse::<Engine>()
            .unwrap_err()
            .contains("expected vllm"));
        let all: Vec<Wire> = Engine::ALL
            .iter()
            .flat_map(|e| e.wires())
            .copied()
            .collect();
        assert_eq!(all, Wire::ALL);
        let stems: std::collections::BTreeSet<_> = Wire::ALL.map(Wire::file_stem).into();
        assert_eq!(stems.len(), Wire::ALL.len());
        let names: std::collections::BTreeSet<_> = Wire::ALL.map(Wire::name).into();
        assert_eq!(names.len(), Wire::ALL.len());
        assert_eq!(
            Engine::Vllm
                .wires()
                .iter()
                .map(|w| w.name())
                .collect::<Vec<_>>(),
            ["by-handle", "inline compact", "inline npy"]
        );
        assert_eq!(
            Wire::Sglang(Api::Generate).dtype(Dtype::Uint8),
            Dtype::Int32
        );
        assert_eq!(Wire::Npy.dtype(Dtype::Uint16), Dtype::Uint16);
    }
}
