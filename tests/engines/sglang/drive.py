"""Drives the real SGLang harness (run.sh starts the servers and the router).

Sends `/generate` requests (input_ids, greedy) to the example router in front
of a prefill/decode pair and the same requests to a colocated server, and
checks that the tokens are equal and the routed-experts rows bitwise equal:
whole and streamed, a batch, a client's own `routed_experts_start_len`, some
before the decode's KV pool wrapped and some after. Beside that, against the
pair directly (both sent the body at once with a fresh bootstrap room, as
SGLang's router does):

- what the engine answers: the prefill's rows, the decode's full-length rows
  (the prompt's rows are not data: zeros on a fresh server, stale rows once
  the pool wrapped), the decode's rows from `routed_experts_start_len = P`;
- the decode's answer size with and without `routed_experts_start_len = P`;
- the time to the first byte of a stream, through the router and straight
  from the decode;
- SGLang's OpenAI endpoints without a tokenizer.

Saves real answers under --answers (and --fixtures, when given). Standard
library and NumPy only. Exits 1 on any difference.
"""

import argparse
import base64
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

import numpy as np

LAYERS, TOP_K = 3, 2  # the model made by tests/engines/vllm/make_model.py
VOCAB = 512
WIDTH = LAYERS * TOP_K


# --- HTTP -------------------------------------------------------------------


class Answer:
    def __init__(self, status, body, t_headers, t_first, t_total, sent_at=None):
        self.status = status
        # time.monotonic() when the request was sent: the clock tap.py's
        # `at` reads (CLOCK_MONOTONIC, one for every process of the machine)
        self.sent_at = sent_at
        self.body = body  # bytes, as received
        self.t_headers = t_headers  # seconds from sending to the headers
        self.t_first = t_first  # ... to the first byte of the body
        self.t_total = t_total  # ... to the end of the body

    def json(self):
        return json.loads(self.body)

    def events(self):
        """A text/event-stream body's `data:` payloads, in order (str)."""
        out = []
        for block in self.body.decode().split("\n\n"):
            if block.strip():
                assert block.startswith("data: "), block[:80]
                out.append(block[len("data: "):])
        return out


def post(url, path, body, timeout=120):
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = json.dumps(body).encode()
    t0 = time.monotonic()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    t_headers = time.monotonic() - t0
    first = resp.read(1)
    t_first = time.monotonic() - t0
    rest = resp.read()
    t_total = time.monotonic() - t0
    conn.close()
    return Answer(resp.status, first + rest, t_headers, t_first, t_total, t0)


def post_pair(args, body, decode_extra=None):
    """The body to the prefill and the decode at once, with the bootstrap
    fields SGLang's router adds (a list of each for a batch). The prefill is
    asked not to stream. Returns (prefill Answer, decode Answer, the bodies)."""
    batch = isinstance(body["input_ids"][0], list)
    n = len(body["input_ids"]) if batch else 1
    rooms = [random.randrange(2**63) for _ in range(n)]
    fields = {
        "bootstrap_host": ["127.0.0.1"] * n if batch else "127.0.0.1",
        "bootstrap_port": [args.bootstrap_port] * n if batch else args.bootstrap_port,
        "bootstrap_room": rooms if batch else rooms[0],
    }
    pbody = dict(body, **fields, stream=False)
    dbody = dict(body, **fields, **(decode_extra or {}))
    got = {}
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=lambda: got.__setitem__("p", (post(args.prefill, "/generate", pbody), time.perf_counter() - t0))),
        threading.Thread(target=lambda: got.__setitem__("d", post(args.decode, "/generate", dbody))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    prefill, prefill_done = got["p"]
    prefill.t_done_from_pair_start = prefill_done
    return prefill, got["d"], pbody, dbody


# --- rows -------------------------------------------------------------------


def rows_of(item):
    """An output's rows as an int32 array (rows, layers, top_k), or None."""
    s = item.get("meta_info", {}).get("routed_experts")
    if s is None:
        return None
    return np.frombuffer(base64.b64decode(s), dtype="<i4").reshape(-1, LAYERS, TOP_K)


def last_event_json(answer):
    """The last JSON event of a stream (before [DONE]) and whether [DONE] came."""
    events = answer.events()
    done = bool(events) and events[-1] == "[DONE]"
    payloads = [e for e in events if e != "[DONE]"]
    return json.loads(payloads[-1]), done, [json.loads(p) for p in payloads]


# --- requests ---------------------------------------------------------------

rng = random.Random(36)


def prompt(n):
    # Token ids 3.. (0, 1, 2 are pad, bos and eos in the model's config).
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def gen_body(ids, n_new, stream=False, ignore_eos=True, **extra):
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": n_new, "temperature": 0, "ignore_eos": ignore_eos},
        "return_routed_experts": True,
    }
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


