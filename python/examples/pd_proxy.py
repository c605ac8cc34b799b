"""A P/D proxy in Python that stitches routed experts with `pd_stitch`.

It does what examples/pd_router.rs does. `POST /inference/v1/generate`:

1. asks the prefill backend for one token (`sampling_params.max_tokens = 1`,
   `min_tokens` at most 1, `stream: false`);
2. sends the client's request to the decode backend, with the prefill's
   `kv_transfer_params` when it returned any;
3. stitches the two bodies with `pd_stitch.merge_routed_experts_for_pd`, bytes
   in and bytes out (the GIL is released during the merge, and the merge runs
   on a worker thread, so the event loop keeps serving other requests), and
   returns the merged body.

A streamed request (`"stream": true`) is stitched on the way: the decode's
events go to the client as they arrive, through a `pd_stitch.StreamStitcher`
given the prefill's body (on SGLang's route, when it comes: its prefill
often answers after the decode's first bytes), which rewrites only the event that carries
rows (on a worker thread, the GIL released). A stitch error mid-stream ends
the stream with an error event (`data: {"error": ...}`, then `[DONE]`, as
vLLM reports errors on a stream).
A `StitchError` is a 502 whose body names it (kind, location, message); a
failing backend is a 502, one slower than `--timeout` a 504, and a 4xx of a
backend is passed on.

`POST /generate` is SGLang's: both backends are sent the client's body at
once (each waits for the other in the bootstrap room to move the KV cache),
with `bootstrap_host` (the prefill's host), `bootstrap_port`
(`--bootstrap-port`) and a fresh `bootstrap_room` added, a list of each for a
batch, as SGLang's own P/D router adds them; the prefill's is not streamed.
The same merge finds SGLang's rows by their keys; `--row-shape LAYERSxTOP_K`
places them (without it, a pair whose counts leave the positions ambiguous is
a 502).

Built on aiohttp: one maintained package that is both the server and the
client, on one event loop, with streaming both ways and per-request timeouts;
Starlette/uvicorn would need a third package (httpx) for the client side.

    python examples/pd_proxy.py --prefill http://127.0.0.1:8001 \
        --decode http://127.0.0.1:8002 --listen 127.0.0.1:8000 --row-shape 48x8
"""
import argparse
import asyncio
import json
import random
import urllib.parse

import aiohttp
from aiohttp import web

import pd_stitch

GENERATE = "/inference/v1/generate"
SGLANG_GENERATE = "/generate"


class Failure(Exception):
    """An answer other than the merged body: a status and a JSON error."""

    def __init__(self, status, error_type, message, **extra):
        super().__init__(message)
        self.status, self.error_type, self.message, self.extra = status, error_type, message, extra

    def response(self):
        error = {"code": self.status, "type": self.error_type, "message": self.message, **self.extra}
        return web.json_response({"error": error}, status=self.status)


def prefill_request(request):
    """The client's request asking for exactly one token, without a stream."""
    if not isinstance(request, dict):
        raise Failure(400, "invalid_request", "the request body must be a JSON object")
    prefill = dict(request, stream=False)
    params = prefill.get("sampling_params", {})
    if not isinstance(params, dict):
        raise Failure(400, "invalid_request", "sampling_params must be a JSON object")
    params = dict(params, max_tokens=1)
    minimum = params.get("min_tokens")
    if "min_tokens" in params and not (isinstance(minimum, int) and 0 <= minimum <= 1):
        params["min_tokens"] = 1
    prefill["sampling_params"] = params
    return prefill


