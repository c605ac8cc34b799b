"""The table of places (pd_stitch.places(), the crate's own table) walked
through the binding, as tests/it/places.rs walks it in Rust: for each place
that holds rows, a pair is built from the place itself, by its kind (inline
rows or a payload at its holder and key, SGLang's rows with their counts
where the table puts them), and goes through every path the binding has:
prefill_has_routed_experts and the merge on every input type (a dict's
skeleton takes only the table's places), the stream, gather and check. A
place added to the table is walked with no line here."""
import base64
import copy
import json

import pytest

import pd_stitch

PLACES = pd_stitch.places()
ROWS = [place for place in PLACES if place["holds"] != "count"]


def test_the_table_names_today_s_places():
    seen = {(p["holder"], p["member"], p["key"], p["holds"]) for p in PLACES}
    for place in [
        ("choice", None, "routed_experts", "inline"),
        ("choice", None, "payload", "by_handle"),
        ("member", "meta_info", "routed_experts", "sglang"),
        ("member", "sglext", "routed_experts", "sglang"),
        ("choice_member", "sgl_ext", "routed_experts", "sglang"),
        ("member", "nvext", "routed_experts", "inline"),
        ("choice", None, "token_ids", "count"),
        ("member", "usage", "prompt_tokens", "count"),
    ]:
        assert place in seen, place
    assert {p["holds"] for p in PLACES} <= {"inline", "by_handle", "sglang", "count"}


def put(response, holder, member, key, value):
    """Sets value at key of the object the holder names: the first choice,
    an object of it, or an object of the response."""
    if holder == "choice":
        target = response["choices"][0]
    elif holder == "choice_member":
        target = response["choices"][0].setdefault(member, {})
    else:
        target = response.setdefault(member, {})
    target[key] = value


def at(place, value):
    response = {"choices": [{"index": 0}]}
    put(response, place["holder"], place["member"], place["key"], value)
    return response


def compact(rows):
    return {"data": base64.b64encode(bytes(b for row in rows for b in row)).decode(),
            "shape": [len(rows), 1, 3], "start": 0, "dtype": "uint8"}


def ids(values):
    return base64.b64encode(b"".join(v.to_bytes(4, "little", signed=True) for v in values)).decode()


def counts_holder(place):
    """Where the table puts the counts of rows at place: in their own object
    when it holds counts, else in the response's object of counts alone."""
    own = (place["holder"], place["member"])
    if any((p["holder"], p["member"]) == own and p["holds"] == "count" for p in PLACES):
        return own
    for p in PLACES:
        holder = (p["holder"], p["member"])
        if p["holder"] == "member" and all(
                q["holds"] == "count" for q in PLACES if (q["holder"], q["member"]) == holder):
            return holder
    raise AssertionError(f"no object of counts for {place}")


def walk(place, tmp_path):
    """(prefill, decode, merged, (start, rows of merged), (start, rows of decode))."""
    if place["holds"] == "inline":
        return (at(place, compact([[1, 2, 3]])), at(place, compact([[0, 0, 0], [4, 5, 6]])),
                at(place, compact([[1, 2, 3], [4, 5, 6]])),
                (0, [[1, 2, 3], [4, 5, 6]]), (0, [[0, 0, 0], [4, 5, 6]]))
    if place["holds"] == "by_handle":
        (tmp_path / "p").write_bytes(bytes([1, 2]))
        (tmp_path / "d").write_bytes(bytes([7, 8, 9]))

        def segment(file, pos, rows):
            return {"field": "routed_experts", "file": file, "offset": 0, "pos": pos,
                    "rows": rows, "dtype": "uint8", "shape": [1]}
        return (at(place, [segment("p", 0, 2)]), at(place, [segment("d", 2, 3)]),
                at(place, [segment("p", 0, 2), segment("d", 2, 3)]),
                (0, [[1], [2], [7], [8], [9]]), (2, [[7], [8], [9]]))
    holder, member = counts_holder(place)

    def side(completion, values):
        response = at(place, ids(values))
        put(response, holder, member, "prompt_tokens", 2)
        put(response, holder, member, "completion_tokens", completion)
        return response

    def le(values):
        return [list(v.to_bytes(4, "little", signed=True)) for v in values]
    return (side(1, [10, 11]), side(3, [0, 0, 12, 13]), side(3, [10, 11, 12, 13]),
            (0, le([10, 11, 12, 13])), (0, le([0, 0, 12, 13])))


def as_kind(value, kind):
    text = json.dumps(value)
    return {"dict": copy.deepcopy(value), "str": text, "bytes": text.encode(),
            "bytearray": bytearray(text.encode())}[kind]


def parsed(value):
    return value if isinstance(value, dict) else json.loads(value)


@pytest.mark.parametrize("place", ROWS, ids=lambda p: f"{p['member'] or 'choice'}.{p['key']}")
def test_every_place_is_walked_through_every_path(place, tmp_path):
    prefill, decode, merged, merged_rows, decode_rows = walk(place, tmp_path)
    shape = (1, 1)
    for kind in ["dict", "str", "bytes", "bytearray"]:
        assert pd_stitch.prefill_has_routed_experts(as_kind(prefill, kind)), kind
        out = pd_stitch.merge_routed_experts_for_pd(
            as_kind(prefill, kind), as_kind(decode, kind), row_shape=shape)
        assert parsed(out) == merged, kind
    # The stream finds the rows event by the table's keys.
    stream = pd_stitch.StreamStitcher(json.dumps(prefill).encode(), row_shape=shape)
    out = stream.feed(b"data: " + json.dumps(decode).encode() + b"\n\n") + stream.finish()
    assert out.startswith(b"data: ") and out.endswith(b"\n\n")
    assert json.loads(out[len(b"data: "):-2]) == merged
    # gather reads the rows where the table puts them, dict or text.
    for kind in ["dict", "bytes"]:
        for response, (start, rows) in [(merged, merged_rows), (decode, decode_rows)]:
            got_start, array = pd_stitch.gather(
                as_kind(response, kind), 0, root=tmp_path, row_shape=shape)
            assert got_start == start, kind
            assert [list(row.reshape(-1).view("uint8")) for row in array] == rows, kind
    # check reads them too, one field with their coverage.
    report = pd_stitch.check(merged, root=tmp_path, row_shape=shape)
    assert [field["coverage"] for field in report] == [
        [(merged_rows[0], merged_rows[0] + len(merged_rows[1]))]], report
    assert all(field["ok"] for field in report), report
