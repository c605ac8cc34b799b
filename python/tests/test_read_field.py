"""``pd_stitch.read_field`` is exactly the plain NumPy reading of the same
rules (``numpy_read_field.py``) on hostile layouts: overlaps, gaps, mixed
shapes and dtypes, CSR, empty segments, windows partly or wholly outside;
either both give the same array (dtype, shape, values, fill) or both raise."""

import math
import os
import random
import sys

import numpy as np
import pytest

import pd_stitch

sys.path.insert(0, os.path.dirname(__file__))
from numpy_read_field import read_field as numpy_read_field  # noqa: E402

DTYPES = ["uint8", "uint16", "int8", "int32", "uint32", "int64", "float16", "float32", "float64", "bool"]
SHAPES = [[], [2], [3], [2, 2], [1, 3], [0, 2]]


def fixed_layout(rng, tmp):
    files = []
    for k in range(rng.randint(1, 3)):
        name = f"f{k}.bin"
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        (tmp / name).write_bytes(data)
        files.append(name)
    segments = []
    plain = rng.random() < 0.6
    for _ in range(rng.randint(0, 5)):
        dtype, shape = ("uint8", [2]) if plain and rng.random() < 0.7 else (rng.choice(DTYPES), rng.choice(SHAPES))
        if dtype == "bool":
            continue  # raw bool bytes other than 0/1 are NumPy's own business
        if dtype.startswith("float") and plain:
            dtype = "uint8"
        segments.append(
            {
                "field": rng.choice(["routed_experts", "routed_expert_weights"]),
                "file": rng.choice(files),
                "offset": rng.randint(0, 40),
                "pos": rng.randint(0, 12),
                "rows": rng.randint(0, 4),
                "dtype": dtype,
                "shape": shape,
            }
        )
    return segments


def csr_layout(rng, tmp):
    segments = []
    data = {0: bytearray(), 1: bytearray()}
    for _ in range(rng.randint(0, 5)):
        f = rng.randint(0, 1)
        buf = data[f]
        offset = len(buf)
        counts = [rng.randint(0, 4) for _ in range(rng.randint(0, 4))]
        at = offset + 4 * (len(counts) + 1)
        starts = [at]
        for c in counts:
            at += 4 * c
            starts.append(at)
        buf += np.array(starts, dtype="<u4").tobytes()
        values = [rng.randint(-1000, 1000) for _ in range(sum(counts))]
        field = rng.choice(["sampling_mask", "sampling_mask_logprobs"])
        if field == "sampling_mask":
            buf += np.array(values, dtype="<i4").tobytes()
        else:
            buf += np.array(values, dtype="<f4").tobytes() if rng.random() < 0.9 else bytes(4 * len(values))
        segments.append({"field": field, "file": f"m{f}.bin", "offset": offset, "pos": rng.randint(0, 10),
                         "rows": len(counts), "dtype": "uint32", "shape": []})
    if rng.random() < 0.2 and len(data[0]) >= 8:
        k = rng.randrange(0, len(data[0]) // 4) * 4
        data[0][k : k + 4] = np.array([rng.randint(0, 64)], dtype="<u4").tobytes()
    for f, buf in data.items():
        (tmp / f"m{f}.bin").write_bytes(bytes(buf))
    return segments


def outcome(fn):
    try:
        return ("ok", fn())
    except (ValueError, IndexError, OSError, KeyError, TypeError, pd_stitch.StitchError) as e:
        return ("raises", type(e).__name__)


def same(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "raises":
        return True
    x, y = a[1], b[1]
    if x is None or y is None:
        return x is None and y is None
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True)


@pytest.mark.parametrize("seed", range(300))
def test_read_field_is_the_numpy_reading_on_hostile_layouts(tmp_path, seed):
    rng = random.Random(seed)
    segments = fixed_layout(rng, tmp_path) + csr_layout(rng, tmp_path)
    rng.shuffle(segments)
    as_lists = rng.random() < 0.5
    given = [[s[k] for k in ("field", "file", "offset", "pos", "rows", "dtype", "shape")] for s in segments] if as_lists else segments
    for field in ("routed_experts", "routed_expert_weights", "sampling_mask", "sampling_mask_logprobs"):
        lo = rng.randint(0, 12)
        hi = lo + rng.randint(0, 12)
        ours = outcome(lambda: pd_stitch.read_field(given, field, lo, hi, root=str(tmp_path)))
        theirs = outcome(lambda: numpy_read_field(segments, field, lo, hi, root=str(tmp_path)))
        assert same(ours, theirs), (seed, field, lo, hi, segments, ours, theirs)


def test_a_re_emission_reads_the_later_rows_and_a_gap_the_fill(tmp_path):
    (tmp_path / "d.bin").write_bytes(bytes([40, 41, 50, 51, 52]))
    seg = lambda off, pos, rows: ["routed_experts", "d.bin", off, pos, rows, "uint8", []]  # noqa: E731
    out = pd_stitch.read_field([seg(0, 4, 2), seg(2, 5, 3), seg(4, 10, 1)], "routed_experts", 3, 11, root=str(tmp_path))
    assert out.dtype == np.int32
    assert out.tolist() == [0, 40, 50, 51, 52, 0, 0, 52]


def test_no_segment_of_the_field_is_none_and_an_unknown_field_a_key_error(tmp_path):
    assert pd_stitch.read_field([], "routed_experts", 0, 4, root=str(tmp_path)) is None
    (tmp_path / "x.bin").write_bytes(b"\0" * 8)
    with pytest.raises(KeyError):
        pd_stitch.read_field([["other", "x.bin", 0, 0, 1, "uint8", []]], "other", 0, 1, root=str(tmp_path))


def test_reads_are_confined_to_root_and_allow(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\x07" * 4)
    seg = ["routed_experts", "../secret.bin", 0, 0, 2, "uint8", []]
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.read_field([seg], "routed_experts", 0, 2, root=str(tmp_path / "root"))
    assert e.value.kind == "Outside"
    out = pd_stitch.read_field([seg], "routed_experts", 0, 2, root=str(tmp_path / "root"), allow=[str(tmp_path)])
    assert out.tolist() == [7, 7]
