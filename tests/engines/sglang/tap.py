"""A TCP proxy between the example router and the SGLang decode that notes
what the router asks of the decode and what it gets back, so that drive.py
can check that the decode is asked only for the rows it computes.

    python tap.py LISTEN_PORT DECODE_PORT LOG

Bytes pass through unchanged, in both directions, as they arrive. For each
connection it writes JSON lines to LOG: {"conn", "dir": "request",
"start": ...} for each `"routed_experts_start_len": VALUE` the router sends
(VALUE as JSON: a number, a list, or absent when a request has none: then
"start" is null, one line per `/generate` request line seen), and
{"conn", "dir": "answer", "b64": N} for each `"routed_experts":"..."`
string the decode sends, N its length in base64 characters; and
{"conn", "dir": "first_byte", "ms": T} when the first byte of the body of
the decode's answer to a request arrives, T milliseconds after the tap had
that request whole: the decode's own time to its first byte, for the very
request the router sent (drive.py holds the router's to it).
Standard library only.
"""

import asyncio
import json
import re
import sys

REQUEST_LINE = re.compile(rb"POST /generate HTTP/1\.1\r\n")
START = re.compile(rb'"routed_experts_start_len"\s*:\s*(\[[^\]]*\]|-?\d+)')
ROWS = re.compile(rb'"routed_experts"\s*:\s*"([A-Za-z0-9+/=]*)"')


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def write(self, **kw):
        self.f.write(json.dumps(kw) + "\n")


async def pump(reader, writer, on_data):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            on_data(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


class Scanner:
    """Finds complete matches in a byte stream that arrives in pieces."""

    def __init__(self, handle):
        self.buf = b""
        self.handle = handle

    def feed(self, data):
        self.buf += data
        self.handle(self)


def main():
    listen, target, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    log = Log(path)
    counter = [0]

    async def on_conn(client_r, client_w):
        loop = asyncio.get_running_loop()
        counter[0] += 1
        conn = counter[0]
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_w.close()
            return

        # Where the answer to the last request stands: its head being read,
        # its body's first byte awaited, or done.
        answer = {"t_req": None, "phase": None, "head": b""}

        def scan_request(s):
            # One request at a time on a connection: its head, then its body.
            while True:
                m = REQUEST_LINE.search(s.buf)
                if not m:
                    s.buf = s.buf[-64:]
                    return
                head_end = s.buf.find(b"\r\n\r\n", m.end())
                if head_end < 0:
                    s.buf = s.buf[m.start():]
                    return
                head = s.buf[m.end():head_end].lower()
                length = re.search(rb"content-length:\s*(\d+)", head)
                if not length:
                    s.buf = s.buf[head_end + 4:]
                    continue
                end = head_end + 4 + int(length.group(1))
                if len(s.buf) < end:
                    s.buf = s.buf[m.start():]
                    return
                body = s.buf[head_end + 4:end]
                start = START.search(body)
                now = loop.time()
                log.write(conn=conn, dir="request", start=json.loads(start.group(1)) if start else None,
                          at=round(now, 4))
                answer.update(t_req=now, phase="head", head=b"")
                s.buf = s.buf[end:]

        def scan_answer(s):
            while True:
                m = ROWS.search(s.buf)
                if not m:
                    # Keep a tail that may hold the start of a match.
                    cut = s.buf.rfind(b'"routed_experts"')
                    s.buf = s.buf[cut:] if cut >= 0 else s.buf[-32:]
                    return
                log.write(conn=conn, dir="answer", b64=len(m.group(1)))
                s.buf = s.buf[m.end():]

        def first_byte():
            now = loop.time()
            log.write(conn=conn, dir="first_byte", ms=round(1000 * (now - answer["t_req"]), 1), at=round(now, 4))
            answer["phase"] = None

        def on_answer(data):
            if answer["phase"] == "head":
                answer["head"] += data
                end = answer["head"].find(b"\r\n\r\n")
                if end >= 0:
                    answer["phase"] = "body"
                    if len(answer["head"]) > end + 4:
                        first_byte()
            elif answer["phase"] == "body" and data:
                first_byte()
            ans.feed(data)

        req, ans = Scanner(scan_request), Scanner(scan_answer)
        await asyncio.gather(
            pump(client_r, server_w, req.feed),
            pump(server_r, client_w, on_answer),
        )

    async def serve():
        server = await asyncio.start_server(on_conn, "127.0.0.1", listen)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
