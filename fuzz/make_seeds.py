#!/usr/bin/env python3
"""Write the committed seed corpus, fuzz/seeds/<target>/<name>.

A seed is what the fuzz targets read: the prefill's JSON, one NUL byte, the
decode's JSON. The seeds are real-looking responses, so the fuzzer starts from
inputs that reach deep into the merge instead of rediscovering the format:

- the committed pairs, tests/fixtures/pairs/*/ and examples/*/ (as written,
  and minified), and examples/broken/*.json as decodes of the seed prefill;
- inline npy pairs from the NumPy-written files in tests/fixtures/npy/;
- for the bytes entry point (bytes_merge_for_pd), every seed of
  merge_routed_experts_for_pd, and variants of the seed example that are not
  JSON or whose keys are repeated or escaped;
- the real engines' answers, tests/fixtures/engines/ (vLLM 0.32's generate
  pairs with their `token_ids` and `usage.prompt_tokens`, SGLang 0.5.23's
  `/generate` pairs, a batch among them, Dynamo 1.6.1's compact rows per
  choice and at `nvext`), byte for byte as the servers sent them, and their
  decode streams for stream_stitch;
- for the episode target (fuzz_targets/episode.rs, its input format in
  fuzz/src/episode.rs): the real engines' three-turn episodes,
  tests/fixtures/engines/{vllm,sglang}/episode*/, as colocated, stitched
  and P/D-pair turns, full and delta, byte for byte, and mutated (a delta
  start one late, turns out of order, Prefer::Latest, a turn repeated, a
  decode's rows cut), and a few raw pieces of other dtypes;
- optionally, pairs rebuilt from a simulator run's merged responses: the
  prefill's segments or rows split off, and the decode given back its row for
  the last prompt position, as a decode instance writes it.

    target/debug/pd-stitch simulate --requests 24 --seed 11 --dir /tmp/pdsim
    python3 fuzz/make_seeds.py /tmp/pdsim

Standard library only. The output is deterministic for a given simulator run.
"""

import base64
import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"
BY_HANDLE = "merge_routed_payload_in_json"
INLINE = "merge_routed_experts_in_json"
FOR_PD = "merge_routed_experts_for_pd"
# The bytes entry point: every seed of FOR_PD, plus texts that are not JSON
# or that a byte-level reader could read differently from serde_json.
BYTES = "bytes_merge_for_pd"
# SGLang's structured pairs (fuzz_targets/sglang_merge.rs): raw bytes.
SGLANG = "sglang_merge"
# The streaming target: the prefill's bytes, NUL, the decode's stream. Its
# two hand-written seeds stay; the engines' streams are written beside them
# (names starting "engine-").
STREAM = "stream_stitch"
# The episode target: turns separated by NUL, each a JSON header and its
# pieces, each after a 0x01 byte (fuzz/src/episode.rs).
EPISODE = "episode"
ENGINES = ROOT / "tests" / "fixtures" / "engines"
# The simulator's requests with the smallest responses of `--seed 11`.
SIM_REQUESTS = ["req-0006", "req-0017", "req-0019"]
ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2,
            "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4,
            "float32": 4, "int64": 8, "uint64": 8, "float64": 8}

seeds = {BY_HANDLE: {}, INLINE: {}, FOR_PD: {}, BYTES: {}, STREAM: {}, EPISODE: {}}


def minify(value):
    return json.dumps(value, separators=(",", ":")).encode()


def add(targets, name, prefill, decode):
    """Add a pair (bytes or JSON values) to the targets' seeds."""
    if not isinstance(prefill, bytes):
        prefill, decode = minify(prefill), minify(decode)
    if FOR_PD in targets:
        targets = [*targets, BYTES]
    for target in targets:
        seeds[target][name] = prefill.rstrip() + b"\0" + decode.rstrip()


