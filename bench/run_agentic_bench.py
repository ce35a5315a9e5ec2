#!/usr/bin/python3
"""The agentic benchmark: agent sessions (tessera-bench --dataset agentic) with prompt retention off and on,
on one unified instance and behind a router over two.

    /usr/bin/python3 bench/run_agentic_bench.py [--build build] [--model DIR] [--out DIR]
        [--arms off,on] [--topologies unified,router] [--num-kv-blocks 512] [--conversations 6]
        [--min-turns 20] [--max-turns 40] [--idle-gap 4]
        [--retention-flags "..."] [--retention-body JSON]

Every (topology, retention) arm starts fresh instances (--threads 1, --num-kv-blocks N,
a host KV tier of --host-gb, KV events on) and, for `router`, a kv-aware router in front
of two; runs the same seeded agentic workload (one 2048-token system prompt and 16 tools,
20-40 turns per session of 256-token tool results and 32-token calls, 4 s idle gaps:
more sessions than the pool holds) through it; reads every instance's /metrics before and
after; and prints one markdown row: TTFT p50/p99, prompt tokens, recomputed prompt tokens
(tessera:prompt_tokens_computed_total, every reason) and where the cached ones came from
(tessera:prompt_tokens_cached_total by source: the cache waterfall).

Retention "off" is today's LRU. The "on" arm runs only where `tessera serve --help` lists
a retention flag (another change adds it); then the instances get --retention-flags and
every request --retention-body (default {"prompt_cache_retention": "24h"}, OpenAI's field).
Without one the arm is skipped and the table says so. Without --model it synthesizes the
qwen3 checkpoint of bench/run_kv_router_bench.py. Run it under bench/quiet_run.sh for figures.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_kv_router_bench import EVENTS, Proc, synth_bench_model  # noqa: E402

SOURCES = ("pool", "host", "disk", "redis", "peer")


def waterfall(port):
    """{'cached': {source: n}, 'computed': {reason: n}, 'prompt': n} from one server's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {"cached": {}, "computed": {}, "prompt": 0.0}
    for m in re.finditer(r'^tessera:prompt_tokens_(cached|computed)_total\{[^}]*(?:source|reason)="([^"]+)"[^}]*\} (\S+)$',
                         text, re.M):
        d = out[m.group(1)]
        d[m.group(2)] = d.get(m.group(2), 0.0) + float(m.group(3))
    m = re.search(r'^tessera:prompt_tokens_total(?:\{[^}]*\})? (\S+)$', text, re.M)
    out["prompt"] = float(m.group(1)) if m else 0.0
    return out


def delta(after, before):
    d = {"cached": {}, "computed": {}, "prompt": 0.0}
    for a, b in zip(after, before):
        d["prompt"] += a["prompt"] - b["prompt"]
        for k in ("cached", "computed"):
            for name, v in a[k].items():
                d[k][name] = d[k].get(name, 0.0) + v - b[k].get(name, 0.0)
    return d


def retention_flag(tessera):
    """The first --*retention* / --*retain* flag `tessera serve --help` lists, or None."""
    p = subprocess.run([tessera, "serve", "--help"], capture_output=True, text=True, timeout=30)
    m = re.search(r"--[a-z0-9-]*(?:retention|retain)[a-z0-9-]*", p.stdout + p.stderr)
    return m.group(0) if m else None


