#!/usr/bin/python3
"""KV-aware vs round-robin routing: two unified instances behind `tessera serve --role router`.

    /usr/bin/python3 bench/run_kv_router_bench.py [--build build] [--model DIR] [--out DIR]
        [--policies kv-aware,round-robin] [--workloads shared-prefix,multi-turn] [--num-kv-blocks 320]
        [--peer-fetch]

For every (workload, policy) it starts two fresh instances (KV events on,
--threads 1 each, --num-kv-blocks N) and a router with --routing-logic POLICY,
runs tessera-bench through the router (streamed /v1/completions, closed loop),
reads each instance's /metrics before and after, and prints one markdown row:
prefill tokens computed (prompt tokens - prefix-cache hits, summed over both
instances), TTFT mean/p50/p99, throughput. Without --model it synthesizes a
qwen3 checkpoint of hidden 384, 6 layers, FFN 1024, 6 query / 2 KV heads of 64,
bf16 (random weights, the real Qwen3 tokenizer), where prefilling a 1k-token
prompt costs a few hundred ms on one core: prefill dominates TTFT, as with a
real model on a GPU. Run it under bench/quiet_run.sh for figures.

Workloads (fixed seeds, same requests for every policy):
  shared-prefix  98 requests, 7 system prompts of 1024 tokens + 32-token
                 questions, 16 output tokens, 8 concurrent (an odd number of
                 groups, so that round-robin does not partition them by accident)
  multi-turn     60 requests: 15 conversations x 4 turns of 64-token user
                 turns and 32-token replies, 6 concurrent
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

EVENTS = ('{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*", '
          '"replay_endpoint": "tcp://127.0.0.1:*"}')
WORKLOADS = {
    "shared-prefix": ["--dataset", "shared-prefix", "--num-prompts", "98", "--prefix-len", "1024",
                      "--num-prefix-groups", "7", "--input-len", "32", "--output-len", "16", "--max-concurrency", "8"],
    "multi-turn": ["--dataset", "multi-turn", "--num-prompts", "60", "--turns", "4", "--input-len", "64",
                   "--output-len", "32", "--max-concurrency", "6"],
}


def decisions(port):
    """{policy or instance: decisions} from the router's tessera:router_routing_decisions_total."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^tessera:router_routing_decisions_total\{instance="([^"]*)",policy="([^"]*)"[^}]*\} (\S+)$',
                         text, re.M):
        for k in (m.group(1), m.group(2)):
            out[k] = out.get(k, 0) + int(float(m.group(3)))
    return out


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$', line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


