"""Writes the example responses and row files under examples/.

Rows are easy to read back: the uint16 element k of the true row of position x
is 100 * x + k, and a decode instance's own row for a prompt position is
9900 + k (it does not know the prompt's routing: a row a router could give,
distinct experts in each layer, but not the prompt's). Run from the repository
root:  python3 examples/make_examples.py
"""
import base64
import json
import os
import struct

SHAPE = [2, 4]  # (layers, topk)
ELEMS = SHAPE[0] * SHAPE[1]
ROW = 2 * ELEMS  # uint16


def row(x, wrong=False):
    return struct.pack("<%dH" % ELEMS, *([9900 + k for k in range(ELEMS)] if wrong else [100 * x + k for k in range(ELEMS)]))


def seg(field, file, offset, pos, rows, dtype="uint16", shape=SHAPE):
    return {"field": field, "file": file, "offset": offset, "pos": pos, "rows": rows, "dtype": dtype, "shape": shape}


def write(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def seed():
    # Prompt of 3 tokens; the prefill computed rows [0, 3).
    with open("examples/seed/p.bin", "wb") as f:
        f.write(b"".join(row(x) for x in range(3)))
    # Two decode choices of 3 tokens: rows [2, 5), row 2 the decode's own (wrong).
    # Choice 1 was preempted after its first row: two segments.
    d = b"".join([row(2, True), row(3), row(4)]) + b"".join([row(2, True), row(3), row(4)])
    with open("examples/seed/d.bin", "wb") as f:
        f.write(d)
    with open("examples/seed/m.bin", "wb") as f:
        f.write(bytes(3 * 8))
    write("examples/seed/prefill.json", {
        "id": "cmpl-seed", "object": "text_completion",
        "choices": [{"index": 0, "token_ids": [11], "finish_reason": "length", "payload": [
            seg("routed_experts", "p.bin", 0, 0, 3),
            seg("sampling_mask", "m.bin", 0, 2, 1, "bool", [8]),
        ]}],
    })
    write("examples/seed/decode.json", {
        "id": "cmpl-seed", "object": "text_completion",
        "choices": [
            {"index": 0, "token_ids": [11, 12, 13], "finish_reason": "length", "payload": [
                seg("routed_experts", "d.bin", 0, 2, 3),
                seg("sampling_mask", "m.bin", 0, 2, 3, "bool", [8]),
            ]},
            {"index": 1, "token_ids": [11, 21, 22], "finish_reason": "length", "payload": [
                seg("routed_experts", "d.bin", 3 * ROW, 2, 1),
                seg("routed_experts", "d.bin", 4 * ROW, 3, 2),
            ]},
        ],
    })


def inline():
    b64 = lambda rows: base64.b64encode(b"".join(rows)).decode()
    write("examples/inline/prefill.json", {"choices": [{"index": 0, "routed_experts": {
        "data": b64([row(x) for x in range(3)]), "shape": [3] + SHAPE, "start": 0, "dtype": "uint16"}}]})
    write("examples/inline/decode.json", {"choices": [{"index": 0, "routed_experts": {
        "data": b64([row(2, True), row(3), row(4)]), "shape": [3] + SHAPE, "start": 2, "dtype": "uint16"}}]})


def broken():
    with open("examples/broken/rows.bin", "wb") as f:
        f.write(b"".join(row(x) for x in range(6)))
    write("examples/broken/gap.json", {"choices": [{"payload": [
        seg("routed_experts", "rows.bin", 0, 0, 3), seg("routed_experts", "rows.bin", 4 * ROW, 4, 2)]}]})
    write("examples/broken/overlap.json", {"choices": [{"payload": [
        seg("routed_experts", "rows.bin", 0, 0, 3), seg("routed_experts", "rows.bin", 2 * ROW, 2, 3)]}]})
    write("examples/broken/short.json", {"choices": [{"payload": [
        seg("routed_experts", "rows.bin", 0, 0, 3), seg("routed_experts", "rows.bin", 3 * ROW, 3, 4)]}]})
    write("examples/broken/missing.json", {"choices": [{"payload": [
        seg("routed_experts", "no-such-file.bin", 0, 0, 3)]}]})


def npy_file(descr, shape, data):
    """A version 1.0 .npy file, as numpy.save writes it."""
    dims = ", ".join("%d" % d for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def episode():
    """Three turns of one chat, each answered another way, for
    `pd-stitch episode` (README "The episode"). Turn 0 (prompt 11 12 13,
    completion 14 15) is a P/D pair by handle, the decode's own row for the
    prompt's last position wrong; turn 1 repeats turn 0 and adds 16 17,
    generates 18 19 20, and asked for rows from L - 1 = 4 (inline compact,
    in the JSONL line): its first row is the boundary, turn 0's last token;
    turn 2 adds 21, generates 22 23, and asked for all its rows (a .npy
    placed by its counts), its row of position 6 routed otherwise (a
    re-prefill: 650 + k), which turn 1's keeps under --prefer earliest."""
    d = "examples/episode"
    os.makedirs(d, exist_ok=True)
    b64 = lambda data: base64.b64encode(data).decode()
    with open(f"{d}/p0.bin", "wb") as f:
        f.write(b"".join(row(x) for x in range(3)))
    with open(f"{d}/d0.bin", "wb") as f:
        f.write(row(2, True) + row(3))
    write(f"{d}/t0.prefill.json", {"choices": [{"index": 0, "token_ids": [14], "payload": [
        seg("routed_experts", "p0.bin", 0, 0, 3)]}]})
    write(f"{d}/t0.decode.json", {"choices": [{"index": 0, "token_ids": [14, 15], "payload": [
        seg("routed_experts", "d0.bin", 0, 2, 2)]}]})
    rerouted = struct.pack("<%dH" % ELEMS, *[650 + k for k in range(ELEMS)])
    rows2 = b"".join(rerouted if x == 6 else row(x) for x in range(12))
    write(f"{d}/t2.json", {"usage": {"prompt_tokens": 11}, "choices": [{
        "index": 0, "token_ids": [22, 23], "routed_experts": b64(npy_file("<u2", [12] + SHAPE, rows2))}]})
    t1 = {"data": b64(b"".join(row(x) for x in range(4, 9))), "shape": [5] + SHAPE, "start": 4,
          "dtype": "uint16"}
    lines = [
        {"prompt_token_ids": [11, 12, 13], "completion_token_ids": [14, 15],
         "prefill_file": "t0.prefill.json", "decode_file": "t0.decode.json"},
        {"prompt_token_ids": [11, 12, 13, 14, 15, 16, 17], "completion_token_ids": [18, 19, 20],
         "start": 4, "response": {"choices": [{"index": 0, "routed_experts": t1}]}},
        {"prompt_token_ids": [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
         "completion_token_ids": [22, 23], "response_file": "t2.json"},
    ]
    with open(f"{d}/turns.jsonl", "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    seed()
    inline()
    broken()
    episode()
