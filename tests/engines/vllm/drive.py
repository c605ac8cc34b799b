"""Drive a colocated vLLM, a P/D pair and the example router in front of the
pair; check that every answer through the router equals the colocated one.

    python drive.py --colocated URL --prefill URL --decode URL --router URL \
        --pd-stitch target/debug/pd-stitch --answers DIR

run.sh starts the servers and calls this. For every request of the matrix
(prompt lengths 1 to 230 tokens, n 1 and 2, streamed or not, one at a time
or four at once, two-turn episodes with and without
`routed_experts_prompt_start`), the same body goes to the colocated server
and through the router. The tokens must be equal, and the rows too, bitwise:
each answer pair is saved under DIR (a stream as its raw SSE text and as a
response-shaped JSON reassembled from its events) and `pd-stitch compare A B`
must exit 0 on it. (A stream without a usage event gets, reassembled,
the `usage` its request implies, the same on both sides: compare places a
vLLM `.npy` from `usage.prompt_tokens`.)

Before the matrix, the engine's own P/D facts are checked without the
router: the prefill (max_tokens 1) answers the colocated rows [0, P), the
decode sent `routed_experts_prompt_start = P` the rows [P, P + N - 1), and
`pd-stitch merge` of that pair is compared with the colocated answer.

Prints a table per kind and exits 1 on any difference or error.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine  # noqa: E402
from engine import HttpError, assemble_stream, post, post_json, prompt, rows, sampling  # noqa: E402

MAX_TOKENS = 10
LENGTHS = [1, 20, 32, 64, 100, 230]  # under a block, one block, two, ..., over 200


class ServerDied(Exception):
    pass


class Check:
    """One request's outcome: what was sent, the two answers, the verdict."""

    def __init__(self, kind, name, body, s0=0, routed=True):
        self.kind, self.name, self.body, self.s0 = kind, name, body, s0
        self.routed = routed  # sent through the router (else the engine's facts)
        self.errors = []
        self.tokens_equal = None
        self.rows_equal = None  # pd-stitch compare's verdict
        self.numpy_equal = None  # the same, by NumPy on the .npy arrays
        self.colocated = None  # response dict (a stream reassembled)
        self.seconds = {}

    @property
    def ok(self):
        return not self.errors and self.tokens_equal and self.rows_equal