def bytes_pairs():
    """Inputs for the bytes entry point only, as raw bytes: each is a variant
    of the seed example that is not JSON, or JSON whose bytes a scanner could
    read otherwise than serde_json does."""
    pair = ROOT / "tests" / "fixtures" / "pairs" / "seed"
    p_text = (pair / "prefill.json").read_bytes().rstrip()
    d_text = (pair / "decode.json").read_bytes().rstrip()
    p, d = json.loads(p_text), json.loads(d_text)
    raw = {
        # Not JSON: trailing bytes, a truncated text, a byte that is not
        # UTF-8 in a string, both sides broken, a second NUL in the decode,
        # nesting beyond serde_json's 128 levels.
        "not-json-decode-trailing": (p_text, d_text + b" x"),
        "not-json-prefill-truncated": (p_text[: len(p_text) // 2], d_text),
        "not-json-decode-not-utf8": (p_text, d_text.replace(b'"cmpl-seed"', b'"cmpl-\xff"', 1)),
        "not-json-both": (p_text + b",", d_text[:-1]),
        "not-json-decode-nul": (p_text, d_text + b"\0{}"),
        "not-json-decode-deep": (p_text, b"[" * 200 + b"]" * 200),
        # JSON: whitespace of every kind around the values, CRLF lines.
        "json-whitespace": (b" \t\r\n" + p_text.replace(b"\n", b"\r\n") + b"\n ",
                            b"\r\n" + d_text + b"\t"),
    }
    # JSON: a repeated key (serde_json keeps the last), and keys written with
    # escapes (`\u0070ayload` is `payload`).
    stale = minify(p["choices"][0]["payload"])
    raw["json-repeated-payload-key"] = (
        minify(p), minify(d).replace(b'"payload":', b'"payload":[],"payload":', 1))
    raw["json-stale-repeated-payload-key"] = (
        minify(p), minify(d).replace(b'"payload":', b'"payload":' + stale + b',"payload":', 1))
    raw["json-escaped-keys"] = (
        minify(p).replace(b'"payload"', b'"\\u0070ayload"'),
        minify(d).replace(b'"payload"', b'"pay\\u006coad"').replace(b'"pos"', b'"p\\u006fs"'))
    raw["json-escaped-field-value"] = (
        minify(p), minify(d).replace(b'"routed_experts"', b'"routed\\u005fexperts"'))
    # Nothing to stitch on either side: Ok(false), the decode kept as sent.
    bare = json.loads(d_text)
    for choice in bare["choices"]:
        del choice["payload"]
    raw["json-no-rows"] = (b'{"choices": [{"index": 0}]}', json.dumps(bare, indent=1).encode())
    for name, (prefill, decode) in raw.items():
        seeds[BYTES][f"bytes-{name}"] = prefill + b"\0" + decode


def committed_pairs():
    pairs = ROOT / "tests" / "fixtures" / "pairs"
    for pair in sorted(pairs.iterdir()):
        prefill = (pair / "prefill.json").read_bytes()
        decode = (pair / "decode.json").read_bytes()
        # Every entry point gets every pair: on the other kind's rows it
        # takes its no-op or refusal paths.
        targets = [BY_HANDLE, INLINE, FOR_PD]
        add(targets, f"fixture-{pair.name}", prefill, decode)
        add(targets, f"fixture-{pair.name}-min", json.loads(prefill), json.loads(decode))
    # examples/seed and examples/inline are the same as the fixtures; the
    # broken decodes are not.
    seed = json.loads((ROOT / "examples" / "seed" / "prefill.json").read_bytes())
    for broken in sorted((ROOT / "examples" / "broken").glob("*.json")):
        decode = json.loads(broken.read_bytes())
        add([BY_HANDLE], f"example-broken-{broken.stem}", seed, decode)
    # Both kinds in one response, for the combined entry point.
    inline_p = json.loads((pairs / "inline" / "prefill.json").read_bytes())
    inline_d = json.loads((pairs / "inline" / "decode.json").read_bytes())
    seed_d = json.loads((pairs / "seed" / "decode.json").read_bytes())
    seed["choices"][0]["routed_experts"] = inline_p["choices"][0]["routed_experts"]
    for choice in seed_d["choices"]:
        choice["routed_experts"] = inline_d["choices"][0]["routed_experts"]
    add([BY_HANDLE, INLINE, FOR_PD], "fixture-seed-and-inline", seed, seed_d)


def npy_pairs():
    npy = ROOT / "tests" / "fixtures" / "npy"

    def rows(name):
        text = base64.b64encode((npy / f"{name}.npy").read_bytes()).decode()
        return {"choices": [{"index": 0, "routed_experts": text}]}

    for prefill, decode in [("pd_prefill_u1", "pd_decode_u1"),
                            ("pd_prefill_u1", "pd_decode_u2"),
                            ("u2_5x3x2_v2", "u2_5x3x2_v3"),
                            ("i4_2x2x2", "u1_3x2x4"),
                            ("pd_prefill_u1", "bad_fortran")]:
        add([INLINE], f"npy-{prefill}-{decode}", rows(prefill), rows(decode))
    add([FOR_PD], "npy-pd_prefill_u1-pd_decode_u2", rows("pd_prefill_u1"), rows("pd_decode_u2"))


def row_bytes(segment):
    size = ITEMSIZE[segment["dtype"]]
    for dim in segment["shape"]:
        size *= dim
    return size


def simulated_pairs(run):
    for request in SIM_REQUESTS:
        merged = json.loads((run / request / "by-handle.merged.json").read_bytes())
        prefix = [item for item in merged["choices"][0]["payload"]
                  if item["file"].endswith("prefill.bin")]
        cut = max(item["pos"] + item["rows"] for item in prefix)
        prefill = {k: v for k, v in merged.items() if k != "choices"}
        prefill["choices"] = [{"index": 0, "payload": prefix}]
        decode = json.loads(json.dumps(merged))
        for choice in decode["choices"]:
            own = [item for item in choice["payload"] if item not in prefix]
            # The decode's first row is the last prompt position's.
            for item in own:
                if item["field"] == "routed_experts" and item["pos"] == cut \
                        and item["offset"] >= row_bytes(item):
                    item["pos"] -= 1
                    item["rows"] += 1
                    item["offset"] -= row_bytes(item)
                    break
            choice["payload"] = own
        add([BY_HANDLE, FOR_PD], f"sim-{request}-by-handle", prefill, decode)

        compact = json.loads((run / request / "compact.merged.json").read_bytes())
        first = compact["choices"][0]["routed_experts"]
        _, layers, topk = first["shape"]
        size = ITEMSIZE[first["dtype"]] * layers * topk
        data = base64.b64decode(first["data"])
        p_rows = dict(first, data=base64.b64encode(data[:cut * size]).decode(),
                      shape=[cut, layers, topk], start=0)
        c_prefill = {"choices": [{"index": 0, "routed_experts": p_rows}]}
        c_decode = json.loads(json.dumps(compact))
        for choice in c_decode["choices"]:
            rows = choice["routed_experts"]
            data = base64.b64decode(rows["data"])
            rows["data"] = base64.b64encode(data[(cut - 1) * size:]).decode()
            rows["shape"][0] -= cut - 1
            rows["start"] = cut - 1
        add([INLINE], f"sim-{request}-compact", c_prefill, c_decode)

        # Both kinds at once, when the forms agree on the choices.
        if len(c_decode["choices"]) == len(decode["choices"]):
            prefill["choices"][0]["routed_experts"] = p_rows
            for choice, rows in zip(decode["choices"], c_decode["choices"]):
                choice["routed_experts"] = rows["routed_experts"]
            add([FOR_PD], f"sim-{request}-both", prefill, decode)


def ids_b64(ids):
    return base64.b64encode(b"".join(int(i).to_bytes(4, "little", signed=True) for i in ids)).decode()


def sglang_pairs():
    """SGLang's rows (SPEC section 10) for the JSON and bytes entry points:
    /generate full-length and suffix-only, a batch, sglext and sgl_ext; and
    structured inputs for the sglang_merge target."""
    def generate(prompt, completion, ids):
        return {"text": "x", "meta_info": {"prompt_tokens": prompt, "completion_tokens": completion,
                                           "routed_experts": ids_b64(ids)}}

    def chat(prompt, completion, ids, place):
        out = {"choices": [{"index": 0}], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
        if place == "sglext":
            out["sglext"] = {"routed_experts": ids_b64(ids)}
        else:
            out["choices"][0]["sgl_ext"] = {"routed_experts": ids_b64(ids)}
        return out

    # Prompt 3, 3 generated, rows of 2 ids: [0, 3) from the prefill.
    prefill_ids = [10, 11, 20, 21, 30, 31]
    full = [0] * 6 + [40, 41, 50, 51]
    suffix = [40, 41, 50, 51]
    add([FOR_PD], "sglang-generate-full", generate(3, 1, prefill_ids), generate(3, 3, full))
    add([FOR_PD], "sglang-generate-suffix", generate(3, 1, prefill_ids), generate(3, 3, suffix))
    add([FOR_PD], "sglang-generate-batch", [generate(3, 1, prefill_ids), generate(2, 1, [1, 2])],
        [generate(3, 3, suffix), generate(2, 2, [0, 0, 3, 4])])
    for place in ["sglext", "sgl_ext"]:
        add([FOR_PD], f"sglang-{place}", chat(3, 1, prefill_ids, place), chat(3, 3, full, place))
    # A pair that is ambiguous without the row shape (SPEC section 10).
    add([FOR_PD], "sglang-ambiguous", generate(2, 1, [10, 11]), generate(2, 3, [0, 0, 12, 13]))
    # The structured target: shape byte, slot byte, items, then 5 bytes an item.
    structured = {
        "full-width-2": [3, 0, 0, 3, 1, 3, 6, 10],
        "suffix-width-2": [3, 0, 0, 3, 1, 3, 6, 4],
        "no-shape": [0, 0, 0, 5, 1, 4, 24, 42],
        "ambiguous": [0, 0, 0, 2, 1, 3, 2, 4],
        "batch": [2, 0x80, 2, 3, 1, 3, 6, 4, 2, 1, 2, 4, 6, 4, 1, 4, 8, 8],
        "sglext": [3, 1, 0, 4, 1, 5, 8, 16],
        "sgl_ext": [3, 2, 0, 4, 1, 5, 8, 8],
        "counts-zero": [1, 0, 0, 0, 0, 0, 0, 0],
        "row-shape-zero": [1, 0, 0, 3, 1, 3, 3, 5],
    }
    for name, data in structured.items():
        seeds.setdefault(SGLANG, {})[f"sglang-{name}"] = bytes(data)


def engine_pairs():
    """The real engines' answers as they came off the wire: the counted
    `.npy` rules (SPEC section 4a) and SGLang's rows are then fuzzed from
    what engines send, not only from what this project writes."""
    vllm = ENGINES / "vllm"
    for prompt in ["p45", "p70", "turn2"]:
        folder = vllm / prompt
        prefill = (folder / "prefill.json").read_bytes()
        for decode in sorted(folder.glob("decode*.json")):
            if decode.name.endswith(".request.json"):
                continue
            first = prefill
            if decode.name == "decode-n2.json":
                first = (folder / "prefill-n2.json").read_bytes()
            add([FOR_PD], f"engine-vllm-{prompt}-{decode.stem}", first, decode.read_bytes())
        for stream in sorted(folder.glob("decode*.sse")):
            name = f"engine-vllm-{prompt}-{stream.stem}"
            seeds[STREAM][name] = prefill.rstrip() + b"\0" + stream.read_bytes()
    sglang = ENGINES / "sglang"
    prefill = (sglang / "prefill.json").read_bytes()
    for decode in ["decode_from_prompt", "decode_full_length_fresh"]:
        add([FOR_PD], f"engine-sglang-{decode}", prefill, (sglang / f"{decode}.json").read_bytes())
    add([FOR_PD], "engine-sglang-batch", (sglang / "batch_prefill.json").read_bytes(),
        (sglang / "batch_decode.json").read_bytes())
    add([FOR_PD], "engine-sglang-after-wrap",
        (sglang / "decode_full_length_after_wrap_prefill.json").read_bytes(),
        (sglang / "decode_full_length_after_wrap.json").read_bytes())
    seeds[STREAM]["engine-sglang-decode_stream"] = (
        prefill.rstrip() + b"\0" + (sglang / "decode_stream.sse").read_bytes())
    dynamo = ENGINES / "dynamo"
    for prompt in ["p45", "p70"]:
        folder = dynamo / prompt
        read = lambda name: (folder / f"{name}.json").read_bytes()  # noqa: E731
        for prefill, decode in [("prefill", "decode"), ("prefill", "decode-s32"),
                                ("prefill-n2", "decode-n2"), ("openai-prefill", "openai-colocated")]:
            add([INLINE, FOR_PD], f"engine-dynamo-{prompt}-{decode}", read(prefill), read(decode))
        # The OpenAI API's decode answers its prompt rows too, the ones the
        # prefill has: a decode that did not compute them (zeros here) is
        # the pair where an unstitched merge shows. Not byte for byte.
        decode = json.loads(read("openai-colocated"))
        rows = decode["nvext"]["routed_experts"]
        data = bytearray(base64.b64decode(rows["data"]))
        prompt_bytes = decode["usage"]["prompt_tokens"] * rows["shape"][1] * rows["shape"][2]
        data[:prompt_bytes] = bytes(prompt_bytes)
        rows["data"] = base64.b64encode(bytes(data)).decode()
        add([INLINE, FOR_PD], f"engine-dynamo-{prompt}-openai-prompt-rows-zeroed",
            json.loads(read("openai-prefill")), decode)
        seeds[STREAM][f"engine-dynamo-{prompt}-openai-stream"] = (
            read("openai-prefill").rstrip() + b"\0" + (folder / "openai-stream.sse").read_bytes())


def episode_turn(header, pieces):
    """One turn of the episode target: its header, then each piece after 0x01."""
    return minify(header) + b"".join(b"\x01" + piece.rstrip() for piece in pieces)


def episode_seed(turns):
    return b"\x00".join(turns)


def episode_seeds():
    """The engines' episodes (tests/fixtures/engines/*/episode*/) as the
    episode target reads them: every turn from the colocated answers, the
    stitched ones, or the P/D pair's two; full or delta; then mutated."""
    for engine, folder, shape in [("vllm", "episode", None), ("sglang", "episode", [3, 2]),
                                  ("sglang", "episode-decode-flip", [3, 2])]:
        root = ENGINES / engine / folder

        def turn(t, delta, side, start=None):
            prefix = "delta-" if delta and t > 0 else ""
            read = lambda name: (root / f"t{t}" / f"{prefix}{name}.json").read_bytes()  # noqa: E731
            request = json.loads(read("request"))
            colocated = json.loads(read("colocated"))
            prompt = request.get("token_ids") or request.get("input_ids")
            completion = (colocated.get("choices") or [{}])[0].get("token_ids") or colocated.get("output_ids")
            asked = request.get("sampling_params", {}).get("routed_experts_prompt_start",
                                                           request.get("routed_experts_start_len"))
            header = {"prompt": prompt, "completion": completion,
                      "start": asked if start is None else start}
            if shape:
                header["row_shape"] = shape
            pieces = [read("prefill"), read("decode")] if side == "pair" else [read(side)]
            return header, pieces

        name = f"engine-{engine}-{folder}"
        for side in ["colocated", "stitched", "pair"]:
            for delta in [False, True]:
                turns = [episode_turn(*turn(t, delta, side)) for t in range(3)]
                seeds[EPISODE][f"{name}-{side}-{'delta' if delta else 'full'}"] = episode_seed(turns)
        # Mutations of the delta stitched episode.
        t0, t1, t2 = (turn(t, True, "stitched") for t in range(3))
        late = dict(t1[0], start=t1[0]["start"] + 1)
        seeds[EPISODE][f"{name}-delta-start-late"] = episode_seed(
            [episode_turn(*t0), episode_turn(late, t1[1]), episode_turn(*t2)])
        seeds[EPISODE][f"{name}-out-of-order"] = episode_seed(
            [episode_turn(*t1), episode_turn(*t0), episode_turn(*t2)])
        seeds[EPISODE][f"{name}-latest"] = episode_seed(
            [episode_turn(dict(t0[0], prefer="latest"), t0[1]), episode_turn(*t1), episode_turn(*t2)])
        seeds[EPISODE][f"{name}-repeated"] = episode_seed(
            [episode_turn(*t0), episode_turn(*t0), episode_turn(*t1), episode_turn(*t1)])
        # A P/D pair whose decode lost its last row: the counts no longer fit.
        header, (prefill, decode) = turn(1, True, "pair")
        cut = json.loads(decode)
        if engine == "sglang":
            rows = base64.b64decode(cut["meta_info"]["routed_experts"])
            cut["meta_info"]["routed_experts"] = base64.b64encode(rows[:-24]).decode()
        else:
            cut["choices"][0]["token_ids"] = cut["choices"][0]["token_ids"][:-1]
        seeds[EPISODE][f"{name}-decode-cut"] = episode_seed(
            [episode_turn(*t0), episode_turn(header, [prefill, minify(cut)])])
    # Raw pieces: a dtype (an index of pd_stitch's Dtype::ALL), a row shape,
    # the rows' bytes, and a first position or none.
    def raw(dtype, rows, first=None):
        piece = {"dtype": dtype, "shape": [1, 1], "bytes": rows}
        if first is not None:
            piece["first"] = first
        return minify({"raw": piece})
    uint8, uint16, int32, float32 = 2, 4, 7, 9
    one = {"prompt": [1, 2], "completion": [3]}
    two = {"prompt": [1, 2, 3, 4], "completion": [5, 6], "start": 2}
    seeds[EPISODE]["raw-widen"] = episode_seed([
        episode_turn(one, [raw(uint8, [7, 8])]),
        episode_turn(two, [raw(uint16, [1, 0, 2, 0, 3, 0])])])
    seeds[EPISODE]["raw-int-float"] = episode_seed([
        episode_turn(one, [raw(int32, [7, 0, 0, 0, 8, 0, 0, 0])]),
        episode_turn(two, [raw(float32, [0] * 12)])])
    seeds[EPISODE]["raw-pair-first"] = episode_seed([
        episode_turn(one, [raw(uint8, [7], 0), raw(uint8, [8, 9], 1)])])


def main():
    engine_pairs()
    episode_seeds()
    sglang_pairs()
    committed_pairs()
    npy_pairs()
    bytes_pairs()
    if len(sys.argv) > 1:
        simulated_pairs(pathlib.Path(sys.argv[1]))
    for target, files in seeds.items():
        if target == STREAM:
            for old in (SEEDS / target).glob("engine-*"):
                old.unlink()
        else:
            shutil.rmtree(SEEDS / target, ignore_errors=True)
        (SEEDS / target).mkdir(parents=True, exist_ok=True)
        for name, data in sorted(files.items()):
            (SEEDS / target / name).write_bytes(data)
        print(f"{target}: {len(files)} seeds, {sum(map(len, files.values()))} bytes")


if __name__ == "__main__":
    main()
