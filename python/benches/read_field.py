"""pd_stitch.read_field against the plain NumPy reading of the same rules
(python/tests/numpy_read_field.py): many small segments over many files on
tmpfs (/dev/shm), side by side in one run. Prints the ratio.

    python python/benches/read_field.py [--segments N] [--files F] [--repeat R]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import pd_stitch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from numpy_read_field import read_field as numpy_read_field  # noqa: E402


def layout(root, segments, files, rows=4, shape=(48, 8)):
    rng = np.random.default_rng(0)
    row_bytes = int(np.prod(shape))
    out, buffers = [], [bytearray() for _ in range(files)]
    for k in range(segments):
        f = k % files
        offset = len(buffers[f])
        buffers[f] += rng.integers(0, 256, rows * row_bytes, dtype=np.uint8).tobytes()
        out.append(["routed_experts", f"f{f}.bin", offset, k * rows, rows, "uint8", list(shape)])
        # A CSR mask beside it: rows + 1 offsets, then the values.
        offset = len(buffers[f])
        counts = rng.integers(0, 8, rows)
        starts = offset + 4 * (rows + 1) + 4 * np.concatenate([[0], np.cumsum(counts)])
        buffers[f] += starts.astype("<u4").tobytes() + rng.integers(0, 32000, counts.sum(), dtype="<i4").tobytes()
        out.append(["sampling_mask", f"f{f}.bin", offset, k * rows, rows, "uint32", []])
    for f, buf in enumerate(buffers):
        with open(os.path.join(root, f"f{f}.bin"), "wb") as fh:
            fh.write(buf)
    return out, segments * rows


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--segments", type=int, default=2000)
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = tempfile.mkdtemp(prefix="pd-stitch-read-field-", dir=base)
    try:
        segments, n = layout(root, args.segments, args.files)
        for field in ("routed_experts", "sampling_mask"):
            ours = pd_stitch.read_field(segments, field, 0, n, root=root)
            theirs = numpy_read_field(segments, field, 0, n, root=root)
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), field
            t_ours = best(lambda: pd_stitch.read_field(segments, field, 0, n, root=root), args.repeat)
            t_numpy = best(lambda: numpy_read_field(segments, field, 0, n, root=root), args.repeat)
            print(
                f"{field:16} {args.segments} segments over {args.files} files on {base or 'tmp'}: "
                f"read_field {t_ours * 1e3:.2f} ms, NumPy {t_numpy * 1e3:.2f} ms: {t_numpy / t_ours:.1f}x"
            )
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