def sglang_request(request, host, port):
    """The SGLang body both instances are sent: the client's, with the
    prefill's bootstrap address and a fresh room (one of each per prompt for
    a batch: `text` or `input_ids` a list of prompts)."""
    if not isinstance(request, dict):
        raise Failure(400, "invalid_request", "the request body must be a JSON object")
    text, ids = request.get("text"), request.get("input_ids")
    if isinstance(text, list):
        batch = len(text)
    elif text is None and isinstance(ids, list) and ids and isinstance(ids[0], list):
        batch = len(ids)
    else:
        batch = None
    room = lambda: random.getrandbits(63)  # SGLang's router draws rooms in [0, 2**63)
    if batch is None:
        fields = {"bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room()}
    else:
        fields = {"bootstrap_host": [host] * batch, "bootstrap_port": [port] * batch,
                  "bootstrap_room": [room() for _ in range(batch)]}
    return dict(request, **fields)


def decode_request(request, prefill, decode_start=True):
    """The vLLM decode's request: the client's, with the prefill's
    kv_transfer_params, and (with decode_start) the start of the rows the
    decode computes, sampling_params.routed_experts_prompt_start = max(P, S0),
    P the prompt's length (the request's token_ids, else the prefill's
    usage.prompt_tokens), S0 the client's. A vLLM 0.32 decode sent no start
    goes down on any prompt longer than one KV block (docs/SPEC.md 4a)."""
    request = dict(request)
    if prefill.get("kv_transfer_params") is not None:
        request["kv_transfer_params"] = prefill["kv_transfer_params"]
    if not decode_start:
        return request
    tokens = request.get("token_ids")
    if isinstance(tokens, list):
        prompt = len(tokens)
    else:
        prompt = (prefill.get("usage") or {}).get("prompt_tokens")
        if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt < 0:
            raise Failure(502, "prompt_length",
                          "neither the request's token_ids nor the prefill's usage.prompt_tokens gives "
                          "the prompt's length, which the decode's routed_experts_prompt_start needs")
    params = request.get("sampling_params", {})
    if not isinstance(params, dict):
        raise Failure(400, "invalid_request", "sampling_params must be a JSON object")
    asked = params.get("routed_experts_prompt_start")
    asked = asked if isinstance(asked, int) and not isinstance(asked, bool) else 0
    request["sampling_params"] = dict(params, routed_experts_prompt_start=max(asked, prompt))
    return request


def sglang_decode_request(request):
    """The SGLang decode's request: routed_experts_start_len set to the
    prompt's length, so that the decode answers only the rows it computes;
    the prompt rows it would answer otherwise are zeros or stale rows of
    earlier requests. A batch is sent as it is (SGLang 0.5.23 takes one
    integer start for the whole batch), and so is a request by text (no
    tokenizer here to count its prompt)."""
    ids = request.get("input_ids")
    if not isinstance(ids, list) or (ids and isinstance(ids[0], list)):
        return request
    return dict(request, routed_experts_start_len=len(ids))


class Proxy:
    def __init__(self, prefill, decode, timeout, row_shape=None, bootstrap_port=8998, decode_start=True):
        self.backends = {"prefill": prefill.rstrip("/"), "decode": decode.rstrip("/")}
        self.timeout = timeout
        self.row_shape = row_shape
        self.bootstrap_port = bootstrap_port
        self.decode_start = decode_start
        self.session = None

    async def start(self, app):
        self.session = aiohttp.ClientSession()

    async def stop(self, app):
        await self.session.close()

    async def send(self, backend, body, deadline=True, path=GENERATE):
        """POSTs `body` to `backend`; the response when it succeeded. With
        `deadline` the whole answer must come within the timeout (the caller
        reads it inside `read`); without, each read must."""
        timeout = aiohttp.ClientTimeout(total=self.timeout) if deadline else \
            aiohttp.ClientTimeout(total=None, sock_read=self.timeout, sock_connect=self.timeout)
        try:
            response = await self.session.post(
                self.backends[backend] + path, data=json.dumps(body).encode(),
                headers={"content-type": "application/json"}, timeout=timeout)
        except asyncio.TimeoutError:
            raise Failure(504, "backend_timeout", f"the {backend} backend did not answer within {self.timeout} s")
        except aiohttp.ClientError as e:
            raise Failure(502, "backend_error", f"the {backend} backend failed: {e!r}")
        if response.status >= 300:
            text = (await response.read())[:300].decode("utf-8", "replace")
            response.release()
            message = f"the {backend} backend answered {response.status}: {text}"
            if 400 <= response.status < 500:
                raise Failure(response.status, "invalid_request", message)
            raise Failure(502, "backend_error", message)
        return response

    async def read(self, backend, body, path=GENERATE):
        """The whole body of a successful answer of `backend`, as bytes."""
        response = await self.send(backend, body, path=path)
        try:
            return await response.read()
        except asyncio.TimeoutError:
            raise Failure(504, "backend_timeout", f"the {backend} backend did not answer within {self.timeout} s")
        except aiohttp.ClientError as e:
            raise Failure(502, "backend_error", f"the {backend} backend failed: {e!r}")
        finally:
            response.release()

    async def generate(self, request):
        try:
            return await self.stitched(request)
        except Failure as failure:
            return failure.response()

    async def sglang_generate(self, request):
        try:
            return await self.sglang_stitched(request)
        except Failure as failure:
            return failure.response()

    async def sglang_stitched(self, http_request):
        try:
            request = json.loads(await http_request.read())
        except ValueError as e:
            raise Failure(400, "invalid_request", f"the request body is not JSON: {e}")
        host = urllib.parse.urlsplit(self.backends["prefill"]).hostname
        decode_body = sglang_request(request, host, self.bootstrap_port)
        prefill_body = dict(decode_body, stream=False)
        if self.decode_start:
            decode_body = sglang_decode_request(decode_body)
        stream = decode_body.get("stream") is True
        prefill = asyncio.ensure_future(self.read("prefill", prefill_body, path=SGLANG_GENERATE))
        if stream:
            decode = asyncio.ensure_future(
                self.send("decode", decode_body, deadline=False, path=SGLANG_GENERATE))
        else:
            decode = asyncio.ensure_future(self.read("decode", decode_body, path=SGLANG_GENERATE))
        try:
            # At once: each instance waits for the other in the bootstrap room.
            if stream:
                # The stream starts when the decode answers; the prefill's
                # answer, which often comes after the decode's first bytes,
                # is given to the stitcher when it comes. A prefill that
                # fails first fails the request.
                done, _ = await asyncio.wait({prefill, decode}, return_when=asyncio.FIRST_COMPLETED)
                if prefill in done and decode not in done:
                    prefill.result()
                response = await decode
            else:
                prefill, decode = await asyncio.gather(prefill, decode)
        except BaseException:
            for task in (prefill, decode):
                task.cancel()
            # A streamed decode's response that did arrive is released.
            if stream and decode.done() and not decode.cancelled() and decode.exception() is None:
                decode.result().release()
            raise
        if stream:
            return await self.stream_through(http_request, response, self.stream_stitcher(None), prefill)
        return await self.merged(prefill, decode)

    def stream_stitcher(self, prefill):
        """A stream stitcher with `prefill`'s body, or awaiting it (None)."""
        try:
            return pd_stitch.StreamStitcher(prefill, row_shape=self.row_shape)
        except pd_stitch.StitchError as e:
            raise Failure(502, "backend_error", f"the prefill backend's response is not JSON: {e}")

    async def merged(self, prefill, decode):
        """The decode's body stitched with the prefill's, as a response."""
        try:
            # On a worker thread: the merge releases the GIL, so a large inline
            # merge does not stall the event loop.
            merged = await asyncio.get_running_loop().run_in_executor(
                None, lambda: pd_stitch.merge_routed_experts_for_pd(prefill, decode, row_shape=self.row_shape))
        except pd_stitch.StitchError as e:
            raise Failure(502, "stitch_error",
                          f"cannot stitch the prefill's and the decode's responses: {e}",
                          kind=e.kind, location=e.location)
        return web.Response(body=merged, content_type="application/json")

    async def stitched(self, http_request):
        try:
            request = json.loads(await http_request.read())
        except ValueError as e:
            raise Failure(400, "invalid_request", f"the request body is not JSON: {e}")
        prefill_body = prefill_request(request)
        stream = request.get("stream") is True

        prefill = await self.read("prefill", prefill_body)
        try:
            # Only kv_transfer_params and the prompt's length are needed from
            # the prefill as objects; the stitch itself works on the bytes.
            prefill_object = json.loads(prefill)
            decode_body = decode_request(request, prefill_object, self.decode_start)
        except (ValueError, AttributeError) as e:
            raise Failure(502, "backend_error", f"the prefill backend's response is not a JSON object: {e}")

        if stream:
            stitcher = self.stream_stitcher(prefill)
            response = await self.send("decode", decode_body, deadline=False)
            return await self.stream_through(http_request, response, stitcher)

        decode = await self.read("decode", decode_body)
        return await self.merged(prefill, decode)

    async def stream_through(self, http_request, response, stitcher, prefill=None):
        """The decode's stream (`response`) through `stitcher`, each read sent
        on as soon as the stitcher gives it back. `prefill`, when given, is
        the task that reads the prefill's body: the stitcher awaits it, and
        is given it when it completes (only the rows event waits)."""
        out = web.StreamResponse(status=response.status)
        if "content-type" in response.headers:
            out.headers["content-type"] = response.headers["content-type"]
        await out.prepare(http_request)
        loop = asyncio.get_running_loop()
        chunks = response.content.iter_any().__aiter__()
        reading = None  # the read of the next chunk, while the prefill is awaited
        try:
            while True:
                if prefill is not None:
                    reading = reading or asyncio.ensure_future(chunks.__anext__())
                    done, _ = await asyncio.wait({prefill, reading}, return_when=asyncio.FIRST_COMPLETED)
                    if prefill in done:
                        body, prefill = prefill.result(), None
                        ready = await loop.run_in_executor(None, stitcher.give_prefill, body)
                        if ready:
                            await out.write(ready)
                        continue
                read, reading = reading or chunks.__anext__(), None
                try:
                    chunk = await read
                except StopAsyncIteration:
                    break
                # A rows event's merge may take milliseconds: off the loop.
                ready = await loop.run_in_executor(None, stitcher.feed, chunk)
                if ready:
                    await out.write(ready)
            if prefill is not None:
                # The decode is done; its last events wait for the prefill.
                body, prefill = await prefill, None
                ready = await loop.run_in_executor(None, stitcher.give_prefill, body)
                if ready:
                    await out.write(ready)
            ready = stitcher.finish()
            if ready:
                await out.write(ready)
        except pd_stitch.StitchError as e:
            error = {"code": 502, "type": "stitch_error", "kind": e.kind, "location": e.location,
                     "message": f"cannot stitch the prefill's and the decode's responses: {e}"}
            await out.write(f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n".encode())
        except Failure as failure:
            # The prefill failed after the stream's status went out.
            error = {"code": 502, "type": failure.error_type, "message": failure.message}
            await out.write(f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n".encode())
        finally:
            for task in (prefill, reading):
                if task is not None:
                    task.cancel()
            response.release()
        await out.write_eof()
        return out


def app(prefill, decode, timeout=30.0, row_shape=None, bootstrap_port=8998, decode_start=True):
    proxy = Proxy(prefill, decode, timeout, row_shape, bootstrap_port, decode_start)
    application = web.Application(client_max_size=1 << 30)
    application.router.add_post(GENERATE, proxy.generate)
    application.router.add_post(SGLANG_GENERATE, proxy.sglang_generate)
    application.on_startup.append(proxy.start)
    application.on_cleanup.append(proxy.stop)
    return application


def row_shape(text):
    """`LAYERSxTOP_K` (or `LAYERS,TOP_K`) as a pair of positive integers."""
    try:
        layers, top_k = (int(n) for n in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LAYERSxTOP_K, e.g. 48x8")
    if layers <= 0 or top_k <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: both must be positive")
    return layers, top_k


def main():
    parser = argparse.ArgumentParser(description="A P/D proxy stitching routed experts.")
    parser.add_argument("--prefill", required=True, help="the prefill backend's base URL")
    parser.add_argument("--decode", required=True, help="the decode backend's base URL")
    parser.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a backend may take")
    parser.add_argument("--row-shape", type=row_shape, default=None,
                        help="LAYERSxTOP_K of the model's rows, which place SGLang's rows")
    parser.add_argument("--bootstrap-port", type=int, default=8998, help="the SGLang prefill's bootstrap port")
    parser.add_argument("--no-decode-start", action="store_true",
                        help="send the decode the client's start as it is, not the prompt's length "
                             "(a vLLM 0.32 decode goes down on it: only to show that)")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    application = app(args.prefill, args.decode, args.timeout, args.row_shape, args.bootstrap_port,
                      not args.no_decode_start)
    web.run_app(application, host=host, port=int(port),
                print=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
