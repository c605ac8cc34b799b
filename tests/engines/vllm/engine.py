"""What drive.py and save_fixtures.py share: HTTP to vLLM's
`/inference/v1/generate`, its streams, its `.npy` rows, and the prompts.

Standard library and NumPy only (both in the engine's venv).
"""

import base64
import io
import json
import random
import urllib.error
import urllib.request

import numpy as np

GENERATE = "/inference/v1/generate"
TIMEOUT = 300


class HttpError(Exception):
    def __init__(self, url, status, body):
        super().__init__(f"{url}: HTTP {status}: {body[:400]!r}")
        self.status = status
        self.body = body


def post(base, body, path=GENERATE):
    """POST a JSON body; the answer's raw bytes (HttpError unless 200)."""
    url = base + path
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise HttpError(url, e.code, e.read()) from None


def post_json(base, body):
    return json.loads(post(base, body))


def sse_events(raw):
    """The `data:` payloads of an SSE body, in order, as text ("[DONE]" kept)."""
    text = raw.decode()
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")]
        if data:
            events.append("\n".join(data))
    return events


def assemble_stream(raw, prompt_tokens=None):
    """A streamed answer reassembled into a non-streamed answer's shape.

    Per choice (by `index`): `token_ids` concatenated over the events (each
    event carries the tokens new since the last, as vLLM's generate stream
    does; checked by drive.py against the non-streamed answer), the one
    `routed_experts` value (more than one is an error), the last
    `finish_reason`; the last event's `usage` when there is one. A stream
    without a usage event (no `stream_options.include_usage`) gets, when
    `prompt_tokens` is given (the request's length), the `usage` a whole
    answer would have had, so that `pd-stitch compare` can place its `.npy`
    rows (it reads them end-anchored at `usage.prompt_tokens` + N - 1).
    Returns (response_dict, facts) where facts says which event carried what.
    """
    events = sse_events(raw)
    if not events or events[-1] != "[DONE]":
        raise ValueError(f"stream does not end with data: [DONE] (last event {events[-1:]!r})")
    choices = {}
    usage = None
    facts = {"events": len(events), "rows_events": [], "usage_events": [], "error": None}
    top = {}
    for k, text in enumerate(events[:-1]):
        ev = json.loads(text)
        if "error" in ev and "choices" not in ev:
            facts["error"] = ev
            raise ValueError(f"stream error event: {text[:300]}")
        for key in ("request_id", "prompt_token_ids"):
            if ev.get(key) is not None and key not in top:
                top[key] = ev[key]
        if ev.get("usage") is not None:
            usage = ev["usage"]
            facts["usage_events"].append(k)
        for c in ev.get("choices") or []:
            i = c["index"]
            ch = choices.setdefault(i, {"index": i, "token_ids": [], "routed_experts": None,
                                        "finish_reason": None})
            ch["token_ids"].extend(c.get("token_ids") or [])
            if c.get("routed_experts") is not None:
                if ch["routed_experts"] is not None:
                    raise ValueError(f"choice {i}: routed_experts in two events")
                ch["routed_experts"] = c["routed_experts"]
                facts["rows_events"].append((k, i, bool(c.get("finish_reason"))))
            if c.get("finish_reason") is not None:
                ch["finish_reason"] = c["finish_reason"]
    resp = dict(top)
    resp["choices"] = [choices[i] for i in sorted(choices)]
    if usage is not None:
        resp["usage"] = usage
    elif prompt_tokens is not None:
        completion = sum(len(c["token_ids"]) for c in resp["choices"])
        resp["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                         "total_tokens": prompt_tokens + completion}
        facts["usage_from_request"] = True
    return resp, facts


def rows(value):
    """A choice's routed_experts (base64 of a .npy) as an array, or None."""
    if value is None:
        return None
    return np.load(io.BytesIO(base64.b64decode(value)), allow_pickle=False)


def prompt(seed, length):
    """A prompt of `length` token ids in [3, 512): 0-2 are pad, bos, eos."""
    rng = random.Random(seed * 1_000_003 + length)
    return [rng.randrange(3, 512) for _ in range(length)]


def sampling(max_tokens, *, seed=None, temperature=0.0, n=1, start=None):
    sp = {"max_tokens": max_tokens, "temperature": temperature, "n": n, "ignore_eos": True}
    if seed is not None:
        sp["seed"] = seed
    if start is not None:
        sp["routed_experts_prompt_start"] = start
    return sp


def loaded_tokens(prompt_len, block_size=32):
    """How many prompt tokens ExampleConnector's consumer loads: whole
    blocks of the first P - 1 tokens (`align_to_block_size(len - 1)` in
    vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py)."""
    n = prompt_len - 1
    return max(0, (n - 1) // block_size * block_size) if n > 0 else 0
