"""A plain NumPy reading of payload segments by the rules of docs/SPEC.md,
section 5a (prime-rl's trainer reader, restated): the reference that
``pd_stitch.read_field`` must equal, and the baseline of its benchmark.

Written from the rules, one file read at a time, in Python."""

import math
import os

import numpy as np

FILLS = {
    "routed_experts": (0, False),
    "routed_expert_weights": (0.0, False),
    "sampling_mask": (-1, True),
    "sampling_mask_logprobs": (-math.inf, True),
}

FIELDS = ("field", "file", "offset", "pos", "rows", "dtype", "shape")


def as_dict(segment):
    return segment if isinstance(segment, dict) else dict(zip(FIELDS, segment))


def _pread(path, offset, size):
    if size < 0:
        raise ValueError("negative read")
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise OSError(f"{path}: short read")
    return data


def read_field(segments, field, lo, hi, root="."):
    segments = [as_dict(s) for s in segments]
    mine = [s for s in segments if s["field"] == field]
    if not mine:
        return None
    fill, ragged = FILLS[field]
    path = lambda s: os.path.join(root, s["file"])  # noqa: E731
    if ragged:
        values = np.float32 if isinstance(fill, float) else np.int32
        mine = [s for s in mine if s["rows"]]
        tables = [
            np.frombuffer(_pread(path(s), s["offset"], 4 * (s["rows"] + 1)), dtype="<u4").astype(np.int64)
            for s in mine
        ]
        width = max([int((np.diff(t) // 4).max()) for t in tables] + [1])
        out = np.full((hi - lo, width), fill, dtype=values)
        pending = []
        for s, t in zip(mine, tables):
            a, b = max(s["pos"], lo) - s["pos"], min(s["pos"] + s["rows"], hi) - s["pos"]
            if a < b:
                w = t[a : b + 1]
                pending.append((s["pos"] + a - lo, w, _pread(path(s), int(w[0]), int(w[-1] - w[0]))))
        for row, w, data in pending:
            counts = np.clip(np.diff(w) // 4, 0, width)
            got = np.frombuffer(data, dtype="<" + np.dtype(values).str[1:])
            if len(got) != counts.sum():
                raise ValueError("values do not match the counts")
            block = out[row : row + len(counts)]
            block[:] = fill
            block[np.arange(width) < counts[:, None]] = got
        return out
    rank = min(len(s["shape"]) for s in mine)
    shape = [max(s["shape"][k] for s in mine) for k in range(rank)]
    first = np.dtype(mine[0]["dtype"])
    out = np.full((hi - lo, *shape), fill, dtype=np.float32 if first.kind == "f" else np.int32)
    pending = []
    for s in mine:
        start, end = max(s["pos"], lo), min(s["pos"] + s["rows"], hi)
        if start < end:
            dtype = np.dtype(s["dtype"]).newbyteorder("<")
            row_bytes = dtype.itemsize * math.prod(s["shape"])
            data = _pread(path(s), s["offset"] + (start - s["pos"]) * row_bytes, (end - start) * row_bytes)
            pending.append((s, start, end, dtype, data))
    for s, start, end, dtype, data in pending:
        if len(s["shape"]) > rank:
            raise IndexError("too many indices")
        rows = np.frombuffer(data, dtype=dtype).reshape(end - start, *s["shape"])
        out[(slice(start - lo, end - lo), *(slice(0, d) for d in s["shape"]))] = rows
    return out
