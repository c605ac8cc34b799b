"""Reads merged responses the way an RL trainer does, with NumPy, and compares
with `pd-stitch gather --npy`.

A trainer reads a by-handle response segment by segment, in payload order:
numpy.fromfile(file, dtype, count, offset) reshaped to (rows, *shape), each
written at its positions, so where a re-emitted segment overlaps an earlier
one the later rows are the ones read (docs/SPEC.md, section 5a). For inline rows it base64-decodes `data` (compact) or
loads the .npy. This script runs `pd-stitch simulate`, reads every merged
response of every form that way, and checks that the arrays equal what
`pd-stitch gather --npy` writes (and so the colocated truth, which simulate
checks), dtype, shape and values.

Usage: python3 tests/python/trainer_read.py PATH/TO/pd-stitch [REQUESTS]
"""
import base64
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def by_handle(response, choice, root):
    """Rows of routed_experts as a trainer reads them: each segment written
    at its positions in payload order, later segments winning."""
    segs = [s for s in response["choices"][choice]["payload"] if s.get("field") == "routed_experts"]
    start = min(s["pos"] for s in segs)
    end = max(s["pos"] + s["rows"] for s in segs)
    shape = tuple(segs[0]["shape"])
    widest = max((np.dtype(s["dtype"]) for s in segs), key=lambda d: d.itemsize)
    out = np.zeros((end - start,) + shape, dtype=widest.newbyteorder("<"))
    for seg in segs:
        count = seg["rows"] * int(np.prod(shape, dtype=np.int64))
        rows = np.fromfile(os.path.join(root, seg["file"]), dtype=np.dtype(seg["dtype"]).newbyteorder("<"),
                           count=count, offset=seg["offset"])
        out[seg["pos"] - start:seg["pos"] - start + seg["rows"]] = rows.reshape((seg["rows"],) + shape)
    return out


def inline(response, choice):
    value = response["choices"][choice]["routed_experts"]
    if isinstance(value, str):
        return np.load(io.BytesIO(base64.b64decode(value, validate=True)), allow_pickle=False)
    data = base64.b64decode(value["data"], validate=True)
    return np.frombuffer(data, dtype=np.dtype(value.get("dtype", "uint8")).newbyteorder("<")).reshape(value["shape"])


def main():
    binary = sys.argv[1]
    requests = sys.argv[2] if len(sys.argv) > 2 else "24"
    passed = failed = 0
    with tempfile.TemporaryDirectory() as root:
        subprocess.run([binary, "simulate", "--requests", requests, "--seed", "7", "--dir", root],
                       check=True, stdout=subprocess.DEVNULL)
        for request in sorted(d for d in os.listdir(root) if d.startswith("req-")):
            for form, read in [("by-handle", lambda r, c: by_handle(r, c, root)), ("compact", inline), ("npy", inline)]:
                path = os.path.join(root, request, form + ".merged.json")
                with open(path) as f:
                    response = json.load(f)
                for choice in range(len(response["choices"])):
                    out = os.path.join(root, "gathered.npy")
                    subprocess.run([binary, "gather", path, "--choice", str(choice), "--root", root, "--npy", out],
                                   check=True)
                    expected = np.load(out, allow_pickle=False)
                    got = read(response, choice)
                    if got.dtype == expected.dtype and got.shape == expected.shape and np.array_equal(got, expected):
                        passed += 1
                    else:
                        failed += 1
                        print(f"MISMATCH {request} {form} choice {choice}: trainer read {got.dtype}{got.shape}, "
                              f"gather wrote {expected.dtype}{expected.shape}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
