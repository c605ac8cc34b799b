"""assemble_episode: a multi-turn episode's rows from its turns' responses.

Checked against a model written here (`model_episode`: the rule position by
position over the turns in order, no trie), in every form a turn's rows
come in (inline compact, .npy with and without its counts, by handle,
SGLang's with row_shape, a P/D pair's two responses), as dicts, bytes, str
and bytearray; every error kind with its text, the same text as the
command's; the inputs left as they were; the GIL released."""
import ast
import base64
import copy
import io
import json
import random
import subprocess
import threading
import time

import numpy as np
import pytest

import pd_stitch
from conftest import PYTHON_DIR

LAYERS, TOP_K = 2, 3
EXPERTS = 64


def b64(data):
    return base64.b64encode(data).decode()


def true_row(tokens, x):
    """The model's row of position x: a function of the token prefix
    tokens[:x + 1] (as an engine's routing is), expert ids below EXPERTS."""
    h = 1469598103934665603
    for t in tokens[: x + 1]:
        h = ((h ^ t) * 1099511628211) % (1 << 64)
    rng = random.Random(h ^ x)
    return np.array([rng.sample(range(EXPERTS), TOP_K) for _ in range(LAYERS)], dtype=np.int64)


def rows_of(tokens, lo, hi, noise=()):
    """Rows [lo, hi) of `tokens`; at the positions of `noise`, another row
    (a re-prefill that routed differently)."""
    out = []
    for x in range(lo, hi):
        row = true_row(tokens, x)
        if x in noise:
            row = (row + 1) % EXPERTS
        out.append(row)
    return np.array(out, dtype=np.int64).reshape((hi - lo, LAYERS, TOP_K))


# ------------------------------------------------------------- the forms


def compact(rows, start, dtype="uint16"):
    arr = np.asarray(rows).astype(np.dtype(dtype).newbyteorder("<"))
    return {"choices": [{"index": 0, "routed_experts": {
        "data": b64(arr.tobytes()), "shape": list(arr.shape), "start": start, "dtype": dtype}}]}