class Driver:
    def __init__(self, args):
        self.a = args
        self.checks = []
        os.makedirs(args.answers, exist_ok=True)

    # ------------------------------------------------------------ requests
    def ask(self, base, body):
        """(raw bytes, response dict, stream facts or None)."""
        raw = post(base, body)
        if body.get("stream"):
            resp, facts = assemble_stream(raw, prompt_tokens=len(body["token_ids"]))
            return raw, resp, facts
        return raw, json.loads(raw), None

    def save(self, check, side, raw, resp):
        stem = os.path.join(self.a.answers, f"{check.name}.{side}")
        if check.body.get("stream"):
            with open(stem + ".sse", "wb") as f:
                f.write(raw)
            with open(stem + ".json", "w") as f:
                json.dump(resp, f)
        else:
            with open(stem + ".json", "wb") as f:
                f.write(raw)
        return stem + ".json"

    def one_side(self, check, side, base):
        t0 = time.monotonic()
        try:
            raw, resp, _ = self.ask(base, check.body)
        except (HttpError, OSError, ValueError) as e:
            check.errors.append(f"{side}: {e}")
            return None
        finally:
            check.seconds[side] = time.monotonic() - t0
        self.save(check, side, raw, resp)
        return resp

    def judge(self, check, colo, merged):
        check.colocated = colo
        try:
            self._judge(check, colo, merged)
        finally:
            self.progress(check)

    def progress(self, check):
        secs = " ".join(f"{k} {v:.2f}s" for k, v in check.seconds.items())
        state = "ok" if check.ok else "FAILED: " + "; ".join(check.errors)[:300]
        print(f"  {check.name:<34} {secs:<36} {state}", flush=True)

    def _judge(self, check, colo, merged):
        if colo is None or merged is None:
            return
        self.check_colocated_shape(check, colo)
        cc, mc = colo.get("choices") or [], merged.get("choices") or []
        check.tokens_equal = len(cc) == len(mc) and all(
            a.get("token_ids") == b.get("token_ids") for a, b in zip(cc, mc)
        )
        if not check.tokens_equal:
            check.errors.append(
                f"tokens differ: colocated {[c.get('token_ids') for c in cc]}, "
                f"router {[c.get('token_ids') for c in mc]}"
            )
        try:
            check.numpy_equal = len(cc) == len(mc) and all(
                _same(rows(a.get("routed_experts")), rows(b.get("routed_experts")))
                for a, b in zip(cc, mc)
            )
        except Exception as e:  # a value NumPy cannot read is pd-stitch's to report
            check.numpy_equal = False
            check.errors.append(f"numpy cannot read the rows: {e}")
        a_path = os.path.join(self.a.answers, f"{check.name}.router.json")
        b_path = os.path.join(self.a.answers, f"{check.name}.colocated.json")
        check.rows_equal, report = compare(self.a.pd_stitch, a_path, b_path)
        with open(os.path.join(self.a.answers, f"{check.name}.compare.txt"), "w") as f:
            f.write(report)
        if not check.rows_equal:
            check.errors.append("pd-stitch compare: " + _last_line(report))

    def check_colocated_shape(self, check, colo):
        """The engine's own convention, on every colocated answer: rows for
        positions [S0, P + N - 1), usage.prompt_tokens = P."""
        p = len(check.body["token_ids"])
        usage = colo.get("usage")
        if usage is not None and usage.get("prompt_tokens") != p:
            check.errors.append(f"colocated usage.prompt_tokens {usage.get('prompt_tokens')} != {p}")
        for c in colo.get("choices") or []:
            r = rows(c.get("routed_experts"))
            n = len(c.get("token_ids") or [])
            want = p + n - 1 - check.s0
            if r is None or r.shape != (want, 3, 2) or r.dtype != np.uint8:
                got = None if r is None else (r.shape, str(r.dtype))
                check.errors.append(
                    f"colocated choice {c.get('index')}: rows {got}, want ({want}, 3, 2) uint8 "
                    f"(P {p} + N {n} - 1 - S0 {check.s0})"
                )

    def run(self, check):
        colo = self.one_side(check, "colocated", self.a.colocated)
        merged = self.one_side(check, "router", self.a.router)
        if check.body.get("stream") and colo is not None:
            self.check_reassembly(check, colo)
        self.judge(check, colo, merged)
        self.checks.append(check)
        if check.errors:
            self.stop_if_a_server_died(check)
        return check

    def stop_if_a_server_died(self, check):
        """After a failed check: if a server no longer answers /health, the
        rest of the matrix would only repeat its death; stop here."""
        dead = []
        for name in ("colocated", "prefill", "decode", "router"):
            base = getattr(self.a, name)
            try:
                urllib.request.urlopen(base + "/health", timeout=10).close()
            except urllib.error.HTTPError:
                pass  # it answers (the router has no /health route)
            except OSError:
                dead.append(name)
        if dead:
            raise ServerDied(f"{', '.join(dead)} stopped answering after {check.name}")

    def check_reassembly(self, check, streamed):
        """A stream reassembled (token deltas concatenated, the rows event's
        value) equals the same request answered whole, on the colocated
        server: what makes a reassembled stream a fair input for compare."""
        body = {k: v for k, v in check.body.items() if k not in ("stream", "stream_options")}
        try:
            whole = post_json(self.a.colocated, body)
        except (HttpError, OSError) as e:
            check.errors.append(f"colocated, not streamed: {e}")
            return
        for a, b in zip(whole["choices"], streamed["choices"]):
            if a["token_ids"] != b["token_ids"] or not _same(rows(a["routed_experts"]), rows(b["routed_experts"])):
                check.errors.append(f"choice {a['index']}: the colocated stream reassembled differs from its whole answer")

    def run_concurrently(self, checks, k=4):
        """The colocated answers k at a time, then the router's k at a time."""
        with concurrent.futures.ThreadPoolExecutor(k) as pool:
            colos = list(pool.map(lambda c: self.one_side(c, "colocated", self.a.colocated), checks))
            merged = list(pool.map(lambda c: self.one_side(c, "router", self.a.router), checks))
        for c, a, b in zip(checks, colos, merged):
            self.judge(c, a, b)
            self.checks.append(c)
        if any(c.errors for c in checks):
            self.stop_if_a_server_died(checks[-1])

    # ------------------------------------------------------------ the engine's own facts
    def direct(self, length, seed):
        """Without the router: prefill rows == colocated [0, P); decode rows
        with S = P == colocated [P, P + N - 1); `pd-stitch merge` of the two
        compared with the colocated answer."""
        name = f"direct-p{length}"
        try:
            self._direct(name, length, seed)
        finally:
            self.progress(self.checks[-1])

    def _direct(self, name, length, seed):
        p = prompt(seed, length)
        check = Check("direct P/D (prefill + decode S=P) + merge", name,
                      {"token_ids": p, "sampling_params": sampling(MAX_TOKENS)}, routed=False)
        self.checks.append(check)
        try:
            colo_raw = post(self.a.colocated, check.body)
            pf_raw = post(self.a.prefill, {"token_ids": p, "sampling_params": sampling(1)})
            pf = json.loads(pf_raw)
            dbody = {"token_ids": p, "sampling_params": sampling(MAX_TOKENS, start=length)}
            if pf.get("kv_transfer_params"):
                dbody["kv_transfer_params"] = pf["kv_transfer_params"]
            d_raw = post(self.a.decode, dbody)
        except (HttpError, OSError) as e:
            check.errors.append(str(e))
            return
        colo, d = json.loads(colo_raw), json.loads(d_raw)
        check.colocated = colo
        stem = os.path.join(self.a.answers, name)
        for side, raw in (("colocated", colo_raw), ("prefill", pf_raw), ("decode", d_raw)):
            with open(f"{stem}.{side}.json", "wb") as f:
                f.write(raw)
        self.check_colocated_shape(check, colo)
        c_rows = rows(colo["choices"][0]["routed_experts"])
        p_rows = rows(pf["choices"][0]["routed_experts"])
        d_rows = rows(d["choices"][0]["routed_experts"])
        check.tokens_equal = colo["choices"][0]["token_ids"] == d["choices"][0]["token_ids"]
        if not check.tokens_equal:
            check.errors.append("decode tokens differ from colocated")
        if not _same(p_rows, c_rows[:length]):
            check.errors.append(f"prefill rows {p_rows.shape} != colocated [0, {length})")
        if not _same(d_rows, c_rows[length:]):
            check.errors.append(f"decode rows {d_rows.shape} != colocated [{length}, {len(c_rows)})")
        check.numpy_equal = _same(np.concatenate([p_rows, d_rows]), c_rows)
        # The crate's own merge of the real pair (the router's merge, offline).
        merged = f"{stem}.merged.json"
        m = subprocess.run(
            [self.a.pd_stitch, "merge", f"{stem}.prefill.json", f"{stem}.decode.json", "-o", merged],
            capture_output=True, text=True,
        )
        if m.returncode != 0:
            check.rows_equal = False
            check.errors.append("pd-stitch merge: " + (m.stderr.strip() or m.stdout.strip()))
            return
        check.rows_equal, report = compare(self.a.pd_stitch, merged, f"{stem}.colocated.json")
        with open(f"{stem}.compare.txt", "w") as f:
            f.write(report)
        if not check.rows_equal:
            check.errors.append("pd-stitch compare: " + _last_line(report))

    # ------------------------------------------------------------ the matrix
    def matrix(self):
        a = self.a
        # First, while the KV directory is empty (run.sh empties it): the
        # 1-token prompt's prefill (see one_token).
        if not a.one_token_pd:
            self.one_token()
        seed = 100
        for length in [n for n in LENGTHS if n > 1] + [45, 70]:
            self.direct(length, seed)
            seed += 1
        if a.only_direct:
            return

        pd_lengths = LENGTHS if a.one_token_pd else [n for n in LENGTHS if n > 1]
        # Plain: greedy, and sampled with a fixed seed.
        for length in pd_lengths:
            for label, sp in (("greedy", sampling(MAX_TOKENS)),
                              ("seeded", sampling(MAX_TOKENS, temperature=1.0, seed=seed))):
                self.run(Check("plain", f"plain-p{length}-{label}",
                               {"token_ids": prompt(seed, length), "sampling_params": sp}))
                seed += 1
        # n = 2, sampled (greedy would make the two choices the same).
        for length in pd_lengths:
            self.run(Check("n=2", f"n2-p{length}",
                           {"token_ids": prompt(seed, length),
                            "sampling_params": sampling(MAX_TOKENS, temperature=1.0, seed=seed, n=2)}))
            seed += 1
        # Streamed: with and without a usage chunk; one with n = 2.
        for k, length in enumerate(pd_lengths):
            body = {"token_ids": prompt(seed, length), "sampling_params": sampling(MAX_TOKENS), "stream": True}
            if k % 2:
                body["stream_options"] = {"include_usage": True}
            self.run(Check("streamed", f"stream-p{length}{'-usage' if k % 2 else ''}", body))
            seed += 1
        for length in (45, 100):
            self.run(Check("streamed", f"stream-n2-p{length}",
                           {"token_ids": prompt(seed, length), "stream": True,
                            "sampling_params": sampling(MAX_TOKENS, temperature=1.0, seed=seed, n=2)}))
            seed += 1
        # Concurrency 4: eight requests, four in flight at a time.
        group = []
        for k, length in enumerate([20, 32, 45, 64, 70, 100, 150, 230]):
            sp = sampling(MAX_TOKENS, temperature=1.0, seed=seed, n=2) if k % 4 == 3 else sampling(MAX_TOKENS)
            group.append(Check("concurrency 4", f"conc-p{length}",
                               {"token_ids": prompt(seed, length), "sampling_params": sp}))
            seed += 1
        self.run_concurrently(group)
        # Two-turn episodes: turn 2 = turn 1's prompt + its completion + new
        # tokens, sent without and with routed_experts_prompt_start = turn 1's
        # prompt length (the colocated server gets the same S0).
        for length, new in ((20, 5), (45, 7), (70, 30), (100, 40)):
            p1 = prompt(seed, length)
            seed += 1
            t1 = self.run(Check("turn 1", f"turn1-p{length}",
                                {"token_ids": p1, "sampling_params": sampling(MAX_TOKENS)}))
            if t1.colocated is None:
                continue
            p2 = p1 + t1.colocated["choices"][0]["token_ids"] + prompt(seed, new)
            seed += 1
            self.run(Check("turn 2, S0 = 0", f"turn2-p{len(p2)}",
                           {"token_ids": p2, "sampling_params": sampling(MAX_TOKENS)}))
            self.run(Check("turn 2, S0 = turn 1's P", f"turn2-p{len(p2)}-s{length}",
                           {"token_ids": p2, "sampling_params": sampling(MAX_TOKENS, start=length)},
                           s0=length))
            # Turn 2 streamed, with S0.
            self.run(Check("turn 2, S0 = turn 1's P", f"turn2-p{len(p2)}-s{length}-stream",
                           {"token_ids": p2, "stream": True,
                            "stream_options": {"include_usage": True},
                            "sampling_params": sampling(MAX_TOKENS, start=length)},
                           s0=length))

    def one_token(self):
        """A 1-token prompt, colocated and prefill only (unless
        --one-token-pd): ExampleConnector's `align_to_block_size(0)` is -32,
        so once any prompt of at most 33 tokens has been prefilled into the
        KV directory, every engine with the connector takes a 1-token
        prompt as 32 tokens short of cached and dies ("auxiliary output
        token start must be non-negative"). Hence first, on an empty
        directory, and never through the decode."""
        try:
            self._one_token()
        finally:
            self.progress(self.checks[-1])

    def _one_token(self):
        p = prompt(7, 1)
        check = Check("1-token prompt (colocated + prefill only)", "one-token",
                      {"token_ids": p, "sampling_params": sampling(MAX_TOKENS)}, routed=False)
        self.checks.append(check)
        try:
            colo = post_json(self.a.colocated, check.body)
            pf = post_json(self.a.prefill, {"token_ids": p, "sampling_params": sampling(1)})
        except (HttpError, OSError) as e:
            check.errors.append(str(e))
            return
        check.colocated = colo
        self.check_colocated_shape(check, colo)
        c_rows, p_rows = rows(colo["choices"][0]["routed_experts"]), rows(pf["choices"][0]["routed_experts"])
        check.tokens_equal = pf["choices"][0]["token_ids"] == colo["choices"][0]["token_ids"][:1]
        check.rows_equal = check.numpy_equal = _same(p_rows, c_rows[:1])
        if not check.rows_equal:
            check.errors.append(f"prefill rows {p_rows.shape} != colocated [0, 1)")

    # ------------------------------------------------------------ the report
    def summary(self):
        kinds = []
        for c in self.checks:
            if c.kind not in kinds:
                kinds.append(c.kind)
        w = max(len(k) for k in kinds)
        print()
        print(f"{'kind':<{w}}  requests  tokens equal  rows equal (compare)  rows equal (numpy)  errors")
        for k in kinds:
            cs = [c for c in self.checks if c.kind == k]
            n = len(cs)
            te = sum(1 for c in cs if c.tokens_equal)
            re_ = sum(1 for c in cs if c.rows_equal)
            ne = sum(1 for c in cs if c.numpy_equal)
            er = sum(1 for c in cs if c.errors)
            print(f"{k:<{w}}  {n:>8}  {te:>6}/{n:<5}  {re_:>13}/{n:<6}  {ne:>11}/{n:<6}  {er:>6}")
        bad = [c for c in self.checks if not c.ok]
        n_router = sum(1 for c in self.checks if c.routed)
        print()
        for c in bad:
            print(f"FAILED {c.name}: " + "; ".join(c.errors)[:600])
        if bad:
            print(f"DIFFERENT: {len(bad)} of {len(self.checks)} checks failed "
                  f"({n_router} requests through the router); answers in {self.a.answers}")
        else:
            print(f"all {len(self.checks)} checks equal ({n_router} requests through the router, "
                  f"tokens and rows bitwise equal to the colocated server's)")
        print(f"{len(self.checks) - len(bad)} passed, {len(bad)} failed")
        return 1 if bad else 0


