"""examples/pd_proxy.py end to end over loopback: the Rust mock
backends (examples/mock_backend.rs) on ephemeral ports, the proxy in this
process, and the stitched answers gathered back equal to the colocated
truth's rows as the Rust crate stitches them, in every form."""
import asyncio
import json
import re
import select
import subprocess

import aiohttp
import numpy as np
import pytest
from aiohttp import web

import pd_proxy
import pd_stitch

TIMEOUT = aiohttp.ClientTimeout(total=60)


class Mock:
    """One mock backend process, on a port it picks and prints."""

    def __init__(self, binary, role, root, fault="none", extra=()):
        self.process = subprocess.Popen(
            [str(binary), "--role", role, "--listen", "127.0.0.1:0", "--dir", str(root), "--fault", fault,
             *extra],
            stdout=subprocess.PIPE, text=True)
        # The mock prints its address first; wait for it a bounded time.
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        if not ready:
            self.process.kill()
            raise AssertionError("the mock did not start within 60 s")
        line = self.process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert found, f"the mock said {line!r}"
        self.url = found.group(0)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def backends(mock_backend, tmp_path):
    started = []

    def start(prefill_fault="none", decode_fault="none", colocated=False, extra=()):
        mocks = (Mock(mock_backend, "prefill", tmp_path, prefill_fault, extra),
                 Mock(mock_backend, "decode", tmp_path, decode_fault, extra))
        started.extend(mocks)
        if colocated:
            # The server whose answers a stitched one must equal.
            started.append(Mock(mock_backend, "colocated", tmp_path, extra=extra))
            return mocks[0].url, mocks[1].url, started[-1].url
        return mocks[0].url, mocks[1].url, tmp_path

    yield start
    for mock in started:
        mock.stop()


async def with_proxy(prefill, decode, requests, timeout=10.0, path=pd_proxy.GENERATE, row_shape=None):
    """Starts the proxy on an ephemeral loopback port, POSTs each body to
    `path`, and returns [(status, body bytes)]."""
    # The prefill mock's bootstrap server (where an SGLang decode joins its
    # room) is on the mock's own port.
    bootstrap_port = int(prefill.rsplit(":", 1)[1])
    runner = web.AppRunner(pd_proxy.app(prefill, decode, timeout, row_shape=row_shape,
                                        bootstrap_port=bootstrap_port))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    url = f"http://{host}:{port}{path}"
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            async def post(body):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                async with session.post(url, data=data) as response:
                    return response.status, await response.read()
            return await asyncio.gather(*(post(body) for body in requests))
    finally:
        await runner.cleanup()


def test_stitched_answers_in_every_form(backends):
    prefill, decode, root = backends()
    # The mocks answer by handle, compact and npy in turn by request index.
    bodies = [{"request_id": f"req-{i}", "sampling_params": {"max_tokens": 8}} for i in range(9)]
    answers = asyncio.run(with_proxy(prefill, decode, bodies))
    forms = set()
    for i, (status, body) in enumerate(answers):
        assert status == 200, body[:300]
        merged = json.loads(body)
        for c, choice in enumerate(merged["choices"]):
            # Inline rows, or by handle (an inline choice's payload holds
            # its sampling masks alone).
            inline = choice.get("routed_experts")
            forms.add("payload" if inline is None else type(inline).__name__)
            start, rows = pd_stitch.gather(body, c, root=root)
            assert start == 0 and rows.ndim == 3
            # The prompt's rows come from the prefill: check against a layout
            # check of the whole answer (no gap, no overlap, one dtype).
        assert all(r["ok"] for r in pd_stitch.check(body, root=root)), i
    assert forms == {"payload", "dict", "str"}


def test_stitched_rows_equal_a_direct_merge_of_the_backends_answers(backends):
    prefill, decode, root = backends()

    async def direct(body):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            p_body = pd_proxy.prefill_request(body)
            async with session.post(prefill + pd_proxy.GENERATE, json=p_body) as r:
                p = await r.read()
            d_body = pd_proxy.decode_request(body, json.loads(p))
            async with session.post(decode + pd_proxy.GENERATE, json=d_body) as r:
                d = await r.read()
        return pd_stitch.merge_routed_experts_for_pd(p, d)

    for i in range(3):
        body = {"request_id": f"req-{10 + i}", "sampling_params": {"max_tokens": 6}}
        [(status, through_proxy)] = asyncio.run(with_proxy(prefill, decode, [body]))
        assert status == 200
        expected = asyncio.run(direct(body))
        for c in range(len(json.loads(expected)["choices"])):
            assert np.array_equal(pd_stitch.gather(through_proxy, c, root=root)[1],
                                  pd_stitch.gather(expected, c, root=root)[1])


