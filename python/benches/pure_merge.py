"""The pure-Python P/D merge the benchmark measures `pd_stitch` against, and
the workloads of issue 14.

`pure_merge` is what a Python proxy writes by hand today: `json.loads` both
responses, splice the payload segments (rows by handle), base64-decode,
concatenate and re-encode the inline compact rows, `json.dumps` the decode.
It follows docs/SPEC.md's rules R3/R5 and N3 for well-formed inputs of equal
dtypes (it validates nothing), and the tests check it gives the same output as
`pd_stitch` (python/tests/test_merge.py), so the two are compared on equal work.
"""
import base64
import json
import math

ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
}


def pure_merge(prefill, decode, fields=("routed_experts",)):
    """Merged decode bytes, or `decode` itself when there is nothing to stitch."""
    p = json.loads(prefill)
    d = json.loads(decode)
    first = p["choices"][0]
    changed = False

    # Rows by handle: the prefill's stitched segments, then the decode's,
    # dropped below the cut or clipped to start at it.
    stitched = [s for s in first.get("payload") or [] if isinstance(s, dict) and s.get("field") in fields]
    if stitched:
        cuts = {}
        for s in stitched:
            cuts[s["field"]] = max(cuts.get(s["field"], 0), s["pos"] + s["rows"])
        for choice in d["choices"]:
            payload = list(stitched)
            for item in choice.get("payload") or []:
                if isinstance(item, dict) and item.get("field") in fields:
                    cut = cuts[item["field"]]
                    if item["pos"] + item["rows"] <= cut:
                        continue
                    if item["pos"] < cut:
                        skip = cut - item["pos"]
                        row_bytes = ITEMSIZE[item["dtype"]] * math.prod(item["shape"])
                        item = dict(item, pos=cut, rows=item["rows"] - skip, offset=item["offset"] + skip * row_bytes)
                payload.append(item)
            choice["payload"] = payload
        changed = True

    # Inline compact rows: decode, concatenate from the cut, encode.
    rows = first.get("routed_experts")
    if rows is not None:
        prompt = base64.b64decode(rows["data"])
        seq, layers, topk = rows["shape"]
        cut = rows["start"] + seq
        for choice in d["choices"]:
            own = choice["routed_experts"]
            dtype = own.get("dtype", "uint8")
            assert dtype == rows.get("dtype", "uint8"), "the pure merge does not widen"
            row_bytes = ITEMSIZE[dtype] * layers * topk
            data = prompt + base64.b64decode(own["data"])[(cut - own["start"]) * row_bytes:]
            choice["routed_experts"] = dict(
                own, data=base64.b64encode(data).decode("ascii"),
                shape=[len(data) // row_bytes, layers, topk], start=rows["start"], dtype=dtype)
        changed = True

    return json.dumps(d, separators=(",", ":")).encode() if changed else decode


def compact(value):
    """JSON as servers send it (Starlette's JSONResponse, serde_json): no spaces."""
    return json.dumps(value, separators=(",", ":")).encode()


def by_handle_pair(choices=8, segments=32, divisor=997.0):
    """Issue 14's by-handle workload: a 4,096-token prompt in one prefill
    segment; `choices` decode choices of 1,024 positions from the last prompt
    position in `segments` segments, each with 1,024 token ids and float
    logprobs (232 KB of decode JSON at 8 x 32). A power-of-two `divisor` makes
    every logprob exact in binary, so that a JSON reader's rounding cannot
    differ from Python's."""
    prompt = 4096

    def seg(file, offset, pos, rows):
        return {"field": "routed_experts", "file": file, "offset": offset, "pos": pos, "rows": rows,
                "dtype": "uint8", "shape": [48, 8]}

    prefill = {"id": "cmpl-p", "choices": [{"index": 0, "token_ids": [1],
                                            "payload": [seg("/dev/shm/prefill-0.bin", 0, 0, prompt)]}]}
    per = 1024 // segments
    out = []
    for i in range(choices):
        payload = [seg("/dev/shm/decode-0.bin", (i * 1024 + k * per) * 384, prompt - 1 + k * per, per)
                   for k in range(segments)]
        payload.append({"field": "sampling_mask", "file": "/dev/shm/mask.bin", "offset": 0,
                        "pos": prompt - 1, "rows": 1024, "dtype": "bool", "shape": [1024]})
        out.append({"index": i, "token_ids": list(range(1024)),
                    "logprobs": [-t / divisor for t in range(1024)], "finish_reason": "length",
                    "payload": payload})
    decode = {"id": "cmpl-d", "object": "text_completion", "choices": out}
    return compact(prefill), compact(decode)


def compact_pair(prompt=16 * 1024, positions=32 * 1024, layers=48, topk=8, seed=1):
    """Issue 14's inline workload: a compact prompt of `prompt` rows, one
    decode choice of `positions` rows from the last prompt position, uint8
    rows of `layers` x `topk` (16.8 MB of decode JSON at 16k/32k)."""
    import random
    rng = random.Random(seed)
    row = layers * topk
    p_rows = rng.randbytes(prompt * row)
    d_rows = rng.randbytes(positions * row)
    prefill = {"choices": [{"routed_experts": {"data": base64.b64encode(p_rows).decode(),
                                               "shape": [prompt, layers, topk], "start": 0, "dtype": "uint8"}}]}
    decode = {"choices": [{"index": 0, "routed_experts": {"data": base64.b64encode(d_rows).decode(),
                                                          "shape": [positions, layers, topk],
                                                          "start": prompt - 1, "dtype": "uint8"}}]}
    return compact(prefill), compact(decode)


def stitched_values(body):
    """What a merge writes: each choice's payload and routed_experts."""
    return [(c.get("payload"), c.get("routed_experts")) for c in json.loads(body)["choices"]]
