#!/usr/bin/python3
"""Soak benchmark: 32 streams for N minutes at 2x overload against a `tessera serve` it starts.

    /usr/bin/python3 bench/soak/soak.py --tessera build/tessera [--model DIR] [--minutes 30] [--out soak.json]

Starts `tessera serve` on a free 127.0.0.1 port with --max-num-seqs S and
--max-pending-requests P chosen so that --streams clients are twice what the
server admits at once (P = streams/2; S = P/2), so 429s happen and are retried
after Retry-After. First it computes, alone and in order, the greedy reference
of a fixed prompt set (completions and chat). Then each client loops until the
deadline, picking a prompt and an action at random:

  complete   greedy request to the end (streamed or unary); its text and token
             count must be byte-identical to the reference
  cancel     a deliberate disconnect at one phase: sending (half a body),
             queued (right after sending), prefill (a long prompt, before its
             first byte), decode (after k SSE events), mid-sse (inside an
             event), unary (a non-streamed request, after a random delay)

Every HTTP exchange is a fresh connection (Connection: close) carrying an
X-Request-Id that the response must echo. Meanwhile /health is polled every
100 ms (latency p50/p99/max) and the server's VmRSS sampled every 5 s. At the
end it waits for the clients, checks /metrics return to idle (running 0,
waiting 0, kv_cache_usage_perc 0), stops the server with SIGTERM and reports:
requests sent/completed/cancelled/429, lost responses (a request that neither
completed nor was deliberately cancelled), duplicated responses (a response id
seen twice, a second finish for one choice, data after [DONE], a foreign
X-Request-Id), reference mismatches, /health latency, RSS drift and KV idle.
Prints a short table and one JSON object (also to --out); exits 1 when
anything that must be 0 is not, or the server did not return to idle.
Python standard library only; bounded in time (minutes + a grace period).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

READY_TIMEOUT = 120
IO_TIMEOUT = 300          # seconds any one socket operation may block (--io-timeout)
GRACE = 180               # seconds after the deadline (plus --io-timeout) for in-flight requests to end
PHASES = ("sending", "queued", "prefill", "decode", "mid-sse", "unary")


# --- a minimal HTTP/1.1 client on raw sockets (disconnects must be exact) ---

class HttpError(Exception):
    pass


def build_request(method, path, body, request_id):
    data = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"X-Request-Id: {request_id}\r\n")
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return (head + "\r\n").encode() + data


class Response:
    """Reads one response: status and headers, then the body (Content-Length, chunked or to EOF)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise HttpError(f"bad status line {lines[0]!r}")
        self.status = int(parts[1])
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.remaining = int(self.headers["content-length"]) if "content-length" in self.headers else None
        self.done = False

    def _fill(self, n=65536):
        b = self.sock.recv(n)
        if not b:
            raise HttpError("connection closed by the server")
        self.buf += b

    def read_some(self, n=65536):
        """Next piece of the (de-chunked) body; b"" at its end."""
        if self.done:
            return b""
        if not self.chunked:
            if self.remaining == 0:
                self.done = True
                return b""
            if not self.buf:
                try:
                    self._fill(n)
                except HttpError:
                    if self.remaining is None:
                        self.done = True
                        return b""
                    raise
            out, self.buf = self.buf, b""
            if self.remaining is not None:
                out, self.buf = out[:self.remaining], out[self.remaining:]
                self.remaining -= len(out)
            return out
        while b"\r\n" not in self.buf:
            self._fill(n)
        size_line, _, rest = self.buf.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        while len(rest) < size + 2:
            self.buf = size_line + b"\r\n" + rest
            self._fill(n)
            size_line, _, rest = self.buf.partition(b"\r\n")
        out, self.buf = rest[:size], rest[size + 2:]
        if size == 0:
            self.done = True
        return out

    def read_all(self):
        out = b""
        while True:
            b = self.read_some()
            if not b:
                return out
            out += b


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def http_json(port, method, path, body=None, timeout=IO_TIMEOUT):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(build_request(method, path, body, "soak-ctl"))
        r = Response(s)
        data = r.read_all()
    try:
        return r.status, r.headers, json.loads(data)
    except ValueError:
        return r.status, r.headers, data.decode("utf-8", "replace")


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', line)
        if m and not line.startswith("#"):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def vm_rss_mb(pid):
    """VmRSS of a process in MB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def percentile(values, q):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# --- the server ---

class Server:
    def __init__(self, args, workdir):
        self.port_file = os.path.join(workdir, "ports.json")
        self.log_path = os.path.join(workdir, "serve.log")
        self.log = open(self.log_path, "wb")
        cmd = [args.tessera, "serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "-1",
               "--port-file", self.port_file, "--max-num-seqs", str(args.max_num_seqs),
               "--max-pending-requests", str(args.max_pending)]
        if args.model:
            cmd += ["--model", args.model]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        cmd += args.serve_arg
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None

    def wait_ready(self):
        deadline = time.time() + READY_TIMEOUT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.port is None:
                    with open(self.port_file) as f:
                        self.port = int(json.load(f)["http"])
                status, _, _ = http_json(self.port, "GET", "/ready", timeout=5)
                if status == 200:
                    return
            except (OSError, ValueError, KeyError, HttpError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready within {READY_TIMEOUT}s:\n{self.log_tail()}")

    def rss_mb(self):
        return vm_rss_mb(self.proc.pid)

    def log_tail(self, n=20):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])

    def stop(self, timeout=60):
        """SIGTERM; the exit status, or None if it had to be killed."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.log.close()


