"""Save a real three-turn vLLM 0.32 episode as fixtures (run by
`run.sh --save-episode`).

    python save_episode.py --colocated URL --prefill URL --decode URL \
        --router URL --out tests/fixtures/engines/vllm/episode --versions "..."

Turn 0's prompt is 45 tokens; turn t + 1's prompt is turn t's, the
colocated server's completion of it (8 tokens, greedy) and 4 new tokens, as
`pd-stitch probe --turns 3` builds them. Each turn is asked twice: in full
(rows from 0) and, from turn 1 on, as a delta (rows from its common prefix
with the turn before minus one, `routed_experts_prompt_start = L - 1`).
Into OUT/t<T>/ it writes, byte for byte as the servers sent them:

    request.json              the client's request (full)
    colocated.json            the colocated server's answer
    prefill.request.json      what a router sends the prefill (max_tokens 1)
    prefill.json              the prefill's answer
    decode.request.json       what a router sends the decode (S = P)
    decode.json               the decode's answer
    stitched.json             the example router's answer (pd-stitch's merge)

and, for T >= 1, the same with the delta start, each name prefixed `delta-`
(the client's S0 = L - 1 forwarded to the prefill, S = max(P, S0) = P to
the decode). Then OUT/full-context.request.json and OUT/full-context.json:
the whole episode (turn 2's prompt and its completion) as one prompt to the
colocated server, max_tokens 1, with a `cache_salt` of its own so that no
block is a prefix-cache hit. And OUT/manifest.json: the versions, and per
turn its prompt length P, completion length N, common prefix L and starts.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import post, prompt, rows, sampling  # noqa: E402

MAX_TOKENS = 8
FIRST_PROMPT = 45
NEW_TOKENS = 4
TURNS = 3


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else (json.dumps(data) + "\n").encode())


def ask(base, body, path, req_path=None):
    """POST `body` to `base`; the answer's bytes, saved at `path` (and the
    body at `req_path`)."""
    raw = post(base, body)
    if req_path:
        write(req_path, body)
    write(path, raw)
    return raw


def pair(a, body, d, prefix):
    """The turn `body` to the colocated server, to the prefill and the decode
    as the example router sends them, and through the router; each saved
    under `d` with `prefix`. The colocated answer."""
    colocated = json.loads(ask(a.colocated, body, f"{d}/{prefix}colocated.json", f"{d}/{prefix}request.json"))
    pbody = json.loads(json.dumps(body))
    pbody["sampling_params"]["max_tokens"] = 1
    pf = ask(a.prefill, pbody, f"{d}/{prefix}prefill.json", f"{d}/{prefix}prefill.request.json")
    dbody = json.loads(json.dumps(body))
    asked = body["sampling_params"].get("routed_experts_prompt_start", 0)
    dbody["sampling_params"]["routed_experts_prompt_start"] = max(len(body["token_ids"]), asked)
    kv = json.loads(pf).get("kv_transfer_params")
    if kv:
        dbody["kv_transfer_params"] = kv
    decode = json.loads(ask(a.decode, dbody, f"{d}/{prefix}decode.json", f"{d}/{prefix}decode.request.json"))
    stitched = json.loads(ask(a.router, body, f"{d}/{prefix}stitched.json"))
    # What was saved, checked: the pair's rows are the colocated rows, and
    # so are the stitched ones; the tokens are equal.
    c = rows(colocated["choices"][0]["routed_experts"])
    p = rows(json.loads(pf)["choices"][0]["routed_experts"])
    dr = rows(decode["choices"][0]["routed_experts"])
    s = rows(stitched["choices"][0]["routed_experts"])
    assert np.array_equal(np.concatenate([p, dr]), c), f"{d}/{prefix}: prefill ++ decode rows differ from the colocated"
    assert np.array_equal(s, c), f"{d}/{prefix}: stitched rows differ from the colocated"
    for answer in (decode, stitched):
        assert answer["choices"][0]["token_ids"] == colocated["choices"][0]["token_ids"], f"{d}/{prefix}: tokens differ"
    return colocated


def main():
    ap = argparse.ArgumentParser()
    for k in ("colocated", "prefill", "decode", "router", "out", "versions"):
        ap.add_argument(f"--{k}", required=True)
    a = ap.parse_args()
    manifest = {"versions": a.versions, "max_tokens": MAX_TOKENS, "turns": []}
    tokens = prompt(4301, FIRST_PROMPT)
    before = None  # the turn before's prompt ++ completion
    for t in range(TURNS):
        d = os.path.join(a.out, f"t{t}")
        full = {"token_ids": tokens, "sampling_params": sampling(MAX_TOKENS)}
        colocated = pair(a, full, d, "")
        completion = colocated["choices"][0]["token_ids"]
        turn = {"prompt_tokens": len(tokens), "completion_tokens": len(completion)}
        if before is not None:
            common = len(before)
            assert tokens[:common] == before
            start = common - 1
            delta = {"token_ids": tokens, "sampling_params": sampling(MAX_TOKENS, start=start)}
            pair(a, delta, d, "delta-")
            turn.update(common_prefix=common, delta_start=start)
        manifest["turns"].append(turn)
        print(f"saved {d}: {turn}")
        before = tokens + completion
        tokens = before + prompt(4310 + t, NEW_TOKENS)
    body = {"token_ids": before, "sampling_params": sampling(1), "cache_salt": "pd-stitch-episode-fixture"}
    raw = ask(a.colocated, body, f"{a.out}/full-context.json", f"{a.out}/full-context.request.json")
    forward = rows(json.loads(raw)["choices"][0]["routed_experts"])
    assert forward.shape[0] == len(before), f"the forward has {forward.shape[0]} rows for {len(before)} tokens"
    manifest["full_context_tokens"] = len(before)
    write(os.path.join(a.out, "manifest.json"), json.dumps(manifest, indent=1).encode() + b"\n")
    print(f"saved {a.out}/full-context.json ({len(before)} tokens)")


if __name__ == "__main__":
    main()
