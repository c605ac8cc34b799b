"""Every error kind: a StitchError (a ValueError) with the Rust variant's
name as `.kind`, the JSON path as `.location` (None for invalid JSON), the
Rust message, and the decode untouched, through every argument type."""
import base64
import copy
import io
import json

import numpy as np
import pytest

import pd_stitch
from conftest import pair


def npy(array):
    out = io.BytesIO()
    np.save(out, array)
    return base64.b64encode(out.getvalue()).decode()


def seed():
    p, d = pair("seed")
    return json.loads(p), json.loads(d)


def inline():
    p, d = pair("inline")
    return json.loads(p), json.loads(d)


def fault(kind):
    """A pair with one fault of `kind`, and the location the error names."""
    if kind == "Structure":
        p, d = seed()
        d["choices"] = "x"
        return p, d, "decode choices"
    if kind == "Integer":
        p, d = seed()
        d["choices"][1]["payload"][1]["rows"] = -1
        return p, d, "decode choices[1].payload[1].rows"
    if kind == "Dtype":
        p, d = seed()
        d["choices"][0]["payload"][0]["dtype"] = "uint7"
        return p, d, "decode choices[0].payload[0].dtype"
    if kind == "Overflow":
        p, d = seed()
        d["choices"][0]["payload"][0]["rows"] = 2 ** 64 - 1
        return p, d, "decode choices[0].payload[0]"
    if kind == "MissingPrefillField":
        p, d = seed()
        del p["choices"][0]["payload"]
        return p, d, "decode choices[0].payload[0]"
    if kind == "MissingDecodeRows":
        p, d = inline()
        del d["choices"][0]["routed_experts"]
        return p, d, "decode choices[0].routed_experts"
    if kind == "Base64":
        p, d = inline()
        d["choices"][0]["routed_experts"]["data"] = "!" + d["choices"][0]["routed_experts"]["data"][1:]
        return p, d, "decode choices[0].routed_experts.data"
    if kind == "Npy":
        rows = np.arange(24, dtype=np.uint16).reshape(3, 2, 4)
        p = {"choices": [{"routed_experts": npy(rows)}]}
        d = {"choices": [{"routed_experts": npy(rows.reshape(3, 8))}]}
        return p, d, "decode choices[0].routed_experts"
    if kind == "Length":
        p, d = inline()
        d["choices"][0]["routed_experts"]["shape"][0] += 1
        return p, d, "decode choices[0].routed_experts.data"
    if kind == "FormMismatch":
        p, d = inline()
        d["choices"][0]["routed_experts"] = npy(np.zeros((3, 2, 4), np.uint16))
        return p, d, "decode choices[0].routed_experts"
    if kind == "RowShapeMismatch":
        p, d = inline()
        d["choices"][0]["routed_experts"]["shape"] = [d["choices"][0]["routed_experts"]["shape"][0], 4, 2]
        return p, d, "decode choices[0].routed_experts"
    if kind == "DtypeMismatch":
        p, d = inline()
        d["choices"][0]["routed_experts"]["dtype"] = "int16"
        return p, d, "decode choices[0].routed_experts"
    if kind == "Coverage":
        p, d = inline()
        d["choices"][0]["routed_experts"]["start"] = 100
        return p, d, "decode choices[0].routed_experts"
    raise AssertionError(kind)


KINDS = ["Structure", "Integer", "Dtype", "Overflow", "MissingPrefillField", "MissingDecodeRows", "Base64",
         "Npy", "Length", "FormMismatch", "RowShapeMismatch", "DtypeMismatch", "Coverage"]


def as_type(value, kind):
    text = json.dumps(value, indent=1)
    return {bytes: text.encode(), bytearray: bytearray(text.encode()), str: text, dict: value}[kind]


@pytest.mark.parametrize("decode_type", [bytes, bytearray, str, dict], ids=lambda t: t.__name__)
@pytest.mark.parametrize("kind", KINDS)
def test_each_error_kind_with_its_location_and_the_decode_untouched(kind, decode_type):
    p, d, location = fault(kind)
    prefill, decode = as_type(p, decode_type), as_type(d, decode_type)
    before = copy.deepcopy(decode)
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.merge_routed_experts_for_pd(prefill, decode)
    e = err.value
    assert isinstance(e, ValueError)
    assert e.kind == kind, str(e)
    assert e.location == location, str(e)
    assert str(e).startswith(location + ":"), str(e)
    assert decode == before


@pytest.mark.parametrize("side", ["prefill", "decode"])
@pytest.mark.parametrize("text", [b"{", b'{"choices": []} x', b"\xef\xbb\xbf{}", b'{"a" 1}', b"\xff"])
def test_invalid_json_is_kind_json_without_a_location(side, text):
    p, d = pair("seed")
    prefill, decode = (text, bytearray(d)) if side == "prefill" else (p, bytearray(text))
    before = bytes(decode)
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.merge_routed_experts_for_pd(prefill, decode)
    assert err.value.kind == "Json"
    assert err.value.location is None
    assert str(err.value).startswith(f"{side} response: invalid JSON at byte ")
    assert bytes(decode) == before
    # A dict decode with an invalid prefill text: the same error.
    if side == "prefill":
        with pytest.raises(pd_stitch.StitchError) as err:
            pd_stitch.merge_routed_experts_for_pd(text, json.loads(d))
        assert err.value.kind == "Json"
        with pytest.raises(pd_stitch.StitchError):
            pd_stitch.prefill_has_routed_experts(text)


def test_the_message_is_the_rust_errors():
    p, d, _ = fault("Integer")
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.merge_routed_payload_in_json(p, d)
    assert str(err.value) == "decode choices[1].payload[1].rows: must be a non-negative integer, got -1"
