#!/usr/bin/python3
"""Bad-input end-to-end test of `tessera serve`'s OpenAI HTTP API (stdlib only).

    /usr/bin/python3 tests/e2e/test_bad_input.py --tessera build/tessera [--keep]

Synthesises a tiny random-weight qwen3 checkpoint and throws malformed,
mistyped, out-of-range, oversized, slow, abandoned and overloading requests at
`tessera serve`. Every case asserts the documented status and OpenAI error shape
({"error": {message, type, param, code}}, `param` where meaningful); after each
group the server must still answer /health and give the same greedy completion
as before. Then: 200 abandoned streams must free their KV blocks (visible in
/metrics), 100 concurrent requests over --max-pending-requests 8 get 200 or
429/503 with Retry-After, and the server's RSS must not grow by 150 MB or more.
Prints one line per check and ends with `N passed, M failed`.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (PROMPT, Results, Server, chat, complete, error_check,  # noqa: E402
                        get_metrics, request, synth_model)
from bad_input_cases import load as load_cases  # noqa: E402

NAME = "bad-input-model"
VOCAB = 151936            # Qwen3 vocabulary (tokens 0..VOCAB-1)
BODY_LIMIT = 256 * 1024   # --max-body-bytes of the main server
MAX_PENDING = 8           # --max-pending-requests of the overload server
RSS_GROWTH_LIMIT_MB = 150
IDLE_TIMEOUT = 2          # --idle-timeout of the main server (seconds)
CASES = load_cases()      # value cases shared with the gRPC suite (bad_input_cases.json)


def raw_exchange(port, data, timeout=10.0, half_close=False):
    """Sends raw bytes; returns everything the server sends until it closes (or timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            chunks.append(b)
            if b"\r\n\r\n" in b"".join(chunks) and not half_close:
                head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
                length = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
                if length and len(rest) >= int(length[0].split(b":")[1]):
                    break
        return b"".join(chunks)


def raw_status(resp):
    line = resp.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    assert len(parts) >= 2 and parts[0].startswith(b"HTTP/1."), f"no HTTP status line in {resp[:200]!r}"
    return int(parts[1])


def raw_json_body(resp):
    return json.loads(resp.partition(b"\r\n\r\n")[2])


def post_raw(port, path, body_bytes):
    return request(port, "POST", path, raw=body_bytes)


class Ctx:
    def __init__(self, res, srv):
        self.res = res
        self.srv = srv
        self.reference = None  # greedy token_ids of the canary completion
        self.restarts = 0

    @property
    def port(self):
        return self.srv.port

    def ensure_alive(self, before):
        """If the server died (crashed on a previous case), starts a fresh one; False if that fails."""
        try:  # a crash may still be under way: probe, then give it time to exit
            status, _, _ = request(self.port, "GET", "/health", timeout=3)
            if status == 200 and self.srv.proc.poll() is None:
                return True
        except OSError:
            pass
        try:
            self.srv.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        if self.srv.proc.poll() is None:
            return True
        self.restarts += 1
        tessera, args, workdir, name, env = self.srv.init_args
        self.srv.stop()
        self.srv = self.res.server = Server(tessera, args, workdir, f"{name}-restart{self.restarts}", env)
        return self.res.run(f"server restarted (after a crash) before {before}", self.srv.wait_ready)

    def canary(self):
        status, _, body = complete(self.port, model=NAME, prompt=PROMPT, max_tokens=4, temperature=0)
        assert status == 200, (status, body)
        return body["choices"][0].get("token_ids") or body["choices"][0]["text"]

    def healthy_after(self, group):
        def check():
            status, _, body = request(self.port, "GET", "/health", timeout=10)
            assert status == 200, (status, body)
            got = self.canary()
            assert got == self.reference, f"canary completion changed: {got!r} != {self.reference!r}"
        self.res.run(f"healthy after: {group} (/health 200, same greedy completion)", check)


def shared_cases(ctx, group):
    """The `group` cases of bad_input_cases.json (shared with the gRPC suite): each -> its status, naming its param.

    One check per table (all values of one field) or per single case."""
    checks = {}
    for case in CASES:
        if case["group"] == group:
            key = case["table"] or f"{case['endpoint']}: {case['name']}"
            checks.setdefault(key, []).append(case)
    for key, cases in checks.items():
        def check(cases=cases):
            bad = []
            for c in cases:
                status, _, resp = request(ctx.port, "POST", c["path"], c["body"])
                try:
                    error_check(status, resp, tuple(c["statuses"]), param=c["param"] if status == 400 else None)
                except AssertionError as e:
                    bad.append(f"{c['name']} -> {e}")
            assert not bad, f"{len(bad)}/{len(cases)} wrong:\n    " + "\n    ".join(bad)
        params = sorted({c["param"] for c in cases})
        ctx.res.run(f"{key}" + (f" x{len(cases)}" if len(cases) > 1 else "") +
                    f" -> {'/'.join(map(str, cases[0]['statuses']))} param {', '.join(map(repr, params))}", check)


def malformed_json_group(ctx):
    res = ctx.res
    cases = [
        ("malformed JSON", b'{"prompt": [1, 2,, 3]}'),
        ("truncated JSON", b'{"model": "' + NAME.encode() + b'", "prompt": [1, 2'),
        ("empty body", b""),
        ("not JSON at all", b"hello world"),
        ("JSON array, not an object", b"[1, 2, 3]"),
        ("JSON string, not an object", b'"prompt"'),
        ("JSON null", b"null"),
        ("JSON number", b"42"),
        ("trailing garbage", b'{"prompt": [1], "max_tokens": 1} xyz'),
        ("deeply nested, unterminated (100000 '[')", b"[" * 100000),
        ("deeply nested, terminated", b"[" * 100000 + b"]" * 100000),
        ("deeply nested inside a field", b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
        ("deeply nested objects", b'{"a":' * 30000 + b"1" + b"}" * 30000),
    ]
    for path in ("/v1/completions", "/v1/chat/completions"):
        for name, raw in cases:
            if path.endswith("chat/completions") and "inside a field" in name:
                raw = raw.replace(b'"prompt"', b'"messages"')

            def case(raw=raw, path=path):
                status, _, body = post_raw(ctx.port, path, raw)
                error_check(status, body, 400)
            res.run(f"{path}: {name} -> 400", case)
            if not ctx.ensure_alive(f"the next case after {path}: {name}"):
                return
    ctx.healthy_after("malformed JSON")


def wrong_types_group(ctx):
    shared_cases(ctx, "types")
    ctx.healthy_after("wrong types")


def out_of_range_group(ctx):
    res, port = ctx.res, ctx.port
    shared_cases(ctx, "range")

    def context_length():
        status, _, body = complete(port, model=NAME, prompt=PROMPT, max_tokens=10 ** 6)
        error_check(status, body, 400, code="context_length_exceeded")
    res.run("completions: max_tokens 10^6 -> 400 context_length_exceeded", context_length)
    ctx.healthy_after("out of range")


def token_ids_group(ctx):
    res, port = ctx.res, ctx.port
    shared_cases(ctx, "tokens")
    for tokens in ([-1], [VOCAB], [10 ** 9], [1, "x"], "x", None, [1.5]):
        def case(tokens=tokens):
            status, _, body = request(port, "POST", "/detokenize", {"model": NAME, "tokens": tokens})
            error_check(status, body, 400, param="tokens")
        res.run(f"/detokenize tokens {json.dumps(tokens)} -> 400 param 'tokens'", case)

    def detok_ok():
        status, _, body = request(port, "POST", "/detokenize", {"model": NAME, "tokens": [9707, 11, 1879, 0]})
        assert status == 200 and body == {"prompt": "Hello, world!"}, (status, body)
    res.run("/detokenize [9707, 11, 1879, 0] -> 'Hello, world!' (control)", detok_ok)
    ctx.healthy_after("token ids outside the vocabulary")


def utf8_group(ctx):
    res, port = ctx.res, ctx.port
    cases = [
        ("completions", b'{"model": "' + NAME.encode() + b'", "prompt": "ab\xff\xfecd", "max_tokens": 1}'),
        ("completions", b'{"model": "' + NAME.encode() + b'", "prompt": "\xc3", "max_tokens": 1}'),
        ("completions", b'{"model": "' + NAME.encode() + b'", "prompt": "x", "stop": ["\xed\xa0\x80"]}'),
        ("chat", b'{"model": "' + NAME.encode() + b'", "messages": [{"role": "user", "content": "hi \xff"}]}'),
        ("chat", b'{"model": "' + NAME.encode() + b'", "messages": [{"role": "user", "\xff": "hi"}]}'),
        ("tokenize", b'{"model": "' + NAME.encode() + b'", "prompt": "\xf8\x88\x80\x80\x80"}'),
    ]
    paths = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "tokenize": "/tokenize"}
    for i, (kind, raw) in enumerate(cases):
        def case(kind=kind, raw=raw):
            status, _, body = post_raw(port, paths[kind], raw)
            error_check(status, body, 400)
        res.run(f"{kind}: invalid UTF-8 bytes in a JSON string #{i} -> 400", case)

    def lone_surrogate():
        # Valid JSON escapes, but not a Unicode scalar value: 400 or handled, never 5xx or a crash.
        status, _, body = post_raw(port, "/v1/completions",
                                   b'{"model": "' + NAME.encode() + b'", "prompt": "a\\ud800b", "max_tokens": 1}')
        assert status in (200, 400), (status, body)
        if status == 400:
            error_check(status, body, 400)
    res.run("completions: lone surrogate escape \\ud800 -> 200 or 400", lone_surrogate)

    def raw_garbage():
        resp = raw_exchange(port, b"\xff\xfe\xfd\x80 /\xff HTTP/1.1\r\n\r\n")
        assert raw_status(resp) == 400, resp[:300]
    res.run("raw request line of invalid UTF-8 bytes, no headers -> 400", raw_garbage)

    def raw_bad_header():
        resp = raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-\xff\xfe: \xff\r\n\r\n")
        assert raw_status(resp) in (200, 400), resp[:300]
    res.run("raw request with invalid UTF-8 in a header -> 200 or 400", raw_bad_header)

    def raw_not_http():
        resp = raw_exchange(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)), half_close=True)
        assert resp == b"" or raw_status(resp) == 400, resp[:300]
    res.run("TLS ClientHello on the plain port -> 400 or closed", raw_not_http)
    ctx.healthy_after("invalid UTF-8")


