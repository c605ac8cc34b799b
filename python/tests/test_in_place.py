"""A bytearray decode is merged where it is: the same object comes back,
grown or shortened to the merged text, which is what the bytes merge gives;
on error, or when its length cannot change, it is left as it was."""
import json
import tracemalloc

import pytest

import pd_stitch
from conftest import pair
from pure_merge import compact_pair

MERGES = [pd_stitch.merge_routed_experts_for_pd, pd_stitch.merge_routed_payload_in_json,
          pd_stitch.merge_routed_experts_in_json]


def text(value, spaced_shape=False):
    """JSON text of `value`; with `spaced_shape`, a compact object's shape
    written `[2, 1, 3]`, which the merge rewrites as `[2,1,3]`."""
    out = json.dumps(value, separators=(", ", ": "))
    if not spaced_shape:
        out = out.replace("[2, 1, 3]", "[2,1,3]")
    return out.encode()


PREFILL = {"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}
# The decode's rows for positions 0 and 1: same length once merged.
SAME = {"choices": [{"routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}]}
# The decode's rows from position 1 on: the merge adds the prefill's row.
GROWS = {"choices": [{"routed_experts": {"data": "BAUG", "shape": [1, 1, 3], "start": 1, "dtype": "uint8"}}]}


def cases():
    """(name, prefill, decode): merged texts longer, as long and shorter
    than the decode."""
    p = text(PREFILL)
    return [("grows", p, text(GROWS)), ("same length", p, text(SAME)),
            ("shorter", p, text(SAME, spaced_shape=True)), ("by handle", *pair("seed")),
            ("inline pair", *pair("inline"))]


@pytest.mark.parametrize("name,prefill,decode", cases(), ids=[c[0] for c in cases()])
@pytest.mark.parametrize("merge", MERGES, ids=lambda m: m.__name__)
def test_the_very_bytearray_comes_back_holding_the_bytes_merge(merge, name, prefill, decode):
    expected = merge(prefill, decode)
    array = bytearray(decode)
    out = merge(prefill, array)
    assert out is array
    if expected is decode:  # nothing to stitch
        assert array == decode
    else:
        assert bytes(array) == expected


def test_the_cases_grow_keep_and_shorten():
    # The cases above cover all three ways the length can go.
    lengths = {name: len(pd_stitch.merge_routed_experts_for_pd(p, d)) - len(d) for name, p, d in cases()[:3]}
    assert lengths["grows"] > 0 and lengths["same length"] == 0 and lengths["shorter"] < 0, lengths


def test_an_error_leaves_the_bytearray_as_it_was():
    p, d = pair("seed")
    for prefill, decode, kind in [(p, d[: len(d) // 2], "Json"), (p[: len(p) // 2], d, "Json"),
                                  (p, d.replace(b'"rows": ', b'"rows": -', 1), "Integer")]:
        array = bytearray(decode)
        with pytest.raises(pd_stitch.StitchError) as err:
            pd_stitch.merge_routed_experts_for_pd(prefill, array)
        assert err.value.kind == kind
        assert array == decode


def test_strict_refuses_a_gap_and_leaves_the_bytearray():
    seg = {"field": "routed_experts", "offset": 0, "dtype": "uint8", "shape": [2]}
    prefill = json.dumps({"choices": [{"payload": [dict(seg, file="p.bin", pos=0, rows=3)]}]}).encode()
    decode = json.dumps({"choices": [{"payload": [dict(seg, file="d.bin", pos=2, rows=2),
                                                  dict(seg, file="d.bin", pos=6, rows=2)]}]}).encode()
    array = bytearray(decode)
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.merge_routed_payload_in_json(prefill, array, strict=True)
    assert err.value.kind == "Layout"
    assert array == decode


@pytest.mark.parametrize("name,prefill,decode", cases()[:3], ids=[c[0] for c in cases()[:3]])
def test_a_bytearray_exported_elsewhere_changes_only_if_its_length_does_not(name, prefill, decode):
    expected = pd_stitch.merge_routed_experts_for_pd(prefill, decode)
    array = bytearray(decode)
    view = memoryview(array)
    if len(expected) == len(decode):
        # Merged in place; the view sees the merged bytes.
        assert pd_stitch.merge_routed_experts_for_pd(prefill, array) is array
        assert bytes(view) == expected
    else:
        # CPython's own refusal to resize an exported bytearray, raised
        # before anything is written.
        with pytest.raises(BufferError):
            pd_stitch.merge_routed_experts_for_pd(prefill, array)
        assert array == decode
    view.release()
    # Once the view is gone, the merge goes through.
    assert bytes(pd_stitch.merge_routed_experts_for_pd(prefill, array)) == expected


def test_the_prefill_may_be_the_decode_itself():
    # The prefill is read from a copy, taken before the bytearray is written.
    p, _ = pair("inline")
    expected = pd_stitch.merge_routed_experts_for_pd(p, p)
    array = bytearray(p)
    out = pd_stitch.merge_routed_experts_for_pd(array, array)
    assert out is array
    assert (bytes(array) == expected) if expected is not p else (array == p)


def test_nothing_but_the_bytearray_holds_the_merged_decode():
    # A same-length inline merge of megabytes allocates no Python object of
    # the decode's size: the peak of Python's allocations during the call
    # stays far below it, where the bytes merge allocates a new object of
    # that size (the control).
    prefill, _ = compact_pair(prompt=1024, positions=8 * 1024)
    full = json.loads(compact_pair(prompt=1024, positions=8 * 1024 + 1023)[1])
    full["choices"][0]["routed_experts"]["start"] = 0
    decode = json.dumps(full, separators=(",", ":")).encode()
    size = len(decode)
    assert size > 4_000_000
    array = bytearray(decode)
    expected = pd_stitch.merge_routed_experts_for_pd(prefill, decode)
    assert len(expected) == size and expected != decode

    def peak(call):
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base, _ = tracemalloc.get_traced_memory()
            call()
            _, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return top - base

    in_place = peak(lambda: pd_stitch.merge_routed_experts_for_pd(prefill, array))
    assert bytes(array) == expected
    as_bytes = peak(lambda: pd_stitch.merge_routed_experts_for_pd(prefill, decode))
    assert as_bytes >= size, as_bytes
    assert in_place < size // 20, (in_place, size)


def test_a_merge_that_grows_a_large_bytearray():
    p, d = compact_pair(prompt=2048, positions=4096)
    expected = pd_stitch.merge_routed_experts_for_pd(p, d)
    assert len(expected) > len(d)
    array = bytearray(d)
    assert pd_stitch.merge_routed_experts_for_pd(p, array) is array
    assert bytes(array) == expected
