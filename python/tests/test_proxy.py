"""examples/pd_proxy.py end to end over loopback: the Rust mock vLLM
backends (examples/mock_vllm.rs) on ephemeral ports, the proxy in this
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

    def __init__(self, binary, role, root, fault="none"):
        self.process = subprocess.Popen(
            [str(binary), "--role", role, "--listen", "127.0.0.1:0", "--dir", str(root), "--fault", fault],
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
def backends(mock_vllm, tmp_path):
    started = []

    def start(prefill_fault="none", decode_fault="none"):
        mocks = Mock(mock_vllm, "prefill", tmp_path, prefill_fault), Mock(mock_vllm, "decode", tmp_path, decode_fault)
        started.extend(mocks)
        return mocks[0].url, mocks[1].url, tmp_path

    yield start
    for mock in started:
        mock.stop()


async def with_proxy(prefill, decode, requests, timeout=10.0):
    """Starts the proxy on an ephemeral loopback port, POSTs each body, and
    returns [(status, body bytes)]."""
    runner = web.AppRunner(pd_proxy.app(prefill, decode, timeout))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    url = f"http://{host}:{port}{pd_proxy.GENERATE}"
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
            forms.add("payload" if "payload" in choice else type(choice["routed_experts"]).__name__)
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
            d_body = pd_proxy.decode_request(body, json.loads(p).get("kv_transfer_params"))
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


def test_a_stream_that_needs_stitching_is_a_400(backends):
    prefill, decode, _ = backends()
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [{"request_id": "req-3", "stream": True}]))
    assert status == 400
    assert "cannot carry routed experts" in json.loads(body)["error"]["message"]


def test_a_stream_without_rows_is_passed_through(backends):
    prefill, decode, _ = backends(prefill_fault="no-routing", decode_fault="no-routing")
    [(status, body)] = asyncio.run(with_proxy(prefill, decode, [{"request_id": "req-3", "stream": True}]))
    assert status == 200 and body


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
