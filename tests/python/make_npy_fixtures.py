"""Writes the .npy fixtures under tests/fixtures/npy/ with NumPy itself.

The inline tests compare the crate's .npy reading and writing against these
files, so every expected byte here comes from NumPy, not from the crate.
Run from the repository root:  python3 tests/python/make_npy_fixtures.py
"""
import os

import numpy as np
from numpy.lib import format as npformat

OUT = os.path.join("tests", "fixtures", "npy")


def save(name, array, version=None, allow_pickle=False):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        if version is None:
            np.save(f, array, allow_pickle=allow_pickle)
        else:
            npformat.write_array(f, array, version=version, allow_pickle=allow_pickle)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261130)

    # Round trips: read, then written back byte for byte.
    save("u1_3x2x4.npy", np.arange(24, dtype="u1").reshape(3, 2, 4))
    save("u2_5x3x2.npy", (np.arange(30, dtype="u4") * 2203 % 65536).astype("<u2").reshape(5, 3, 2))
    save("u1_0x48x8.npy", np.zeros((0, 48, 8), dtype="u1"))
    save("u1_40x48x8.npy", rng.integers(0, 256, size=(40, 48, 8), dtype="u1"))
    save("i4_2x2x2.npy", np.arange(-4, 4, dtype="<i4").reshape(2, 2, 2))

    # Other header versions of u2_5x3x2: read, then written back as version 1.0.
    a = (np.arange(30, dtype="u4") * 2203 % 65536).astype("<u2").reshape(5, 3, 2)
    save("u2_5x3x2_v2.npy", a, version=(2, 0))
    save("u2_5x3x2_v3.npy", a, version=(3, 0))

    # A P/D pair and the array NumPy makes of it: prefill rows [0, 4), decode
    # rows [0, 9) (its first 4 rows are not the prompt's), merged = prefill
    # rows then decode rows [4, 9).
    prompt = rng.integers(0, 256, size=(4, 3, 2), dtype="u1")
    decode = rng.integers(0, 256, size=(9, 3, 2), dtype="u1")
    save("pd_prefill_u1.npy", prompt)
    save("pd_decode_u1.npy", decode)
    save("pd_merged_u1.npy", np.concatenate([prompt, decode[4:]]))

    # Widening: a uint8 prefill with a uint16 decode merges into uint16.
    decode16 = rng.integers(0, 65536, size=(9, 3, 2), dtype="<u2")
    save("pd_decode_u2.npy", decode16)
    save("pd_merged_u1_u2.npy", np.concatenate([prompt.astype("<u2"), decode16[4:]]))

    # Not rows: each must be refused.
    save("bad_big_endian.npy", np.arange(8, dtype=">u2").reshape(2, 2, 2))
    save("bad_fortran.npy", np.asfortranarray(np.arange(24, dtype="u1").reshape(2, 3, 4)))
    save("bad_2d.npy", np.arange(6, dtype="u1").reshape(2, 3))
    save("bad_object.npy", np.array([[[1, "x"]]], dtype=object), allow_pickle=True)
    save("bad_structured.npy", np.zeros((2,), dtype=[("a", "<u2"), ("b", "u1")]))


if __name__ == "__main__":
    main()
