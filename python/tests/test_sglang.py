"""SGLang's rows (SPEC section 10) through the Python binding: row_shape=,
every argument type, batch arrays, the OpenAI slots, and the errors. The
responses and their truth are written here with struct and base64."""
import base64
import copy
import json
import struct

import pytest

import pd_stitch


def ids_b64(ids):
    return base64.b64encode(struct.pack(f"<{len(ids)}i", *ids)).decode()


def ids_of(text):
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}i", raw))


def truth(x, k):
    return 1000 * x + k


def rows(frm, to, width, wrong_below=0):
    return [(-1 if x < wrong_below else 1) * truth(x, k) for x in range(frm, to) for k in range(width)]


def generate(prompt, completion, ids):
    return {"text": "out \u00e9", "meta_info": {"id": "r", "prompt_tokens": prompt,
            "completion_tokens": completion, "routed_experts": ids_b64(ids), "e2e_latency": 0.5}}


def pair(prompt=6, completion=5, start=1, width=6, suffix=False):
    end = prompt + completion - 1
    prefill = generate(prompt, 1, rows(start, prompt, width))
    decode_ids = rows(prompt, end, width) if suffix else rows(start, end, width, wrong_below=prompt)
    decode = generate(prompt, completion, decode_ids)
    colocated = generate(prompt, completion, rows(start, end, width))
    return prefill, decode, colocated


@pytest.mark.parametrize("suffix", [False, True])
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "str", "dict"])
def test_both_conventions_in_every_type(suffix, kind):
    prefill, decode, colocated = pair(suffix=suffix)
    convert = {"bytes": lambda v: json.dumps(v).encode(), "bytearray": lambda v: bytearray(json.dumps(v).encode()),
               "str": json.dumps, "dict": copy.deepcopy}[kind]
    d = convert(decode)
    before = copy.deepcopy(d)
    merged = pd_stitch.merge_routed_experts_for_pd(convert(prefill), d, row_shape=(2, 3))
    if kind == "bytearray":
        assert merged is d  # merged where it is (test_in_place.py)
    else:
        assert d == before
    value = merged if isinstance(merged, dict) else json.loads(merged)
    assert value == colocated
    assert ids_of(value["meta_info"]["routed_experts"]) == rows(1, 10, 6)
    if kind == "dict":
        # Other members of meta_info are kept (shared, as copy.copy shares them).
        assert value["meta_info"]["e2e_latency"] == 0.5 and value["text"] == decode["text"]


def test_without_row_shape_an_ambiguous_pair_is_refused():
    # A prompt of 2 from 0, 3 generated, rows of 1 id: also suffix-only rows of 2 ids.
    prefill = generate(2, 1, [10, 11])
    decode = generate(2, 3, [0, 0, 12, 13])
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.merge_routed_experts_for_pd(json.dumps(prefill), json.dumps(decode))
    assert (e.value.kind, e.value.location) == ("Positions", "decode meta_info.routed_experts")
    assert "ambiguous" in str(e.value)
    merged = json.loads(pd_stitch.merge_routed_experts_for_pd(json.dumps(prefill), json.dumps(decode), row_shape=(1, 1)))
    assert ids_of(merged["meta_info"]["routed_experts"]) == [10, 11, 12, 13]
    # A determined pair needs no shape.
    p, d, c = pair(prompt=5, completion=4, start=1, width=6)
    assert json.loads(pd_stitch.merge_routed_experts_for_pd(json.dumps(p), json.dumps(d))) == c


def test_batch_arrays_merge_item_by_item():
    items = [pair(prompt=4 + i, completion=3 + i, start=i, suffix=i % 2 == 1) for i in range(3)]
    prefill, decode, colocated = (json.dumps([it[j] for it in items]).encode() for j in range(3))
    assert pd_stitch.prefill_has_routed_experts(prefill)
    merged = pd_stitch.merge_routed_experts_for_pd(prefill, decode, row_shape=(2, 3))
    assert json.loads(merged) == json.loads(colocated)
    short = json.dumps(json.loads(decode)[:2])
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.merge_routed_experts_for_pd(prefill, short, row_shape=(2, 3))
    assert (e.value.kind, e.value.location) == ("Structure", "decode response")