def test_the_vllm_decode_is_sent_the_prompt_start():
    """max(P, S0), P from token_ids else the prefill's usage; a request
    whose prompt length nothing gives is a 502, never a decode sent no
    start (docs/SPEC.md 4a); off, the request is the client's."""
    prefill = {"usage": {"prompt_tokens": 7}, "kv_transfer_params": {"k": 1}}
    cases = [
        ({"token_ids": [1, 2, 3]}, 3),
        ({"token_ids": [1, 2, 3], "sampling_params": {"routed_experts_prompt_start": 5}}, 5),
        ({"token_ids": [1, 2, 3], "sampling_params": {"routed_experts_prompt_start": 2}}, 3),
        ({"request_id": 1}, 7),
    ]
    for request, start in cases:
        before = json.loads(json.dumps(request))
        sent = pd_proxy.decode_request(request, prefill)
        assert sent["sampling_params"]["routed_experts_prompt_start"] == start, request
        assert sent["kv_transfer_params"] == {"k": 1}
        assert request == before, "the client's request is not changed"
        assert pd_proxy.decode_request(request, {}, decode_start=False) == request
    with pytest.raises(pd_proxy.Failure) as failure:
        pd_proxy.decode_request({"request_id": 1}, {})
    assert failure.value.status == 502
    with pytest.raises(pd_proxy.Failure) as failure:
        pd_proxy.decode_request({"token_ids": [1], "sampling_params": 3}, prefill)
    assert failure.value.status == 400


def test_the_sglang_decode_is_sent_the_start_len():
    assert pd_proxy.sglang_decode_request({"input_ids": [1, 2, 3]})["routed_experts_start_len"] == 3
    assert "routed_experts_start_len" not in pd_proxy.sglang_decode_request({"input_ids": [[1, 2], [3, 4, 5, 6]]})
    assert "routed_experts_start_len" not in pd_proxy.sglang_decode_request({"text": "6 x 7?"})


def events(body):
    """The data of each event of an SSE body (LF framing, as the mock sends)."""
    assert body.endswith(b"\n\n"), body[-40:]
    return [event[len(b"data: "):] for event in body[:-2].split(b"\n\n")]


# The fields a merge stitches by default: a payload of other fields alone (the
# mock keeps its sampling masks when it answers without routing) carries no rows.
STITCHED = ("routed_experts", "routed_expert_weights")


def rows_choices(body):
    """The choices of the events that carry rows, as one response: with each
    choice's tokens summed over its events and the usage event's counts,
    which place a vLLM 0.32 .npy (docs/SPEC.md 4a)."""
    choices, tokens, usage = [], {}, None
    for data in events(body):
        if data == b"[DONE]":
            continue
        event = json.loads(data)
        usage = event.get("usage") or usage
        for choice in event.get("choices", []):
            index = choice.get("index", 0)
            tokens.setdefault(index, []).extend(choice.get("token_ids") or [])
            stitched = [item for item in choice.get("payload") or []
                        if isinstance(item, dict) and item.get("field") in STITCHED]
            if choice.get("routed_experts") is not None or stitched:
                choices.append(dict(choice))
    response = {"choices": choices}
    for choice in choices:
        index = choice.pop("index", 0)
        choice.pop("finish_reason", None)
        if isinstance(choice.get("token_ids"), list):
            choice["token_ids"] = tokens[index]
            response["usage"] = usage
    return json.dumps(response).encode()


def test_a_stream_is_stitched_and_equals_a_direct_merge(backends):
    prefill, decode, root = backends()
    # By handle, compact and npy in turn by request index.
    bodies = [{"request_id": f"req-{i}", "stream": True, "sampling_params": {"max_tokens": 8}} for i in range(3)]
    streamed = asyncio.run(with_proxy(prefill, decode, bodies))
    plain = asyncio.run(with_proxy(prefill, decode, [dict(b, stream=False) for b in bodies]))
    for (status, body), (plain_status, whole) in zip(streamed, plain):
        assert status == 200 and plain_status == 200, body[:300]
        data = events(body)
        assert data[-1] == b"[DONE]"
        merged = rows_choices(body)
        n = len(json.loads(whole)["choices"])
        assert len(json.loads(merged)["choices"]) == n
        for c in range(n):
            assert np.array_equal(pd_stitch.gather(merged, c, root=root)[1],
                                  pd_stitch.gather(whole, c, root=root)[1])