def npy(rows, counts=None, dtype="uint16"):
    """A .npy response; with counts (prompt length, completion ids) its
    choice carries token_ids and usage.prompt_tokens, which place it."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(rows).astype(np.dtype(dtype).newbyteorder("<")), allow_pickle=False)
    choice = {"index": 0, "routed_experts": b64(buf.getvalue())}
    response = {"choices": [choice]}
    if counts is not None:
        choice["token_ids"] = list(counts[1])
        response["usage"] = {"prompt_tokens": counts[0]}
    return response


def by_handle(rows, start, root, name, dtype="uint16"):
    arr = np.asarray(rows).astype(np.dtype(dtype).newbyteorder("<"))
    (root / name).write_bytes(arr.tobytes())
    return {"choices": [{"index": 0, "payload": [{
        "field": "routed_experts", "file": name, "offset": 0, "pos": start,
        "rows": len(arr), "dtype": dtype, "shape": [LAYERS, TOP_K]}]}]}


def sglang(rows, prompt, completion):
    ids = np.asarray(rows).astype("<i4")
    return {"text": "", "meta_info": {"prompt_tokens": prompt, "completion_tokens": completion,
                                      "routed_experts": b64(ids.tobytes())}}


# -------------------------------------------------------------- the model


def model_episode(turns, prefer="earliest"):
    """The rule, naively, for a linear episode (each turn's prompt repeats
    the whole of the turn before): `turns` as (tokens, P, rows by position,
    positions a decode computed); position x keeps the first (or last)
    turn's row that has one, compared with each later turn's that meets it."""
    tokens = turns[-1][0]
    n = len(tokens)
    rows, source, decoded = [None] * n, [-1] * n, [False] * n
    overlaps = []
    for t, (_, _, own, decode_positions) in enumerate(turns):
        compared, differed = 0, []
        for x in sorted(own):
            if source[x] >= 0:
                compared += 1
                if not np.array_equal(rows[x], own[x]):
                    differed.append(x)
                if prefer == "earliest":
                    continue
            rows[x], source[x], decoded[x] = own[x], t, x in decode_positions
        overlaps.append({"compared": compared, "differed": differed})
    zero = np.zeros((LAYERS, TOP_K), dtype=np.int64)
    return {
        "len": n,
        "rows": np.array([zero if r is None else r for r in rows]),
        "has_row": np.array([s >= 0 for s in source]),
        "turn": np.array(source, dtype=np.int32),
        "from_decode": np.array(decoded),
        "overlaps": overlaps,
    }


def assert_equal(got, want, dtype):
    assert got["len"] == want["len"]
    assert got["rows"].shape == (want["len"], LAYERS, TOP_K)
    assert got["rows"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got["rows"], want["rows"])
    for key in ("has_row", "turn", "from_decode"):
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert got["overlaps"] == want["overlaps"]


def three_turns(tmp_path):
    """A chat of three turns, each answered another way: turn 0 a P/D pair
    by handle (the decode's own row for the prompt's last position wrong),
    turn 1 a delta request asked from L - 1 (its first row the boundary, turn
    0's last token), turn 2 a full-context response whose row at position 6
    was routed differently (re-prefill). Returns the turns as
    assemble_episode takes them and as model_episode does."""
    t0 = [11, 12, 13, 14, 15]  # prompt [11, 12, 13], completion [14, 15]
    t1 = t0 + [16, 17, 18, 19, 20]  # prompt adds 16, 17; completion 18-20
    t2 = t1 + [21, 22, 23]  # prompt adds 21; completion 22, 23
    wrong = rows_of(t0, 2, 4)
    wrong[0] = 0
    turns = [
        {"prompt_token_ids": t0[:3], "completion_token_ids": t0[3:],
         "prefill": by_handle(rows_of(t0, 0, 3), 0, tmp_path, "t0.prefill.bin"),
         "decode": by_handle(wrong, 2, tmp_path, "t0.decode.bin")},
        {"prompt_token_ids": t1[:7], "completion_token_ids": t1[7:], "start": 4,
         "response": compact(rows_of(t1, 4, 9), 4)},
        {"prompt_token_ids": t2[:11], "completion_token_ids": t2[11:],
         "response": npy(rows_of(t2, 0, 12, noise={6}), counts=(11, t2[11:]))},
    ]
    model = [
        (t0, 3, {x: true_row(t0, x) for x in range(4)}, {3}),
        (t1, 7, {x: true_row(t1, x) for x in range(4, 9)}, {7, 8}),
        (t2, 11, dict(enumerate(rows_of(t2, 0, 12, noise={6}))), {11}),
    ]
    return turns, model


@pytest.mark.parametrize("prefer", ["earliest", "latest"])
def test_a_three_turn_episode_is_the_models(tmp_path, prefer):
    turns, model = three_turns(tmp_path)
    got = pd_stitch.assemble_episode(turns, prefer=prefer, root=tmp_path)
    want = model_episode(model, prefer)
    assert_equal(got, want, "uint16")
    # Spelled out: 13 positions; turn 2 met 9 rows and one differed.
    assert got["len"] == 13 and not got["has_row"][12] and got["has_row"][:12].all()
    assert got["overlaps"] == [{"compared": 0, "differed": []}, {"compared": 0, "differed": []},
                               {"compared": 9, "differed": [6]}]
    expected_turn = [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, -1] if prefer == "earliest" else [2] * 12 + [-1]
    assert got["turn"].tolist() == expected_turn
    # The boundary (turn 0's last token) took turn 1's row; the prefill's
    # row of position 2, not the decode's own.
    assert (got["rows"][2] == true_row(turns[0]["prompt_token_ids"], 2)).all()
    differs = got["rows"][6] != true_row(turns[2]["prompt_token_ids"], 6)
    assert differs.any() == (prefer == "latest")


def linear_episode(rng, tmp_path, dtypes):
    """Three to five linear turns, full or delta from L - 1, each in a form
    drawn at random, some rows rerouted: (turns, model turns, dtype)."""
    tokens, turns, model = [], [], []
    dtype_seen = []
    for t in range(rng.randint(3, 5)):
        common = len(tokens)
        prompt = tokens + [rng.randrange(1000) for _ in range(rng.randint(1 if t == 0 else 0, 3))]
        completion = [rng.randrange(1000) for _ in range(rng.randint(1, 3))]
        if t == 0 and len(prompt) + len(completion) < 2:
            prompt.append(7)
        seq = prompt + completion
        p, end = len(prompt), len(seq) - 1
        start = max(common - 1, 0) if rng.random() < 0.5 else 0
        noise = {x for x in range(start, end) if rng.random() < 0.2}
        form = rng.choice(["compact", "npy counted", "npy bare", "by handle", "sglang", "pair"])
        dtype = rng.choice(dtypes)
        own = {}
        if form == "pair":
            prefill_rows = rows_of(seq, start, p, noise)
            decode_rows = rows_of(seq, p - 1, end, noise)
            decode_rows[0] = (decode_rows[0] + 3) % EXPERTS  # its own, wrong, row of P - 1
            turn = {"prefill": compact(prefill_rows, start, dtype),
                    "decode": by_handle(decode_rows, p - 1, tmp_path, f"d{t}.bin", dtype)}
            own.update({x: prefill_rows[x - start] for x in range(start, p)})
            own.update({x: decode_rows[x - p + 1] for x in range(p, end)})
        else:
            rows = rows_of(seq, start, end, noise)
            if form == "compact":
                turn = {"response": compact(rows, start, dtype)}
            elif form == "npy counted":
                turn = {"response": npy(rows, (p, completion), dtype)}
            elif form == "npy bare":
                turn = {"response": npy(rows, None, dtype)}
            elif form == "by handle":
                turn = {"response": by_handle(rows, start, tmp_path, f"w{t}.bin", dtype)}
            else:
                turn = {"response": sglang(rows, p, len(completion))}
                dtype = "int32"
            own.update({x: rows[x - start] for x in range(start, end)})
        dtype_seen.append(dtype)
        turn.update({"prompt_token_ids": prompt, "completion_token_ids": completion})
        if start or rng.random() < 0.5:
            turn["start"] = start
        turns.append(turn)
        model.append((seq, p, own, set(range(p, end))))
        tokens = seq
    widest = np.result_type(*[np.dtype(d) for d in dtype_seen])
    return turns, model, widest


@pytest.mark.parametrize("dtypes", [("uint16",), ("uint8", "uint16"), ("uint8", "int16", "int32")])
def test_random_episodes_in_every_form_are_the_models(tmp_path, dtypes):
    rng = random.Random(",".join(dtypes))
    for case in range(40):
        root = tmp_path / str(case)
        root.mkdir()
        turns, model, widest = linear_episode(rng, root, dtypes)
        for prefer in ("earliest", "latest"):
            got = pd_stitch.assemble_episode(turns, prefer=prefer, root=root, row_shape=(LAYERS, TOP_K))
            assert_equal(got, model_episode(model, prefer), widest)


@pytest.mark.parametrize("kind", [dict, bytes, str, bytearray])
def test_a_response_is_a_dict_bytes_str_or_bytearray(tmp_path, kind):
    turns, model = three_turns(tmp_path)

    def convert(response):
        text = json.dumps(response)
        return {dict: response, bytes: text.encode(), str: text, bytearray: bytearray(text.encode())}[kind]

    for turn in turns:
        for key in ("response", "prefill", "decode"):
            if key in turn:
                turn[key] = convert(turn[key])
    got = pd_stitch.assemble_episode(turns, root=str(tmp_path))
    assert_equal(got, model_episode(model), "uint16")


def test_sglang_rows_take_the_row_shape_and_widen_to_int32():
    seq = [5, 6, 7, 8]
    turns = [{"prompt_token_ids": seq[:2], "completion_token_ids": seq[2:],
              "response": sglang(rows_of(seq, 0, 3), 2, 2)},
             {"prompt_token_ids": seq + [9], "completion_token_ids": [10], "start": 3,
              "response": compact(rows_of(seq + [9, 10], 3, 5), 3, "uint8")}]
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.assemble_episode(turns)
    assert err.value.kind == "RowShapeNeeded"
    assert str(err.value) == ("turn 0: response output 0: SGLang's rows need their row shape "
                              "(layers, top_k), which is not on the wire")
    got = pd_stitch.assemble_episode(turns, row_shape=(LAYERS, TOP_K))
    assert got["rows"].dtype == np.dtype("int32") and got["rows"].shape == (6, LAYERS, TOP_K)
    np.testing.assert_array_equal(got["rows"][:5], rows_of(seq + [9, 10], 0, 5))
    # A whole response's rows from its prompt's end on were the decode's.
    assert got["from_decode"].tolist() == [False, False, True, False, False, False]
    assert got["turn"].tolist() == [0, 0, 0, 1, 1, -1]


def test_a_pd_pair_is_its_stitched_response(tmp_path):
    """The prefill wins where the pair overlaps: the pair assembles as the
    router's stitched response does."""
    seq = [1, 2, 3, 4, 5, 6]
    prefill = compact(rows_of(seq, 0, 4), 0)
    own = rows_of(seq, 3, 5)
    own[0] = 0  # the decode's own row of the prompt's last position
    decode = compact(own, 3)
    turn = {"prompt_token_ids": seq[:4], "completion_token_ids": seq[4:]}
    pair = pd_stitch.assemble_episode([dict(turn, prefill=prefill, decode=decode)])
    stitched = pd_stitch.merge_routed_experts_for_pd(prefill, decode)
    whole = pd_stitch.assemble_episode([dict(turn, response=stitched)])
    np.testing.assert_array_equal(pair["rows"], whole["rows"])
    np.testing.assert_array_equal(pair["rows"][:5], rows_of(seq, 0, 5))
    assert pair["from_decode"].tolist() == whole["from_decode"].tolist() == [False] * 4 + [True, False]


def test_the_outputs_dtypes_and_shapes():
    seq = [1, 2, 3]
    turn = {"prompt_token_ids": seq[:2], "completion_token_ids": seq[2:]}
    for dtype in ("uint8", "uint16", "int32", "int64", "float16", "float32", "bool"):
        rows = rows_of(seq, 0, 2) % 2 if dtype == "bool" else rows_of(seq, 0, 2)
        got = pd_stitch.assemble_episode([dict(turn, response=compact(rows, 0, dtype))])
        assert got["rows"].dtype == np.dtype(dtype), dtype
        assert got["rows"].shape == (3, LAYERS, TOP_K)
        assert (got["has_row"].dtype, got["turn"].dtype, got["from_decode"].dtype) == (
            np.dtype(bool), np.dtype(np.int32), np.dtype(bool))
        assert got["has_row"].shape == got["turn"].shape == got["from_decode"].shape == (3,)
        assert not got["rows"][2].any()
        assert isinstance(got["len"], int) and got["len"] == 3


def test_turns_widen_as_numpy_promotes_them():
    seq = [1, 2, 3, 4, 5]
    for first, second in [("uint8", "uint16"), ("uint8", "int8"), ("uint16", "int32"),
                          ("float16", "float32"), ("int8", "uint32")]:
        turns = [{"prompt_token_ids": seq[:2], "completion_token_ids": seq[2:3],
                  "response": compact(rows_of(seq, 0, 2), 0, first)},
                 {"prompt_token_ids": seq[:4], "completion_token_ids": seq[4:], "start": 2,
                  "response": compact(rows_of(seq, 2, 4), 2, second)}]
        got = pd_stitch.assemble_episode(turns)
        assert got["rows"].dtype == np.result_type(np.dtype(first), np.dtype(second)), (first, second)
        np.testing.assert_array_equal(got["rows"][:4], rows_of(seq, 0, 4))


def test_the_inputs_are_not_modified(tmp_path):
    turns, _ = three_turns(tmp_path)
    turns[1]["response"] = json.dumps(turns[1]["response"]).encode()
    turns[2]["response"] = bytearray(json.dumps(turns[2]["response"]).encode())
    before = copy.deepcopy(turns)
    pd_stitch.assemble_episode(turns, root=tmp_path)
    assert turns == before
    # An iterator of turns is taken as a list is.
    got = pd_stitch.assemble_episode(iter(turns), root=tmp_path)
    assert got["len"] == 13


# ------------------------------------------------------------- the errors


def one_turn():
    """Prompt [1, 2, 3], completion [4, 5]: rows [0, 4)."""
    seq = [1, 2, 3, 4, 5]
    return seq, {"prompt_token_ids": seq[:3], "completion_token_ids": seq[3:],
                 "response": compact(rows_of(seq, 0, 4), 0)}


def next_turn(start=4, rows=None, first=None, dtype="uint16", shape=None):
    """Turn 1: turn 0's 5 tokens, [6] more, [7] generated: from 4, rows
    [4, 6)."""
    seq = [1, 2, 3, 4, 5, 6, 7]
    rows = rows_of(seq, start, 6) if rows is None else rows
    response = compact(rows, start if first is None else first, dtype)
    if shape is not None:
        response["choices"][0]["routed_experts"]["shape"] = shape
    return {"prompt_token_ids": seq[:6], "completion_token_ids": seq[6:], "start": start,
            "response": response}


def episode_errors(tmp_path):
    """(kind, turns, the error's text): one for each error a turn can meet."""
    seq, first = one_turn()
    outside = tmp_path.parent / (tmp_path.name + "-outside.bin")
    outside.write_bytes(bytes(12))
    handle = lambda name: {"choices": [{"payload": [{"field": "routed_experts", "file": name, "offset": 0,
                                                     "pos": 4, "rows": 2, "dtype": "uint8", "shape": [2, 3]}]}]}
    return [
        ("NoCompletion", [first, dict(next_turn(), completion_token_ids=[])],
         "turn 1: position 6: no completion token: a turn's rows end before its last completion "
         "token, so it needs one"),
        ("ExtendsNoTurn", [first, dict(next_turn(), prompt_token_ids=[1, 2, 9, 9, 9, 6])],
         "turn 1: position 2: its prompt extends no earlier turn: it shares 2 tokens with turn 0, "
         "whose prompt has 3"),
        ("StartBeyondPrefix", [first, dict(next_turn(), start=6)],
         "turn 1: position 6: asked from 6, beyond the 5 tokens it shares with turn 0: the rows "
         "below would be another sequence's"),
        ("PieceLength", [first, next_turn(rows=np.zeros((0, 2, 3)), dtype="uint8",
                                          shape=[0, 1 << 30, 1 << 31])],
         "turn 1: position 4: piece 0's rows of uint8 [1073741824, 2147483648] are too large "
         "to hold (as 8-byte elements, past isize::MAX bytes)"),
        ("Counts", [first, next_turn(first=3)],
         "turn 1: position 3: piece 0 (whole): 2 rows from 3 end at 5, but they must end at 6, "
         "before the turn's last token, which is never fed back: the counts fit neither a full "
         "nor a delta response"),
        ("StartNotAsked", [first, dict(next_turn(start=0), start=4)],
         "turn 1: position 0: piece 0's 6 rows start at 0, but turn 1 asked from 4: a delta start "
         "other than the one asked"),
        ("PieceRowShape", [first, next_turn(rows=np.zeros((2, 3, 2)))],
         "turn 1: position 4: piece 0's rows have shape [3, 2], but the episode's have [2, 3]"),
        ("PieceDtype", [first, next_turn(dtype="float32")],
         "turn 1: position 4: piece 0's rows are float32, which does not widen with the episode's "
         "uint16 (integers widen as NumPy promotes them, floats likewise; integers and floats, bool "
         "and another dtype, or uint64 and a signed integer do not mix)"),
        ("Unsized", [{"prompt_token_ids": [], "completion_token_ids": [1],
                      "response": compact(np.zeros((0, 1 << 29, 1 << 30)), 0, "uint8")}],
         "turn 0: position 0: no row: its pieces hold none, and the episode holds none yet: its "
         "rows are sized by the rows given, not by a row shape no row backs ([536870912, "
         "1073741824] of uint8)"),
        ("RowGap", [first, next_turn(start=5)],
         "turn 1: position 4 has no row: turn 1 asked from 5 but its common prefix with turn 0 "
         "is 5 (turn 0's rows end at 4)"),
        ("NoTurns", [], "the episode has no turn to assemble"),
        # A turn's response that cannot be read: the reader's kind.
        ("Json", [first, dict(next_turn(), response="{")],
         "turn 1: response: invalid JSON at byte 0: EOF while parsing an object at line 1 column 1"),
        ("Base64", [first, dict(next_turn(), response={"choices": [{"routed_experts": {
            "data": "A!==", "shape": [1, 2, 3], "start": 4, "dtype": "uint8"}}]})],
         None),
        ("NoRows", [first, dict(next_turn(), response={"choices": [{}]})],
         "turn 1: response choices[0]: no rows of field \"routed_experts\" (no payload segment, "
         "and no inline rows)"),
        ("Outside", [first, dict(next_turn(), response=handle(str(outside)))], None),
        ("Io", [first, dict(next_turn(), response=handle("no-such-file.bin"))], None),
        ("RowShapeNeeded", [dict(first, response=sglang(rows_of(seq, 0, 4), 3, 2))],
         "turn 0: response output 0: SGLang's rows need their row shape (layers, top_k), which "
         "is not on the wire"),
    ]


def test_every_error_is_a_stitch_error_naming_the_turn(tmp_path):
    kinds = set()
    for kind, turns, message in episode_errors(tmp_path):
        before = copy.deepcopy(turns)
        with pytest.raises(pd_stitch.StitchError) as err:
            pd_stitch.assemble_episode(turns, root=tmp_path)
        e = err.value
        assert isinstance(e, ValueError)
        assert e.kind == kind, str(e)
        if message is not None:
            assert str(e) == message
        assert str(e).startswith("turn ") or kind == "NoTurns", str(e)
        assert turns == before
        kinds.add(kind)
    # Every kind of the episode a Python caller can meet: NoPieces cannot be
    # (a turn always gives one response, or two).
    assert kinds >= {"NoCompletion", "ExtendsNoTurn", "StartBeyondPrefix", "PieceLength", "Counts",
                     "StartNotAsked", "PieceRowShape", "PieceDtype", "Unsized", "RowGap", "NoTurns"}


def test_reading_errors_have_the_readers_location(tmp_path):
    _, first = one_turn()
    bad = dict(next_turn(), response={"choices": [{"routed_experts": {
        "data": "A!==", "shape": [1, 2, 3], "start": 4, "dtype": "uint8"}}]})
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.assemble_episode([first, bad])
    assert err.value.location == "response choices[0].routed_experts.data"
    assert str(err.value).startswith("turn 1: response choices[0].routed_experts.data: invalid base64")
    # A pair's side is named; invalid JSON has no location.
    pair = dict(next_turn())
    pair["prefill"], pair["decode"] = pair.pop("response"), b"{]"
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.assemble_episode([first, pair])
    assert (err.value.kind, err.value.location) == ("Json", None)
    assert str(err.value).startswith("turn 1 (decode): decode response: invalid JSON at byte 1")


def test_rows_by_handle_are_read_inside_root_and_allow_only(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    seq = [1, 2, 3]
    turn = {"prompt_token_ids": seq[:2], "completion_token_ids": seq[2:],
            "response": by_handle(rows_of(seq, 0, 2), 0, outside, "rows.bin")}
    turn["response"]["choices"][0]["payload"][0]["file"] = str(outside / "rows.bin")
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.assemble_episode([turn], root=inside)
    assert err.value.kind == "Outside"
    assert str(err.value).startswith("turn 0: response choices[0].payload[0]: file ")
    got = pd_stitch.assemble_episode([turn], root=inside, allow=[outside])
    np.testing.assert_array_equal(got["rows"][:2], rows_of(seq, 0, 2))


@pytest.mark.parametrize("turns, error, message", [
    ([[1, 2]], TypeError, "turn 0: a turn is a dict, not list"),
    ([{"completion_token_ids": [1]}], ValueError, "turn 0: no \"prompt_token_ids\""),
    ([{"prompt_token_ids": [1], "completion_token_ids": [-1], "response": {}}], ValueError,
     "turn 0: completion_token_ids must be a sequence of non-negative integers (token ids)"),
    ([{"prompt_token_ids": [1], "completion_token_ids": [2], "start": "0", "response": {}}], ValueError,
     "turn 0: start must be None or a non-negative integer"),
    ([{"prompt_token_ids": [1], "completion_token_ids": [2]}], ValueError,
     "turn 0: no \"response\" (or \"prefill\" and \"decode\", a P/D pair's)"),
    ([{"prompt_token_ids": [1], "completion_token_ids": [2], "prefill": {}}], ValueError,
     "turn 0: a P/D pair needs both \"prefill\" and \"decode\""),
    ([{"prompt_token_ids": [1], "completion_token_ids": [2], "response": {}, "decode": {}}], ValueError,
     "turn 0: give \"response\", or \"prefill\" and \"decode\", not both"),
    ([{"prompt_token_ids": [1], "completion_token_ids": [2], "response": 5}], TypeError,
     "turn 0: response must be bytes, bytearray, str or dict, not int"),
])
def test_malformed_turns_are_type_and_value_errors(turns, error, message):
    with pytest.raises(error) as err:
        pd_stitch.assemble_episode(turns)
    assert not isinstance(err.value, pd_stitch.StitchError)
    assert str(err.value) == message


def test_prefer_is_earliest_or_latest():
    _, first = one_turn()
    with pytest.raises(ValueError, match='prefer must be "earliest" or "latest", not "first"'):
        pd_stitch.assemble_episode([first], prefer="first")


def test_the_command_says_what_python_says(pd_stitch_cli, tmp_path):
    """`pd-stitch episode` and assemble_episode read turns through the same
    reader: on every error above, the command's one line on stderr is
    "error: " and Python's text."""
    for kind, turns, _ in episode_errors(tmp_path):
        with pytest.raises(pd_stitch.StitchError) as err:
            pd_stitch.assemble_episode(turns, root=tmp_path)
        lines = tmp_path / f"{kind}.jsonl"
        lines.write_text("".join(json.dumps(turn) + "\n" for turn in turns))
        out = subprocess.run([str(pd_stitch_cli), "episode", str(lines), "--root", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout) == (1, ""), (kind, out.stderr)
        assert out.stderr == f"error: {err.value}\n", kind


def test_the_stub_names_the_functions_arguments():
    stub = ast.parse((PYTHON_DIR / "pd_stitch.pyi").read_text())
    (function,) = [f for f in stub.body if isinstance(f, ast.FunctionDef) and f.name == "assemble_episode"]
    names = [a.arg for a in function.args.args + function.args.kwonlyargs]
    assert names == ["turns", "prefer", "row_shape", "allow", "root"]
    assert pd_stitch.assemble_episode.__text_signature__ == (
        "(turns, *, prefer='earliest', row_shape=None, allow=(), root='.')")


def test_a_thread_keeps_running_while_an_episode_is_assembled():
    from test_threads import ticks_during, ticks_inside
    # Four delta turns of 16k positions each of 48 x 8 uint8 rows.
    tokens, turns = [], []
    for t in range(4):
        common = len(tokens)
        seq = tokens + list(range(common, common + 16 * 1024))
        start = max(common - 1, 0)
        rows = np.full((len(seq) - 1 - start, 48, 8), t, dtype=np.uint8)
        response = {"choices": [{"routed_experts": {"data": b64(rows.tobytes()), "shape": list(rows.shape),
                                                    "start": start, "dtype": "uint8"}}]}
        turns.append({"prompt_token_ids": seq[:-4], "completion_token_ids": seq[-4:], "start": start,
                      "response": json.dumps(response).encode()})
        tokens = seq
    start, end, ticks = ticks_during(lambda: pd_stitch.assemble_episode(turns))
    assert end - start > 0.02, "too quick to show anything"
    assert len(ticks_inside(start, end, ticks)) > 0, (end - start, len(ticks))
