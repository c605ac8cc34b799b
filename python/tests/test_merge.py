"""The merges: every argument type in and out, the same answers as the Rust
crate (the `pd-stitch merge` command) and as the pure-Python merge, the very
object back when there is nothing to stitch, inputs never modified but a
bytearray decode (merged where it is), and the keyword arguments."""
import copy
import json
import subprocess

import pytest

import pd_stitch
from conftest import PAIRS, loads, pair
from pure_merge import by_handle_pair, compact_pair, pure_merge

TYPES = [bytes, bytearray, str, dict]
MERGES = [pd_stitch.merge_routed_experts_for_pd, pd_stitch.merge_routed_payload_in_json,
          pd_stitch.merge_routed_experts_in_json]


def as_type(body, kind):
    if kind is bytes:
        return bytes(body)
    if kind is bytearray:
        return bytearray(body)
    if kind is str:
        return body.decode()
    return json.loads(body)


@pytest.fixture(scope="module")
def cli_merged(pd_stitch_cli):
    """What the Rust crate makes of each committed stitchable pair."""
    out = {}
    for name in ["seed", "inline"]:
        done = subprocess.run([str(pd_stitch_cli), "merge", str(PAIRS / name / "prefill.json"),
                               str(PAIRS / name / "decode.json")], check=True, capture_output=True, timeout=60)
        out[name] = json.loads(done.stdout)
    return out


# The pair, the merges that stitch it, and the merge that has nothing to do.
CASES = [("seed", [pd_stitch.merge_routed_experts_for_pd, pd_stitch.merge_routed_payload_in_json],
          pd_stitch.merge_routed_experts_in_json),
         ("inline", [pd_stitch.merge_routed_experts_for_pd, pd_stitch.merge_routed_experts_in_json],
          pd_stitch.merge_routed_payload_in_json)]


@pytest.mark.parametrize("prefill_type", TYPES, ids=lambda t: "prefill-" + t.__name__)
@pytest.mark.parametrize("decode_type", TYPES, ids=lambda t: "decode-" + t.__name__)
@pytest.mark.parametrize("name,merges,idle", CASES, ids=[c[0] for c in CASES])
def test_types_in_types_out_and_the_rust_answer(cli_merged, name, merges, idle, prefill_type, decode_type):
    p, d = pair(name)
    for merge in merges:
        prefill, decode = as_type(p, prefill_type), as_type(d, decode_type)
        before = copy.deepcopy(decode)
        out = merge(prefill, decode)
        assert type(out) is decode_type, merge.__name__
        assert loads(out) == cli_merged[name], merge.__name__
        if decode_type is bytearray:
            # Merged where it is (tests/test_in_place.py).
            assert out is decode
        else:
            assert out is not decode
            assert decode == before, "the input decode was modified"
    # The other kind of rows is absent: nothing to stitch, the very object back.
    decode = as_type(d, decode_type)
    assert idle(as_type(p, prefill_type), decode) is decode