def test_the_stream_stitcher_in_chunks_of_any_size():
    prefill = b'{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}'
    stream = (b'data: {"choices": [{"index": 0, "token_ids": [7], "routed_experts": null}]}\r\n\r\n'
              b'data: {"choices": [{"index": 0, "routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], '
              b'"start": 0, "dtype": "uint8"}}]}\n\ndata: [DONE]\n\n')
    outputs = set()
    for size in (1, 2, 7, len(stream)):
        s = pd_stitch.StreamStitcher(prefill)
        out = b"".join(s.feed(stream[i:i + size]) for i in range(0, len(stream), size)) + s.finish()
        outputs.add(out)
    [out] = outputs
    assert b'"data": "AQIDBAUG"' in out and out.startswith(stream[:70]) and out.endswith(b"data: [DONE]\n\n")
    # Errors are StitchErrors, and the stitcher is closed after one.
    # The first event, before the failing one, comes back; the next call raises.
    s = pd_stitch.StreamStitcher(b'{"choices": [{}]}')
    first = stream[:stream.index(b"\r\n\r\n") + 4]
    assert s.feed(stream) == first
    with pytest.raises(pd_stitch.StitchError) as e:
        s.feed(b"data: x\n\n")
    assert e.value.kind == "StreamEvent" and e.value.location == "decode choices[0].routed_experts"
    with pytest.raises(pd_stitch.StitchError) as e:
        s.feed(b"data: x\n\n")
    assert e.value.kind == "StreamClosed"
    with pytest.raises(pd_stitch.StitchError) as e:
        pd_stitch.StreamStitcher(b"{")
    assert e.value.kind == "Json"
    with pytest.raises(TypeError):
        pd_stitch.StreamStitcher(prefill).feed("data: x")


def test_the_stream_stitcher_takes_the_prefill_at_any_point():
    # SGLang's pair is sent both requests at once: the prefill may answer
    # after the decode's first events. Whenever it is given, the bytes out
    # are those of a stitcher that had it first.
    prefill = b'{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}'
    token = b'data: {"choices": [{"index": 0, "token_ids": [7], "routed_experts": null}]}\n\n'
    rows = (b'data: {"choices": [{"index": 0, "routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], '
            b'"start": 0, "dtype": "uint8"}}]}\n\n')
    stream = token + rows + b"data: [DONE]\n\n"
    early = pd_stitch.StreamStitcher(prefill)
    want = early.feed(stream) + early.finish()
    chunks = [stream[i:i + 9] for i in range(0, len(stream), 9)]
    for at in range(len(chunks) + 1):
        s = pd_stitch.StreamStitcher(row_shape=(1, 3))
        assert not s.has_prefill
        out = b"".join(s.feed(c) for c in chunks[:at])
        assert want.startswith(out) and len(out) <= len(token)
        out += s.give_prefill(prefill)
        assert s.has_prefill
        out += b"".join(s.feed(c) for c in chunks[at:]) + s.finish()
        assert out == want, at
    # Without a prefill: the events before the rows go out; finish raises.
    s = pd_stitch.StreamStitcher()
    assert s.feed(stream) == token
    assert s.buffered == len(stream) - len(token)
    with pytest.raises(pd_stitch.StitchError) as e:
        s.finish()
    assert e.value.kind == "StreamPrefillMissing" and e.value.location == "decode response"
    # Twice, and not JSON.
    s = pd_stitch.StreamStitcher(prefill)
    with pytest.raises(pd_stitch.StitchError) as e:
        s.give_prefill(prefill)
    assert e.value.kind == "StreamPrefillRepeated" and e.value.location == "prefill response"
    s = pd_stitch.StreamStitcher()
    with pytest.raises(pd_stitch.StitchError) as e:
        s.give_prefill(b"{")
    assert e.value.kind == "Json"
    with pytest.raises(TypeError):
        pd_stitch.StreamStitcher().give_prefill(12)
    # A dict, as the other prefills may be.
    s = pd_stitch.StreamStitcher()
    out = s.feed(stream) + s.give_prefill(json.loads(prefill)) + s.finish()
    assert json.loads(events(out)[1])["choices"][0]["routed_experts"]["data"] == "AQIDBAUG"


def test_a_stream_without_rows_is_passed_through(backends):
    prefill, decode, _ = backends(prefill_fault="no-routing", decode_fault="no-routing")
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [{"request_id": "req-3", "stream": True}]))
    assert status == 200 and events(body)[-1] == b"[DONE]"
    assert rows_choices(body) == b'{"choices": []}'


