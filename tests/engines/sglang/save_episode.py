"""Save a real three-turn SGLang 0.5.23 episode as fixtures (run by
`SGLANG_SAVE_EPISODE=1 run.sh`).

    python save_episode.py --colocated URL --prefill URL --decode URL \
        --router URL --bootstrap-port PORT --out tests/fixtures/engines/sglang/episode

Turn 0's prompt is 45 tokens; turn t + 1's prompt is turn t's, the
colocated server's completion of it (8 tokens, greedy) and 4 new tokens, as
`pd-stitch probe --turns 3` builds them. With `--from-probe SEED:EPISODE`
the first prompt and the tokens added between turns are those of that
episode of `pd-stitch probe --seed SEED --prompt-len 2..230` (vocabulary
512), to keep an episode probe reported. Each turn is asked twice: in full
(rows from 0) and, from turn 1 on, as a delta (rows from its common prefix
with the turn before minus one, `routed_experts_start_len = L - 1`). Into
OUT/t<T>/ it writes, byte for byte as the servers sent them:

    request.json              the client's request (full)
    colocated.json            the colocated server's answer
    prefill.request.json      the body the prefill was sent (bootstrap
                              fields added, not streamed)
    prefill.json              the prefill's answer
    decode.request.json       the body the decode was sent, at the same time,
                              with routed_experts_start_len = P (as the
                              example router sends it)
    decode.json               the decode's answer
    stitched.json             the example router's answer (pd-stitch's merge)

and, for T >= 1, the same with the delta start, each name prefixed `delta-`
(the client's start reaches the prefill; the decode is sent P). Then
OUT/full-context.request.json and OUT/full-context.json: the whole episode
(turn 2's prompt and its completion) as one prompt to the colocated server,
one token, with a `cache_salt` of its own. And OUT/manifest.json: per turn
its prompt length P, completion length N, common prefix L and starts, and
the positions where the pair's rows differ from the colocated rows (none is
expected; they are noted, not refused, so that the fixture shows the engine
as it is).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from drive import gen_body, post, post_pair, rows_of  # noqa: E402

MAX_TOKENS = 8
FIRST_PROMPT = 45
NEW_TOKENS = 4
TURNS = 3
SEED = 4301
MASK = (1 << 64) - 1


class SplitMix64:
    """probe's generator (cli/src/command/probe/prompts.rs), to rebuild its
    episodes' tokens."""

    def __init__(self, state):
        self.state = state & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def tokens(self, count, vocab):
        return [self.next() % vocab for _ in range(count)]


def probe_tokens(seed, episode, lengths=(2, 230), vocab=512):
    """Episode `episode` of probe's drawn prompts: its first prompt, and a
    function giving the tokens added after each turn."""
    draws = SplitMix64(seed)
    for _ in range(episode + 1):
        length = lengths[0] + draws.next() % (lengths[1] - lengths[0] + 1)
        first = draws.tokens(length, vocab)
    added = SplitMix64(seed ^ ((episode * 0x9E3779B9) & MASK))
    return first, lambda _turn: added.tokens(NEW_TOKENS, vocab)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else (json.dumps(data) + "\n").encode())


def ok(answer, what):
    assert answer.status == 200, f"{what}: HTTP {answer.status}: {answer.body[:300]!r}"
    return answer.body


def differing(a, b):
    """Positions whose rows differ (arrays of equal shape)."""
    assert a.shape == b.shape, f"{a.shape} != {b.shape}"
    return [int(i) for i in np.nonzero((a != b).reshape(len(a), -1).any(axis=1))[0]]


def pair(a, body, d, prefix):
    """The turn `body` to the colocated server, to the pair directly (the
    decode from P), and through the router; each saved under `d` with
    `prefix`. The colocated answer, and the positions (from the start asked)
    where the pair's rows and the stitched rows differ from the colocated."""
    write(f"{d}/{prefix}request.json", body)
    raw = ok(post(a.colocated, "/generate", body), f"{d}/{prefix}colocated")
    write(f"{d}/{prefix}colocated.json", raw)
    colocated = json.loads(raw)
    prompt_len = len(body["input_ids"])
    prefill, decode, pbody, dbody = post_pair(a, body, {"routed_experts_start_len": prompt_len})
    write(f"{d}/{prefix}prefill.request.json", pbody)
    write(f"{d}/{prefix}prefill.json", ok(prefill, f"{d}/{prefix}prefill"))
    write(f"{d}/{prefix}decode.request.json", dbody)
    write(f"{d}/{prefix}decode.json", ok(decode, f"{d}/{prefix}decode"))
    raw = ok(post(a.router, "/generate", body), f"{d}/{prefix}stitched")
    write(f"{d}/{prefix}stitched.json", raw)
    stitched = json.loads(raw)
    c = rows_of(colocated)
    pair_rows = np.concatenate([rows_of(prefill.json()), rows_of(decode.json())])
    for answer in (decode.json(), stitched):
        assert answer["output_ids"] == colocated["output_ids"], f"{d}/{prefix}: tokens differ"
    return colocated, {"pair": differing(pair_rows, c), "stitched": differing(rows_of(stitched), c)}


def main():
    ap = argparse.ArgumentParser()
    for k in ("colocated", "prefill", "decode", "router", "out"):
        ap.add_argument(f"--{k}", required=True)
    ap.add_argument("--bootstrap-port", type=int, required=True)
    ap.add_argument("--from-probe", metavar="SEED:EPISODE")
    a = ap.parse_args()
    manifest = {"versions": "sglang==0.5.23 torch==2.14.1", "max_tokens": MAX_TOKENS, "turns": []}
    if a.from_probe:
        seed, episode = (int(x) for x in a.from_probe.split(":"))
        tokens, new_tokens = probe_tokens(seed, episode)
        manifest["from_probe"] = {"seed": seed, "episode": episode}
    else:
        rng = np.random.default_rng(SEED)
        tokens = [int(t) for t in rng.integers(3, 512, FIRST_PROMPT)]
        new_tokens = lambda t: [int(x) for x in rng.integers(3, 512, NEW_TOKENS)]  # noqa: E731
    before = None  # the turn before's prompt ++ completion
    for t in range(TURNS):
        d = os.path.join(a.out, f"t{t}")
        colocated, differ = pair(a, gen_body(tokens, MAX_TOKENS), d, "")
        completion = colocated["output_ids"]
        turn = {"prompt_tokens": len(tokens), "completion_tokens": len(completion), "differing": differ}
        if before is not None:
            common = len(before)
            assert tokens[:common] == before
            start = common - 1
            _, differ = pair(a, gen_body(tokens, MAX_TOKENS, routed_experts_start_len=start), d, "delta-")
            turn.update(common_prefix=common, delta_start=start, delta_differing=differ)
        manifest["turns"].append(turn)
        print(f"saved {d}: {turn}")
        before = tokens + completion
        tokens = before + new_tokens(t)
    body = gen_body(before, 1, cache_salt="pd-stitch-episode-fixture")
    write(f"{a.out}/full-context.request.json", body)
    raw = ok(post(a.colocated, "/generate", body), "full-context")
    write(f"{a.out}/full-context.json", raw)
    forward = rows_of(json.loads(raw))
    assert forward.shape[0] == len(before), f"the forward has {forward.shape[0]} rows for {len(before)} tokens"
    manifest["full_context_tokens"] = len(before)
    write(os.path.join(a.out, "manifest.json"), json.dumps(manifest, indent=1).encode() + b"\n")
    print(f"saved {a.out}/full-context.json ({len(before)} tokens)")


if __name__ == "__main__":
    main()
