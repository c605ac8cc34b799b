"""pd_stitch against the pure-Python merge, and gather against NumPy, side by
side in one process.

    python benches/bench.py [--quick]

Prints, for each workload of issue 14, the median time per call of
`pure_merge` (json.loads both, splice, base64 decode/concatenate/encode,
json.dumps) and of `pd_stitch.merge_routed_experts_for_pd` (bytes in, bytes
out, and a bytearray decode merged in place), and their ratios; then `pd_stitch.gather` of a by-handle response
against `numpy.fromfile` per segment plus `numpy.concatenate`.

Every iteration gets fresh inputs (new bytes objects, new files for gather
after a page-cache warm-up that both sides share), so neither side is
measured on a warm allocator alone; both sides are checked to give the same
output before timing.
"""
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import pd_stitch
from pure_merge import by_handle_pair, compact_pair, pure_merge, stitched_values


def median_time(call, make_input, iterations):
    times = []
    for _ in range(iterations):
        args = make_input()
        start = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare_merge(name, p, d, iterations):
    # The same stitched values (the whole output is compared in
    # tests/test_merge.py; here the logprobs are the issue's, which a
    # serde_json round trip may move by an ulp).
    assert stitched_values(pure_merge(p, d)) == stitched_values(pd_stitch.merge_routed_experts_for_pd(p, d)), name
    # Fresh copies each iteration: a proxy gets new bodies for every request.
    fresh = lambda: (bytes(bytearray(p)), bytes(bytearray(d)))
    # A proxy that reads the decode into a bytearray has it merged there.
    fresh_array = lambda: (bytes(bytearray(p)), bytearray(d))
    assert pd_stitch.merge_routed_experts_for_pd(*fresh_array()) == pd_stitch.merge_routed_experts_for_pd(p, d), name
    # Alternate the three so that machine load hits them alike.
    pure, rust, in_place = [], [], []
    for _ in range(iterations):
        pure.append(median_time(pure_merge, fresh, 1))
        rust.append(median_time(pd_stitch.merge_routed_experts_for_pd, fresh, 1))
        in_place.append(median_time(pd_stitch.merge_routed_experts_for_pd, fresh_array, 1))
    pure, rust, in_place = statistics.median(pure), statistics.median(rust), statistics.median(in_place)
    print(f"{name:<44} {len(d) / 1e3:>9.0f} KB  pure Python {pure * 1e3:>9.2f} ms  "
          f"pd_stitch {rust * 1e3:>8.3f} ms  speedup {pure / rust:>7.1f}x  "
          f"into a bytearray {in_place * 1e3:>8.3f} ms  speedup {pure / in_place:>7.1f}x", flush=True)
    return pure / rust


def compare_dict_paths(name, p, d, iterations):
    """Dicts in, dict out: the binding's skeleton conversion (only choices,
    payload and routed_experts cross into Rust) against the other way to
    do it, json.dumps both, the bytes merge, json.loads the result."""
    def via_text(prefill, decode):
        return json.loads(pd_stitch.merge_routed_experts_for_pd(json.dumps(prefill), json.dumps(decode)))

    fresh = lambda: (json.loads(p), json.loads(d))
    a, b = fresh()
    assert stitched_values(json.dumps(pd_stitch.merge_routed_experts_for_pd(a, b))) == \
        stitched_values(json.dumps(via_text(a, b)))
    skeleton, text = [], []
    for _ in range(iterations):
        skeleton.append(median_time(pd_stitch.merge_routed_experts_for_pd, fresh, 1))
        text.append(median_time(via_text, fresh, 1))
    skeleton, text = statistics.median(skeleton), statistics.median(text)
    print(f"{'dicts, ' + name:<44} {'':>12}  via JSON text {text * 1e3:>7.2f} ms  "
          f"skeleton {skeleton * 1e3:>8.3f} ms  ratio {text / skeleton:>7.1f}x", flush=True)


