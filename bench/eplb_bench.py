#!/usr/bin/env python3
"""EPLB and parallel step time on CPU ranks, through `tessera serve`.

Synthesizes a small Mixtral-shaped MoE whose router is skewed (synth
--router-skew: the first top-k experts are hot), then serves it in several
layouts with the same workload and reads the server's own metrics:

  one rank                    the reference step time (compute only)
  -dp N --enable-expert-parallel                 plain expert parallelism
  -dp N --enable-expert-parallel --num-redundant-experts R --enable-eplb
                              EPLB: replicas + a rebalance every --step-interval steps
  -tp N                       tensor parallelism (attention and experts split)

Each server gets a warm-up phase (EPLB rebalances at least once in it), then a
timed phase of --requests concurrent greedy requests of --max-tokens tokens.
From the metric deltas over the timed phase:
  step_s      rank 0's tessera:parallel_step_seconds_total / engine steps (one
              rank: wall time / steps)
  coll_s      rank 0's collective seconds per step
  load        (token, expert) pairs each rank computed
              (tessera:moe_expert_rank_tokens_total), max/mean over ranks
Writes a JSON document (--out) and prints a table. Run it through
bench/quiet_run.sh; cores: each rank gets --threads threads.

  bench/eplb_bench.py --tessera build/tessera --workdir /tmp/eplb --ranks 2 --out eplb.json
"""
import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

SHAPE = {  # config.json overrides: experts dominate a decode step
    "hidden_size": 512, "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000,
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=None, timeout=600):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(port):
    status, text = http(port, "GET", "/metrics")
    assert status == 200, text
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            labels.pop("model_name", None)
            out[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
    return out


def total(m, name, **want):
    return sum(v for (n, labels), v in m.items()
               if n == name and all(dict(labels).get(k) == str(x) for k, x in want.items()))


def workload(port, n, max_tokens, seed, prompt_len):
    def one(i):
        prompt = [(seed * 7919 + i * 104729 + j * 31) % 31000 + 100 for j in range(prompt_len)]
        status, body = http(port, "POST", "/v1/completions",
                            {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                             "ignore_eos": True})
        assert status == 200, body
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        list(ex.map(one, range(n)))


def run_layout(args, model, name, extra):
    port = free_port()
    log = open(os.path.join(args.workdir, f"{name}.log"), "wb")
    cmd = [args.tessera, "serve", "--model", model, "--served-model-name", "m", "--port", str(port),
           "--grpc-port", "-1", "--threads", str(args.threads), "--num-kv-blocks", "1024",
           "--max-num-seqs", str(args.requests)] + extra
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if http(port, "GET", "/ready", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, f"{name}: server exited, see {log.name}"
            time.sleep(0.2)
        workload(port, args.requests, args.warmup_tokens, 1, args.prompt_len)
        m0, t0 = metrics(port), time.time()
        workload(port, args.requests, args.max_tokens, 2, args.prompt_len)
        wall = time.time() - t0
        m1 = metrics(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    def d(n, **k):
        return total(m1, n, **k) - total(m0, n, **k)
    steps = d("tessera:engine_steps_total")
    ranks = sorted({dict(l).get("rank") for (n, l) in m1 if n == "tessera:parallel_step_seconds_total"} - {None},
                   key=int)
    row = {"layout": name, "flags": " ".join(extra), "steps": steps, "wall_s": wall,
           "tokens_per_s": args.requests * args.max_tokens / wall}
    if ranks:
        row["step_s"] = d("tessera:parallel_step_seconds_total", rank=0) / steps
        row["coll_s"] = d("tessera:parallel_collective_seconds_total", rank=0) / steps
        row["rank_step_s"] = [d("tessera:parallel_step_seconds_total", rank=r) / steps for r in ranks]
        pairs = [d("tessera:moe_expert_rank_tokens_total", rank=r) for r in ranks]
        if sum(pairs) > 0:
            row["rank_pairs"] = pairs
            row["load_max_over_mean"] = max(pairs) * len(pairs) / sum(pairs)
        row["rebalances"] = d("tessera:eplb_rebalances_total")
    else:
        row["step_s"] = wall / steps
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2])
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--warmup-tokens", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=24)
    ap.add_argument("--skew", type=float, default=3.0)
    ap.add_argument("--step-interval", type=int, default=16, help="EPLB step_interval and window_size")
    ap.add_argument("--layouts", default="one,ep,eplb,tp")
    ap.add_argument("--out")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, f"mixtral-skew{args.skew:g}")
    if not os.path.exists(os.path.join(model, "config.json")):
        cmd = [args.tessera, "synth", "--arch", "mixtral", "--size", "tiny", "--dtype", "bf16", "--router-skew",
               str(args.skew), "--out", model]
        for k, v in SHAPE.items():
            cmd += ["--set", f"{k}={v}"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    layouts = args.layouts.split(",")
    rows = []
    if "one" in layouts:
        rows.append(run_layout(args, model, "one rank", []))
    for n in args.ranks:
        ep = ["--data-parallel-size", str(n), "--enable-expert-parallel"]
        cfg = json.dumps({"window_size": args.step_interval, "step_interval": args.step_interval})
        if "ep" in layouts:
            rows.append(run_layout(args, model, f"ep{n}", ep))
        if "eplb" in layouts:
            rows.append(run_layout(args, model, f"ep{n}+eplb",
                                   ep + ["--num-redundant-experts", str(n), "--enable-eplb", "--eplb-config", cfg]))
        if "tp" in layouts:
            rows.append(run_layout(args, model, f"tp{n}", ["--tensor-parallel-size", str(n)]))
    cfg = json.load(open(os.path.join(model, "config.json")))
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": {k: cfg[k] for k in SHAPE} |
           {"num_local_experts": cfg["num_local_experts"], "num_experts_per_tok": cfg["num_experts_per_tok"],
            "router_skew": args.skew},
           "requests": args.requests, "max_tokens": args.max_tokens, "prompt_len": args.prompt_len, "threads_per_rank": args.threads,
           "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"{'layout':<12} {'step ms':>8} {'coll ms':>8} {'tok/s':>7} {'load max/mean':>13} {'rebal':>5}")
    for r in rows:
        print(f"{r['layout']:<12} {r['step_s'] * 1e3:8.1f} {r.get('coll_s', 0) * 1e3:8.1f} "
              f"{r['tokens_per_s']:7.1f} {r.get('load_max_over_mean', float('nan')):13.3f} "
              f"{r.get('rebalances', 0):5.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
