"""Dynamo 1.6.1's answers (tests/fixtures/engines/dynamo, saved from the
engine) through the Python binding: compact rows per choice on its token
API, and at the response's nvext.routed_experts on its OpenAI API, as a
dict (whose places the binding converts, as the table names them), as str
and as bytes. Rows are read here with base64 and the object's members."""
import base64
import copy
import json
import pathlib

import pytest

import pd_stitch

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "engines" / "dynamo"


def load(name):
    return json.loads((FIXTURES / name).read_bytes())


def rows(compact):
    return compact["start"], compact["shape"], base64.b64decode(compact["data"])


def as_kind(value, kind):
    return {"dict": value, "str": json.dumps(value), "bytes": json.dumps(value).encode()}[kind]


def parsed(merged):
    return merged if isinstance(merged, dict) else json.loads(merged)


@pytest.mark.parametrize("kind", ["dict", "str", "bytes"])
@pytest.mark.parametrize("prompt", ["p45", "p70"])
def test_token_api_pairs_stitch_to_the_colocated_rows(prompt, kind):
    colocated = load(f"{prompt}/colocated.json")
    decode = load(f"{prompt}/decode.json")
    assert rows(decode["choices"][0]["routed_experts"]) != rows(colocated["choices"][0]["routed_experts"])
    merged = parsed(pd_stitch.merge_routed_experts_for_pd(
        as_kind(load(f"{prompt}/prefill.json"), kind), as_kind(decode, kind)))
    assert rows(merged["choices"][0]["routed_experts"]) == rows(colocated["choices"][0]["routed_experts"])


@pytest.mark.parametrize("kind", ["dict", "str", "bytes"])
@pytest.mark.parametrize("prompt", ["p45", "p70"])
def test_openai_pairs_stitch_at_nvext(prompt, kind):
    colocated = load(f"{prompt}/openai-colocated.json")
    p = colocated["usage"]["prompt_tokens"]
    # The decode's prompt rows overwritten, as a decode that did not compute
    # them answers: the stitched rows below the prompt's end are the prefill's.
    decode = copy.deepcopy(colocated)
    start, shape, data = rows(decode["nvext"]["routed_experts"])
    width = shape[1] * shape[2]
    decode["nvext"]["routed_experts"]["data"] = base64.b64encode(bytes([7]) * (p * width) + data[p * width:]).decode()
    merged = parsed(pd_stitch.merge_routed_experts_for_pd(
        as_kind(load(f"{prompt}/openai-prefill.json"), kind), as_kind(decode, kind)))
    assert rows(merged["nvext"]["routed_experts"]) == rows(colocated["nvext"]["routed_experts"])


def test_nvext_rows_on_the_decode_only_are_refused():
    prefill = load("p45/openai-prefill.json")
    del prefill["nvext"]
    with pytest.raises(pd_stitch.StitchError) as info:
        pd_stitch.merge_routed_experts_for_pd(prefill, load("p45/openai-colocated.json"))
    assert info.value.kind == "MissingPrefillField"
    assert "nvext.routed_experts" in str(info.value)
