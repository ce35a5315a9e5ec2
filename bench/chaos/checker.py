"""The chaos soak's checked clients: greedy requests through the router whose token ids must equal
those a unified reference instance produced for the same prompts, alone.

The prompts (`prompt_set`) are token-id completions and chat requests, long ones (at least the
router's --prefill-threshold, 128 tokens, so they go prefill -> decode) on two shared prefixes
(so decodes find prefix hits, Redis-tier hits and KV-aware routing) and short ones (straight to a
decode). Every request is greedy with `ignore_eos`, so each prompt has exactly one right answer.

A request ends as
  completed   HTTP 200, one choice, finish_reason "length" after max_tokens tokens; its token ids
              are compared with the reference (a difference is a MISMATCH, never a failure)
  failed      anything else, with why (HTTP status and message, reset, refused, timeout, error
              event, stream without [DONE], finish_reason "abort", ...): what a client saw
Failures are not retried: the soak counts what clients see while faults happen.
Thread-safe: Tally is shared by every client thread. Stdlib only (+ soak.py's HTTP client).
"""
import json
import random
import re
import socket
import threading
import time

from soak import HttpError, Response, build_request, sse_payloads

WORDS = ("the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing "
         "matches near a river bank under pale winter light").split()


def prompt_set(prefix_tokens=128, vocab=150000):
    """[(kind, body)] without the sampling fields. Token ids avoid the first 100 (special-ish)."""
    def ids(seed, n):
        return [(seed * 7919 + i * 104729) % vocab + 100 for i in range(n)]
    a, b = ids(1, prefix_tokens), ids(2, prefix_tokens)
    rng = random.Random(7)
    system = " ".join(rng.choice(WORDS) for _ in range(160))
    return [
        ("completions", {"prompt": a + ids(3, 40)}),
        ("completions", {"prompt": a + ids(4, 72)}),
        ("completions", {"prompt": b + ids(5, 40)}),
        ("completions", {"prompt": b + ids(6, 100)}),
        ("completions", {"prompt": ids(7, 12)}),
        ("completions", {"prompt": ids(8, 30)}),
        ("chat", {"messages": [{"role": "system", "content": system},
                               {"role": "user", "content": "Summarize that in one line."}]}),
        ("chat", {"messages": [{"role": "user", "content": "Write a haiku about the sea."}]}),
    ]


def path_of(kind):
    return "/v1/completions" if kind == "completions" else "/v1/chat/completions"


class Failed(Exception):
    pass


def normalize(why):
    """A failure message as a group: ids, ports and counts become N, the text is cut at 120 chars."""
    why = re.sub(r"(cmpl|chatcmpl|req|chaos)-[0-9a-zA-Z-]+", r"\1-ID", why)
    return re.sub(r"\d+", "N", why)[:120]


def call(port, kind, body, stream, rid, timeout):
    """One request; returns (token_ids, finish_reason) of its single choice; raises Failed(why)."""
    req = dict(body, stream=stream)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(build_request("POST", path_of(kind), req, rid))
            r = Response(s)
            if r.status != 200:
                raise Failed(f"HTTP {r.status}: {r.read_all()[:160].decode('utf-8', 'replace')}")
            if not stream:
                c = json.loads(r.read_all())["choices"]
                if len(c) != 1:
                    raise Failed(f"{len(c)} choices")
                return c[0].get("token_ids") or [], c[0].get("finish_reason")
            return read_stream(r)
    except Failed:
        raise
    except (socket.timeout, TimeoutError):
        raise Failed(f"no byte for {timeout:.0f} s") from None
    except (OSError, HttpError, ValueError, KeyError) as e:
        raise Failed(f"{type(e).__name__}: {e}") from None


def read_stream(r):
    tokens, finish, done = [], None, False
    for payloads in sse_payloads(r):
        for payload in payloads:
            if payload == "[DONE]":
                done = True
                continue
            chunk = json.loads(payload)
            if "error" in chunk:
                raise Failed(f"error event: {json.dumps(chunk['error'])[:160]}")
            for c in chunk.get("choices", []):
                if c.get("index", 0) != 0:
                    raise Failed(f"a choice with index {c.get('index')}")
                tokens += c.get("token_ids") or []
                if c.get("finish_reason"):
                    finish = c["finish_reason"]
    if not done:
        raise Failed("stream ended without [DONE]")
    return tokens, finish


def with_sampling(body, max_tokens):
    return dict(body, max_tokens=max_tokens, temperature=0, ignore_eos=True, return_token_ids=True)


def reference(port, prompts, max_tokens, timeout=120):
    """Each prompt's token ids, computed one at a time (nothing else running) on `port`."""
    refs = []
    for i, (kind, body) in enumerate(prompts):
        try:
            tokens, finish = call(port, kind, body, False, f"chaos-ref-{i}", timeout)
        except Failed as e:
            raise RuntimeError(f"reference of prompt {i}: {e}") from None
        if finish != "length" or len(tokens) != max_tokens:
            raise RuntimeError(f"reference of prompt {i}: finish {finish}, {len(tokens)} tokens, want "
                               f"length after {max_tokens}")
        refs.append(tokens)
    return refs


class Tally:
    """Outcomes of the checked requests, shared by the client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.completed = self.mismatched = 0
        self.failures = []       # (started, s since the load began; why; seconds it took)
        self.mismatch_examples = []
        self.latencies = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def check_one(port, prompts, refs, i, stream, rid, timeout, tally, t0):
    """Sends prompt i, checks the answer against refs[i], records the outcome in `tally`."""
    kind, body = prompts[i]
    tally.add(sent=1)
    start = time.time()
    try:
        tokens, finish = call(port, kind, body, stream, rid, timeout)
        if finish != "length":
            raise Failed(f"finish_reason {finish!r} after {len(tokens)} tokens")
    except Failed as e:
        with tally.lock:
            tally.failures.append((round(start - t0, 2), str(e), round(time.time() - start, 2)))
        return False
    tally.add(completed=1)
    with tally.lock:
        tally.latencies.append(time.time() - start)
    if tokens != refs[i]:
        tally.add(mismatched=1)
        with tally.lock:
            if len(tally.mismatch_examples) < 10:
                tally.mismatch_examples.append({"request": rid, "prompt": i, "stream": stream,
                                                "t_s": round(start - t0, 2), "got": tokens, "want": refs[i]})
    return True


def client(port, prompts, refs, seed, deadline, timeout, tally, t0, pause=0.0):
    """Checked requests back to back (a `pause` between them) until the deadline."""
    rng = random.Random(seed)
    n = 0
    while time.time() < deadline:
        n += 1
        check_one(port, prompts, refs, rng.randrange(len(prompts)), rng.random() < 0.5, f"chaos-{seed}-{n}",
                  timeout, tally, t0)
        if pause:
            time.sleep(pause * rng.uniform(0.5, 1.5))
