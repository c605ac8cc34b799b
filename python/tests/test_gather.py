"""gather and check: the simulator's merged responses read back equal to a
NumPy reader, every argument type, the errors, and confinement of reads."""
import base64
import io
import json
import os
import subprocess

import numpy as np
import pytest

import pd_stitch
from conftest import PAIRS, pair

def numpy_reader(response, choice, root):
    """What a trainer does (docs/SPEC.md, section 5a): numpy.fromfile per
    segment, each written at its positions in payload order, so a later
    segment wins where two overlap (a re-emission); base64 and np.load /
    frombuffer for inline rows."""
    own = response["choices"][choice]
    segments = [s for s in own.get("payload") or [] if s.get("field") == "routed_experts"]
    if segments:
        start = min(s["pos"] for s in segments)
        end = max(s["pos"] + s["rows"] for s in segments)
        shape = tuple(segments[0]["shape"])
        widest = max((np.dtype(s["dtype"]) for s in segments), key=lambda d: d.itemsize)
        out = np.zeros((end - start,) + shape, dtype=widest.newbyteorder("<"))
        for s in segments:
            dtype = np.dtype(s["dtype"]).newbyteorder("<")
            rows = np.fromfile(os.path.join(root, s["file"]), dtype=dtype,
                               count=s["rows"] * int(np.prod(shape)), offset=s["offset"])
            out[s["pos"] - start:s["pos"] - start + s["rows"]] = rows.reshape((s["rows"],) + shape)
        return start, out
    value = own["routed_experts"]
    if isinstance(value, str):
        return 0, np.load(io.BytesIO(base64.b64decode(value)), allow_pickle=False)
    data = base64.b64decode(value["data"])
    return value["start"], np.frombuffer(data, np.dtype(value["dtype"]).newbyteorder("<")).reshape(value["shape"])