def run_arm(a, model, topology, arm, out):
    tessera = os.path.join(a.build, "tessera")
    inst = [tessera, "serve", "--model", model, "--threads", "1", "--num-kv-blocks", str(a.num_kv_blocks),
            "--max-model-len", "16384", "--max-num-seqs", "8", "--kv-events-config", EVENTS,
            "--kv-offload-host-gb", str(a.host_gb)]
    if arm == "on":
        inst += a.retention_flags.split()
    name = f"{topology}-{arm}"
    procs = []
    try:
        for n in (("a", "b") if topology == "router" else ("a",)):
            procs.append(Proc(inst, out, f"{name}-{n}"))
        for p in procs:
            p.wait_ready()
        front = procs[0]
        if topology == "router":
            front = Proc([tessera, "serve", "--role", "router", "--routing-logic", "kv-aware",
                          "--router-poll-interval", "0.1",
                          "--decode-instances", ",".join(f"127.0.0.1:{p.port}" for p in procs)], out, f"{name}-r")
            procs.append(front)
            front.wait_ready()
            time.sleep(1.0)  # the router learns the instances' event endpoints
        instances = procs[:2] if topology == "router" else procs[:1]
        before = [waterfall(p.port) for p in instances]
        res = os.path.join(out, f"{name}.json")
        cmd = [os.path.join(a.build, "bench", "tessera-bench"), "--base-url", f"http://127.0.0.1:{front.port}",
               "--endpoint", "/v1/chat/completions", "--tokenizer", model, "--seed", "7", "--no-progress",
               "--result-json", res, "--dataset", "agentic", "--conversations", str(a.conversations),
               "--idle-gap", str(a.idle_gap), "--min-turns", str(a.min_turns), "--max-turns", str(a.max_turns),
               "--prefix-len", "2048", "--num-tools", "16", "--input-len", "128",
               "--tool-result-len", "256", "--output-len", "32"]
        if arm == "on" and a.retention_body:
            cmd += ["--extra-body", a.retention_body]
        bench = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if bench.returncode != 0:
            raise RuntimeError(f"tessera-bench failed:\n{bench.stdout[-2000:]}\n{bench.stderr[-2000:]}")
        w = delta([waterfall(p.port) for p in instances], before)
    finally:
        for p in procs:
            p.stop()
    run = json.load(open(res))["runs"][0]
    return {"topology": topology, "arm": arm, "requests": run["completed"], "failed": run["failed"],
            "ttft_p50": run["ttft_ms"]["median"], "ttft_p99": run["ttft_ms"]["p99"], "waterfall": w}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--arms", default="off,on")
    ap.add_argument("--topologies", default="unified,router")
    ap.add_argument("--num-kv-blocks", type=int, default=512)
    ap.add_argument("--host-gb", type=float, default=0.25)
    ap.add_argument("--conversations", type=int, default=6)
    ap.add_argument("--idle-gap", type=float, default=4.0)
    ap.add_argument("--min-turns", type=int, default=20)
    ap.add_argument("--max-turns", type=int, default=40)
    ap.add_argument("--retention-flags", default="", help="serve flags of the 'on' arm")
    ap.add_argument("--retention-body", default='{"prompt_cache_retention": "24h"}',
                    help="JSON merged into every request of the 'on' arm")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="tessera-agentic-bench-")
    os.makedirs(out, exist_ok=True)
    flag = retention_flag(os.path.join(a.build, "tessera"))
    model = a.model or synth_bench_model(a.build, out)
    rows, skipped = [], []
    for t in a.topologies.split(","):
        for arm in a.arms.split(","):
            if arm == "on" and flag is None:
                skipped.append(f"{t}/on")
                continue
            rows.append(run_arm(a, model, t, arm, out))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| topology | retention | requests | TTFT p50 / p99 (ms) | prompt tokens | recomputed | cached: "
          + " / ".join(SOURCES) + " | recomputed by reason |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        w = r["waterfall"]
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(w["computed"].items()) if v)
        cached = " / ".join(f"{w['cached'].get(s, 0):.0f}" for s in SOURCES)
        print(f"| {r['topology']} | {r['arm']} | {r['requests']} ({r['failed']} failed) "
              f"| {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} | {w['prompt']:.0f} | {sum(w['computed'].values()):.0f} "
              f"| {cached} | {reasons} |")
    if skipped:
        print(f"\nskipped (tessera serve --help lists no retention flag): {', '.join(skipped)}")
    elif flag:
        print(f"\nretention flag found: {flag}; 'on' arm ran with serve flags '{a.retention_flags}' and body "
              f"{a.retention_body}")
    print(f"\n(outputs in {out})")
    if not a.out:
        shutil.rmtree(os.path.join(out, "model"), ignore_errors=True)


if __name__ == "__main__":
    main()