def messages_group(ctx):
    res, port = ctx.res, ctx.port
    shared_cases(ctx, "messages")  # param: the offending element, OpenAI style ("messages[0].role")

    def tokenize_bad_messages():
        status, _, body = request(port, "POST", "/tokenize", {"model": NAME, "messages": [{"content": "x"}]})
        error_check(status, body, 400, param="messages[0].role")
    res.run("/tokenize: messages missing role -> 400 param 'messages[0].role'", tokenize_bad_messages)
    ctx.healthy_after("malformed messages")


def huge_lists_group(ctx):
    shared_cases(ctx, "huge")
    ctx.healthy_after("huge lists")


def oversize_group(ctx):
    res, port = ctx.res, ctx.port

    def body_413():
        raw = b'{"model": "' + NAME.encode() + b'", "prompt": [' + b"1, " * (BODY_LIMIT // 3 + 1000) + b'1]}'
        status, _, body = post_raw(port, "/v1/completions", raw)
        error_check(status, body, 413)
    res.run(f"body over --max-body-bytes {BODY_LIMIT} -> 413", body_413)

    def body_413_declared():
        # Content-Length over the limit with no body sent: refused without reading it.
        resp = raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: 100000000\r\n\r\n{", timeout=10)
        assert raw_status(resp) == 413, resp[:300]
    res.run("Content-Length 10^8 (body not sent) -> 413 promptly", body_413_declared)

    def header_431():
        status, _, body = request(port, "GET", "/health", headers={"X-Filler": "a" * 40000})
        error_check(status, body, 431)
    res.run("40 KB header -> 431", header_431)

    def many_headers_431():
        hdrs = {f"X-H{i}": "v" * 20 for i in range(2000)}
        status, _, body = request(port, "GET", "/health", headers=hdrs)
        error_check(status, body, 431)
    res.run("2000 headers (~60 KB) -> 431", many_headers_431)
    ctx.healthy_after("oversize body and headers")


def slow_client_group(ctx):
    res, port = ctx.res, ctx.port
    socks = []

    def slow():
        # Half a request (headers, then part of the body) on 4 connections that then stall.
        body = json.dumps({"model": NAME, "prompt": PROMPT, "max_tokens": 2}).encode()
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:len(body) // 2])
            socks.append(s)
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Partial: ")  # stalled mid-header
        socks.append(s)
        t0 = time.time()
        for _ in range(3):
            got = ctx.canary()
            assert got == ctx.reference, (got, ctx.reference)
        dt = time.time() - t0
        assert dt < 15, f"3 completions took {dt:.1f}s while slow clients stalled"

    def closed_by_idle_timeout():
        # --idle-timeout IDLE_TIMEOUT: the server closes the stalled connections (a 408 first is fine).
        deadline = time.time() + IDLE_TIMEOUT + 4
        for i, s in enumerate(socks):
            s.settimeout(max(0.1, deadline - time.time()))
            data = b""
            try:
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    data += b
            except socket.timeout:
                raise AssertionError(f"stalled connection {i} still open {IDLE_TIMEOUT + 4}s after it stalled "
                                     f"(--idle-timeout {IDLE_TIMEOUT})") from None
            except ConnectionResetError:
                pass
            assert data == b"" or raw_status(data) == 408, f"stalled connection {i} got {data[:200]!r}"
    try:
        res.run("slow clients (half requests, stalled) do not block other requests", slow)
        res.run(f"stalled connections closed by the server (--idle-timeout {IDLE_TIMEOUT})", closed_by_idle_timeout)
    finally:
        for s in socks:
            s.close()
    ctx.healthy_after("slow clients")


def abandoned_group(ctx, n=200):
    res, port = ctx.res, ctx.port
    rss = {}

    def abandon():
        rss.setdefault("before", ctx.srv.rss_mb())
        body = json.dumps({"model": NAME, "prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True,
                           "stream": True, "temperature": 0}).encode()
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        outcome = [None] * n
        barrier = threading.Barrier(n, timeout=30)

        def one(i):
            try:
                barrier.wait()  # connect all at once (after it: --idle-timeout is short)
            except threading.BrokenBarrierError:
                pass
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError as e:
                outcome[i] = f"connect: {e}"
                return
            try:
                s.sendall(req)
                buf = b""
                while b"data:" not in buf:
                    b = s.recv(4096)
                    if not b:
                        break
                    buf += b
                head = buf.split(b"\r\n", 1)[0]
                outcome[i] = "ok" if (b" 200 " in head and b"data:" in buf) else f"got {buf[:200]!r}"
            except OSError as e:
                outcome[i] = f"{type(e).__name__}: {e}"
            finally:
                s.close()  # abandon the stream after its first chunk
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(1.0, 60 - (time.time() - t0)))
        bad = [o for o in outcome if o != "ok"]
        print(f"  {n} streams opened and abandoned in {time.time() - t0:.1f}s", flush=True)
        assert not bad, f"{len(bad)}/{n} streams did not start: {sorted(set(map(str, bad)))[:5]}"

    def freed():
        deadline = time.time() + 20
        m = {}
        while time.time() < deadline:
            m = get_metrics(port)
            if m.get("tessera:num_requests_running") == 0 and m.get("tessera:num_requests_waiting", 0) == 0 \
                    and m.get("tessera:kv_cache_usage_perc") == 0:
                return
            time.sleep(0.25)
        raise AssertionError("after 20 s: running={} waiting={} kv_cache_usage_perc={}".format(
            m.get("tessera:num_requests_running"), m.get("tessera:num_requests_waiting"),
            m.get("tessera:kv_cache_usage_perc")))
    for rnd in (1, 2):  # two rounds: a per-request leak shows up twice in the RSS growth
        res.run(f"round {rnd}: {n} concurrent streams (max_tokens 2000, ignore_eos) each get a first chunk", abandon)
        res.run(f"round {rnd}: /metrics running 0, waiting 0, kv_cache_usage_perc 0 within 20 s", freed)
        rss[f"after round {rnd}"] = ctx.srv.rss_mb()

    def counted_as_abort():
        m = get_metrics(port)
        # the streams finished as aborts, not as length: far fewer than n*2000 tokens generated
        gen = m.get("tessera:generation_tokens_total", 0)
        assert gen < 2 * n * 2000 / 4, f"generation_tokens_total {gen}: abandoned streams ran on"
    res.run("abandoned streams stopped generating (generation_tokens_total << 2*200*2000)", counted_as_abort)

    def fresh():
        t0 = time.time()
        got = ctx.canary()
        dt = time.time() - t0
        assert got == ctx.reference and dt < 5, (got, ctx.reference, f"{dt:.1f}s")
    res.run("fresh request after the abandonment completes within 5 s, same tokens", fresh)

    def memory():
        rss["after"] = ctx.srv.rss_mb()
        print("  server RSS (MB): " + ", ".join(f"{k} {v:.1f}" for k, v in rss.items()), flush=True)
        assert rss["after"] - rss["before"] < RSS_GROWTH_LIMIT_MB, rss
    res.run(f"RSS growth over 2 abandonment rounds < {RSS_GROWTH_LIMIT_MB} MB", memory)


def overload_checks(res, tessera, model, workdir, n=100):
    srv = Server(tessera, ["--model", model, "--served-model-name", NAME, "--max-pending-requests",
                           str(MAX_PENDING)], workdir, "overload")
    res.server = srv
    try:
        if not res.run(f"overload server (--max-pending-requests {MAX_PENDING}) ready", srv.wait_ready):
            return
        port = srv.port
        rss = {"before": srv.rss_mb()}
        outcome = [None] * n
        barrier = threading.Barrier(n, timeout=30)

        def one(i):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    pass
                body = {"model": NAME, "prompt": PROMPT, "max_tokens": 32, "ignore_eos": True, "temperature": 0}
                if i % 2:
                    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32,
                            "ignore_eos": True, "temperature": 0}
                path = "/v1/chat/completions" if i % 2 else "/v1/completions"
                outcome[i] = request(port, "POST", path, body, conn=conn)
                conn.close()
            except Exception as e:  # noqa: BLE001
                outcome[i] = e

        def overload():
            threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
            t0 = time.time()
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(1.0, 90 - (time.time() - t0)))
            errors = [o for o in outcome if not isinstance(o, tuple)]
            statuses = [o[0] for o in outcome if isinstance(o, tuple)]
            counts = {s: statuses.count(s) for s in sorted(set(statuses))}
            print(f"  {n} requests in {time.time() - t0:.1f}s: statuses {counts}, errors {len(errors)}", flush=True)
            assert not errors, f"connection errors: {[repr(e) for e in errors[:5]]}"
            assert set(counts) <= {200, 429, 503}, f"unexpected statuses {counts}: " + str(
                [o[2] for o in outcome if o[0] not in (200, 429, 503)][:3])
            assert counts.get(200, 0) >= 1, f"no request succeeded: {counts}"
            refused = [o for o in outcome if o[0] in (429, 503)]
            assert refused, f"none of {n} concurrent requests was refused with --max-pending-requests {MAX_PENDING}"
            for status, headers, body in refused:
                assert headers.get("retry-after", "").strip().isdigit(), f"{status} without Retry-After: {headers}"
                error_check(status, body, (429, 503))
            for status, _, body in outcome:
                if status == 200:
                    assert body["usage"]["completion_tokens"] == 32, body["usage"]
        res.run(f"overload: {n} concurrent -> only 200 or 429/503 with Retry-After, no resets", overload)

        def healthy():
            status, _, _ = request(port, "GET", "/health")
            assert status == 200, status
            status, _, body = complete(port, model=NAME, prompt=PROMPT, max_tokens=4, temperature=0)
            assert status == 200 and body["usage"]["completion_tokens"] == 4, (status, body)
            deadline = time.time() + 10
            while True:
                m = get_metrics(port)
                if m.get("tessera:num_requests_running") == 0 and m.get("tessera:kv_cache_usage_perc") == 0:
                    break
                assert time.time() < deadline, f"metrics not back to idle: {m}"
                time.sleep(0.2)
            rejected = m.get("tessera:request_rejected_total", 0)
            refused = sum(1 for o in outcome if isinstance(o, tuple) and o[0] in (429, 503))
            assert rejected >= refused, f"tessera:request_rejected_total {rejected} < {refused} refused"
        res.run("overload: healthy after, metrics idle, rejections counted", healthy)

        def memory():
            rss["after"] = srv.rss_mb()
            print(f"  server RSS before {rss['before']:.1f} MB, after {rss['after']:.1f} MB", flush=True)
            assert rss["after"] - rss["before"] < RSS_GROWTH_LIMIT_MB, rss
        res.run(f"overload: RSS growth < {RSS_GROWTH_LIMIT_MB} MB", memory)

        res.run("overload server: SIGTERM -> exit 0", lambda: _eq(srv.terminate_and_wait(), 0))
    finally:
        srv.stop()


