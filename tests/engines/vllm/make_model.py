"""Make the tiny random-weight MoE the engine test serves.

A Qwen3-MoE of 3 layers, hidden 128, 8 experts, top-2, vocabulary 512,
float32, weights drawn from a fixed seed. No hub is needed: the config and
the weights are made here and written with `save_pretrained`.

    python make_model.py OUT_DIR

Writes OUT_DIR/config.json, OUT_DIR/model.safetensors (about 6 MB) and
OUT_DIR/generation_config.json. The same seed gives the same weights on the
same torch version, but the test does not depend on that: it compares a P/D
pair with a colocated server serving the same directory.
"""

import sys

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SEED = 33


def config() -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )


def main() -> None:
    out = sys.argv[1]
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(config()).to(torch.float32)
    # The default init (std 0.02) gives near-uniform router logits; a wider
    # one makes the experts' choice depend on the token, as in a real model.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.normal_(0.0, 0.5)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"made {out}: {n} parameters, seed {SEED}")


if __name__ == "__main__":
    main()
