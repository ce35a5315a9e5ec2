#!/usr/bin/python3
"""The twin's fidelity table: `tessera simulate` against a measured tessera-bench run of the same trace.

The full table (2 layouts x 3 workloads x 3 loads; sized for <= 15 minutes on a quiet 2-core machine):

    /usr/bin/python3 bench/fidelity.py --tessera build/tessera \\
        --model ~/.cache/tessera/bench-models/llama-0.5b-Q4_K_M.gguf \\
        --layout unified,pd --workloads random,shared-prefix,bursty --loads 0.3,0.6,0.9 \\
        --num-prompts 24 --input-len 64 --output-len 24 --prefix-len 128 \\
        --out bench/figures/fidelity.md --result-json bench/figures/fidelity.json -- --threads 1

For one model on this machine: calibrates the cost model (`tessera calibrate`,
unless --cost-model is given; once: the same cost model serves the unified
instance and both PD roles) and, per layout, starts the servers once:
  unified  one `tessera serve --cost-model`
  pd       1 prefill + 1 decode instance (KV over UCX tcp,self, as deploy/local's pd
           topology) behind `tessera serve --role router`, on loopback and free
           ports; the twin runs the same layout (--prefill-instances 1
           --decode-instances 1, the router's --prefill-threshold and
           --router-poll-interval, and --kv-transfer-bandwidth and
           --kv-transfer-latency-ms when given, else simulate's transfer defaults).
Serve flags after `--` go to calibrate, every engine instance and simulate alike
(not to the router). In PD the two instances run side by side while the twin
prices each instance's steps as if alone: give each its own cores (`-- --threads
1` on 2 cores, as bench/pd_goodput.py does); the unified rows then run on the
same per-instance budget, which is the one calibrate measured.

For each workload and load level it runs tessera-bench (streaming, ignore_eos,
exact prompt lengths through the model's tokenizer when the model directory has
tokenizer.json) and `tessera simulate` on the same workload flags and seed.
Workloads: random, shared-prefix, and bursty: random prompts whose arrival gaps
are gamma-distributed with shape --burstiness (default 0.25: bursts and lulls).
`bursty` STANDS IN FOR a BurstGPT replay: BurstGPT's CSV is not reachable from
this machine. Given --burstgpt-csv FILE, the workload `burstgpt` replays that
trace instead (its first --num-prompts usable rows: their prompt and output
lengths and their timing, scaled by --time-scale to the load level).
Load levels are fractions of the saturation throughput the twin predicts for the
layout (a run at --request-rate inf), so both sides see the same arrival times.
Per row: TTFT and TPOT p50/p90, measured and predicted, and the row's MAPE over
those four; the JSON also keeps the servers' own step-time prediction error
(tessera:step_time_prediction_error, summed over a layout's engine instances).
--bound PCT exits 1 when a row's MAPE exceeds it. Each run uses its own seed, so
no server's prefix cache holds anything of a later run's prompts (the twin
starts empty). Sizing: a run lasts about num-prompts / (load x saturation), so
loads 0.3,0.6,0.9 take about 6 x num-prompts / saturation per workload and
layout; the log gives the twin's duration of each run before it starts. For the
command above, with a cost model calibrated under a load average of 9 (the
calibration alone took 317 s at --threads 1), the twin put the 18 runs at 430 s.
"""
import argparse
import csv
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


def trace_rate(a):
    """The BurstGPT trace's own request rate over the rows tessera-bench and simulate replay (the first
    --num-prompts rows with non-zero request and response tokens, as both read it)."""
    with open(a.burstgpt_csv, newline="") as f:
        times = [float(r["Timestamp"]) for r in csv.DictReader(f)
                 if int(r["Request tokens"]) > 0 and int(r["Response tokens"]) > 0][:a.num_prompts]
    if len(times) < 2 or times[-1] <= times[0]:
        raise RuntimeError(f"{a.burstgpt_csv}: fewer than 2 usable rows at distinct times")
    return (len(times) - 1) / (times[-1] - times[0])


def workload_flags(a, workload, seed):
    """tessera-bench's and simulate's flags for a workload, without its arrival rate."""
    if workload == "burstgpt":
        return ["--dataset", "burstgpt", "--dataset-path", a.burstgpt_csv, "--num-prompts", str(a.num_prompts),
                "--seed", str(seed)]
    f = ["--dataset", "random" if workload == "bursty" else workload, "--num-prompts", str(a.num_prompts),
         "--input-len", str(a.input_len), "--output-len", str(a.output_len), "--seed", str(seed)]
    if workload == "shared-prefix":
        f += ["--prefix-len", str(a.prefix_len), "--num-prefix-groups", str(a.num_prefix_groups)]
    if workload == "bursty":
        f += ["--burstiness", f"{a.burstiness:g}"]
    return f