# --- prompts and their greedy reference ---

def prompt_set(long_tokens):
    """(kind, path, body) of the fixed prompts; greedy and ignore_eos, so each has one exact answer."""
    words = "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing".split()
    rng = random.Random(1234)
    prompts = [
        ("completions", {"prompt": "Hello, my name is"}),
        ("completions", {"prompt": [9707, 11, 1879, 0, 576, 374]}),
        ("completions", {"prompt": "The capital of France is"}),
        ("completions", {"prompt": " ".join(rng.choice(words) for _ in range(40))}),
        ("chat", {"messages": [{"role": "user", "content": "Write a haiku about the sea."}]}),
        ("chat", {"messages": [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "What is 2 + 2?"}]}),
        ("chat", {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                               {"role": "user", "content": "Tell me a story."}]}),
        # long: prefill takes a while, for disconnects during prefill
        ("completions", {"prompt": [(i * 7919) % 30000 + 100 for i in range(long_tokens)]}),
    ]
    return prompts


def path_of(kind):
    return "/v1/completions" if kind == "completions" else "/v1/chat/completions"


def text_of(kind, choice):
    return choice.get("text", "") if kind == "completions" else (choice.get("message") or {}).get("content") or ""


def delta_text(kind, choice):
    return choice.get("text", "") if kind == "completions" else (choice.get("delta") or {}).get("content") or ""


# --- one logical request ---

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {k: 0 for k in ("logical", "sent", "completed", "cancelled", "rejected_429", "rejected_503",
                                 "starved", "lost", "duplicated", "mismatched")}
        self.by_action = {}
        self.cancel_phases = {p: 0 for p in PHASES}
        self.lost_examples = []
        self.dup_examples = []
        self.mismatch_examples = []
        self.response_ids = set()
        self.latencies = []

    def add(self, key, n=1):
        with self.lock:
            self.c[key] += n

    def note(self, kind, example):
        with self.lock:
            lst = {"lost": self.lost_examples, "duplicated": self.dup_examples,
                   "mismatched": self.mismatch_examples}[kind]
            self.c[kind] += 1
            if len(lst) < 10:
                lst.append(example)

    def response_id(self, rid):
        """False if this response id was seen before (a duplicated response)."""
        with self.lock:
            if rid in self.response_ids:
                return False
            self.response_ids.add(rid)
            return True


class Outcome(Exception):
    """Ends an attempt: 'retry' (429/503), 'lost' (with why) or 'dup'."""

    def __init__(self, kind, why="", retry_after=0.0):
        super().__init__(why)
        self.kind, self.why, self.retry_after = kind, why, retry_after