@pytest.mark.parametrize("slot", ["sglext", "sgl_ext"])
def test_openai_slots(slot):
    def chat(prompt, completion, ids):
        out = {"id": "c", "choices": [{"index": 0, "message": {"content": "x"}}],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
        if slot == "sglext":
            out["sglext"] = {"routed_experts": ids_b64(ids), "cached_tokens_details": {"device": 1}}
        else:
            out["choices"][0]["sgl_ext"] = {"routed_experts": ids_b64(ids)}
        return out
    prefill = chat(6, 1, rows(0, 6, 4))
    decode = chat(6, 5, rows(6, 10, 4))
    assert pd_stitch.prefill_has_routed_experts(prefill)
    merged = pd_stitch.merge_routed_experts_for_pd(prefill, copy.deepcopy(decode), row_shape=(1, 4))
    got = merged["sglext"] if slot == "sglext" else merged["choices"][0]["sgl_ext"]
    assert ids_of(got["routed_experts"]) == rows(0, 10, 4)
    if slot == "sglext":
        assert got["cached_tokens_details"] == {"device": 1}
    two = copy.deepcopy(decode)
    two["choices"].append(copy.deepcopy(two["choices"][0]))
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.merge_routed_experts_for_pd(prefill, two, row_shape=(1, 4))
    assert e.value.kind == "Positions" and "choices" in str(e.value)


def test_errors_name_the_value():
    prefill, decode, _ = pair()
    bad = copy.deepcopy(decode)
    bad["meta_info"]["prompt_tokens"] = 7
    for kind in (json.dumps, copy.deepcopy):
        with pytest.raises(pd_stitch.StitchError) as e:
            pd_stitch.merge_routed_experts_for_pd(kind(prefill), kind(bad), row_shape=(2, 3))
        assert (e.value.kind, e.value.location) == ("Positions", "decode meta_info.prompt_tokens")
    bare = copy.deepcopy(decode)
    del bare["meta_info"]["routed_experts"]
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.merge_routed_experts_for_pd(prefill, bare, row_shape=(2, 3))
    assert (e.value.kind, e.value.location) == ("MissingDecodeRows", "decode meta_info.routed_experts")
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.merge_routed_experts_for_pd(prefill, decode, row_shape=(0, 3))
    assert e.value.kind == "Positions"
    with pytest.raises((TypeError, ValueError)):  # not a (layers, top_k) pair
        pd_stitch.merge_routed_experts_for_pd(prefill, decode, row_shape=(2,))


def test_nothing_to_stitch_returns_the_very_object():
    prefill, decode, _ = pair()
    del prefill["meta_info"]["routed_experts"]
    del decode["meta_info"]["routed_experts"]
    assert not pd_stitch.prefill_has_routed_experts(prefill)
    text = json.dumps(decode).encode()
    assert pd_stitch.merge_routed_experts_for_pd(prefill, text, row_shape=(2, 3)) is text


def sse(*events):
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def test_a_stream_reads_sglang_rows_with_the_row_shape():
    # The pair the merge refuses as ambiguous without a shape: the stream
    # stitcher must read it with the one it was given (it once dropped it).
    prefill = generate(2, 1, [10, 11])
    decode = generate(2, 3, [0, 0, 12, 13])
    s = pd_stitch.StreamStitcher(json.dumps(prefill), row_shape=(1, 1))
    out = s.feed(sse(decode, b"[DONE]")) + s.finish()
    event = json.loads(out.split(b"\n\n")[0][len(b"data: "):])
    assert ids_of(event["meta_info"]["routed_experts"]) == [10, 11, 12, 13]
    s = pd_stitch.StreamStitcher(json.dumps(prefill))
    with pytest.raises(pd_stitch.StitchError) as e:
        s.feed(sse(decode, b"[DONE]"))
    assert e.value.kind == "StreamEvent"