def test_a_stream_that_cannot_be_stitched_ends_with_an_error_event(backends):
    prefill, decode, _ = backends(prefill_fault="no-routing")
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [{"request_id": "req-0", "stream": True}]))
    assert status == 200
    data = events(body)
    assert data[-1] == b"[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["type"] == "stitch_error" and error["kind"] == "StreamEvent"
    assert rows_choices(b"\n\n".join(b"data: " + d for d in data[:-2]) + b"\n\n") == b'{"choices": []}'


def test_events_before_a_failing_one_in_the_same_chunk_are_returned_first():
    # A chunk holding a plain event and then one that cannot be stitched (the
    # decode has rows, the prefill none): the plain event comes back, byte for
    # byte, and the error is raised by the next call, so nothing is lost.
    plain = b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
    rows = (b'data: {"choices": [{"index": 0, "payload": [{"field": "routed_experts", '
            b'"file": "d.bin", "offset": 0, "pos": 0, "rows": 1, "dtype": "uint8", "shape": [1]}]}]}\n\n')
    s = pd_stitch.StreamStitcher(b'{"choices": [{}]}')
    assert s.feed(plain + rows) == plain
    with pytest.raises(pd_stitch.StitchError) as err:
        s.finish()
    assert err.value.kind == "StreamEvent"
    with pytest.raises(pd_stitch.StitchError) as again:
        s.feed(b"data: x\n\n")
    assert again.value.kind == "StreamClosed"
    # Alone in its chunk, the failing event raises at once.
    s = pd_stitch.StreamStitcher(b'{"choices": [{}]}')
    with pytest.raises(pd_stitch.StitchError) as now:
        s.feed(rows)
    assert now.value.kind == "StreamEvent"


def test_a_stitch_error_is_a_502_naming_it(backends):
    # The prefill answers without rows, the decode with: MissingPrefillField.
    prefill, decode, _ = backends(prefill_fault="no-routing")
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [{"request_id": "req-0"}]))
    assert status == 502
    error = json.loads(body)["error"]
    assert error["type"] == "stitch_error" and error["kind"] == "MissingPrefillField"
    assert error["location"].startswith("decode choices[0]")


def test_failing_and_slow_backends(backends):
    prefill, decode, _ = backends(decode_fault="status-500")
    [(status, _)] = asyncio.run(with_proxy(prefill, decode, [{"request_id": "req-0"}]))
    assert status == 502
    prefill, decode, _ = backends(decode_fault="slow=3000")
    loop_start = asyncio.run(_timed(with_proxy(prefill, decode, [{"request_id": "req-0"}], timeout=0.5)))
    (status, _), took = loop_start
    assert status == 504 and took < 2.5
    # Nothing listens there.
    [(status, _)] = asyncio.run(with_proxy("http://127.0.0.1:9", decode, [{"request_id": "req-0"}]))
    assert status == 502


async def _timed(coroutine):
    start = asyncio.get_running_loop().time()
    [answer] = await coroutine
    return answer, asyncio.get_running_loop().time() - start


# SGLang's /generate: both instances at once (the mocks wait for each other in
# the bootstrap room, as SGLang's do), the answer equal to a colocated server's.

def sglang_body(index, batch=None, stream=False):
    text = "What is 6 x 7?" if batch is None else ["What is 6 x 7?"] * batch
    return {"rid": f"req-{index}", "text": text, "return_routed_experts": True, "stream": stream,
            "sampling_params": {"max_new_tokens": 96}}


async def colocated_answers(url, bodies):
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async def post(body):
            async with session.post(url + pd_proxy.SGLANG_GENERATE, json=dict(body, stream=False)) as response:
                assert response.status == 200
                return json.loads(await response.read())
        return await asyncio.gather(*(post(body) for body in bodies))


@pytest.mark.parametrize("convention", ["full-length", "suffix-only"])
def test_sglang_answers_equal_the_colocated_servers(backends, convention):
    prefill, decode, colocated = backends(colocated=True, extra=("--sglang-decode", convention))
    bodies = [sglang_body(i, batch=(2 if i == 3 else None)) for i in range(6)]
    answers = asyncio.run(with_proxy(prefill, decode, bodies, path=pd_proxy.SGLANG_GENERATE, row_shape=(8, 4)))
    truth = asyncio.run(colocated_answers(colocated, bodies))
    for (status, body), expected in zip(answers, truth):
        assert status == 200, body[:300]
        assert json.loads(body) == expected
    # Unstitched, the decode's own answers are not the colocated ones: the
    # check above can fail.
    async def direct():
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            body = pd_proxy.sglang_request(sglang_body(0), "127.0.0.1", int(prefill.rsplit(":", 1)[1]))
            answers = await asyncio.gather(
                session.post(prefill + pd_proxy.SGLANG_GENERATE, json=body),
                session.post(decode + pd_proxy.SGLANG_GENERATE, json=body))
            return [await a.read() for a in answers]
    _, own = asyncio.run(direct())
    assert json.loads(own) != truth[0]