def rate_flags(a, workload, rate):
    """Arrivals at `rate` req/s (inf: all at once); a trace keeps its own gaps, scaled to that mean rate."""
    if workload != "burstgpt":
        return ["--request-rate", "inf" if rate == float("inf") else f"{rate:.6g}"]
    return ["--time-scale", f"{1e-9 if rate == float('inf') else a.trace_rate / rate:.6g}"]


class Server:
    """One `tessera serve` process on a free port (its --port-file); always stop() it."""

    def __init__(self, a, work, name, args):
        self.name = name
        self.port_file = os.path.join(work, f"{name}.port.json")
        self.log_path = os.path.join(work, f"{name}.log")
        self.log = open(self.log_path, "wb")
        cmd = [a.tessera, "--log-level", "warn", "serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "-1",
               "--port-file", self.port_file] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None

    def wait_ready(self, timeout):
        deadline = time.time() + timeout
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
        with open(self.log_path, "rb") as f:
            tail = f.read().decode(errors="replace")[-3000:]
        raise RuntimeError(f"{self.name} did not become ready; log:\n{tail}")

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Layout:
    """A layout's servers, started in order (engines, then the router) and stopped in reverse; `entry` is
    where clients go, `engines` the instances whose step times the cost model predicts."""

    def __init__(self, a, work, cost, layout):
        self.servers = []
        engine = ["--model", a.model, "--cost-model", cost]
        try:
            if layout == "unified":
                self.engines = [self.start(a, work, "unified", engine + a.serve_args)]
                self.entry = self.engines[0]
                return
            kv = ["--kv-transfer-port", "0", "--kv-ucx-tls", "tcp,self"]
            self.engines = [self.spawn(a, work, role, engine + ["--role", role] + kv + a.serve_args)
                            for role in ("prefill", "decode")]
            for s in self.engines:  # both load their model at once
                s.wait_ready(a.ready_timeout)
            self.entry = self.start(a, work, "router", [
                "--role", "router", "--prefill-instances", f"127.0.0.1:{self.engines[0].port}",
                "--decode-instances", f"127.0.0.1:{self.engines[1].port}"] + router_flags(a))
        except BaseException:
            self.stop()
            raise

    def spawn(self, a, work, name, args):
        s = Server(a, work, name, args)
        self.servers.append(s)
        return s

    def start(self, a, work, name, args):
        s = self.spawn(a, work, name, args)
        s.wait_ready(a.ready_timeout)
        return s

    def stop(self):
        for s in reversed(self.servers):
            s.stop()


def router_flags(a):
    """The router's settings the twin's PD layout reads too."""
    return ["--prefill-threshold", str(a.prefill_threshold), "--router-poll-interval", f"{a.router_poll_interval:g}"]


def layout_flags(a, layout):
    if layout == "unified":
        return []
    f = ["--prefill-instances", "1", "--decode-instances", "1"] + router_flags(a)
    if a.kv_transfer_bandwidth is not None:
        f += ["--kv-transfer-bandwidth", f"{a.kv_transfer_bandwidth:g}"]
    if a.kv_transfer_latency_ms is not None:
        f += ["--kv-transfer-latency-ms", f"{a.kv_transfer_latency_ms:g}"]
    return f


def merged_histogram(servers, name):
    """`name` summed over several servers' /metrics."""
    out = {"buckets": {}, "count": 0.0, "sum": 0.0}
    for s in servers:
        h = histogram(s.metrics(), name)
        for le, n in h["buckets"].items():
            out["buckets"][le] = out["buckets"].get(le, 0.0) + n
        out["count"] += h["count"]
        out["sum"] += h["sum"]
    return out


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


