#!/usr/bin/python3
"""End-to-end test of SLO-aware admission, `serve --ttft-slo-ms` (docs/architecture.md, "Server").

    /usr/bin/python3 tests/e2e/test_ttft_slo.py --tessera build/tessera

A tiny model served with --max-num-seqs 1 and a cost model of 25 ms per
prefill token, SLO 2.5 s. One long request holds the only slot, so requests
behind it stay queued (their first token never comes while the test runs).
30-token prompts then arrive one at a time: predictions 0.75, 1.5, 2.25 s
are admitted (they queue); the 4th (3.0 s) gets 429 with Retry-After 3 (the
90 tokens ahead drain in 2.25 s; the default would say 1) in OpenAI's error
shape, and so does an Anthropic /v1/messages request, in Anthropic's; the
metrics count both. Without the flag the same burst just queues, and no SLO
metric is exported. The flag without --cost-model, or on a decode instance,
is refused.
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import PROMPT, Results, Server, e2e_args, get_metrics, request, synth_model, wait_until  # noqa: E402

COST = {"model": "linear", "version": 1, "per_prefill_token_ms": 25}
B_PROMPT = list(range(1000, 1030))  # 30 tokens: 0.75 s each by the cost model


class Pending:
    """A streamed request on its own connection and thread: `status` once the head arrives (a 429
    at once; an admitted request's 200 only with its first token); the thread lives until its
    stream ends."""

    def __init__(self, port, path, body, headers=None):
        self.status, self.headers, self.body = None, {}, None
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.thread = threading.Thread(target=self._run, args=(path, body, headers or {}), daemon=True)
        self.thread.start()

    def _run(self, path, body, headers):
        try:
            self.conn.request("POST", path, body=json.dumps(body).encode(),
                              headers={"Content-Type": "application/json", **headers})
            resp = self.conn.getresponse()
            self.status = resp.status
            self.headers = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status != 200:
                self.body = json.loads(resp.read())
            else:
                resp.read()  # the stream, until it ends: the thread is alive while the request runs
        except (OSError, AttributeError, http.client.HTTPException):
            pass  # closed at the end of the test (http.client then reads from a closed file)

    def close(self):
        self.conn.close()


def hold_the_slot(port):
    """A request that keeps the one sequence slot for the whole test (its 200 comes with its first token)."""
    a = Pending(port, "/v1/completions", {"model": "tiny-qwen3", "prompt": PROMPT, "max_tokens": 30000,
                                          "ignore_eos": True, "stream": True})
    wait_until(lambda: a.status is not None, timeout=30, what="the long request's first token")
    assert a.status == 200, a.status
    return a


def burst(port, n, metric_count=None):
    """n 30-token streamed completions, one at a time (each counted by the server before the next
    when metric_count is given: the predictions' order is then the arrival order)."""
    out = []
    for i in range(n):
        out.append(Pending(port, "/v1/completions", {"model": "tiny-qwen3", "prompt": B_PROMPT, "max_tokens": 2,
                                                     "stream": True}))
        if metric_count:
            wait_until(lambda: get_metrics(port).get("tessera:predicted_ttft_seconds_count", 0) >= metric_count + i,
                       timeout=10, what=f"prediction {metric_count + i}")
    return out


def main():
    args = e2e_args(__doc__)
    start = time.time()
    res = Results()
    held = []
    with tempfile.TemporaryDirectory(prefix="tessera-ttft-slo-e2e-") as work:
        model = synth_model(args.tessera, work)
        cost = os.path.join(work, "cost.json")
        with open(cost, "w") as f:
            json.dump(COST, f)
        common = ["--model", model, "--max-num-seqs", "1", "--kv-cache-mb", "64", "--drain-timeout", "1",
                  "--cost-model", cost]
        slo = Server(args.tessera, common + ["--ttft-slo-ms", "2500"], work, "slo")
        plain = Server(args.tessera, common, work, "plain")
        try:
            res.server = slo
            slo.wait_ready()
            plain.wait_ready()

            def refuses_what_would_miss():
                held.append(hold_the_slot(slo.port))  # prediction 1: 6 tokens, 0.15 s
                bs = burst(slo.port, 4, metric_count=2)
                held.extend(bs)
                wait_until(lambda: bs[3].status is not None, timeout=10, what="the 4th request's answer")
                assert [b.status for b in bs] == [None, None, None, 429], [b.status for b in bs]
                r = bs[3]
                assert r.headers.get("retry-after") == "3", r.headers
                err = r.body["error"]
                assert err["type"] == "rate_limit_error" and err["code"] == "queue_full", err
                for want in ("predicted time to first token 3.000 s", "SLO of 2.500 s", "--ttft-slo-ms",
                             "90 prompt tokens are queued ahead"):
                    assert want in err["message"], (want, err["message"])
                assert held[0].thread.is_alive(), "the long request ended: the queue was not held"

            def anthropic_shape():
                m = Pending(slo.port, "/v1/messages",
                            {"model": "tiny-qwen3", "max_tokens": 4, "stream": True,
                             "messages": [{"role": "user", "content": "tell me a long story about the sea"}]},
                            headers={"anthropic-version": "2023-06-01"})
                held.append(m)
                wait_until(lambda: m.status is not None, timeout=10, what="the /v1/messages answer")
                assert m.status == 429 and m.headers.get("retry-after") == "3", (m.status, m.headers)
                assert m.body["type"] == "error" and m.body["error"]["type"] == "rate_limit_error", m.body
                assert "time-to-first-token SLO" in m.body["error"]["message"], m.body

            def metrics_count_them():
                got = get_metrics(slo.port)
                assert got["tessera:slo_rejections_total"] == 2, got.get("tessera:slo_rejections_total")
                assert got["tessera:predicted_ttft_seconds_count"] == 6, got["tessera:predicted_ttft_seconds_count"]
                attainment = got["tessera:predicted_slo_attainment"]
                assert abs(attainment - 4 / 6) < 1e-9, attainment
                # Requests waiting behind the SLO gate are no different from others.
                assert got["tessera:num_requests_waiting"] == 3, got["tessera:num_requests_waiting"]

            def without_the_flag_nothing_changes():
                res.server = plain
                held.append(hold_the_slot(plain.port))
                bs = burst(plain.port, 5)
                held.extend(bs)
                wait_until(lambda: get_metrics(plain.port).get("tessera:num_requests_waiting", 0) == 5, timeout=10,
                           what="5 requests waiting")
                assert all(b.status is None for b in bs), [b.status for b in bs]
                _, headers, _ = request(plain.port, "GET", "/metrics")
                for name in ("predicted_ttft", "slo_rejections", "predicted_slo_attainment"):
                    assert name not in headers["_body"], name

            def refusals_name_the_flag():
                for extra, want in (([], "needs --cost-model"),
                                    (["--cost-model", cost, "--role", "decode"], "decode instance")):
                    p = subprocess.run([args.tessera, "serve", "--model", model, "--ttft-slo-ms", "100",
                                        "--check-config=flags"] + extra, capture_output=True, text=True, timeout=60)
                    assert p.returncode != 0 and "--ttft-slo-ms" in p.stderr and want in p.stderr, \
                        (extra, p.returncode, p.stderr[-1000:])

            res.run("--ttft-slo-ms without --cost-model, or on a decode instance: refused", refusals_name_the_flag)
            res.run("a burst past the SLO: the first 3 queue, the 4th gets 429 + Retry-After", refuses_what_would_miss)
            res.run("/v1/messages: the same refusal in Anthropic's shape", anthropic_shape)
            res.run("metrics: predictions, rejections, attainment", metrics_count_them)
            res.run("without --ttft-slo-ms the burst queues and no SLO metric exists", without_the_flag_nothing_changes)
        finally:
            for p in held:
                p.close()
            for srv in (slo, plain):  # both drain at once
                if srv.proc.poll() is None:
                    srv.proc.terminate()
            slo.stop()
            plain.stop()
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