@pytest.mark.parametrize("kind", TYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("merge", MERGES, ids=lambda m: m.__name__)
def test_nothing_to_stitch_returns_the_very_object(merge, kind):
    prefill = as_type(b'{"choices": [{"text": "a"}]}', kind)
    decode = as_type(b'{"choices": [{"text": "b", "payload": [{"field": "sampling_mask"}]}]}', kind)
    assert merge(prefill, decode) is decode
    assert pd_stitch.prefill_has_routed_experts(prefill) is False


@pytest.mark.parametrize("kind", TYPES, ids=lambda t: t.__name__)
def test_prefill_has_routed_experts_on_every_type(kind):
    for name, expected in [("seed", True), ("inline", True)]:
        assert pd_stitch.prefill_has_routed_experts(as_type(pair(name)[0], kind)) is expected, name
    # Rows in choice 1 only, or a null routed_experts: nothing to stitch.
    rows = json.loads(pair("seed")[0])["choices"][0]
    for prefill in [{"choices": [{"text": "a"}, rows]}, {"choices": [{"routed_experts": None}]}]:
        assert pd_stitch.prefill_has_routed_experts(as_type(json.dumps(prefill).encode(), kind)) is False


def test_a_dict_output_is_new_and_shares_nothing_it_changed():
    p, d = pair("seed")
    decode = json.loads(d)
    before = copy.deepcopy(decode)
    out = pd_stitch.merge_routed_experts_for_pd(json.loads(p), decode)
    assert decode == before
    assert out is not decode and out["choices"] is not decode["choices"]
    for new, old in zip(out["choices"], decode["choices"]):
        assert new is not old and new["payload"] is not old["payload"]
    # Writing into the output leaves the input alone.
    out["choices"][0]["payload"].clear()
    assert decode == before


def test_dict_keys_outside_the_stitched_values_are_kept_as_they_are():
    p, d = pair("seed")
    decode = json.loads(d)
    marker = object()  # not JSON: the merge must never look at it
    decode["choices"][0]["extra"] = marker
    decode["usage"] = marker
    out = pd_stitch.merge_routed_experts_for_pd(json.loads(p), decode)
    assert out["usage"] is marker and out["choices"][0]["extra"] is marker
    assert list(out["choices"][0]) == list(decode["choices"][0])


@pytest.mark.parametrize("workload", ["by-handle", "compact"])
def test_the_same_output_as_the_pure_python_merge(workload):
    # Logprobs exact in binary: this compares merges, not float parsers (the
    # bytes path keeps every byte outside the stitched values; its first
    # version, a serde_json round trip, may move a float by an ulp).
    p, d = by_handle_pair(3, 8, divisor=1024.0) if workload == "by-handle" else compact_pair(prompt=64, positions=128)
    expected = json.loads(pure_merge(p, d))
    assert json.loads(pd_stitch.merge_routed_experts_for_pd(p, d)) == expected
    assert pd_stitch.merge_routed_experts_for_pd(json.loads(p), json.loads(d)) == expected


def test_fields_is_the_set_of_stitched_fields():
    seg = {"file": "p.bin", "offset": 0, "pos": 0, "rows": 3, "dtype": "float32", "shape": [2]}
    prefill = {"choices": [{"payload": [dict(seg, field="routed_experts"),
                                        dict(seg, field="routed_expert_weights")]}]}
    dseg = dict(seg, file="d.bin", pos=2)
    decode = {"choices": [{"payload": [dict(dseg, field="routed_experts"),
                                       dict(dseg, field="routed_expert_weights")]}]}
    both = pd_stitch.merge_routed_payload_in_json(
        prefill, decode, fields=["routed_experts", "routed_expert_weights"])
    assert [(s["field"], s["pos"], s["rows"]) for s in both["choices"][0]["payload"]] == [
        ("routed_experts", 0, 3), ("routed_expert_weights", 0, 3),
        ("routed_experts", 3, 2), ("routed_expert_weights", 3, 2)]
    for bad in ["routed_experts", b"routed_experts", [1]]:
        with pytest.raises(TypeError):
            pd_stitch.merge_routed_payload_in_json(prefill, decode, fields=bad)
    assert pd_stitch.prefill_has_routed_experts(prefill, fields=("routed_experts",))


def test_fields_without_routed_experts_stitches_only_those():
    seg = {"file": "p.bin", "offset": 0, "pos": 0, "rows": 3, "dtype": "float32", "shape": [2]}
    prefill = {"choices": [{"payload": [dict(seg, field="routed_experts"),
                                        dict(seg, field="routed_expert_weights")]}]}
    decode = {"choices": [{"payload": [dict(seg, file="d.bin", pos=2, field="routed_experts")]}]}
    # routed_experts is not stitched: the decode's segment passes through, and
    # the prefill's routed_experts segment is not copied.
    out = pd_stitch.merge_routed_payload_in_json(prefill, decode, fields={"routed_expert_weights"})
    assert [(s["field"], s["pos"]) for s in out["choices"][0]["payload"]] == [
        ("routed_expert_weights", 0), ("routed_experts", 2)]


@pytest.mark.parametrize("kind", [bytes, dict], ids=lambda t: t.__name__)
def test_strict_refuses_a_gap_and_keeps_the_decode(kind):
    seg = {"field": "routed_experts", "offset": 0, "dtype": "uint8", "shape": [2]}
    prefill = {"choices": [{"payload": [dict(seg, file="p.bin", pos=0, rows=3)]}]}
    decode = {"choices": [{"payload": [dict(seg, file="d.bin", pos=2, rows=2),
                                       dict(seg, file="d.bin", pos=6, rows=2)]}]}
    p, d = as_type(json.dumps(prefill).encode(), kind), as_type(json.dumps(decode).encode(), kind)
    before = copy.deepcopy(d)
    # Not strict, the gap [4, 6) goes through.
    pd_stitch.merge_routed_payload_in_json(p, d)
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.merge_routed_payload_in_json(p, d, strict=True)
    assert err.value.kind == "Layout"
    assert err.value.location.startswith("decode choices[0]")
    assert d == before
    # A layout without a fault passes strict.
    p2, d2 = pair("seed")
    pd_stitch.merge_routed_experts_for_pd(p2, d2, strict=True)


def test_wrong_argument_types_are_type_errors():
    p, d = pair("seed")
    for bad in [None, 3, [1], memoryview(d)]:
        with pytest.raises(TypeError):
            pd_stitch.merge_routed_experts_for_pd(p, bad)
        with pytest.raises(TypeError):
            pd_stitch.merge_routed_experts_for_pd(bad, d)
    with pytest.raises(TypeError):
        pd_stitch.merge_routed_experts_for_pd(p, {"choices": [{"payload": [{1: 2}]}]})
    with pytest.raises(ValueError):
        pd_stitch.merge_routed_experts_for_pd(p, {"choices": [{"payload": [float("nan")]}]})


def test_version_stubs_and_py_typed():
    from importlib import metadata
    from pathlib import Path
    assert pd_stitch.__version__ == metadata.version("pd-stitch")
    files = {Path(str(f)).name for f in metadata.files("pd-stitch")}
    assert {"py.typed", "__init__.pyi"} <= files or {"py.typed", "pd_stitch.pyi"} <= files, files