def measure(a, work, cost, layout, sim_base, rows, seed):
    """Every workload and load of one layout on its servers; appends to rows; returns the next seed and
    the servers' step-time figures."""
    servers = Layout(a, work, cost, layout)
    try:
        base_url = f"http://127.0.0.1:{servers.entry.port}"
        # Exact prompt lengths need the HF tokenizer; a GGUF file's prompts are
        # ~1 token per word on the server, exactly 1 in the twin (see the
        # rows' total_input_tokens).
        tokenizer = ["--tokenizer", a.model] if os.path.exists(os.path.join(a.model, "tokenizer.json")) else []
        # Warm-up (not counted): the servers' first steps run cold.
        run([a.bench, "--base-url", base_url, "--endpoint", "/v1/completions", "--dataset", "random",
             "--num-prompts", "4", "--input-len", "32", "--output-len", "4", "--no-progress", "--seed", "999"],
            600, "warm-up")
        sim = sim_base + layout_flags(a, layout)
        for workload in a.workloads.split(","):
            if a.rates:
                capacity, loads = None, [float(x) for x in a.rates.split(",")]
            else:
                sat = run(sim + workload_flags(a, workload, seed) + rate_flags(a, workload, float("inf")) +
                          a.serve_args, 600, "simulate (saturation)")
                capacity = json.loads(sat.stdout)["runs"][0]["request_throughput"]
                loads = [float(x) for x in a.loads.split(",")]
            for load in loads:
                seed += 1
                rate = load if capacity is None else capacity * load
                flags = workload_flags(a, workload, seed) + rate_flags(a, workload, rate)
                twin_doc = json.loads(run(sim + flags + a.serve_args, 600, "simulate").stdout)["runs"][0]
                log(f"{layout} {workload} at {rate:.3g} req/s" +
                    ("" if capacity is None else f" ({load:g} of {capacity:.3g})") +
                    f": the twin's run takes {twin_doc['duration_s']:.0f} s")
                out = os.path.join(work, f"bench-{seed}.json")
                run([a.bench, "--base-url", base_url, "--endpoint", "/v1/completions", "--no-progress",
                     "--no-per-request", "--result-json", out] + tokenizer + flags, 3600, "tessera-bench")
                with open(out) as f:
                    measured = summary_row(json.load(f))
                twin = summary_row({"runs": [twin_doc]})
                apes = [abs(twin[k] - measured[k]) / measured[k] for k in measured
                        if k.endswith(("median", "p90")) and measured[k] > 0]
                rows.append({"layout": layout, "workload": workload, "load": None if capacity is None else load,
                             "request_rate": rate, "measured": measured, "twin": twin,
                             "twin_layout": twin_doc["twin"].get("layout"),
                             "mape": 100 * sum(apes) / len(apes) if apes else None})
        figures = {"server_step_time": merged_histogram(servers.engines, "tessera:step_time_seconds"),
                   "server_step_prediction_error": merged_histogram(servers.engines,
                                                                    "tessera:step_time_prediction_error")}
        if layout == "pd":
            figures["kv_transfer_seconds"] = merged_histogram(servers.engines[1:], "tessera:kv_transfer_seconds")
        return seed, figures
    finally:
        servers.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--bench", help="tessera-bench (default: dirname(--tessera)/bench/tessera-bench)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--cost-model", help="use this file instead of calibrating")
    ap.add_argument("--calibrate-repeats", type=int, default=3)
    ap.add_argument("--layout", default="unified", help="comma-separated: unified, pd (1 prefill + 1 decode + router)")
    ap.add_argument("--workloads", default="random,shared-prefix,bursty",
                    help="comma-separated: random, shared-prefix, bursty, burstgpt (needs --burstgpt-csv)")
    ap.add_argument("--loads", default="0.3,0.6,0.9", help="fractions of the twin's saturation throughput")
    ap.add_argument("--rates", help="request rates (req/s) instead of --loads")
    ap.add_argument("--num-prompts", type=int, default=24)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=24)
    ap.add_argument("--prefix-len", type=int, default=128)
    ap.add_argument("--num-prefix-groups", type=int, default=4)
    ap.add_argument("--burstiness", type=float, default=0.25, help="bursty: gamma shape of the arrival gaps")
    ap.add_argument("--burstgpt-csv", help="a BurstGPT CSV: the workload burstgpt replays it (in place of bursty)")
    ap.add_argument("--prefill-threshold", type=int, default=1,
                    help="pd: the router's: shorter prompts skip the prefill instance (1: none do)")
    ap.add_argument("--router-poll-interval", type=float, default=0.5, help="pd: the router's, seconds")
    ap.add_argument("--kv-transfer-bandwidth", type=float, help="pd: the twin's GB/s of a KV pull")
    ap.add_argument("--kv-transfer-latency-ms", type=float, help="pd: the twin's fixed time of a KV pull")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bound", type=float, help="exit 1 when a row's MAPE exceeds this many percent")
    ap.add_argument("--out", help="write the markdown table here (default: stdout)")
    ap.add_argument("--result-json")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("serve_args", nargs="*", help="after --: serve flags for calibrate, the instances and simulate")
    a = ap.parse_args()
    a.tessera = os.path.abspath(a.tessera)
    a.bench = a.bench or os.path.join(os.path.dirname(a.tessera), "bench", "tessera-bench")
    layouts = a.layout.split(",")
    workloads = a.workloads.split(",")
    for x in layouts:
        if x not in ("unified", "pd"):
            ap.error(f"--layout: unknown layout '{x}' (unified, pd)")
    for w in workloads:
        if w not in ("random", "shared-prefix", "bursty", "burstgpt"):
            ap.error(f"--workloads: unknown workload '{w}' (random, shared-prefix, bursty, burstgpt)")
    if ("burstgpt" in workloads) != bool(a.burstgpt_csv):
        ap.error("the workload burstgpt and --burstgpt-csv FILE go together")
    if a.burstgpt_csv:
        a.burstgpt_csv = os.path.abspath(a.burstgpt_csv)
        a.trace_rate = trace_rate(a)
        if a.rates:
            ap.error("--rates: a trace's load is set by --loads (its timing scaled to that fraction)")
    if not os.path.exists(a.bench):
        log(f"no tessera-bench at {a.bench}")
        return 77
    if "pd" in layouts and not any(x == "--threads" or x.startswith("--threads=") for x in a.serve_args):
        log("pd: no --threads after --: the prefill and decode instances share the cores, which the twin does "
            "not model")
    if not os.path.exists(os.path.join(a.model, "tokenizer.json")):
        log(f"{a.model} has no tokenizer.json: measured prompt lengths are approximate")
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
        sim_base = [a.tessera, "--log-level", "warn", "simulate", "--model", a.model, "--cost-model", cost]
        rows, figures, seed = [], {}, a.seed
        for layout in layouts:
            seed, figures[layout] = measure(a, work, cost, layout, sim_base, rows, seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lines = ["| layout | workload | load | req/s | TTFT p50 ms (meas / twin) | TTFT p90 ms | TPOT p50 ms | "
             "TPOT p90 ms | MAPE |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r['measured'][f'{k}_{s}']:.1f} / {r['twin'][f'{k}_{s}']:.1f}" for k, s in STATS]
        mape = "n/a" if r["mape"] is None else f"{r['mape']:.1f}%"
        load = "-" if r["load"] is None else f"{r['load']:g}"
        lines.append(f"| {r['layout']} | {r['workload']} | {load} | {r['request_rate']:.3g} | " + " | ".join(cells) +
                     f" | {mape} |")
    fit = cost_doc.get("calibration", {}).get("fit", {})
    lines.append("")
    if "bursty" in workloads:
        lines.append(f"bursty: random prompts, gamma arrival gaps of shape {a.burstiness:g}; it stands in for a "
                     "BurstGPT replay (the trace is not reachable from this machine).")
    lines.append(f"Cost model: R² {fit.get('r2', float('nan')):.3f}, calibration MAPE "
                 f"{100 * fit.get('mape', float('nan')):.1f}%.")
    for layout, fig in figures.items():
        steps, err = fig["server_step_time"], fig["server_step_prediction_error"]
        line = (f"{layout}: server steps {steps['count']:.0f}, mean step "
                f"{1000 * steps['sum'] / max(steps['count'], 1):.2f} ms, mean signed step prediction error "
                f"{100 * err['sum'] / max(err['count'], 1):+.1f}%")
        if "kv_transfer_seconds" in fig:
            kv = fig["kv_transfer_seconds"]
            line += f"; KV pulls {kv['count']:.0f}, mean {1000 * kv['sum'] / max(kv['count'], 1):.1f} ms"
        lines.append(line + ".")
    lines.append(f"{time.time() - t0:.0f} s.")
    table = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    if a.result_json:
        with open(a.result_json, "w") as f:
            json.dump({"model": a.model, "cost_model": cost_doc, "rows": rows, "layouts": figures,
                       "serve_args": a.serve_args}, f, indent=2)
    worst = max((r["mape"] for r in rows if r["mape"] is not None), default=None)
    if a.bound is not None and (worst is None or worst > a.bound):
        log(f"a row's MAPE {worst} exceeds the bound {a.bound}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
