"""Save real vLLM 0.32 answers as fixtures (run by `run.sh --save-fixtures`).

    python save_fixtures.py --colocated URL --prefill URL --decode URL \
        --router URL --out tests/fixtures/engines/vllm --versions "..."

For each prompt (45 and 70 tokens, and 1 token as far as the engine allows)
it writes, into OUT/p<P>/, each request beside its answer, byte for byte as
the server sent it:

    request.json           the client's request (greedy, 10 tokens)
    colocated.json         the colocated server's answer
    prefill.request.json   what a router sends the prefill (max_tokens 1)
    prefill.json           the prefill's answer
    decode.request.json    what a router sends the decode (S = P)
    decode.json            the decode's answer
    decode-s<B>.json       the decode sent S = B, a block boundary below P
                           at or above the tokens it loads (+ .request.json)
    colocated.sse          the colocated server's stream (no stream_options)
    decode.sse             the decode's stream, S = P (no stream_options)
    decode-usage.sse       the same with stream_options.include_usage
    n2.request.json, colocated-n2.json, prefill-n2.json, decode-n2.json
                           the same prompt sampled with n = 2 (seed fixed);
                           the prefill sent n = 2 and max_tokens 1

and into OUT/turn2/ a second turn (turn 1's prompt of 45 tokens, its
completion, 7 new tokens) asked with routed_experts_prompt_start = 45:
request.json, colocated.json, prefill.request.json, prefill.json (the
client's S0 forwarded), decode.request.json, decode.json (S = P).

The 1-token prompt has only request, colocated, colocated.sse, prefill
and the colocated n = 2 answer: ExampleConnector takes a 1-token prompt as
cached, -32 tokens of it (`align_to_block_size(0)`), as soon as any prompt
of at most 33 tokens has gone through a prefill, and the engine that loads
it dies (see README.md there). So it goes first, on an empty KV directory.

Also OUT/manifest.json: the versions, the model config, the prompts.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import assemble_stream, loaded_tokens, post, prompt, rows, sampling  # noqa: E402

MAX_TOKENS = 10


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else (json.dumps(data) + "\n").encode())


def ask(base, body, path=None, req_path=None):
    raw = post(base, body)
    if req_path:
        write(req_path, body)
    if path:
        write(path, raw)
    return raw


def decode_body(body, pf_raw, start):
    d = json.loads(json.dumps(body))
    d["sampling_params"]["routed_experts_prompt_start"] = start
    kv = json.loads(pf_raw).get("kv_transfer_params")
    if kv:
        d["kv_transfer_params"] = kv
    return d


def prefill_body(body):
    p = json.loads(json.dumps(body))
    p["sampling_params"]["max_tokens"] = 1
    p.pop("stream", None)
    p.pop("stream_options", None)
    return p


def one_prompt(a, length, seed, out):
    d = os.path.join(out, f"p{length}")
    toks = prompt(seed, length)
    body = {"token_ids": toks, "sampling_params": sampling(MAX_TOKENS)}
    write(f"{d}/request.json", body)
    colo = json.loads(ask(a.colocated, body, f"{d}/colocated.json"))
    ask(a.colocated, dict(body, stream=True), f"{d}/colocated.sse")
    pbody = prefill_body(body)
    pf = ask(a.prefill, pbody, f"{d}/prefill.json", f"{d}/prefill.request.json")
    n2 = {"token_ids": toks, "sampling_params": sampling(MAX_TOKENS, temperature=1.0, seed=seed, n=2)}
    write(f"{d}/n2.request.json", n2)
    ask(a.colocated, n2, f"{d}/colocated-n2.json")
    if length == 1:
        # ExampleConnector takes any 1-token prompt as cached (-32 tokens)
        # once a prompt of at most 33 tokens has been prefilled: this
        # prefill was the first (run.sh empties the KV directory), a second
        # one, or a decode, would kill its engine.
        return {"prompt_tokens": length,
                "decode": "none: ExampleConnector's consumer crashes on a 1-token prompt"}
    pf2 = ask(a.prefill, prefill_body(n2), f"{d}/prefill-n2.json")
    ask(a.decode, decode_body(body, pf, length), f"{d}/decode.json", f"{d}/decode.request.json")
    ask(a.decode, decode_body(dict(body, stream=True), pf, length), f"{d}/decode.sse")
    ask(a.decode, decode_body(dict(body, stream=True, stream_options={"include_usage": True}), pf, length),
        f"{d}/decode-usage.sse")
    ask(a.decode, decode_body(n2, pf2, length), f"{d}/decode-n2.json")
    b = loaded_tokens(length)
    facts = {"prompt_tokens": length, "loaded_by_decode": b}
    if 0 < b < length:
        ask(a.decode, decode_body(body, pf, b), f"{d}/decode-s{b}.json", f"{d}/decode-s{b}.request.json")
        facts["decode_below_p"] = f"decode-s{b}.json"
    # A sanity check of what was saved: the stitched rows are the colocated.
    c_rows = rows(colo["choices"][0]["routed_experts"])
    p_rows = rows(json.loads(pf)["choices"][0]["routed_experts"])
    d_rows = rows(json.loads(open(f"{d}/decode.json", "rb").read())["choices"][0]["routed_experts"])
    assert (p_rows == c_rows[:length]).all() and (d_rows == c_rows[length:]).all(), "P/D rows differ"
    s_resp, _ = assemble_stream(open(f"{d}/decode.sse", "rb").read())
    assert (rows(s_resp["choices"][0]["routed_experts"]) == d_rows).all(), "streamed decode rows differ"
    return facts


def turn2(a, out):
    d = os.path.join(out, "turn2")
    p1 = prompt(945, 45)
    t1 = json.loads(post(a.colocated, {"token_ids": p1, "sampling_params": sampling(MAX_TOKENS)}))
    p2 = p1 + t1["choices"][0]["token_ids"] + prompt(946, 7)
    body = {"token_ids": p2, "sampling_params": sampling(MAX_TOKENS, start=len(p1))}
    write(f"{d}/request.json", body)
    ask(a.colocated, body, f"{d}/colocated.json")
    pbody = prefill_body(body)
    pf = ask(a.prefill, pbody, f"{d}/prefill.json", f"{d}/prefill.request.json")
    ask(a.decode, decode_body(body, pf, len(p2)), f"{d}/decode.json", f"{d}/decode.request.json")
    return {"turn1_prompt_tokens": len(p1), "prompt_tokens": len(p2), "routed_experts_prompt_start": len(p1)}


def main():
    ap = argparse.ArgumentParser()
    for k in ("colocated", "prefill", "decode", "router", "out", "versions"):
        ap.add_argument(f"--{k}", required=True)
    a = ap.parse_args()
    manifest = {"versions": a.versions, "block_size": 32, "max_tokens": MAX_TOKENS, "prompts": {}}
    model_config = os.path.join("target/engines/vllm/model/config.json")
    if os.path.exists(model_config):
        manifest["model_config"] = json.load(open(model_config))
    # The 1-token prompt first, on an empty KV directory (see one_prompt).
    for length, seed in ((1, 901), (45, 945), (70, 970)):
        manifest["prompts"][f"p{length}"] = one_prompt(a, length, seed, a.out)
        print(f"saved {a.out}/p{length}")
    manifest["prompts"]["turn2"] = turn2(a, a.out)
    print(f"saved {a.out}/turn2")
    write(os.path.join(a.out, "manifest.json"), json.dumps(manifest, indent=1).encode() + b"\n")


if __name__ == "__main__":
    main()
