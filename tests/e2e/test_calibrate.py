#!/usr/bin/python3
"""End-to-end test of `tessera calibrate`, serve's step-time metrics and the twin's fidelity (docs/architecture.md, "Twin").

    /usr/bin/python3 tests/e2e/test_calibrate.py --tessera build/tessera

On a tiny synthetic model: calibrate writes a valid versioned cost model
(coefficients >= 0, the per-token prefill and per-decode costs positive, a
good fit, the model's shape and the machine recorded); calibrate refuses
flags it cannot honour, and serve refuses a bad cost-model file, naming the
field. Then bench/fidelity.py's smallest case (one workload, one load, the
tiny model): `serve --cost-model` under tessera-bench, whose /metrics must
hold tessera:step_time_seconds and tessera:step_time_prediction_error
observations, and the twin's TTFT/TPOT p50/p90 must be within FIDELITY_BOUND
of the measured run; the same row in the PD layout (prefill + decode behind the
router, every prompt's KV pulled, the twin on the same layout) within the
same bound.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, e2e_args, skip_test, synth_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tiny model's steps take 1-5 milliseconds, so the parts of a request the
# twin does not model (HTTP, tokenizing, SSE, the client's clock) weigh about
# as much as the steps, and on a shared 2-core machine the calibration and the
# measured run see different loads (this case measured 51% here under a load
# of 5). The 15% target is the bench model's table (bench/fidelity.py); this
# bound catches a broken pipeline: a cost model in the wrong unit, steps not
# counted, or calibrating at another temperature than the workload samples
# (sampling at temperature 1 made the twin's TPOT twice the measured one:
# 174%).
FIDELITY_BOUND = 100  # percent, MAPE over TTFT and TPOT p50/p90
# PD adds the KV pull, which the twin prices as latency + bytes / bandwidth;
# simulate's default latency (24 ms) is the bench model's over UCX tcp, while
# the tiny model's pulls on loopback took 5-6 ms in all (15 ms under a load of
# 8), so the PD row gives the twin PD_PULL_MS.
PD_PULL_MS = 5


def main():
    args = e2e_args(__doc__)
    start = time.time()
    tessera = args.tessera
    bench = os.path.join(os.path.dirname(tessera), "bench", "tessera-bench")
    if not os.path.exists(bench):
        return skip_test(f"no tessera-bench at {bench} (build the tessera-bench target)")
    res = Results()
    with tempfile.TemporaryDirectory(prefix="tessera-calibrate-e2e-") as work:
        env = dict(os.environ, TESSERA_HOME=os.path.join(work, "home"))
        model = synth_model(tessera, work)
        cost = os.path.join(work, "cost.json")
        engine = ["--max-num-seqs", "16", "--kv-cache-mb", "64"]
        t0 = time.time()
        cal = subprocess.run([tessera, "--log-level", "warn", "calibrate", "--model", model, "--out", cost,
                              "--repeats", "2"] + engine, capture_output=True, text=True, timeout=120, env=env)
        cal_s = time.time() - t0

        def calibrate_writes_a_sane_model():
            assert cal.returncode == 0, cal.stderr[-3000:]
            assert "composition" in cal.stderr and "R^2" in cal.stderr, cal.stderr[-1000:]  # progress, fit
            with open(cost) as f:
                doc = json.load(f)
            assert doc["model"] == "linear" and doc["version"] == 1, doc
            keys = ("base_ms", "per_prefill_token_ms", "per_prefill_attention_ms", "per_decode_seq_ms",
                    "per_decode_token_ms", "per_decode_context_ms")
            for k in keys:
                assert doc[k] >= 0, (k, doc[k])
            assert doc["per_prefill_token_ms"] > 0 and doc["base_ms"] + doc["per_decode_seq_ms"] > 0, doc
            c = doc["calibration"]
            with open(os.path.join(model, "config.json")) as f:
                config = json.load(f)
            assert c["model"]["num_layers"] == config["num_hidden_layers"], c["model"]
            assert c["model"]["hidden_size"] == config["hidden_size"], c["model"]
            assert c["machine"]["device"] == "cpu" and c["machine"]["hardware_threads"] > 0, c["machine"]
            assert c["tool"].startswith("tessera calibrate ") and c["date"].endswith("Z"), c
            fit = c["fit"]
            assert fit["undetermined"] == ["per_decode_token_ms"], fit["undetermined"]  # no drafts
            assert len(fit["points"]) >= 12 and fit["repeats"] == 2, len(fit["points"])
            assert all(p["samples"] >= 2 for p in fit["points"]), fit["points"]
            assert fit["r2"] > 0.8, fit["r2"]
            assert fit["wall_s"] < 20 and cal_s < 30, (fit["wall_s"], cal_s)

        def refusals_name_the_flag():
            runs = {"--cost-model": ["calibrate", "--model", model, "--cost-model", cost],
                    "--speculative-config": ["calibrate", "--model", model, "--speculative-config",
                                             '{"method": "ngram", "num_speculative_tokens": 2}']}
            bad = os.path.join(work, "bad.json")
            with open(bad, "w") as f:
                json.dump({"model": "linear", "version": 1, "per_decode_seq_ms": -1}, f)
            runs["per_decode_seq_ms"] = ["serve", "--model", model, "--port", "0", "--cost-model", bad]
            for want, cmd in runs.items():
                p = subprocess.run([tessera] + cmd, capture_output=True, text=True, timeout=60, env=env)
                assert p.returncode != 0 and want in p.stderr, (want, p.returncode, p.stderr[-1000:])

        res.run("calibrate writes a sane cost model", calibrate_writes_a_sane_model)
        res.run("refusals name the flag or field", refusals_name_the_flag)
        if not os.path.exists(cost):
            return res.summary(start)

        result = os.path.join(work, "fidelity.json")
        fid = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "fidelity.py"), "--tessera", tessera,
                              "--model", model, "--cost-model", cost, "--layout", "unified,pd", "--workloads", "random",
                              "--kv-transfer-latency-ms", str(PD_PULL_MS), "--rates", "8",
                              "--num-prompts", "24", "--input-len", "64", "--output-len", "16",
                              "--result-json", result, "--", *engine],
                             capture_output=True, text=True, timeout=300, env=env)

        def server_exports_step_times_and_prediction_error():
            assert fid.returncode == 0, fid.stderr[-3000:]
            with open(result) as f:
                doc = json.load(f)
            for layout in ("unified", "pd"):
                fig = doc["layouts"][layout]
                steps, errors = fig["server_step_time"], fig["server_step_prediction_error"]
                assert steps["count"] > 24 and steps["sum"] > 0, (layout, steps)
                assert errors["count"] == steps["count"], (layout, errors["count"], steps["count"])
                assert errors["buckets"]["+Inf"] == errors["count"], (layout, errors)
            # Every prompt went through the prefill instance (the warm-up's 4 too) and had its KV pulled.
            assert doc["layouts"]["pd"]["kv_transfer_seconds"]["count"] >= 24 + 4, doc["layouts"]["pd"]

        def twin_within_the_bound(layout):
            with open(result) as f:
                row = [r for r in json.load(f)["rows"] if r["layout"] == layout][0]
            assert row["measured"]["completed"] == 24 and row["twin"]["completed"] == 24, row
            assert row["mape"] is not None and row["mape"] < FIDELITY_BOUND, (row, fid.stdout)
            if layout == "pd":
                twin = row["twin_layout"] or {}
                assert twin.get("layout") == "pd" and twin["kv_transfer"]["transfers"] == 24, twin
            print(fid.stdout, end="", flush=True)

        res.run("serve exports step times and the prediction error", server_exports_step_times_and_prediction_error)
        res.run(f"twin within {FIDELITY_BOUND}% of the measured run", lambda: twin_within_the_bound("unified"))
        res.run(f"PD: twin within {FIDELITY_BOUND}% of the measured run, every prompt's KV pulled",
                lambda: twin_within_the_bound("pd"))
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