class Proc:
    def __init__(self, args, workdir, name, log_level="warn"):
        self.port_file = os.path.join(workdir, name + ".port")
        self.log = open(os.path.join(workdir, name + ".log"), "wb")
        self.proc = subprocess.Popen(args[:1] + ["--log-level", log_level] + args[1:] +
                                     ["--host", "127.0.0.1", "--port", "0", "--grpc-port", "-1",
                                      "--port-file", self.port_file],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None

    def wait_ready(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited {self.proc.returncode}; see {self.log.name}")
            try:
                if self.port is None:
                    with open(self.port_file) as f:
                        self.port = json.load(f)["http"]
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ready", timeout=2)
                return
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        raise RuntimeError(f"not ready in {timeout}s; see {self.log.name}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def synth_bench_model(build, out):
    """The checkpoint described above, under out/model (made once)."""
    model = os.path.join(out, "model")
    if not os.path.isdir(model):
        subprocess.run([os.path.join(build, "tessera"), "--log-level", "warn", "synth", "--arch", "qwen3",
                        "--dtype", "bf16", "--out", model, "--set", "hidden_size=384", "--set",
                        "intermediate_size=1024", "--set", "num_hidden_layers=6", "--set",
                        "num_attention_heads=6", "--set", "num_key_value_heads=2", "--set", "head_dim=64"],
                       check=True, capture_output=True)
    return model


def run_one(a, model, workload, policy, out):
    tessera = os.path.join(a.build, "tessera")
    inst = [tessera, "serve", "--model", model, "--threads", "1", "--num-kv-blocks", str(a.num_kv_blocks),
            "--max-num-seqs", "16", "--kv-events-config", EVENTS]
    if a.peer_fetch:
        inst += ["--kv-peer-fetch", "--kv-ucx-tls", "tcp,self"]
    procs = []
    try:
        for n in ("a", "b"):
            procs.append(Proc(inst, out, f"{workload}-{policy}-{n}"))
        for p in procs:
            p.wait_ready()
        r = Proc([tessera, "serve", "--role", "router", "--routing-logic", policy, "--router-poll-interval", "0.1",
                  "--decode-instances", ",".join(f"127.0.0.1:{p.port}" for p in procs)], out, f"{workload}-{policy}-r",
                 a.router_log_level)
        procs.append(r)
        r.wait_ready()
        time.sleep(1.0)  # the router learns the instances' event endpoints
        before = [metrics(p.port) for p in procs[:2]]
        res = os.path.join(out, f"{workload}-{policy}.json")
        cmd = [os.path.join(a.build, "bench", "tessera-bench"), "--base-url", f"http://127.0.0.1:{r.port}",
               "--tokenizer", model, "--seed", "7", "--no-progress", "--result-json", res] + WORKLOADS[workload]
        bench = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if bench.returncode != 0:
            raise RuntimeError(f"tessera-bench failed:\n{bench.stdout[-2000:]}\n{bench.stderr[-2000:]}")
        after = [metrics(p.port) for p in procs[:2]]
        rm = metrics(r.port)
        dec = decisions(r.port)
    finally:
        for p in procs:
            p.stop()
    run = json.load(open(res))["runs"][0]
    delta = lambda k: sum(x.get(k, 0) - y.get(k, 0) for x, y in zip(after, before))
    prompt = delta("tessera:prompt_tokens_total")
    hits = delta("tessera:prefix_cache_hits_total")
    return {"workload": workload, "policy": policy, "requests": run["completed"], "failed": run["failed"],
            "prompt_tokens": prompt, "prefill_tokens": prompt - hits,
            "ttft_mean": run["ttft_ms"]["mean"], "ttft_p50": run["ttft_ms"]["median"],
            "ttft_p99": run["ttft_ms"]["p99"], "req_s": run["request_throughput"],
            "tok_s": run["total_token_throughput"],
            "router_hit": rm.get("tessera:router_prompt_hit_tokens_total", 0),
            "peer": rm.get("tessera:router_kv_peer_fetch_tokens_total", 0), "decisions": dec}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--policies", default="kv-aware,round-robin")
    ap.add_argument("--workloads", default="shared-prefix,multi-turn")
    ap.add_argument("--num-kv-blocks", type=int, default=416)
    ap.add_argument("--peer-fetch", action="store_true", help="instances run KV transfer (--kv-peer-fetch)")
    ap.add_argument("--router-log-level", default="warn", help="debug: every kv-aware decision with its terms")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="tessera-kv-router-bench-")
    os.makedirs(out, exist_ok=True)
    model = a.model or synth_bench_model(a.build, out)
    rows = []
    for w in a.workloads.split(","):
        for p in a.policies.split(","):
            rows.append(run_one(a, model, w, p, out))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| workload | routing | requests | prompt tokens | prefill tokens computed | TTFT mean / p50 / p99 (ms) "
          "| req/s | tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['policy']} | {r['requests']} ({r['failed']} failed) | {r['prompt_tokens']:.0f} "
              f"| {r['prefill_tokens']:.0f} | {r['ttft_mean']:.0f} / {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} "
              f"| {r['req_s']:.2f} | {r['tok_s']:.0f} |")
    for w in a.workloads.split(","):
        by = {r["policy"]: r for r in rows if r["workload"] == w}
        if "kv-aware" in by and "round-robin" in by:
            k, rr = by["kv-aware"], by["round-robin"]
            print(f"\n{w}: round-robin / kv-aware: prefill tokens {rr['prefill_tokens'] / max(k['prefill_tokens'], 1):.2f}x, "
                  f"mean TTFT {rr['ttft_mean'] / max(k['ttft_mean'], 1e-9):.2f}x, "
                  f"p99 TTFT {rr['ttft_p99'] / max(k['ttft_p99'], 1e-9):.2f}x, "
                  f"throughput kv-aware / round-robin {k['tok_s'] / max(rr['tok_s'], 1e-9):.2f}x")
    print(f"\n(outputs in {out})")
    if not a.out:
        shutil.rmtree(os.path.join(out, "model"), ignore_errors=True)


if __name__ == "__main__":
    main()
