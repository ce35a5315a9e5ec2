#!/usr/bin/python3
"""Goodput of prefill/decode disaggregation against unified instances, measured.

    bench/pd_goodput.py --model /tmp/q05 --topology pd --rates 0.1,0.2,0.3 [--out bench/figures]
    bench/pd_goodput.py --model /tmp/q05 --topology unified --rates 0.1,0.2,0.3
    bench/pd_goodput.py --svg-only [--out bench/figures]     # the figure from the JSON already written

Topologies, on one host and the same budget (each instance --threads 1, so two instances = the two cores):
  pd       1 prefill + 1 decode instance (KV over UCX, --kv-ucx-tls) behind `tessera serve --role router`
           (--prefill-threshold 1: every prompt is prefilled on the prefill instance)
  unified  2 unified instances behind the same router (no prefill pool: load-aware choice of the instance)

For each rate, tessera-bench (build/bench/tessera-bench) sends --num-prompts random requests (Poisson
arrivals, ignore_eos so every request makes --output-len tokens) through the router, with a fresh seed per
rate (so no prompt repeats into a prefix cache), and reports goodput: requests/s that met every SLO of
--goodput (vLLM's syntax, DistServe's metric). Results: OUT/pd_goodput_<topology>.json (per rate: goodput,
throughput, TTFT and TPOT percentiles, and tessera-bench's own JSON), and OUT/pd_goodput.svg (goodput and
p90 TTFT/TPOT against the offered rate, both topologies). Run each topology under
bench/quiet_run.sh (one run <= 10 min).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def start(tessera, args, workdir, name):
    port_file = os.path.join(workdir, name + ".port.json")
    log = open(os.path.join(workdir, name + ".log"), "wb")
    cmd = [tessera, "--log-level", "warn", "serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "-1",
           "--port-file", port_file, *args]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    return {"name": name, "proc": proc, "port_file": port_file, "log": log.name}


def wait_ready(s, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if s["proc"].poll() is not None:
            raise RuntimeError(f"{s['name']} exited; log {s['log']}")
        try:
            with open(s["port_file"]) as f:
                s["port"] = json.load(f)["http"]
            with urllib.request.urlopen(f"http://127.0.0.1:{s['port']}/ready", timeout=2) as r:
                if r.status == 200:
                    return s["port"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{s['name']} not ready within {timeout}s; log {s['log']}")


def stop(servers):
    for s in servers:
        if s["proc"].poll() is None:
            s["proc"].send_signal(signal.SIGTERM)
    for s in servers:
        try:
            s["proc"].wait(timeout=20)
        except subprocess.TimeoutExpired:
            s["proc"].kill()
            s["proc"].wait()


def topology(args, workdir):
    base = ["--model", args.model, "--threads", "1", "--max-model-len", str(args.max_model_len),
            "--kv-cache-mb", str(args.kv_cache_mb), "--served-model-name", "m"]
    kv = ["--kv-ucx-tls", args.kv_ucx_tls]
    if args.topology == "pd":
        insts = [start(args.tessera, [*base, "--role", "prefill", *kv], workdir, "prefill"),
                 start(args.tessera, [*base, "--role", "decode", *kv], workdir, "decode")]
    else:
        insts = [start(args.tessera, [*base, "--role", "unified"], workdir, f"unified{i}") for i in range(2)]
    try:
        ports = [wait_ready(s) for s in insts]
    except Exception:
        stop(insts)
        raise
    if args.topology == "pd":
        routing = ["--prefill-instances", f"127.0.0.1:{ports[0]}", "--decode-instances", f"127.0.0.1:{ports[1]}",
                   "--prefill-threshold", "1"]
    else:
        routing = ["--decode-instances", ",".join(f"127.0.0.1:{p}" for p in ports)]
    router = start(args.tessera, ["--role", "router", *routing, "--router-poll-interval", "0.2"], workdir, "router")
    servers = insts + [router]
    try:
        wait_ready(router)
    except Exception:
        stop(servers)
        raise
    return servers, router["port"]


def bench_rate(args, port, rate, seed, workdir):
    out = os.path.join(workdir, f"bench_{rate}.json")
    cmd = [args.bench, "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions", "--model", "m",
           "--dataset", "random", "--tokenizer", args.model, "--input-len", str(args.input_len),
           "--output-len", str(args.output_len), "--num-prompts", str(args.num_prompts),
           "--request-rate", str(rate), "--seed", str(seed), "--goodput", *args.goodput.split(),
           "--timeout", "300", "--max-duration", str(args.max_duration), "--result-json", out, "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.max_duration + 400)
    if r.returncode != 0:
        raise RuntimeError(f"tessera-bench failed ({r.returncode}): {r.stderr[-2000:]}")
    with open(out) as f:
        doc = json.load(f)
    run = doc["runs"][0]
    run.pop("requests", None)
    return {"rate": rate, "goodput": run["goodput"], "good_requests": run["good_requests"],
            "completed": run["completed"], "failed": run["failed"], "num_requests": run["num_requests"],
            "request_throughput": run["request_throughput"], "output_throughput": run["output_throughput"],
            "ttft_ms": {k: run["ttft_ms"][k] for k in ("median", "p90", "p99", "mean")},
            "tpot_ms": {k: run["tpot_ms"][k] for k in ("median", "p90", "p99", "mean")},
            "e2el_ms": {k: run["e2el_ms"][k] for k in ("median", "p90", "mean")},
            "duration_s": run["duration_s"], "bench": run}


def measure(args):
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"pd-goodput-{args.topology}-")
    started = time.time()
    servers, port = topology(args, workdir)
    points = []
    try:
        for k, rate in enumerate(args.rates):
            p = bench_rate(args, port, rate, args.seed + 1000 * k, workdir)
            points.append(p)
            print(f"{args.topology} rate {rate:g}/s: goodput {p['goodput']:.3f}/s ({p['good_requests']}/"
                  f"{p['num_requests']} in SLO), throughput {p['request_throughput']:.3f}/s, TTFT p90 "
                  f"{p['ttft_ms']['p90']:.0f} ms, TPOT p90 {p['tpot_ms']['p90']:.0f} ms", flush=True)
    finally:
        stop(servers)
    doc = {"topology": args.topology, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "model": args.model, "input_len": args.input_len, "output_len": args.output_len,
           "num_prompts": args.num_prompts, "goodput_slo": args.goodput, "kv_ucx_tls": args.kv_ucx_tls,
           "threads_per_instance": 1, "wall_s": round(time.time() - started, 1), "points": points}
    path = os.path.join(args.out, f"pd_goodput_{args.topology}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote", path)


# ------------------------------------------------------------------ figure

COLORS = {"pd": "#1f77b4", "unified": "#d62728"}
LABELS = {"pd": "1 prefill + 1 decode (+ router)", "unified": "2 unified (+ router, load-aware)"}


def svg(out_dir):
    docs = {}
    for t in ("pd", "unified"):
        p = os.path.join(out_dir, f"pd_goodput_{t}.json")
        if os.path.exists(p):
            with open(p) as f:
                docs[t] = json.load(f)
    if not docs:
        sys.exit(f"no pd_goodput_*.json in {out_dir}")
    any_doc = next(iter(docs.values()))
    panels = [("goodput (req/s in SLO)", lambda p: p["goodput"], "throughput (req/s), dashed",
               lambda p: p["request_throughput"]),
              ("p90 TTFT (ms)", lambda p: p["ttft_ms"]["p90"], None, None),
              ("p90 TPOT (ms)", lambda p: p["tpot_ms"]["p90"], None, None)]
    W, H, pad, pw, ph = 1080, 400, 60, 290, 250
    xmax = max(p["rate"] for d in docs.values() for p in d["points"]) * 1.1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
             f'font-size="12"><rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">Prefill/decode disaggregation vs '
             f'unified: {os.path.basename(any_doc["model"].rstrip("/"))}, {any_doc["input_len"]} in / '
             f'{any_doc["output_len"]} out tokens, SLO {any_doc["goodput_slo"]}, 1 thread per instance</text>']
    for i, (title, fy, title2, fy2) in enumerate(panels):
        x0, y0 = pad + i * (pw + pad), 50
        ys = [fy(p) for d in docs.values() for p in d["points"]]
        if fy2:
            ys += [fy2(p) for d in docs.values() for p in d["points"]]
        ymax = max(ys + [1e-9]) * 1.15

        def X(v):
            return x0 + v / xmax * pw

        def Y(v):
            return y0 + ph - v / ymax * ph
        parts.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        parts.append(f'<text x="{x0 + pw / 2}" y="{y0 - 8}" text-anchor="middle">{title}</text>')
        parts.append(f'<text x="{x0 + pw / 2}" y="{y0 + ph + 32}" text-anchor="middle">offered rate (req/s)'
                     f'</text>')
        for k in range(5):
            xv, yv = xmax * k / 4, ymax * k / 4
            parts.append(f'<text x="{X(xv):.1f}" y="{y0 + ph + 15}" text-anchor="middle">{xv:.2g}</text>')
            parts.append(f'<text x="{x0 - 5}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
            parts.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{Y(yv):.1f}" y2="{Y(yv):.1f}" stroke="#eee"/>')
        for t, d in docs.items():
            pts = sorted(d["points"], key=lambda p: p["rate"])
            for f, dash in ((fy, ""), (fy2, ' stroke-dasharray="5,4"')):
                if f is None:
                    continue
                path = " ".join(f"{X(p['rate']):.1f},{Y(f(p)):.1f}" for p in pts)
                parts.append(f'<polyline points="{path}" fill="none" stroke="{COLORS[t]}" stroke-width="2"{dash}/>')
                for p in pts:
                    parts.append(f'<circle cx="{X(p["rate"]):.1f}" cy="{Y(f(p)):.1f}" r="3" fill="{COLORS[t]}"/>')
    for k, t in enumerate(docs):
        parts.append(f'<rect x="{pad + k * 330}" y="{H - 30}" width="14" height="4" fill="{COLORS[t]}"/>'
                     f'<text x="{pad + k * 330 + 20}" y="{H - 24}">{LABELS[t]}</text>')
    parts.append("</svg>")
    path = os.path.join(out_dir, "pd_goodput.svg")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(REPO, "build/tessera"))
    ap.add_argument("--bench", default=os.path.join(REPO, "build/bench/tessera-bench"))
    ap.add_argument("--model", default="/tmp/q05")
    ap.add_argument("--topology", choices=("pd", "unified"))
    ap.add_argument("--rates", default="0.1,0.2,0.3", help="offered request rates (req/s), comma-separated")
    ap.add_argument("--num-prompts", type=int, default=12)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--goodput", default="ttft:4000 tpot:250", help="SLOs in ms, vLLM's --goodput syntax")
    ap.add_argument("--max-duration", type=int, default=150, help="seconds per rate at most (tessera-bench)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-cache-mb", type=int, default=256)
    ap.add_argument("--kv-ucx-tls", default="tcp,self")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--out", default=os.path.join(HERE, "figures"))
    ap.add_argument("--svg-only", action="store_true")
    args = ap.parse_args()
    args.tessera, args.bench = os.path.abspath(args.tessera), os.path.abspath(args.bench)
    if not args.svg_only:
        if not args.topology:
            ap.error("--topology is required (or --svg-only)")
        args.rates = [float(r) for r in args.rates.split(",")]
        measure(args)
    svg(args.out)


if __name__ == "__main__":
    main()