def _eq(a, b):
    assert a == b, f"{a!r} != {b!r}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True, help="path to the tessera binary")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--only", default="", help="comma-separated group names to run (debugging)")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-bad-")
    res = Results()
    start = time.time()
    only = set(filter(None, args.only.split(",")))
    try:
        model = synth_model(tessera, workdir)
        srv = Server(tessera, ["--model", model, "--served-model-name", NAME, "--max-body-bytes", str(BODY_LIMIT),
                           "--idle-timeout", str(IDLE_TIMEOUT)],
                     workdir, "bad-input")
        res.server = srv
        try:
            if res.run("server becomes ready", srv.wait_ready):
                ctx = Ctx(res, srv)

                def canary():
                    ctx.reference = ctx.canary()
                if res.run("canary greedy completion", canary):
                    groups = [("json", malformed_json_group), ("types", wrong_types_group),
                              ("range", out_of_range_group), ("tokens", token_ids_group), ("utf8", utf8_group),
                              ("messages", messages_group), ("huge", huge_lists_group),
                              ("oversize", oversize_group), ("slow", slow_client_group),
                              ("abandon", abandoned_group)]
                    for name, fn in groups:
                        if not only or name in only:
                            if not ctx.ensure_alive(f"group {name}"):
                                break
                            t0 = time.time()
                            fn(ctx)
                            print(f"  [group {name}: {time.time() - t0:.1f}s]", flush=True)
                    srv = ctx.srv
                    res.run("SIGTERM -> exit 0", lambda: _eq(srv.terminate_and_wait(), 0))
        finally:
            ctx_srv = locals().get("ctx")
            if ctx_srv is not None:
                ctx_srv.srv.stop()
            srv.stop()
        if not only or "overload" in only:
            overload_checks(res, tessera, model, workdir)
    except AssertionError as e:
        res.failed += 1
        print(f"FAIL setup: {e}", flush=True)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
