#!/usr/bin/python3
"""`tessera plan`'s chosen plan, run for real: does it meet the SLO it predicted?

    /usr/bin/python3 bench/plan_check.py --tessera build/tessera \\
        --model ~/.cache/tessera/bench-models/llama-0.5b-Q4_K_M.gguf --cost-model cost.json \\
        --slo ttft:2000,tpot:300 --budget 1 --num-prompts 40 --input-len 64 --output-len 24 \\
        --request-rate 1.0 -- --threads 2

Plans with the calibrated cost model (`tessera calibrate`; this machine's CPU, one instance per
budget unit), serves the best plan's serve.toml on this machine (one instance: --budget 1), runs
tessera-bench on the same workload with `--goodput` at the SLO, and prints the plan's predicted
goodput and SLO attainment beside the measured ones. Exit 1 when the plan predicted an attainment
of at least --attainment and the run measured less (the plan's promise broken), 0 otherwise.
Serve flags after `--` go to plan and serve alike (e.g. --threads). Needs a quiet machine.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fidelity import Server, log, run  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--bench", help="tessera-bench (default: dirname(--tessera)/bench/tessera-bench)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--cost-model", required=True, help="a calibrated cost model of this machine")
    ap.add_argument("--slo", required=True, help="as plan's, e.g. ttft:2000,tpot:300")
    ap.add_argument("--budget", type=int, default=1)
    ap.add_argument("--attainment", type=float, default=0.9)
    ap.add_argument("--num-prompts", type=int, default=40)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=24)
    ap.add_argument("--request-rate", default="1.0")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--search-max-num-seqs", default="2,8,32")
    ap.add_argument("--search-max-num-batched-tokens", default="64,512")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--result-json")
    ap.add_argument("serve_args", nargs="*", help="after --: serve flags for plan and serve")
    a = ap.parse_args()
    a.tessera = os.path.abspath(a.tessera)
    a.bench = a.bench or os.path.join(os.path.dirname(a.tessera), "bench", "tessera-bench")
    if a.budget != 1:
        ap.error("--budget: this check serves the plan on this machine as one instance (1)")
    if not os.path.exists(a.bench):
        log(f"no tessera-bench at {a.bench}")
        return 77
    workload = ["--dataset", "random", "--num-prompts", str(a.num_prompts), "--input-len", str(a.input_len),
                "--output-len", str(a.output_len), "--request-rate", a.request_rate, "--seed", str(a.seed)]
    work = tempfile.mkdtemp(prefix="tessera-plan-check-")
    t0 = time.time()
    server = None
    try:
        out = os.path.join(work, "plan")
        run([a.tessera, "--log-level", "warn", "plan", "--model", a.model, "--cost-model", a.cost_model,
             "--budget", str(a.budget), "--slo", a.slo, "--attainment", f"{a.attainment:g}",
             "--search-max-num-seqs", a.search_max_num_seqs,
             "--search-max-num-batched-tokens", a.search_max_num_batched_tokens,
             "--output-dir", out] + workload + a.serve_args, 600, "plan")
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        best = plan["best"]
        log(f"best plan: {json.dumps(best['plan'])}: predicted goodput {best['predicted_goodput_rps']:.3f} req/s, "
            f"attainment {100 * best['predicted_slo_attainment']:.0f}%")
        server = Server(a, work, "planned", ["--config", os.path.join(out, "serve.toml"), "--model", a.model,
                                             "--cost-model", a.cost_model] + a.serve_args)
        server.wait_ready(a.ready_timeout)
        url = f"http://127.0.0.1:{server.port}"
        run([a.bench, "--base-url", url, "--endpoint", "/v1/completions", "--dataset", "random", "--num-prompts",
             "4", "--input-len", "32", "--output-len", "4", "--no-progress", "--seed", "999"], 600, "warm-up")
        result = os.path.join(work, "bench.json")
        goodput = a.slo.split(",")
        run([a.bench, "--base-url", url, "--endpoint", "/v1/completions", "--no-progress", "--no-per-request",
             "--result-json", result, "--goodput", *goodput] + workload, 3600, "tessera-bench")
        with open(result) as f:
            measured = json.load(f)["runs"][0]
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    attained = measured["good_requests"] / max(measured["completed"] + measured["failed"], 1)
    doc = {"plan": best["plan"], "slo": a.slo, "predicted_goodput_rps": best["predicted_goodput_rps"],
           "predicted_slo_attainment": best["predicted_slo_attainment"], "measured_goodput_rps": measured["goodput"],
           "measured_slo_attainment": attained, "measured_ttft_ms": measured["ttft_ms"],
           "measured_tpot_ms": measured["tpot_ms"], "wall_s": time.time() - t0}
    print(json.dumps(doc, indent=2))
    if a.result_json:
        with open(a.result_json, "w") as f:
            json.dump(doc, f, indent=2)
    if best["predicted_slo_attainment"] >= a.attainment and attained < a.attainment:
        log(f"the plan predicted {100 * best['predicted_slo_attainment']:.0f}% attainment, the run measured "
            f"{100 * attained:.0f}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