@pytest.fixture(scope="module")
def simulated(pd_stitch_cli, tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    subprocess.run([str(pd_stitch_cli), "simulate", "--requests", "24", "--seed", "7", "--dir", str(root)],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    return root


def test_simulated_responses_gather_equal_to_the_numpy_reader(simulated):
    compared = 0
    for request in sorted(d for d in os.listdir(simulated) if d.startswith("req-")):
        for form in ["by-handle", "compact", "npy"]:
            text = (simulated / request / f"{form}.merged.json").read_bytes()
            response = json.loads(text)
            for choice in range(len(response["choices"])):
                start, rows = pd_stitch.gather(text, choice, root=simulated)
                want_start, want = numpy_reader(response, choice, simulated)
                assert start == want_start == 0
                assert rows.dtype == want.dtype and rows.shape == want.shape, (request, form, choice)
                assert np.array_equal(rows, want), (request, form, choice)
                compared += 1
    assert compared >= 3 * 24


@pytest.mark.parametrize("kind", [bytes, bytearray, str, dict], ids=lambda t: t.__name__)
def test_gather_takes_every_type_and_path_like_roots(simulated, kind):
    text = (simulated / "req-0000" / "by-handle.merged.json").read_bytes()
    value = {bytes: text, bytearray: bytearray(text), str: text.decode(), dict: json.loads(text)}[kind]
    start, rows = pd_stitch.gather(value, 0, field="routed_experts", root=simulated)
    assert np.array_equal(rows, numpy_reader(json.loads(text), 0, simulated)[1])
    assert pd_stitch.gather(value, root=str(simulated))[1].shape == rows.shape


def test_gather_of_the_seed_example():
    merged = pd_stitch.merge_routed_experts_for_pd(*pair("seed"))
    start, rows = pd_stitch.gather(merged, 1, root=PAIRS / "seed")
    assert start == 0 and rows.dtype == np.dtype("<u2") and rows.shape == (5, 2, 4)
    # The example's rows are 100 x + k at position x.
    assert np.array_equal(rows, 100 * np.arange(5)[:, None, None] + np.arange(8).reshape(2, 4))
    start, mask = pd_stitch.gather(merged, 0, field="sampling_mask", root=PAIRS / "seed")
    assert (start, mask.dtype, mask.shape) == (2, np.bool_, (3, 8))


def test_gather_errors_are_stitch_errors(tmp_path):
    gap = (PAIRS.parent.parent.parent / "examples" / "broken" / "gap.json")
    cases = []
    if gap.exists():
        cases.append((gap.read_bytes(), 0, {}, "Gap", None))
    seg = {"field": "routed_experts", "file": "x.bin", "offset": 0, "pos": 0, "rows": 4, "dtype": "uint8",
           "shape": [2]}
    (tmp_path / "x.bin").write_bytes(b"123")
    cases += [
        ({"choices": [{"payload": [seg]}]}, 0, {"root": tmp_path}, "ShortFile", "response choices[0].payload[0]"),
        ({"choices": [{"payload": [dict(seg, file="nope.bin")]}]}, 0, {"root": tmp_path}, "Io", None),
        ({"choices": [{"text": "a"}]}, 0, {}, "NoRows", None),
        ({"choices": [{"payload": [dict(seg, rows=-1)]}]}, 0, {}, "Integer", "response choices[0].payload[0].rows"),
        ({"choices": []}, 0, {}, "Structure", "response choices[0]"),
        (b"{", 0, {}, "Json", None),
    ]
    for response, choice, kwargs, kind, location in cases:
        with pytest.raises(pd_stitch.StitchError) as err:
            pd_stitch.gather(response, choice, **kwargs)
        assert (err.value.kind, err.value.location) == (kind, location), str(err.value)


def test_gather_widens_mixed_unsigned_widths(tmp_path):
    (tmp_path / "p.bin").write_bytes(bytes([1, 2, 3, 4]))
    (tmp_path / "d.bin").write_bytes(np.array([500, 600], "<u2").tobytes())
    seg = {"field": "routed_experts", "offset": 0, "shape": [2]}
    response = {"choices": [{"payload": [dict(seg, file="p.bin", pos=0, rows=2, dtype="uint8"),
                                         dict(seg, file="d.bin", pos=2, rows=1, dtype="uint16")]}]}
    start, rows = pd_stitch.gather(response, root=tmp_path)
    assert rows.dtype == np.dtype("<u2")
    assert rows.tolist() == [[1, 2], [3, 4], [500, 600]]


def one_segment(file):
    return {"choices": [{"payload": [{"field": "routed_experts", "file": str(file), "offset": 0, "pos": 0,
                                      "rows": 2, "dtype": "uint8", "shape": [2]}]}]}


@pytest.fixture
def outside(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "in.bin").write_bytes(b"abcd")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "s.bin").write_bytes(b"SECR")
    return root, secret


def test_reads_inside_the_root(outside):
    root, _ = outside
    assert pd_stitch.gather(one_segment("in.bin"), root=root)[1].tobytes() == b"abcd"
    assert pd_stitch.check(one_segment("in.bin"), root=root)[0]["ok"]


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_reads_outside_the_root_are_refused(outside, how):
    root, secret = outside
    if how == "dotdot":
        name = "../secret/s.bin"
    elif how == "absolute":
        name = str(secret / "s.bin")
    else:
        (root / "link.bin").symlink_to(secret / "s.bin")
        name = "link.bin"
    with pytest.raises(pd_stitch.StitchError) as err:
        pd_stitch.gather(one_segment(name), root=root)
    assert "s.bin" in str(err.value) or "link.bin" in str(err.value)
    report = pd_stitch.check(one_segment(name), root=root)
    assert not report[0]["ok"]


def test_allow_lets_an_outside_directory_in(outside):
    root, secret = outside
    for name in [str(secret / "s.bin"), "../secret/s.bin"]:
        assert pd_stitch.gather(one_segment(name), root=root, allow=[secret])[1].tobytes() == b"SECR"


def test_root_defaults_to_the_current_directory(outside, monkeypatch):
    root, _ = outside
    monkeypatch.chdir(root)
    assert pd_stitch.gather(one_segment("in.bin"))[1].tobytes() == b"abcd"


def test_check_reports_each_field_and_its_problems():
    merged = pd_stitch.merge_routed_experts_for_pd(*pair("seed"))
    report = pd_stitch.check(merged, root=PAIRS / "seed")
    assert [(r["choice"], r["field"], r["ok"]) for r in report] == [
        (0, "routed_experts", True), (0, "sampling_mask", True), (1, "routed_experts", True)]
    assert report[0]["coverage"] == [(0, 5)] and report[0]["dtype"] == "uint16" and report[0]["shape"] == [2, 4]
    assert report[0]["problems"] == [] and report[0]["gaps"] == [] and report[0]["overlaps"] == []

    broken = json.loads(merged)
    broken["choices"][0]["payload"][1]["pos"] += 1  # a gap at position 3
    report = pd_stitch.check(broken, root=PAIRS / "seed")
    assert not report[0]["ok"] and report[0]["gaps"] == [(3, 4)] and report[0]["problems"]
    assert report[2]["ok"]

    report = pd_stitch.check({"choices": 3})
    assert report == [dict(report[0], choice=None, field=None, ok=False)] and report[0]["problems"]


def test_check_places_sglang_rows_with_the_row_shape():
    # 3 prompt tokens, 3 generated: rows end at 5; 4 rows of 2 x 2 ids start at 1.
    ids = base64.b64encode(np.arange(16, dtype="<i4").tobytes()).decode()
    response = {"meta_info": {"prompt_tokens": 3, "completion_tokens": 3, "routed_experts": ids}}
    [line] = pd_stitch.check(response, row_shape=(2, 2))
    assert (line["choice"], line["field"], line["ok"]) == (0, "routed_experts (sglang)", True)
    assert line["coverage"] == [(1, 5)] and line["dtype"] == "int32" and line["shape"] == [2, 2]
    # As 4 x 2 they are 2 rows, [3, 5); as 3 x 1 not whole rows.
    assert pd_stitch.check(response, row_shape=(4, 2))[0]["coverage"] == [(3, 5)]
    [line] = pd_stitch.check(response, row_shape=(3, 1))
    assert not line["ok"] and "whole" in line["problems"][0]
    # Without the row shape they cannot be placed: a problem of the response.
    [line] = pd_stitch.check(response)
    assert line["choice"] is None and not line["ok"]
    assert "row shape" in line["problems"][0]


def test_gather_hands_the_bytes_read_to_numpy_without_a_copy():
    merged = pd_stitch.merge_routed_experts_for_pd(*pair("seed"))
    _, rows = pd_stitch.gather(merged, 1, root=PAIRS / "seed")
    assert not rows.flags.owndata
    # Down the chain of views: the Rust buffer the rows were read into, not a
    # NumPy array or a bytes object that would mean one more copy.
    base = rows
    while isinstance(base, np.ndarray):
        base = base.base
    assert type(base).__name__ == "PySliceContainer", type(base)


def test_check_rows_names_each_kind_on_the_fixtures():
    """The rows check on the committed fixtures (tests/fixtures/rows/): each
    kind where the fixture put it, with its choice, position, layer and ids;
    the expert count only when given."""
    here = os.path.dirname(os.path.abspath(__file__))
    rows = os.path.join(here, "..", "..", "tests", "fixtures", "rows")

    def fixture(name):
        with open(os.path.join(rows, name)) as f:
            return json.load(f)

    clean = pd_stitch.check_rows(fixture("clean.json"))
    assert clean["rows"] == 3 and clean["findings"] == []
    assert clean["counts"] == {"duplicate": 0, "out-of-range": 0, "negative": 0, "zero-row": 0}
    duplicate = pd_stitch.check_rows(fixture("duplicate.json"))["findings"]
    assert duplicate == [{"choice": 0, "position": 1, "layer": 1, "kind": "duplicate",
                          "id": 7, "experts": None, "ids": [7, 7]}]
    assert pd_stitch.check_rows(fixture("out_of_range.json"))["findings"] == []
    out_of_range = pd_stitch.check_rows(fixture("out_of_range.json"), experts=8)["findings"]
    assert [(f["position"], f["layer"], f["kind"], f["id"], f["experts"]) for f in out_of_range] == [
        (2, 0, "out-of-range", 9, 8)]
    zero = pd_stitch.check_rows(json.dumps(fixture("zero_row.json")).encode())
    assert zero["counts"]["zero-row"] == 1
    assert zero["findings"][0]["layer"] is None and zero["findings"][0]["position"] == 0
    negative = pd_stitch.check_rows(fixture("negative.json"))["findings"]
    assert [(f["kind"], f["id"]) for f in negative] == [("negative", -1)]
    # SGLang's rows, placed with the row shape: 2 prompt tokens, 2 generated,
    # rows of 1 x 2 at [0, 3), the second [5, 5].
    ids = np.array([1, 2, 5, 5, 3, 4], dtype="<i4").tobytes()
    sglang = {"meta_info": {"prompt_tokens": 2, "completion_tokens": 2,
                            "routed_experts": base64.b64encode(ids).decode()}}
    found = pd_stitch.check_rows(sglang, row_shape=(1, 2))["findings"]
    assert [(f["position"], f["kind"], f["ids"]) for f in found] == [(1, "duplicate", [5, 5])]
