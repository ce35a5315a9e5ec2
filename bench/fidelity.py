#!/usr/bin/python3
"""The twin's fidelity table: `tessera simulate` against a measured tessera-bench run of the same trace.

    /usr/bin/python3 bench/fidelity.py --tessera build/tessera \\
        --model ~/.cache/tessera/bench-models/llama-0.5b-Q4_K_M.gguf \\
        --workloads random,shared-prefix --loads 0.3,0.6,0.9 --num-prompts 200 \\
        --input-len 256 --output-len 64 --out bench/figures/fidelity.md --result-json fidelity.json

For one model on this machine (unified layout): calibrates the cost model
(`tessera calibrate`, unless --cost-model is given), starts `tessera serve
--cost-model` once, and for each workload and load level runs tessera-bench
(streaming, ignore_eos, exact prompt lengths through the model's tokenizer)
and `tessera simulate` on the same workload flags and seed. Load levels are
fractions of the saturation throughput the twin predicts (a run at
--request-rate inf), so both sides see the same arrival times. Per row: TTFT
and TPOT p50/p90, measured and predicted, and the row's MAPE over those four;
the JSON also keeps the server's own step-time prediction error
(tessera:step_time_prediction_error). --bound PCT exits 1 when a row's MAPE
exceeds it. Each run uses its own seed, so the server's prefix cache holds
nothing of a later run's prompts (the twin starts empty).
Serve flags after `--` go to calibrate, serve and simulate alike.
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

STATS = (("ttft_ms", "median"), ("ttft_ms", "p90"), ("tpot_ms", "median"), ("tpot_ms", "p90"))


def log(msg):
    print(f"fidelity: {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed (rc {p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p


def workload_flags(a, dataset, seed):
    f = ["--dataset", dataset, "--num-prompts", str(a.num_prompts), "--input-len", str(a.input_len),
         "--output-len", str(a.output_len), "--seed", str(seed)]
    if dataset == "shared-prefix":
        f += ["--prefix-len", str(a.prefix_len), "--num-prefix-groups", str(a.num_prefix_groups)]
    return f


class Server:
    """`tessera serve` on a free port (its --port-file); always stop() it."""

    def __init__(self, a, work, cost):
        self.port_file = os.path.join(work, "serve.port.json")
        self.log_path = os.path.join(work, "serve.log")
        self.log = open(self.log_path, "wb")
        cmd = [a.tessera, "--log-level", "warn", "serve", "--model", a.model, "--port", "0", "--grpc-port", "-1",
               "--port-file", self.port_file, "--cost-model", cost] + a.serve_args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + a.ready_timeout
        self.port = None
        while time.time() < deadline and self.proc.poll() is None:
            try:
                if self.port is None:
                    with open(self.port_file) as f:
                        self.port = int(json.load(f)["http"])
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ready", timeout=5) as r:
                    if json.load(r).get("status") == "ready":
                        return
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        self.stop()
        with open(self.log_path, "rb") as f:
            tail = f.read().decode(errors="replace")[-3000:]
        raise RuntimeError(f"serve did not become ready; log:\n{tail}")

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def histogram(text, name):
    """A Prometheus histogram's buckets {le: count}, count and sum (summed over labels)."""
    out = {"buckets": {}, "count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        m = re.match(re.escape(name) + r'_(bucket|count|sum)(\{[^}]*\})?\s+(\S+)', line)
        if not m:
            continue
        if m.group(1) == "bucket":
            le = re.search(r'le="([^"]+)"', m.group(2)).group(1)
            out["buckets"][le] = out["buckets"].get(le, 0.0) + float(m.group(3))
        else:
            out[m.group(1)] += float(m.group(3))
    return out


def summary_row(doc):
    r = doc["runs"][0]
    return {f"{k}_{s}": r[k][s] for k, s in STATS} | {"completed": r["completed"], "failed": r["failed"],
                                                       "total_input_tokens": r["total_input_tokens"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--bench", help="tessera-bench (default: dirname(--tessera)/bench/tessera-bench)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--cost-model", help="use this file instead of calibrating")
    ap.add_argument("--calibrate-repeats", type=int, default=3)
    ap.add_argument("--workloads", default="random,shared-prefix")
    ap.add_argument("--loads", default="0.3,0.6,0.9", help="fractions of the twin's saturation throughput")
    ap.add_argument("--rates", help="request rates (req/s) instead of --loads")
    ap.add_argument("--num-prompts", type=int, default=200)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--prefix-len", type=int, default=512)
    ap.add_argument("--num-prefix-groups", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bound", type=float, help="exit 1 when a row's MAPE exceeds this many percent")
    ap.add_argument("--out", help="write the markdown table here (default: stdout)")
    ap.add_argument("--result-json")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("serve_args", nargs="*", help="after --: serve flags for calibrate, serve and simulate")
    a = ap.parse_args()
    a.tessera = os.path.abspath(a.tessera)
    a.bench = a.bench or os.path.join(os.path.dirname(a.tessera), "bench", "tessera-bench")
    if not os.path.exists(a.bench):
        log(f"no tessera-bench at {a.bench}")
        return 77
    work = tempfile.mkdtemp(prefix="tessera-fidelity-")
    t0 = time.time()
    try:
        cost = a.cost_model
        if not cost:
            cost = os.path.join(work, "cost.json")
            log("calibrating")
            run([a.tessera, "--log-level", "warn", "calibrate", "--model", a.model, "--out", cost,
                 "--repeats", str(a.calibrate_repeats)] + a.serve_args, 1800, "calibrate")
        with open(cost) as f:
            cost_doc = json.load(f)
        # Exact prompt lengths need the HF tokenizer; a GGUF file's prompts are
        # ~1 token per word on the server, exactly 1 in the twin (see the
        # rows' total_input_tokens).
        tokenizer = ["--tokenizer", a.model] if os.path.exists(os.path.join(a.model, "tokenizer.json")) else []
        if not tokenizer:
            log(f"{a.model} has no tokenizer.json: measured prompt lengths are approximate")
        sim_base = [a.tessera, "--log-level", "warn", "simulate", "--model", a.model, "--cost-model", cost]
        rows = []
        server = Server(a, work, cost)
        try:
            # Warm-up (not counted): the server's first steps run cold.
            run([a.bench, "--base-url", f"http://127.0.0.1:{server.port}", "--endpoint", "/v1/completions",
                 "--dataset", "random", "--num-prompts", "4", "--input-len", "32", "--output-len", "4",
                 "--no-progress", "--seed", "999"], 600, "warm-up")
            seed = a.seed
            for dataset in a.workloads.split(","):
                if a.rates:
                    capacity, loads = None, [float(x) for x in a.rates.split(",")]
                else:
                    sat = run(sim_base + workload_flags(a, dataset, seed) + ["--request-rate", "inf"] + a.serve_args,
                              600, "simulate (saturation)")
                    capacity = json.loads(sat.stdout)["runs"][0]["request_throughput"]
                    loads = [float(x) for x in a.loads.split(",")]
                for load in loads:
                    seed += 1
                    rate = f"{load if capacity is None else capacity * load:.6g}"
                    flags = workload_flags(a, dataset, seed) + ["--request-rate", rate]
                    log(f"{dataset} at {rate} req/s" + ("" if capacity is None else f" ({load:g} of {capacity:.3g})"))
                    out = os.path.join(work, f"bench-{seed}.json")
                    run([a.bench, "--base-url", f"http://127.0.0.1:{server.port}", "--endpoint", "/v1/completions",
                         "--no-progress", "--no-per-request", "--result-json", out] + tokenizer + flags,
                        3600, "tessera-bench")
                    with open(out) as f:
                        measured = summary_row(json.load(f))
                    twin = summary_row(json.loads(run(sim_base + flags + a.serve_args, 600, "simulate").stdout))
                    apes = [abs(twin[k] - measured[k]) / measured[k] for k in measured
                            if k.endswith(("median", "p90")) and measured[k] > 0]
                    rows.append({"workload": dataset, "load": None if capacity is None else load,
                                 "request_rate": float(rate),
                                 "measured": measured, "twin": twin,
                                 "mape": 100 * sum(apes) / len(apes) if apes else None})
            step_error = histogram(server.metrics(), "tessera:step_time_prediction_error")
            step_time = histogram(server.metrics(), "tessera:step_time_seconds")
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lines = ["| workload | load | req/s | TTFT p50 ms (meas / twin) | TTFT p90 ms | TPOT p50 ms | TPOT p90 ms | MAPE |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r['measured'][f'{k}_{s}']:.1f} / {r['twin'][f'{k}_{s}']:.1f}" for k, s in STATS]
        mape = "n/a" if r["mape"] is None else f"{r['mape']:.1f}%"
        load = "-" if r["load"] is None else f"{r['load']:g}"
        lines.append(f"| {r['workload']} | {load} | {r['request_rate']:.3g} | " + " | ".join(cells) +
                     f" | {mape} |")
    fit = cost_doc.get("calibration", {}).get("fit", {})
    lines.append("")
    lines.append(f"Cost model: R² {fit.get('r2', float('nan')):.3f}, calibration MAPE "
                 f"{100 * fit.get('mape', float('nan')):.1f}%; server steps {step_error['count']:.0f}, "
                 f"mean step {1000 * step_time['sum'] / max(step_time['count'], 1):.2f} ms, mean signed step "
                 f"prediction error {100 * step_error['sum'] / max(step_error['count'], 1):+.1f}%; "
                 f"{time.time() - t0:.0f} s.")
    table = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    if a.result_json:
        with open(a.result_json, "w") as f:
            json.dump({"model": a.model, "cost_model": cost_doc, "rows": rows, "server_step_time": step_time,
                       "server_step_prediction_error": step_error, "serve_args": a.serve_args}, f, indent=2)
    worst = max((r["mape"] for r in rows if r["mape"] is not None), default=None)
    if a.bound is not None and (worst is None or worst > a.bound):
        log(f"a row's MAPE {worst} exceeds the bound {a.bound}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