def _same(a, b):
    return a is not None and b is not None and a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())


def _last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def compare(pd_stitch, a, b):
    """(equal, report): `pd-stitch compare A B`, exit 0 when all rows equal."""
    r = subprocess.run([pd_stitch, "compare", a, b], capture_output=True, text=True)
    return r.returncode == 0, f"$ pd-stitch compare {a} {b}\n(exit {r.returncode})\n{r.stdout}{r.stderr}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--colocated", required=True)
    ap.add_argument("--prefill", required=True)
    ap.add_argument("--decode", required=True)
    ap.add_argument("--router", required=True)
    ap.add_argument("--pd-stitch", required=True)
    ap.add_argument("--answers", required=True)
    ap.add_argument("--only-direct", action="store_true", help="the engine's own P/D facts only, no router")
    ap.add_argument("--one-token-pd", action="store_true",
                    help="send the 1-token prompt through P/D too (crashes ExampleConnector's decode)")
    a = ap.parse_args()
    t0 = time.monotonic()
    d = Driver(a)
    died = None
    try:
        d.matrix()
    except ServerDied as e:
        died = str(e)
    rc = d.summary()
    if died:
        print(f"STOPPED EARLY: {died} (run.sh prints the end of its log)")
        rc = 1
    print(f"driven in {time.monotonic() - t0:.1f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
