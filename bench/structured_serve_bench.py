#!/usr/bin/env python3
"""Decode throughput with structured outputs: 16 concurrent streams all constrained vs none.

Against a running `tessera serve` (--url). Each request asks for --max-tokens tokens with
ignore_eos, so both runs generate the same number of tokens; the constrained run uses a JSON
Schema with an open string (a mask every step, mostly string states). Reports tokens/s of each
and the ratio (target: constrained >= 0.95x). stdlib only.

    python3 bench/structured_serve_bench.py --url http://127.0.0.1:8000 [--streams 16] [--max-tokens 256]
Check it on tiny inputs (--streams 2 --max-tokens 8); the lead runs the real measurement.
"""
import argparse
import json
import threading
import time
import urllib.request

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"},
                                           "body": {"type": "string"}}, "required": ["title", "n", "body"]}


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run(url, streams, max_tokens, constrained):
    tokens = [0] * streams

    def one(i):
        body = {"prompt": f"Document {i}:", "max_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0,
                "seed": i}
        if constrained:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "doc", "schema": SCHEMA}}
        tokens[i] = post(url, body)["usage"]["completion_tokens"]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    return sum(tokens), dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    run(args.url, args.streams, min(args.max_tokens, 16), True)  # warm-up: compile, mask cache
    best = {}
    for _ in range(args.repeats):
        for constrained in (False, True):
            n, dt = run(args.url, args.streams, args.max_tokens, constrained)
            best[constrained] = max(best.get(constrained, 0.0), n / dt)
    out = {"streams": args.streams, "max_tokens": args.max_tokens, "unconstrained_tok_s": round(best[False], 1),
           "constrained_tok_s": round(best[True], 1), "ratio": round(best[True] / best[False], 3)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