def b64_len(n_bytes):
    return 4 * ((n_bytes + 2) // 3)


class Tap:
    """Reads what tap.py (between the router and the decode) noted since the
    last mark: the starts the router sent and the rows the decode answered."""

    def __init__(self, path):
        self.path = path
        self.pos = 0

    def mark(self):
        self.pos = os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def since(self):
        with open(self.path) as f:
            f.seek(self.pos)
            return [json.loads(line) for line in f.read().splitlines() if line.strip()]


class Run:
    def __init__(self, args):
        self.args = args
        self.counts = Counter()  # kind -> requests checked equal
        self.failures = []  # (kind, name, what)
        self.decode_tokens = 0  # token slots the decode has allocated, about
        self.n = 0
        self.cmp_dir = os.path.join(args.answers, "compare")
        for side in ("router", "colocated"):
            shutil.rmtree(os.path.join(self.cmp_dir, side), ignore_errors=True)
            os.makedirs(os.path.join(self.cmp_dir, side))
        self.stale = []  # observations of the decode's full-length prompt rows
        self.tap = Tap(args.tap_log) if args.tap_log else None
        self.last_tapped = None  # what tap.py noted of the last request through the router
        self.ttfb_split = []  # (to the decode, its own first byte, back), ms, per streamed request
        # Base64 characters of rows the decode sent the router, and what it
        # would have sent asked from the client's start (full-length).
        self.through_router = {"requests": 0, "b64_received": 0, "b64_full_length": 0, "batches": []}
        self.router_sends_start = None

    def fail(self, kind, name, what):
        self.failures.append((kind, name, what))
        print(f"  DIFFERENT {kind} {name}: {what}", flush=True)

    def note_decode(self, body):
        ids = body["input_ids"]
        prompts = ids if isinstance(ids[0], list) else [ids]
        self.decode_tokens += sum(len(p) + body["sampling_params"]["max_new_tokens"] for p in prompts)

    def save(self, name, data, fixture=False):
        """Saves an answer under --answers, and under --fixtures when asked."""
        dirs = [self.args.answers] + ([self.args.fixtures] if fixture and self.args.fixtures else [])
        for d in dirs:
            os.makedirs(d, exist_ok=True)
            mode = "wb" if isinstance(data, bytes) else "w"
            with open(os.path.join(d, name), mode) as f:
                if isinstance(data, (bytes, str)):
                    f.write(data)
                else:
                    json.dump(data, f, indent=1)
                    f.write("\n")

    # -- one item (one output) against the colocated one --

    def compare_item(self, kind, name, got, want, what=""):
        ok = True
        if got.get("output_ids") != want.get("output_ids"):
            self.fail(kind, name, f"{what}output_ids {got.get('output_ids')} != colocated {want.get('output_ids')}")
            ok = False
        for k in ("prompt_tokens", "completion_tokens"):
            if got.get("meta_info", {}).get(k) != want.get("meta_info", {}).get(k):
                self.fail(kind, name, f"{what}{k} {got['meta_info'].get(k)} != {want['meta_info'].get(k)}")
                ok = False
        g, w = got.get("meta_info", {}).get("routed_experts"), want.get("meta_info", {}).get("routed_experts")
        if g != w:
            ok = False
            if g is None or w is None:
                self.fail(kind, name, f"{what}rows present {g is not None}, colocated {w is not None}")
            else:
                a, b = rows_of(got), rows_of(want)
                p = want["meta_info"]["prompt_tokens"]
                if a.shape != b.shape:
                    self.fail(kind, name, f"{what}{a.shape[0]} rows, colocated {b.shape[0]}")
                else:
                    bad = [i for i in range(a.shape[0]) if not np.array_equal(a[i], b[i])]
                    self.fail(kind, name, f"{what}{len(bad)} of {a.shape[0]} rows differ (first {bad[:8]}; rows end at P + N - 1, P = {p})")
        return ok

    # -- through the router --

    def via_router(self, kind, body, name=None):
        self.n += 1
        ids = body["input_ids"]
        need = sum(len(p) + body["sampling_params"]["max_new_tokens"] for p in (ids if isinstance(ids[0], list) else [ids]))
        kind += ", pool not wrapped" if self.decode_tokens + need <= self.args.decode_pool else ", pool wrapped"
        name = name or f"{self.n:03d}-{kind}"
        stream = body.get("stream", False)
        if self.tap:
            self.tap.mark()
        got = post(self.args.router, "/generate", body)
        self.note_decode(body)
        tapped = self.tap.since() if self.tap else None
        self.last_tapped = tapped
        want = post(self.args.colocated, "/generate", body)
        if tapped is not None and want.status == 200:
            self.check_decode_asked(kind, name, body, want, tapped)
        if got.status != 200 or want.status != 200:
            self.fail(kind, name, f"status router {got.status} colocated {want.status}: {got.body[:300]!r}")
            return got, want
        if stream:
            g_last, g_done, g_all = last_event_json(got)
            w_last, w_done, w_all = last_event_json(want)
            ok = self.compare_item(kind, name, g_last, w_last, "last event: ")
            if not g_done:
                self.fail(kind, name, "the router's stream does not end with [DONE]")
                ok = False
            # Each event's output_ids is the tokens so far (SGLang's default,
            # non-incremental streaming): a head of the final ones, growing.
            # How many tokens an event adds depends on timing (the tokenizer
            # manager sends what has arrived), so the events themselves are
            # not compared with the colocated stream's.
            final = g_last.get("output_ids") or []
            heads = [e.get("output_ids") or [] for e in g_all]
            if any(h != final[: len(h)] for h in heads) or any(len(a) > len(b) for a, b in zip(heads, heads[1:])):
                self.fail(kind, name, "an event's output_ids is not a head of the final ones")
                ok = False
            rows_events = [i for i, e in enumerate(g_all) if e.get("meta_info", {}).get("routed_experts") is not None]
            if rows_events != [len(g_all) - 1]:
                self.fail(kind, name, f"rows on events {rows_events} of {len(g_all)}")
                ok = False
            g_cmp, w_cmp = g_last, w_last
        else:
            g, w = got.json(), want.json()
            if isinstance(w, list):
                ok = isinstance(g, list) and len(g) == len(w)
                if not ok:
                    self.fail(kind, name, "the router's answer is not an array of as many outputs")
                else:
                    for i, (gi, wi) in enumerate(zip(g, w)):
                        ok &= self.compare_item(kind, name, gi, wi, f"item {i}: ")
            else:
                ok = self.compare_item(kind, name, g, w)
            g_cmp, w_cmp = g, w
        for side, data in (("router", g_cmp), ("colocated", w_cmp)):
            with open(os.path.join(self.cmp_dir, side, name + ".json"), "w") as f:
                json.dump(data, f)
        if ok:
            self.counts[kind] += 1
        return got, want

    def check_decode_asked(self, kind, name, body, want, tapped):
        """The router asks the decode only for the rows it computes: it sends
        `routed_experts_start_len = P` and the decode answers N - 1 rows
        (tap.py saw both). A batch is reported, not checked: SGLang takes one
        integer start per request (io_struct.py), not one per prompt."""
        starts = [t["start"] for t in tapped if t["dir"] == "request"]
        answers = [t["b64"] for t in tapped if t["dir"] == "answer"]
        ids = body["input_ids"]
        client_start = body.get("routed_experts_start_len", 0)
        if isinstance(ids[0], list):
            self.through_router["batches"].append({"name": name, "prompts": [len(p) for p in ids], "starts_sent": starts, "rows_received": [b * 3 // 4 // 24 for b in answers]})
            return
        if body.get("stream"):
            item, _, _ = last_event_json(want)
        else:
            item = want.json()
        P, N = len(ids), item["meta_info"]["completion_tokens"]
        self.through_router["requests"] += 1
        self.through_router["b64_received"] += sum(answers)
        self.through_router["b64_full_length"] += b64_len((P - client_start + N - 1) * WIDTH * 4)
        want_b64 = b64_len((N - 1) * WIDTH * 4)
        if starts == [P] and answers == [want_b64]:
            self.counts["the decode asked from P (tap)"] += 1
        else:
            self.fail("the decode asked from P (tap)", name, f"the router sent the decode routed_experts_start_len {starts} (P = {P}) and got {[b * 3 // 4 // 24 for b in answers]} rows (N - 1 = {N - 1})")

    # -- the pair directly --

    def observe_full_length(self, label, body, decode_item, truth_item):
        """How many of the decode's prompt rows are zeros, equal to the truth,
        or neither (stale) in a full-length answer."""
        d, t = rows_of(decode_item), rows_of(truth_item)
        p = truth_item["meta_info"]["prompt_tokens"]
        s = body.get("routed_experts_start_len", 0)
        prompt_rows = d[: p - s]
        zeros = int(sum(1 for r in prompt_rows if not r.any()))
        equal = int(sum(1 for i, r in enumerate(prompt_rows) if np.array_equal(r, t[i])))
        nonzero = len(prompt_rows) - zeros
        completion_equal = np.array_equal(d[p - s:], t[p - s:])
        obs = {
            "label": label,
            "decode_tokens_before": self.decode_tokens,
            "pool": self.args.decode_pool,
            "prompt_rows": len(prompt_rows),
            "zeros": zeros,
            "nonzero": nonzero,
            "equal_to_truth": equal,
            "completion_rows_equal": bool(completion_equal),
        }
        self.stale.append(obs)
        if not completion_equal:
            self.fail("direct", label, "the decode's completion rows differ from the colocated ones")
        return obs

    def check_direct(self, label, body, prefill, decode, truth, from_prompt):
        """The prefill's rows are the truth's [S, P); a decode asked from P
        answers exactly the truth's [P, P + N - 1)."""
        ok = True
        p_item, d_item, t_item = prefill.json(), decode.json(), truth.json()
        P = t_item["meta_info"]["prompt_tokens"]
        S = body.get("routed_experts_start_len", 0)
        pr, dr, tr = rows_of(p_item), rows_of(d_item), rows_of(t_item)
        if p_item["meta_info"]["completion_tokens"] != 1 or pr.shape[0] != P - S or not np.array_equal(pr, tr[: P - S]):
            self.fail("direct", label, f"the prefill's {pr.shape[0]} rows are not the colocated [S, P) (completion_tokens {p_item['meta_info']['completion_tokens']})")
            ok = False
        if d_item.get("output_ids") != t_item.get("output_ids"):
            self.fail("direct", label, "the decode's output_ids differ from the colocated ones")
            ok = False
        if from_prompt:
            if not np.array_equal(dr, tr[P - S:]):
                self.fail("direct", label, f"the decode asked from P answered {dr.shape[0]} rows, not the colocated [P, P + N - 1) ({tr.shape[0] - (P - S)} rows)")
                ok = False
        elif dr.shape != tr.shape:
            self.fail("direct", label, f"the full-length decode answered {dr.shape[0]} rows, colocated {tr.shape[0]}")
            ok = False
        if ok:
            self.counts["direct pair (" + ("decode from P" if from_prompt else "full-length decode") + ")"] += 1
        return ok

    def pair(self, label, body, from_prompt):
        extra = {"routed_experts_start_len": len(body["input_ids"])} if from_prompt else None
        prefill, decode, pbody, dbody = post_pair(self.args, body, extra)
        self.note_decode(body)
        truth = post(self.args.colocated, "/generate", body)
        for who, a in (("prefill", prefill), ("decode", decode), ("colocated", truth)):
            if a.status != 200:
                self.fail("direct", label, f"{who} answered {a.status}: {a.body[:300]!r}")
                return None
        if not self.check_direct(label, body, prefill, decode, truth, from_prompt):
            # Kept for a look: the three answers and the bodies sent.
            d = os.path.join(self.args.answers, "failures", label.replace(" ", "_").replace(",", ""))
            os.makedirs(d, exist_ok=True)
            for fname, data in (("prefill.json", prefill.body), ("decode.json", decode.body), ("colocated.json", truth.body),
                                ("prefill_request.json", json.dumps(pbody).encode()), ("decode_request.json", json.dumps(dbody).encode())):
                with open(os.path.join(d, fname), "wb") as f:
                    f.write(data)
        return prefill, decode, truth, pbody, dbody


# --- the phases -------------------------------------------------------------


def router_round(run):
    """One round of requests through the router: every kind."""
    lengths = [1, 4, 20, 37, 100, 128, 220, 260]
    news = [8, 24, 12, 16, 8, 20, 16, 24]
    for L, N in zip(lengths, news):
        run.via_router(f"whole", gen_body(prompt(L), N))
    for L, N in zip(lengths, news):
        run.via_router(f"streamed", gen_body(prompt(L), N, stream=True))
    # A batch: input_ids a list of prompts (the router sends a list of rooms).
    run.via_router(f"batch", gen_body([prompt(7), prompt(50), prompt(150)], 10))
    # The same prompt again (a radix-cache hit on the prefill and the colocated
    # server), and a longer one sharing its head.
    ids = prompt(64)
    run.via_router(f"whole", gen_body(ids, 12))
    run.via_router(f"whole", gen_body(ids, 12))
    run.via_router(f"streamed", gen_body(ids + prompt(30), 12, stream=True))
    # A client's own start: the prefill keeps it, the merged rows start there.
    ids = prompt(40)
    run.via_router(f"client start_len", gen_body(ids, 10, routed_experts_start_len=25))
    run.via_router(f"client start_len", gen_body(prompt(12), 10, stream=True, routed_experts_start_len=12))
    # EOS allowed: the model may stop before max_new_tokens.
    run.via_router(f"whole", gen_body(prompt(33), 24, ignore_eos=False))


def fixtures_fresh(run):
    """Real answers of a fresh pair, before anything else reached the decode."""
    body = gen_body(prompt(12), 6)
    run.save("request.json", body, fixture=True)
    got = run.pair("fixture, fresh, full-length", body, from_prompt=False)
    if got is None:
        return body
    prefill, decode, truth, pbody, _ = got
    obs = run.observe_full_length("fixture, fresh decode", body, decode.json(), truth.json())
    print(f"  fresh decode, full length: {obs['zeros']} of {obs['prompt_rows']} prompt rows are zeros")
    run.save("pair_request.json", pbody, fixture=True)
    run.save("colocated.json", truth.body, fixture=True)
    run.save("prefill.json", prefill.body, fixture=True)
    run.save("decode_full_length_fresh.json", decode.body, fixture=True)
    got = run.pair("fixture, decode from P", body, from_prompt=True)
    if got:
        run.save("decode_from_prompt.json", got[1].body, fixture=True)
        run.save("decode_from_prompt_request.json", got[4], fixture=True)
    # A stream: the decode's raw SSE, byte for byte, and the colocated one's.
    sbody = dict(body, stream=True)
    prefill, decode, _, _ = post_pair(run.args, sbody)
    run.note_decode(sbody)
    run.save("decode_stream.sse", decode.body, fixture=True)
    run.save("colocated_stream.sse", post(run.args.colocated, "/generate", sbody).body, fixture=True)
    # A batch of two prompts.
    bbody = gen_body([prompt(5), prompt(9)], 4)
    prefill, decode, pbody, _ = post_pair(run.args, bbody)
    run.note_decode(bbody)
    run.save("batch_request.json", bbody, fixture=True)
    run.save("batch_pair_request.json", pbody, fixture=True)
    run.save("batch_prefill.json", prefill.body, fixture=True)
    run.save("batch_decode.json", decode.body, fixture=True)
    run.save("batch_colocated.json", post(run.args.colocated, "/generate", bbody).body, fixture=True)
    # The router's stitched stream of the same request, for the record.
    run.save("router_stream.sse", post(run.args.router, "/generate", sbody).body, fixture=True)
    run.note_decode(sbody)
    return body


def sizes(run, k=8):
    """The decode's answer with and without routed_experts_start_len = P:
    prompts of about 300 tokens, 24 new ones."""
    out = {"full": [], "from_prompt": [], "full_rows": [], "from_prompt_rows": []}
    for i in range(k):
        body = gen_body(prompt(294 + i), 24)
        for from_prompt in (False, True):
            got = run.pair(f"size {i} {'from P' if from_prompt else 'full'}", body, from_prompt)
            if got is None:
                continue
            _, decode, truth, _, _ = got
            key = "from_prompt" if from_prompt else "full"
            out[key].append(len(decode.body))
            out[key + "_rows"].append(len(decode.json()["meta_info"]["routed_experts"]))
            if not from_prompt:
                run.observe_full_length(f"size {i}", body, decode.json(), truth.json())
    return out


def ttfb(run, k=12):
    """Time to the first byte of a stream: through the router; the decode's
    own first byte to the same request, as tap.py saw it between the router
    and the decode; and straight from the decode when the pair is sent the
    body at once (another request)."""
    router_t, decode_t, prefill_done, own_t = [], [], [], []
    # Where a request's time through the router goes, in ms: from sending it
    # to the router until the decode has it whole (tap.py's request), the
    # decode's own first byte, and from that byte leaving the decode until it
    # reaches this client.
    for i in range(k):
        body = gen_body(prompt(300), 24, stream=True)
        got, _ = run.via_router("streamed, 300-token prompts", body)
        tapped = run.last_tapped or []
        own = [t["ms"] / 1000 for t in tapped if t["dir"] == "first_byte"]
        if own and got.status == 200:
            router_t.append(got.t_first)
            own_t.append(own[0])
            req_at = [t.get("at") for t in tapped if t["dir"] == "request"]
            first_at = [t.get("at") for t in tapped if t["dir"] == "first_byte"]
            if req_at and first_at and req_at[0] is not None and first_at[0] is not None:
                run.ttfb_split.append((round(1000 * (req_at[0] - got.sent_at)), round(1000 * own[0]),
                                       round(1000 * (got.sent_at + got.t_first - first_at[0]))))
        body = gen_body(prompt(300), 24, stream=True)
        prefill, decode, _, _ = post_pair(run.args, body)
        run.note_decode(body)
        post(run.args.colocated, "/generate", body)  # keeps the colocated cache in step
        if decode.status == 200 and prefill.status == 200:
            decode_t.append(decode.t_first)
            prefill_done.append(prefill.t_done_from_pair_start)
    return router_t, decode_t, prefill_done, own_t


def openai_probe(run):
    """SGLang's OpenAI endpoints on a server started with --skip-tokenizer-init."""
    results = {}
    tries = {
        "completions": ("/v1/completions", {"model": "m", "prompt": prompt(8), "max_tokens": 4, "temperature": 0, "return_routed_experts": True}),
        "completions_stream": ("/v1/completions", {"model": "m", "prompt": prompt(8), "max_tokens": 4, "temperature": 0, "return_routed_experts": True, "stream": True, "stream_options": {"include_usage": True}}),
        "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "return_routed_experts": True}),
        "chat_stream": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "return_routed_experts": True, "stream": True, "stream_options": {"include_usage": True}}),
    }
    text = []
    for name, (path, body) in tries.items():
        a = post(run.args.colocated, path, body)
        results[name] = (a.status, a.body.decode(errors="replace"))
        text.append(f"POST {path}\n{json.dumps(body)}\n-> HTTP {a.status}\n{a.body.decode(errors='replace')}\n")
    run.save("openai_skip_tokenizer_init.txt", "\n".join(text), fixture=True)
    return results


def engine_facts(run):
    """What SGLang answers to a start it does not take."""
    facts = {}
    ids = [prompt(6), prompt(11)]
    # routed_experts_start_len is one integer for the whole request, not one
    # per prompt of a batch. Refused when the body is read, so sent to the
    # decode alone (a prefill would wait in its room for a decode that never
    # comes).
    decode = post(run.args.decode, "/generate", dict(
        gen_body(ids, 4), bootstrap_host=["127.0.0.1"] * 2, bootstrap_port=[run.args.bootstrap_port] * 2,
        bootstrap_room=[random.randrange(2**63) for _ in ids], routed_experts_start_len=[6, 11]))
    facts["batch, decode sent a list of starts"] = (decode.status, decode.body.decode(errors="replace")[:400])
    # One integer applies to every prompt of a batch: the shortest prompt's
    # length is the largest every prompt takes.
    prefill, decode, _, _ = post_pair(run.args, gen_body(ids, 4), {"routed_experts_start_len": 6})
    run.note_decode(gen_body(ids, 4))
    if decode.status == 200:
        facts["batch, decode sent start 6 (prompts of 6 and 11)"] = (200, "rows per item: " + ", ".join(str(rows_of(i).shape[0]) for i in decode.json()))
    else:
        facts["batch, decode sent start 6 (prompts of 6 and 11)"] = (decode.status, decode.body.decode(errors="replace")[:400])
    a = post(run.args.colocated, "/generate", gen_body(prompt(5), 2, routed_experts_start_len=6))
    facts["colocated, start 6 > prompt 5"] = (a.status, a.body.decode(errors="replace")[:300])
    run.save("engine_facts.json", facts)
    return facts


def main():
    ap = argparse.ArgumentParser()
    for name in ("colocated", "prefill", "decode", "router"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--bootstrap-port", type=int, required=True)
    ap.add_argument("--decode-pool", type=int, required=True)
    ap.add_argument("--pd-stitch", required=True)
    ap.add_argument("--answers", required=True)
    ap.add_argument("--fixtures")
    ap.add_argument("--tap-log", help="tap.py's log, when the router reaches the decode through it")
    ap.add_argument("--startup", default="")
    args = ap.parse_args()
    run = Run(args)
    t0 = time.time()

    print("fresh pair: saved answers", flush=True)
    fixture_body = fixtures_fresh(run)

    print(f"router round 1 (decode slots used so far: about {run.decode_tokens} of {args.decode_pool})", flush=True)
    router_round(run)

    print(f"answer sizes (decode slots used so far: about {run.decode_tokens})", flush=True)
    size = sizes(run)

    print(f"time to first byte (decode slots used so far: about {run.decode_tokens})", flush=True)
    router_t, decode_t, prefill_done, own_t = ttfb(run)

    print(f"router round 2 (decode slots used so far: about {run.decode_tokens}, pool {args.decode_pool})", flush=True)
    router_round(run)

    # The fixture's request again, now that the pool has wrapped: the decode's
    # prompt rows are other requests' rows.
    # Which rows it reads depends on which slots it is given; between tries a
    # request with a short prompt and many generated tokens (rows the decode
    # does write) moves the allocator on. The try with the most stale rows is
    # saved.
    best = None
    for attempt in range(6):
        got = run.pair(f"fixture, after the wrap ({attempt})", fixture_body, from_prompt=False)
        if got:
            obs = run.observe_full_length(f"fixture, after the wrap ({attempt})", fixture_body, got[1].json(), got[2].json())
            if best is None or obs["nonzero"] > best[0]["nonzero"]:
                best = (obs, got)
            if obs["nonzero"] * 2 >= obs["prompt_rows"]:
                break
        filler = gen_body(prompt(2), 40)
        post_pair(args, filler)
        run.note_decode(filler)
    if best:
        run.save("decode_full_length_after_wrap.json", best[1][1].body, fixture=True)
        run.save("decode_full_length_after_wrap_prefill.json", best[1][0].body, fixture=True)
        run.save("decode_full_length_after_wrap_observed.json", best[0], fixture=True)

    print("starts SGLang does not take", flush=True)
    facts = engine_facts(run)

    print("OpenAI endpoints without a tokenizer", flush=True)
    openai = openai_probe(run)

    # pd-stitch compare reads SGLang's rows with the row shape: every router
    # answer (a stream's last event) against the colocated one.
    cmp = subprocess.run(
        [args.pd_stitch, "compare", "--dirs", os.path.join(run.cmp_dir, "router"), os.path.join(run.cmp_dir, "colocated"), "--row-shape", f"{LAYERS}x{TOP_K}", "-q"],
        capture_output=True, text=True,
    )
    with open(os.path.join(args.answers, "pd_stitch_compare.txt"), "w") as f:
        f.write(cmp.stdout + cmp.stderr)

    # --- report ---
    print()
    print(f"== SGLang engine harness: {sum(run.counts.values())} checks passed, {len(run.failures)} differences, in {time.time() - t0:.0f} s")
    if args.startup:
        print(f"servers healthy after (s): {args.startup}")
    print("through the router, equal to the colocated answer bitwise (tokens and rows), per kind:")
    for kind, n in sorted(run.counts.items()):
        print(f"  {n:4d}  {kind}")
    failed_kinds = Counter(k for k, _, _ in run.failures)
    for kind, n in sorted(failed_kinds.items()):
        print(f"  {n:4d}  DIFFERENT: {kind}")
    tail = cmp.stdout.strip().splitlines()[-1:] if cmp.stdout.strip() else [cmp.stderr.strip()[:200]]
    print(f"pd-stitch compare --dirs (router vs colocated, --row-shape {LAYERS}x{TOP_K}): exit {cmp.returncode}: {' '.join(tail)}")
    print("the decode's prompt rows in full-length answers (zeros / equal to the truth / stale of prompt rows, decode slots used before):")
    for o in run.stale:
        stale = o["prompt_rows"] - o["zeros"] - o["equal_to_truth"]
        print(f"  {o['label']:28s} {o['zeros']:4d} / {o['equal_to_truth']:4d} / {stale:4d} of {o['prompt_rows']:4d}   after about {o['decode_tokens_before']} slots (pool {o['pool']})")
    med = statistics.median
    tr = run.through_router
    if run.tap and tr["requests"]:
        print(f"rows the decode sent the router (tap.py), {tr['requests']} single-prompt requests: {tr['b64_received']} base64 characters; "
              f"asked full-length from the client's start it would have sent {tr['b64_full_length']} ({tr['b64_full_length'] / max(1, tr['b64_received']):.2f}x)")
        for b in tr["batches"]:
            print(f"  batch {b['name']}: prompts {b['prompts']}, the router sent the decode start {b['starts_sent']}, rows received per item {b['rows_received']}")
    if size["full"] and size["from_prompt"]:
        print(f"decode answer size, prompts 294-301 tokens, 24 new: full-length median {med(size['full'])} B (rows string {med(size['full_rows'])} B), "
              f"from P median {med(size['from_prompt'])} B (rows string {med(size['from_prompt_rows'])} B): "
              f"{med(size['full']) / med(size['from_prompt']):.2f}x")
    if router_t and decode_t:
        print(f"time to first byte of a stream, 300-token prompts, 24 new, {len(router_t)} each: "
              f"through the router median {1000 * med(router_t):.0f} ms, straight from the decode {1000 * med(decode_t):.0f} ms "
              f"({med(router_t) / med(decode_t):.2f}x); the prefill's answer complete at a median {1000 * med(prefill_done):.0f} ms")
        # The router streams when the decode answers, the prefill given to
        # the stitcher when it comes (StreamStitcher::awaiting_prefill): its
        # first byte is the decode's own first byte to the same request
        # (tap.py's), plus the router's hop. Paired per request, as the
        # engine's own time to a first byte varies by hundreds of ms from
        # one request to the next on this CPU (the lists below).
        if own_t:
            # Held per request, the router's first byte against the same
            # request's own: at least half the requests within 1.25 x their
            # own first byte + 20 ms (the median request meets the bound).
            # Medians of the two columns would compare different requests
            # wherever a few requests are slow: one run failed on them
            # (router 282 ms against 1.25 x 195 + 20 ms) while 8 of its 12
            # requests met the bound.
            bounds = [1.25 * o + 0.020 for o in own_t]
            within = sum(r <= b for r, b in zip(router_t, bounds))
            met = 2 * within >= len(router_t)
            print(f"  the decode's own first byte to the same requests (tap.py), median {1000 * med(own_t):.0f} ms; "
                  f"issue 36's bound, per request 1.25 x its own + 20 ms: {within} of {len(router_t)} within, "
                  f"{'met' if met else 'NOT met'} (at least half); medians {1000 * med(router_t):.0f} ms against "
                  f"1.25 x {1000 * med(own_t):.0f} + 20 = {1000 * (1.25 * med(own_t) + 0.020):.0f} ms")
            print(f"  router minus the decode's own, per request, ms: {[round(1000 * (r - o)) for r, o in zip(router_t, own_t)]}")
            print(f"  per request, ms (to the decode, the decode's own first byte, back to the client): {run.ttfb_split}")
            if not met:
                run.fail("time to first byte", "streamed, 300-token prompts",
                         f"{within} of {len(router_t)} requests through the router within 1.25 x the decode's own first byte + 20 ms")
        else:
            run.fail("time to first byte", "streamed, 300-token prompts", "tap.py saw no first byte of the decode's answers")
        print(f"  router ms: {[round(1000 * t) for t in router_t]}")
        print(f"  decode ms: {[round(1000 * t) for t in decode_t]}")
        print(f"  prefill done ms: {[round(1000 * t) for t in prefill_done]}")
    print("routed_experts_start_len:")
    for name, (status, text) in facts.items():
        print(f"  {name}: HTTP {status}: {text[:240]}")
    print("OpenAI endpoints with --skip-tokenizer-init:")
    for name, (status, text) in openai.items():
        print(f"  {name:20s} HTTP {status}: {text[:160]}")
    with open(os.path.join(args.answers, "report.json"), "w") as f:
        json.dump({"counts": run.counts, "failures": run.failures, "stale": run.stale, "sizes": size,
                   "ttfb": {"router": router_t, "decode_own": own_t, "decode": decode_t, "prefill_done": prefill_done,
                            "split_ms": run.ttfb_split},
                   "openai": openai, "engine_facts": facts, "through_router": tr, "compare_exit": cmp.returncode}, f, indent=1)
    if run.failures:
        for f in run.failures:
            print("  DIFFERENT", *f)
    total = sum(run.counts.values())
    print(f"sglang: {total} passed, {len(run.failures) + (1 if cmp.returncode != 0 else 0)} failed")
    sys.exit(1 if run.failures or cmp.returncode != 0 else 0)


if __name__ == "__main__":
    main()
