#!/usr/bin/python3
"""Inter-token latency of a decode's running stream while other requests' KV is pulled.

    bench/pd_pull_itl.py --tessera build/tessera --model /tmp/pull_q3 [--prompt-len 512] [--pulls 3]

One prefill and one decode instance (each --threads 1, KV over UCX --kv-ucx-tls). First the prefill
instance prefills --pulls prompts of --prompt-len random tokens with do_remote_decode (the vLLM handshake
by hand) and keeps their blocks pinned, so it is idle during the measurement. Then one streaming
request runs on the decode instance (--stream-tokens tokens, ignore_eos) and, once it has made
--warmup-tokens tokens, the handed-over requests are sent to the decode one after another (max_tokens 1,
--gap seconds apart): each makes the decode pull its prompt's KV. Reported (JSON on stdout): the stream's
gaps between tokens before the first pull ("quiet") and during the pulls (from the first handover to the
last one's end), p50 and max, and each pull's transfer seconds as the decode reports them
(tessera:kv_transfer_seconds). Same host, one run of each binary under bench/quiet_run.sh.
"""
import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pd_goodput import start, wait_ready  # noqa: E402


def post(port, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def stream(port, body, times):
    """Streams a completion; appends (arrival time, tokens) of each chunk carrying tokens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                d = json.loads(line[6:])
                now = time.monotonic()
                n = sum(len(c.get("token_ids") or []) for c in d.get("choices") or [])
                if n:
                    times.append((now, n))
    conn.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))] if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--pulls", type=int, default=3)
    ap.add_argument("--stream-tokens", type=int, default=120)
    ap.add_argument("--warmup-tokens", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.5)
    ap.add_argument("--kv-ucx-tls", default="tcp,self")
    ap.add_argument("--kv-cache-mb", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="tessera-pd-itl-")
    base = ["--model", args.model, "--threads", "1", "--max-model-len", "4096", "--kv-cache-mb",
            str(args.kv_cache_mb), "--served-model-name", "m", "--kv-ucx-tls", args.kv_ucx_tls]
    insts = [start(args.tessera, [*base, "--role", "prefill", "--kv-pin-timeout", "600"], workdir, "prefill"),
             start(args.tessera, [*base, "--role", "decode", "--kv-pull-timeout", "60"], workdir, "decode")]
    try:
        pport, dport = (wait_ready(s) for s in insts)
        rng = random.Random(args.seed)
        common = dict(model="m", temperature=0, ignore_eos=True, return_token_ids=True)
        # Warm the decode (first forward allocates) with a short local request.
        post(dport, dict(common, prompt=[rng.randrange(100, 150000) for _ in range(16)], max_tokens=2))
        handed = []
        for _ in range(args.pulls):
            prompt = [rng.randrange(100, 150000) for _ in range(args.prompt_len)]
            body = post(pport, dict(common, prompt=prompt, max_tokens=1, kv_transfer_params={"do_remote_decode": True}))
            handed.append(dict(common, prompt=prompt, max_tokens=1, kv_transfer_params=body["kv_transfer_params"]))
        times = []
        th = threading.Thread(target=stream, args=(dport, dict(
            common, prompt=[rng.randrange(100, 150000) for _ in range(32)], max_tokens=args.stream_tokens), times))
        th.start()
        while sum(n for _, n in times) < args.warmup_tokens and th.is_alive():
            time.sleep(0.01)
        before = metrics(dport)
        windows = []
        for h in handed:
            t0 = time.monotonic()
            post(dport, h)
            windows.append((t0, time.monotonic()))
            time.sleep(args.gap)
        after = metrics(dport)
        th.join()
        # Per chunk: its arrival, the silence before it, tokens in it (a slow reader gets several at once).
        gaps = [(times[i][0], times[i][0] - times[i - 1][0], times[i][1]) for i in range(1, len(times))]
        first, last = windows[0][0], windows[-1][1]
        quiet = [(g, n) for t, g, n in gaps if t < first]
        during = [(g, n) for t, g, n in gaps if t >= first and t - g <= last]  # chunks whose silence overlaps a pull

        def summary(xs):
            per_token = [g / n for g, n in xs for _ in range(n)]
            return {"tokens": sum(n for _, n in xs), "itl_p50_ms": 1e3 * pct(per_token, 0.5),
                    "itl_p90_ms": 1e3 * pct(per_token, 0.9), "longest_silence_ms": 1e3 * max(g for g, _ in xs)}

        def metric(m, name):
            return sum(v for k, v in m.items() if k.split("{")[0] == name)
        key_s, key_n = "tessera:kv_transfer_seconds_sum", "tessera:kv_transfer_seconds_count"
        n = metric(after, key_n) - metric(before, key_n)
        out = {
            "tessera": args.tessera, "model": args.model, "prompt_len": args.prompt_len, "pulls": args.pulls,
            "kv_ucx_tls": args.kv_ucx_tls, "stream_tokens": sum(n for _, n in times),
            "pulls_ok": n,
            "pull_s_mean": (metric(after, key_s) - metric(before, key_s)) / n if n else None,
            "handover_s": [round(b - a, 3) for a, b in windows],
            "stream_before_pulls": summary(quiet),
            "stream_during_pulls": summary(during),
            # Silences over 2x the quiet p50: (seconds after the first handover the silence ended, its ms).
            "long_silences": [(round(t - first, 3), round(1e3 * g, 1)) for t, g, _ in gaps
                              if g > 2 * summary(quiet)["itl_p50_ms"] / 1e3],
            "handovers_at": [(round(a - first, 3), round(b - first, 3)) for a, b in windows],
        }
        print(json.dumps(out, indent=1))
    finally:
        for s in insts:
            s["proc"].send_signal(signal.SIGTERM)
        for s in insts:
            try:
                s["proc"].wait(timeout=20)
            except subprocess.TimeoutExpired:
                s["proc"].kill()


if __name__ == "__main__":
    main()