@pytest.mark.parametrize("convention", ["full-length", "suffix-only"])
def test_a_sglang_stream_is_stitched_to_the_colocated_answer(backends, convention):
    prefill, decode, colocated = backends(colocated=True, extra=("--sglang-decode", convention))
    bodies = [sglang_body(i, stream=True) for i in range(4)]
    answers = asyncio.run(with_proxy(prefill, decode, bodies, path=pd_proxy.SGLANG_GENERATE, row_shape=(8, 4)))
    truth = asyncio.run(colocated_answers(colocated, bodies))
    for (status, body), expected in zip(answers, truth):
        assert status == 200, body[:300]
        data = events(body)
        assert data[-1] == b"[DONE]"
        assert len(data) == expected["meta_info"]["completion_tokens"] + 1
        assert json.loads(data[-2]) == expected
        assert all("routed_experts" not in json.loads(d)["meta_info"] for d in data[:-2])


def test_sglang_without_the_row_shape_is_stitched_or_refused(backends):
    prefill, decode, colocated = backends(colocated=True)
    bodies = [sglang_body(i) for i in range(12)]
    answers = asyncio.run(with_proxy(prefill, decode, bodies, path=pd_proxy.SGLANG_GENERATE))
    truth = asyncio.run(colocated_answers(colocated, bodies))
    merged = 0
    for (status, body), expected in zip(answers, truth):
        if status == 200:
            assert json.loads(body) == expected
            merged += 1
        else:
            error = json.loads(body)["error"]
            assert status == 502 and error["kind"] == "Positions", error
            assert "ambiguous" in error["message"]
    assert merged > 0


def test_sglang_failing_backends(backends):
    prefill, decode, _ = backends(prefill_fault="status-500")
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [sglang_body(0)], path=pd_proxy.SGLANG_GENERATE))
    assert status == 502, body
    prefill, decode, _ = backends(decode_fault="no-routing")
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [sglang_body(0)], path=pd_proxy.SGLANG_GENERATE,
                                              row_shape=(8, 4)))
    error = json.loads(body)["error"]
    assert status == 502 and error["type"] == "stitch_error" and error["kind"] == "MissingDecodeRows", error


def test_sglang_requests_get_a_room_per_prompt():
    one = pd_proxy.sglang_request({"text": "hi"}, "10.0.0.1", 8998)
    assert (one["bootstrap_host"], one["bootstrap_port"]) == ("10.0.0.1", 8998)
    assert 0 <= one["bootstrap_room"] < 2**63
    batch = pd_proxy.sglang_request({"input_ids": [[1], [2, 3]]}, "h", 1)
    assert batch["bootstrap_host"] == ["h", "h"] and batch["bootstrap_port"] == [1, 1]
    assert len(set(batch["bootstrap_room"])) == 2
    assert pd_proxy.sglang_request({"input_ids": [1, 2]}, "h", 1)["bootstrap_port"] == 1
    with pytest.raises(pd_proxy.Failure):
        pd_proxy.sglang_request([1], "h", 1)


def test_a_sglang_stream_starts_before_the_prefill_answers(backends):
    # The prefill meets the decode in the bootstrap room at once and answers
    # 1.5 s later: the stream's first bytes come long before that, the rows
    # event stitched once it has answered.
    late = 1.5
    prefill, decode, colocated = backends(prefill_fault=f"late={int(late * 1000)}", colocated=True)
    body = sglang_body(1, stream=True)
    [expected] = asyncio.run(colocated_answers(colocated, [body]))

    async def run():
        runner = web.AppRunner(pd_proxy.app(prefill, decode, 10.0, row_shape=(8, 4),
                                            bootstrap_port=int(prefill.rsplit(":", 1)[1])))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
                loop = asyncio.get_running_loop()
                start, first, data = loop.time(), None, b""
                async with session.post(f"http://{host}:{port}{pd_proxy.SGLANG_GENERATE}", json=body) as response:
                    assert response.status == 200
                    async for chunk in response.content.iter_any():
                        first = first if first is not None else loop.time() - start
                        data += chunk
                return first, loop.time() - start, data
        finally:
            await runner.cleanup()

    first, whole, data = asyncio.run(run())
    assert first < late / 2, f"the first byte came after {first:.2f} s"
    assert whole >= late
    got = events(data)
    assert got[-1] == b"[DONE]" and json.loads(got[-2]) == expected