def numpy_gather(response, choice, root):
    parts = []
    for s in response["choices"][choice]["payload"]:
        if s["field"] != "routed_experts":
            continue
        shape = tuple(s["shape"])
        rows = np.fromfile(os.path.join(root, s["file"]), dtype=np.dtype(s["dtype"]).newbyteorder("<"),
                           count=s["rows"] * int(np.prod(shape)), offset=s["offset"])
        parts.append(rows.reshape((s["rows"],) + shape))
    return np.concatenate(parts)


def compare_gather(iterations, choices=8, segments=32, prompt=4096, positions=1024):
    """A merged by-handle response: the prompt in one prefill file, each
    choice's completion in `segments` segments of a decode file; 48 x 8 uint8
    rows ((4096 + 1024) x 384 bytes = 1.9 MB per choice)."""
    row = 48 * 8
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "p.bin"), "wb") as f:
            f.write(rng.integers(0, 256, prompt * row, dtype=np.uint8).tobytes())
        with open(os.path.join(root, "d.bin"), "wb") as f:
            f.write(rng.integers(0, 256, choices * positions * row, dtype=np.uint8).tobytes())
        seg = lambda file, offset, pos, rows: {"field": "routed_experts", "file": file, "offset": offset,
                                               "pos": pos, "rows": rows, "dtype": "uint8", "shape": [48, 8]}
        per = positions // segments
        response = {"choices": [
            {"index": i, "payload": [seg("p.bin", 0, 0, prompt)] + [
                seg("d.bin", (i * positions + k * per) * row, prompt + k * per, per) for k in range(segments)]}
            for i in range(choices)]}
        text = json.dumps(response).encode()
        for c in range(choices):
            assert np.array_equal(pd_stitch.gather(text, c, root=root)[1], numpy_gather(response, c, root))
        # Both read every choice of the response; NumPy's side gets the
        # response already parsed (a trainer has it as a dict), pd_stitch's
        # the bytes.
        ours = lambda: [pd_stitch.gather(text, c, root=root) for c in range(choices)]
        numpy_side = lambda: [numpy_gather(response, c, root) for c in range(choices)]
        t_ours, t_numpy = [], []
        for _ in range(iterations):
            t_numpy.append(median_time(numpy_side, tuple, 1))
            t_ours.append(median_time(ours, tuple, 1))
        t_ours, t_numpy = statistics.median(t_ours), statistics.median(t_numpy)
        mb = choices * (prompt + positions) * row / 1e6
        print(f"{'gather, by handle, 8 choices x (1+32) segments':<44} {mb * 1e3:>9.0f} KB  "
              f"numpy.fromfile+concatenate {t_numpy * 1e3:>7.2f} ms  pd_stitch.gather {t_ours * 1e3:>7.2f} ms  "
              f"ratio {t_numpy / t_ours:>5.2f}x", flush=True)


def main():
    quick = "--quick" in sys.argv
    n = 5 if quick else 41
    print(f"pd_stitch {pd_stitch.__version__}, Python {sys.version.split()[0]}, NumPy {np.__version__}, "
          f"median of {n} alternating runs, fresh inputs each", flush=True)
    compare_merge("by handle, 8 choices x 32 segments", *by_handle_pair(8, 32), n)
    if quick:
        compare_merge("inline compact, prompt 1k, decode 2k", *compact_pair(1024, 2048), n)
    else:
        compare_merge("inline compact, prompt 16k, decode 32k", *compact_pair(), max(n // 4, 5))
    compare_dict_paths("by handle, 8 x 32", *by_handle_pair(8, 32), n)
    compare_dict_paths("inline compact, 1k/2k" if quick else "inline compact, 16k/32k",
                       *(compact_pair(1024, 2048) if quick else compact_pair()), 5 if quick else 11)
    compare_gather(n)


if __name__ == "__main__":
    main()
