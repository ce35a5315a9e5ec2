#!/usr/bin/python3
"""Closed-loop load against an OpenAI-compatible server: requests/s and TTFT.

    /usr/bin/python3 bench/serve_bench.py --url http://127.0.0.1:8000 \
        --concurrency 1,16 --requests 32 --prompt-tokens 128 --max-tokens 64

Each of C workers sends streaming /v1/completions requests back to back (token-id
prompts of a fixed length, ignore_eos so every request generates exactly
--max-tokens tokens) until --requests have completed at that concurrency or
--max-seconds pass. TTFT is measured to the first SSE chunk carrying text;
inter-token latency from the gaps between later chunks. Prints one JSON object
per concurrency level (and writes them to --out if given). The stdlib only, so
it runs anywhere the tests run; the full load generator is tessera-bench.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse


def percentile(values, q):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(host, port, model, prompt, max_tokens, api_key, timeout):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "ignore_eos": True}
    if model:
        body["model"] = model
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        payload = resp.read()
        conn.close()
        raise RuntimeError(f"HTTP {resp.status}: {payload[:200]!r}")
    first = None
    stamps = []
    tokens = 0
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            data = event[6:]
            if data == b"[DONE]":
                continue
            obj = json.loads(data)
            if "error" in obj:
                raise RuntimeError(f"stream error: {obj['error']}")
            now = time.perf_counter()
            for c in obj.get("choices", []):
                if c.get("text"):
                    tokens += 1
                    if first is None:
                        first = now
                    stamps.append(now)
    conn.close()
    end = time.perf_counter()
    itl = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"ttft": (first or end) - t0, "e2e": end - t0, "itl": itl, "chunks": tokens}


def run_level(args, host, port, concurrency, vocab_hi):
    rng = random.Random(1234 + concurrency)
    lock = threading.Lock()
    results, errors = [], []
    started = [0]
    deadline = time.perf_counter() + args.max_seconds

    def worker():
        while True:
            with lock:
                if started[0] >= args.requests or time.perf_counter() > deadline:
                    return
                started[0] += 1
                prompt = [rng.randrange(100, vocab_hi) for _ in range(args.prompt_tokens)]
            try:
                r = one_request(host, port, args.model, prompt, args.max_tokens, args.api_key, args.timeout)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r["ttft"] for r in results]
    itl = [x for r in results for x in r["itl"]]
    e2e = [r["e2e"] for r in results]
    return {
        "concurrency": concurrency,
        "completed": len(results),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(results) / wall, 3),
        "output_tokens_per_s": round(len(results) * args.max_tokens / wall, 2),
        "ttft_mean_s": round(statistics.mean(ttft), 4) if ttft else None,
        "ttft_p50_s": round(percentile(ttft, 0.5), 4) if ttft else None,
        "ttft_p99_s": round(percentile(ttft, 0.99), 4) if ttft else None,
        "itl_mean_s": round(statistics.mean(itl), 4) if itl else None,
        "itl_p99_s": round(percentile(itl, 0.99), 4) if itl else None,
        "e2e_mean_s": round(statistics.mean(e2e), 4) if e2e else None,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--requests", type=int, default=32, help="completed requests per concurrency level")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=300, help="per level; no new requests after this")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--vocab", type=int, default=150000, help="prompt ids are drawn from [100, vocab)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    levels = []
    for c in [int(x) for x in args.concurrency.split(",") if x]:
        print(f"[serve_bench] concurrency {c}: {args.requests} requests of {args.prompt_tokens} prompt + "
              f"{args.max_tokens} output tokens ...", file=sys.stderr, flush=True)
        r = run_level(args, host, port, c, args.vocab)
        print(json.dumps(r), flush=True)
        levels.append(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"url": args.url, "levels": levels}, f, indent=1)
    return 1 if any(r["errors"] for r in levels) else 0


if __name__ == "__main__":
    sys.exit(main())