def run_attempt(port, kind, body, action, phase, ref, stats, rng, rid):
    """One HTTP attempt. Returns 'completed' or 'cancelled'; raises Outcome."""
    if action == "complete":
        stream = rng.random() < 0.7
    elif phase in ("sending", "queued"):
        stream = rng.random() < 0.5
    else:
        stream = phase != "unary"
    req = dict(body, stream=stream)
    data = build_request("POST", path_of(kind), req, rid)
    s = connect(port)
    try:
        if phase == "sending":
            s.sendall(data[:len(data) - max(1, len(data) // 2)])
            time.sleep(rng.uniform(0, 0.02))
            return "cancelled"
        s.sendall(data)
        stats.add("sent")
        if phase == "queued":
            time.sleep(rng.uniform(0, 0.02))
            return "cancelled"
        if phase == "unary":
            s.settimeout(rng.uniform(0.005, 0.3))
            try:
                r = Response(s)
            except (socket.timeout, TimeoutError):
                return "cancelled"
            s.settimeout(IO_TIMEOUT)
        elif phase == "prefill":
            s.settimeout(rng.uniform(0.005, 0.15))
            try:
                r = Response(s)
            except (socket.timeout, TimeoutError):
                return "cancelled"
            s.settimeout(IO_TIMEOUT)
        else:
            r = Response(s)
        if r.headers.get("x-request-id") != rid:
            raise Outcome("dup", f"X-Request-Id {r.headers.get('x-request-id')!r} on the response to {rid!r}")
        if r.status in (429, 503):
            r.read_all()
            try:
                ra = float(r.headers.get("retry-after", "1"))
            except ValueError:
                ra = 1.0
            raise Outcome("retry", retry_after=ra, why=str(r.status))
        if r.status != 200:
            raise Outcome("lost", f"HTTP {r.status}: {r.read_all()[:200]!r}")
        if action == "cancel" and phase in ("prefill", "unary"):
            return "cancelled"  # headers came back before the timer: disconnect now
        if not stream:
            payload = json.loads(r.read_all())
            return finish(kind, payload.get("id"), [text_of(kind, c) for c in payload["choices"]],
                          [c.get("finish_reason") for c in payload["choices"]],
                          payload.get("usage", {}).get("completion_tokens"), ref, stats, rid)
        return read_stream(r, kind, action, phase, ref, stats, rng, rid)
    except Outcome:
        raise
    except (OSError, HttpError, ValueError, KeyError) as e:
        raise Outcome("lost", f"{type(e).__name__}: {e}") from None
    finally:
        s.close()


def sse_payloads(r):
    """The `data:` payloads of an SSE body, as a list per piece read from the socket (so that a
    caller may act between reads)."""
    buf = b""
    while True:
        piece = r.read_some()
        if not piece:
            return
        buf += piece
        out = []
        while b"\n\n" in buf:
            ev, _, buf = buf.partition(b"\n\n")
            line = ev.decode("utf-8")
            if line.startswith("data:"):
                out.append(line[5:].strip())
        yield out


def read_stream(r, kind, action, phase, ref, stats, rng, rid):
    cut_after = rng.randint(1, max(1, ref["completion_tokens"] - 1)) if action == "cancel" else None
    texts, finishes, ids = {}, {}, set()
    usage = None
    events = 0
    done = False
    for payloads in sse_payloads(r):
        for payload in payloads:
            if done:
                raise Outcome("dup", f"data after [DONE]: {payload[:100]}")
            if payload == "[DONE]":
                done = True
                continue
            chunk = json.loads(payload)
            if "error" in chunk:
                raise Outcome("lost", f"error event: {payload[:200]}")
            ids.add(chunk.get("id"))
            if chunk.get("usage"):
                usage = chunk["usage"].get("completion_tokens")
            for c in chunk.get("choices", []):
                i = c.get("index", 0)
                texts[i] = texts.get(i, "") + delta_text(kind, c)
                if c.get("finish_reason"):
                    if i in finishes:
                        raise Outcome("dup", f"second finish_reason for choice {i}")
                    finishes[i] = c["finish_reason"]
                events += 1
        if action == "cancel" and events >= cut_after and not done:
            if phase == "mid-sse":
                r.sock.recv(rng.randint(1, 20))  # a few bytes into the next event, then gone
            return "cancelled"
    if not done:
        raise Outcome("lost", "stream ended without [DONE]")
    if len(ids) != 1:
        raise Outcome("dup", f"chunks carry {len(ids)} response ids")
    n = max(texts) + 1 if texts else 0
    return finish(kind, ids.pop(), [texts.get(i, "") for i in range(n)], [finishes.get(i) for i in range(n)],
                  usage, ref, stats, rid)


def finish(kind, response_id, texts, finishes, completion_tokens, ref, stats, rid):
    if not response_id:
        raise Outcome("lost", "response without an id")
    if not stats.response_id(response_id):
        raise Outcome("dup", f"response id {response_id} seen before")
    if len(texts) != 1 or finishes != [ref["finish_reason"]]:
        raise Outcome("lost", f"choices {len(texts)} finish {finishes}, want one {ref['finish_reason']}")
    if texts[0] != ref["text"] or (completion_tokens is not None and completion_tokens != ref["completion_tokens"]):
        stats.note("mismatched", {"request": rid, "got": texts[0][:200], "want": ref["text"][:200],
                                  "completion_tokens": completion_tokens})
    return "completed"


def client(port, prompts, refs, args, stats, deadline, seed):
    rng = random.Random(seed)
    n = 0
    while time.time() < deadline:
        n += 1
        i = rng.randrange(len(prompts))
        kind, body = prompts[i]
        if rng.random() < args.cancel_fraction:
            action = "cancel"
            phase = rng.choice(PHASES)
            if phase == "prefill":
                i = len(prompts) - 1  # the long prompt
                kind, body = prompts[i]
        else:
            action, phase = "complete", None
        rid = f"soak-{seed}-{n}"
        stats.add("logical")
        with stats.lock:
            stats.by_action[phase or "complete"] = stats.by_action.get(phase or "complete", 0) + 1
        t0 = time.time()
        while True:
            try:
                got = run_attempt(port, kind, body, action, phase, refs[i], stats, rng, rid)
                stats.add(got)
                if got == "cancelled":
                    with stats.lock:
                        stats.cancel_phases[phase] += 1
                else:
                    with stats.lock:
                        stats.latencies.append(time.time() - t0)
                break
            except Outcome as o:
                if o.kind == "retry":
                    stats.add("rejected_429" if o.why == "429" else "rejected_503")
                    if time.time() - t0 > IO_TIMEOUT:  # the client gives up: refused, not lost
                        stats.add("starved")
                        break
                    time.sleep(min(o.retry_after, args.retry_cap) * rng.uniform(0.5, 1.0))
                    continue
                stats.note("duplicated" if o.kind == "dup" else "lost", {"request": rid, "action": phase or action,
                                                                         "why": o.why})
                break


def poll_health(port, stop, out):
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            status, _, _ = http_json(port, "GET", "/health", timeout=10)
            out["lat"].append((time.perf_counter() - t0) * 1000.0)
            if status != 200:
                out["errors"] += 1
        except (OSError, HttpError, ValueError):
            out["errors"] += 1
            out["lat"].append((time.perf_counter() - t0) * 1000.0)
        stop.wait(max(0.0, 0.1 - (time.perf_counter() - t0)))


def sample_rss(srv, stop, out, t_start, every):
    while not stop.is_set():
        mb = srv.rss_mb()
        if mb is not None:
            out.append((round(time.time() - t_start, 1), round(mb, 1)))
        stop.wait(every)


def rss_summary(samples):
    if not samples:
        return {}
    mbs = [m for _, m in samples]
    # drift: the median of the last tenth of the run minus that of the first tenth (after warm-up)
    k = max(1, len(samples) // 10)
    first, last = statistics.median(mbs[:k]), statistics.median(mbs[-k:])
    slope = None
    if len(samples) >= 3:
        ts = [t for t, _ in samples]
        mt, mm = statistics.fmean(ts), statistics.fmean(mbs)
        den = sum((t - mt) ** 2 for t in ts)
        slope = sum((t - mt) * (m - mm) for t, m in samples) / den * 60.0 if den else None
    return {"start_mb": mbs[0], "end_mb": mbs[-1], "max_mb": max(mbs), "drift_mb": round(last - first, 1),
            "slope_mb_per_min": None if slope is None else round(slope, 2), "samples": samples}


def wait_idle(port, timeout=60):
    t0 = time.time()
    m = {}
    while time.time() - t0 < timeout:
        try:
            _, _, text = http_json(port, "GET", "/metrics", timeout=10)
            m = parse_metrics(text if isinstance(text, str) else json.dumps(text))
        except (OSError, HttpError):
            m = {}
        if m.get("tessera:num_requests_running") == 0 and m.get("tessera:num_requests_waiting") == 0 and \
                m.get("tessera:kv_cache_usage_perc") == 0:
            break
        time.sleep(0.25)
    return {"ok": m.get("tessera:num_requests_running") == 0 and m.get("tessera:num_requests_waiting") == 0 and
            m.get("tessera:kv_cache_usage_perc") == 0,
            "seconds_to_idle": round(time.time() - t0, 2),
            "kv_cache_usage_perc": m.get("tessera:kv_cache_usage_perc"),
            "num_requests_running": m.get("tessera:num_requests_running"),
            "num_requests_waiting": m.get("tessera:num_requests_waiting")}


def compute_references(port, prompts, max_tokens):
    refs = []
    for kind, body in prompts:
        status, _, payload = http_json(port, "POST", path_of(kind), body)
        if status != 200:
            raise RuntimeError(f"reference {kind} {json.dumps(body)[:80]}: HTTP {status} {str(payload)[:300]}")
        c = payload["choices"][0]
        ref = {"text": text_of(kind, c), "finish_reason": c["finish_reason"],
               "completion_tokens": payload["usage"]["completion_tokens"]}
        if ref["completion_tokens"] != max_tokens or ref["finish_reason"] != "length":
            raise RuntimeError(f"reference without ignore_eos semantics: {ref}")
        refs.append(ref)
    return refs


def main():
    global IO_TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default="build/tessera", help="the tessera binary")
    ap.add_argument("--model", default="", help="checkpoint directory or .gguf (default: serve's default model)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--streams", type=int, default=32, help="concurrent clients")
    ap.add_argument("--overload", type=float, default=2.0, help="clients / requests the server admits at once")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per greedy request")
    ap.add_argument("--long-prompt-tokens", type=int, default=1024, help="the prefill-phase prompt (capped by "
                    "the context)")
    ap.add_argument("--cancel-fraction", type=float, default=0.35, help="share of requests cancelled on purpose")
    ap.add_argument("--retry-cap", type=float, default=1.0, help="longest wait (s) honoring Retry-After")
    ap.add_argument("--threads", type=int, default=0, help="serve --threads (0: serve's default)")
    ap.add_argument("--rss-every", type=float, default=5.0, help="seconds between VmRSS samples")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `tessera serve` argument (repeatable)")
    ap.add_argument("--io-timeout", type=float, default=IO_TIMEOUT, help="seconds a socket may wait, and a "
                    "request may keep being refused before the client gives up (counted as starved)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="", help="write the JSON report here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (server log)")
    args = ap.parse_args()
    IO_TIMEOUT = args.io_timeout
    args.tessera = os.path.abspath(args.tessera)
    args.max_pending = max(1, int(args.streams / args.overload))
    args.max_num_seqs = max(1, args.max_pending // 2)

    workdir = tempfile.mkdtemp(prefix="tessera-soak-")
    srv = Server(args, workdir)
    report = {"config": {"streams": args.streams, "minutes": args.minutes, "max_num_seqs": args.max_num_seqs,
                         "max_pending_requests": args.max_pending, "overload": args.overload,
                         "max_tokens": args.max_tokens, "cancel_fraction": args.cancel_fraction,
                         "model": args.model or "(serve's default)", "seed": args.seed, "command": srv.cmd}}
    ok = False
    try:
        srv.wait_ready()
        port = srv.port
        _, _, models = http_json(port, "GET", "/v1/models")
        max_len = int(models["data"][0].get("max_model_len") or 2048)
        long_tokens = max(16, min(args.long_prompt_tokens, max_len - args.max_tokens - 8))
        common = {"max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True}
        prompts = [(k, dict(b, **common)) for k, b in prompt_set(long_tokens)]
        refs = compute_references(port, prompts, args.max_tokens)
        report["config"].update({"long_prompt_tokens": long_tokens, "max_model_len": max_len,
                                 "port": port, "prompts": len(prompts)})

        stats = Stats()
        stop = threading.Event()
        health = {"lat": [], "errors": 0}
        rss = []
        t_start = time.time()
        deadline = t_start + args.minutes * 60.0
        bg = [threading.Thread(target=poll_health, args=(port, stop, health), daemon=True),
              threading.Thread(target=sample_rss, args=(srv, stop, rss, t_start, args.rss_every), daemon=True)]
        for t in bg:
            t.start()
        workers = [threading.Thread(target=client, args=(port, prompts, refs, args, stats, deadline,
                                                         args.seed * 1000 + i), daemon=True)
                   for i in range(args.streams)]
        for t in workers:
            t.start()
        last = 0.0
        while any(t.is_alive() for t in workers) and time.time() < deadline + GRACE + IO_TIMEOUT:
            time.sleep(1.0)
            if time.time() - last >= 60:
                last = time.time()
                c = stats.c
                print(f"[{(time.time() - t_start) / 60:5.1f} min] completed {c['completed']} cancelled "
                      f"{c['cancelled']} 429 {c['rejected_429']} lost {c['lost']} dup {c['duplicated']} "
                      f"mismatched {c['mismatched']} rss {srv.rss_mb():.0f} MB", file=sys.stderr, flush=True)
        stuck = sum(t.is_alive() for t in workers)
        idle = wait_idle(port)
        stop.set()
        for t in bg:
            t.join(10)
        final_rss = srv.rss_mb()
        if final_rss is not None:
            rss.append((round(time.time() - t_start, 1), round(final_rss, 1)))
        lat = health["lat"]
        report.update({
            "duration_s": round(time.time() - t_start, 1),
            "requests": dict(stats.c, stuck_clients=stuck, by_action=stats.by_action,
                             cancel_phases=stats.cancel_phases,
                             completed_latency_p50_s=percentile(stats.latencies, 0.5),
                             completed_latency_p99_s=percentile(stats.latencies, 0.99)),
            "lost_examples": stats.lost_examples, "duplicated_examples": stats.dup_examples,
            "mismatched_examples": stats.mismatch_examples,
            "health_ms": {"polls": len(lat), "errors": health["errors"], "p50": percentile(lat, 0.5),
                          "p99": percentile(lat, 0.99), "max": max(lat) if lat else None},
            "rss": rss_summary(rss),
            "idle_at_end": idle,
        })
        c = stats.c
        ok = (c["lost"] == 0 and c["duplicated"] == 0 and c["mismatched"] == 0 and stuck == 0 and idle["ok"]
              and health["errors"] == 0 and c["completed"] > 0)
    except Exception as e:  # noqa: BLE001 - report the failure, then stop the server
        report["error"] = f"{type(e).__name__}: {e}"
    finally:
        report["server_exit_code"] = srv.stop()
        ok = ok and report["server_exit_code"] == 0
        report["ok"] = ok
        if not ok or args.keep:
            report["server_log_tail"] = open(srv.log_path, "rb").read().decode("utf-8", "replace")[-3000:]
        if args.keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(report)
    emit_json(report, args.out)
    return 0 if ok else 1


def emit_json(report, path):
    """The report on stdout, and in `path` unless it is empty."""
    text = json.dumps(report, indent=1)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    print(text)


def print_table(r):
    q = r.get("requests", {})
    h = r.get("health_ms", {})
    m = r.get("rss", {})
    i = r.get("idle_at_end", {})
    fmt = lambda v, p=1: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))  # noqa: E731
    rows = [
        ("duration (s)", fmt(r.get("duration_s"))),
        ("streams / admitted at once", f"{r['config']['streams']} / {r['config']['max_pending_requests']}"),
        ("requests sent (attempts)", fmt(q.get("sent"))),
        ("completed", fmt(q.get("completed"))),
        ("cancelled on purpose", fmt(q.get("cancelled"))),
        ("refused 429 (retried)", fmt(q.get("rejected_429"))),
        ("refused 503 (retried)", fmt(q.get("rejected_503"))),
        ("gave up after refusals (starved)", fmt(q.get("starved"))),
        ("LOST (must be 0)", fmt(q.get("lost"))),
        ("DUPLICATED (must be 0)", fmt(q.get("duplicated"))),
        ("reference MISMATCHES (must be 0)", fmt(q.get("mismatched"))),
        ("/health p50 / p99 / max (ms)", f"{fmt(h.get('p50'))} / {fmt(h.get('p99'))} / {fmt(h.get('max'))}"),
        ("/health errors", fmt(h.get("errors"))),
        ("RSS start / end / max (MB)", f"{fmt(m.get('start_mb'))} / {fmt(m.get('end_mb'))} / {fmt(m.get('max_mb'))}"),
        ("RSS drift (MB), slope (MB/min)", f"{fmt(m.get('drift_mb'))}, {fmt(m.get('slope_mb_per_min'), 2)}"),
        ("KV usage at end, s to idle", f"{fmt(i.get('kv_cache_usage_perc'), 3)}, {fmt(i.get('seconds_to_idle'))}"),
        ("server exit code", fmt(r.get("server_exit_code"))),
        ("OK", str(r.get("ok"))),
    ]
    if "error" in r:
        rows.append(("error", r["error"][:200]))
    w = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{w}}  {v}" for k, v in rows), file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
