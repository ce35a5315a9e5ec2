#!/usr/bin/python3
"""End-to-end test of `tessera plan` and `tessera calibrate --hardware` (runtime/sim/plan.h,
runtime/sim/hardware.h; docs/architecture.md "Twin").

    /usr/bin/python3 tests/e2e/test_plan.py --tessera build/tessera

A Llama-3-8B config.json (no weights: the planner reads the shape only) on 4 H100s, derived
step times: the derived cost-model file (marked derived; simulate reads it), a plan whose
serve.toml `tessera serve --check-config=flags` accepts and whose kustomize overlay
`kubectl kustomize` builds (SKIP, exit 77, without kubectl), plan.json's best plan, runner-ups
and curves; a calibrated-file plan on CPU instances; refusals naming the flag. A few seconds.
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
from serve_util import Results  # noqa: E402

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def tessera_run(tessera, env, *args, expect_rc=0):
    p = subprocess.run([tessera, "--log-level", "warn", *args], capture_output=True, text=True, timeout=120,
                       env=env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if expect_rc == 0:
        assert p.returncode == 0, f"rc {p.returncode}: {p.stderr[-2000:]}"
    else:
        assert p.returncode != 0, "expected a failure, rc 0"
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    start = time.time()
    tessera = os.path.abspath(args.tessera)
    res = Results()
    with tempfile.TemporaryDirectory(prefix="tessera-plan-e2e-") as work:
        env = dict(os.environ, TESSERA_HOME=work)
        model = os.path.join(work, "llama8b")
        os.makedirs(model)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(LLAMA_8B, f)
        out = os.path.join(work, "plan")
        workload = ["--dataset", "random", "--num-prompts", "300", "--input-len", "512", "--output-len", "64",
                    "--request-rate", "40", "--seed", "1"]

        def derived_file():
            path = os.path.join(work, "h100.json")
            tessera_run(tessera, env, "calibrate", "--model", model, "--hardware", "h100-sxm", "--out", path)
            doc = json.load(open(path))
            assert doc["model"] == "linear" and doc["version"] == 1, doc
            assert doc["calibration"]["source"] == "derived", doc["calibration"]
            assert doc["calibration"]["hardware"]["name"] == "h100-sxm"
            # ~16 GB of BF16 weights at 3.35 TB/s: ~4.8 ms a step.
            assert 4.5 < doc["base_ms"] < 5.1, doc["base_ms"]
            assert doc["per_decode_context_ms"] > 0 and doc["per_prefill_token_ms"] > 0
            p = tessera_run(tessera, env, "simulate", "--model", model, "--cost-model", path, "--num-kv-blocks",
                            "4096", "--num-prompts", "50", "--request-rate", "10")
            assert json.loads(p.stdout)["runs"][0]["completed"] == 50
            # A custom device: half the bandwidth, twice the weight-read time.
            p = tessera_run(tessera, env, "calibrate", "--model", model, "--hardware-bw-gbs", "1675",
                            "--hardware-tflops", "989")
            assert abs(json.loads(p.stdout)["base_ms"] - 2 * doc["base_ms"]) < 1e-6 * doc["base_ms"]
            p = tessera_run(tessera, env, "calibrate", "--model", model, "--hardware", "h100-sxm", "-tp", "2")
            assert json.loads(p.stdout)["calibration"]["tensor_parallel_size"] == 2

        def plan_gpu():
            tessera_run(tessera, env, "plan", "--model", model, "--hardware", "h100-sxm", "--budget", "4",
                        "--slo", "ttft:500,tpot:50", *workload, "--search-max-num-seqs", "16,128",
                        "--search-max-num-batched-tokens", "2048", "--search-max-step-ms", "0",
                        "--top", "2", "--rate-factors", "0.5,1,2,4", "--output-dir", out)
            plan = json.load(open(os.path.join(out, "plan.json")))
            assert "predict" in plan["prediction"] and "derived" in plan["prediction"], plan["prediction"]
            best = plan["best"]
            assert best["plan"]["tensor_parallel_size"] * best["plan"]["data_parallel_size"] == 4, best
            # TP 1, 2 and 4 (32 heads, 8 KV heads), two batch sizes: 6 candidates, best first.
            cands = plan["candidates"]
            assert len(cands) == 6, len(cands)
            assert {c["plan"]["tensor_parallel_size"] for c in cands} == {1, 2, 4}
            goodputs = [c["predicted_goodput_rps"] for c in cands]
            assert goodputs == sorted(goodputs, reverse=True) and goodputs[0] == best["predicted_goodput_rps"]
            assert len(plan["runner_ups"]) == 1
            curve = best["predicted_curve"]
            assert [round(p["request_rate_rps"] / curve[1]["request_rate_rps"], 6) for p in curve] == [0.5, 1, 2, 4]
            assert best["predicted_max_rate_rps"] in [0] + [p["request_rate_rps"] for p in curve]
            assert sorted(plan["cost_models_by_tp"]) == ["1", "2", "4"]
            assert plan["cost_models_by_tp"]["2"]["calibration"]["source"] == "derived"
            toml = open(os.path.join(out, "serve.toml")).read()
            assert f"max-num-seqs = {best['plan']['max_num_seqs']}" in toml, toml
            assert f"tensor-parallel-size = {best['plan']['tensor_parallel_size']}" in toml, toml
            assert 'model = "/models/model"' in toml  # the base file's other settings are kept
            p = tessera_run(tessera, env, "serve", "--config", os.path.join(out, "serve.toml"), "--check-config=flags")
            assert "OK" in p.stdout, p.stdout

        res.run("calibrate --hardware writes a derived cost model", derived_file)
        res.run("plan on 4 x h100-sxm: serve.toml, plan.json", plan_gpu)

        def kustomize():
            p = subprocess.run(["kubectl", "kustomize", os.path.join(out, "k8s")], capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0, p.stderr[-2000:]
            plan = json.load(open(os.path.join(out, "plan.json")))["best"]["plan"]
            assert f"replicas: {plan['data_parallel_size']}" in p.stdout, p.stdout[:3000]
            assert f"nvidia.com/gpu: {plan['tensor_parallel_size']}" in p.stdout
            assert f"max-num-seqs = {plan['max_num_seqs']}" in p.stdout  # the ConfigMap carries the plan
            assert "--device" in p.stdout and "cuda" in p.stdout  # built over overlays/gpu

        if shutil.which("kubectl"):
            res.run("the overlay builds with kubectl kustomize", kustomize)
        else:
            res.skip("the overlay builds with kubectl kustomize", "kubectl is not installed")

        def plan_cpu():
            cost = os.path.join(work, "cpu.json")
            with open(cost, "w") as f:
                json.dump({"model": "linear", "version": 1, "base_ms": 5, "per_prefill_token_ms": 0.5,
                           "per_decode_seq_ms": 2, "calibration": {"source": "hand-written for a test"}}, f)
            cpu_out = os.path.join(work, "plan-cpu")
            tessera_run(tessera, env, "plan", "--cost-model", cost, "--num-kv-blocks", "64", "--budget", "2",
                        "--slo", "ttft:2000", "--num-prompts", "60", "--input-len", "32", "--output-len", "8",
                        "--request-rate", "4", "--search-max-num-seqs", "4,8", "--output-dir", cpu_out)
            plan = json.load(open(os.path.join(cpu_out, "plan.json")))
            assert plan["best"]["plan"]["data_parallel_size"] == 2 and plan["best"]["plan"]["tensor_parallel_size"] == 1
            assert plan["cost_models_by_tp"]["1"]["calibration"]["source"] == "hand-written for a test"
            assert "calibrated" in plan["prediction"]
            patch = open(os.path.join(cpu_out, "k8s", "plan.yaml")).read()
            assert "replicas: 2" in patch and "nvidia.com/gpu" not in patch, patch
            assert "overlays/cpu" in open(os.path.join(cpu_out, "k8s", "kustomization.yaml")).read()
            # --trace: a BurstGPT CSV, its 40 rows one every 0.5 s (2 req/s), as the trace's arrivals.
            csv = os.path.join(work, "trace.csv")
            with open(csv, "w") as f:
                f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
                for i in range(40):
                    f.write(f"{i * 0.5},ChatGPT,{20 + i},{5 + i % 7},{25 + i + i % 7},Conversation log\n")
            p = tessera_run(tessera, env, "plan", "--cost-model", cost, "--num-kv-blocks", "64", "--budget", "2",
                            "--slo", "ttft:2000", "--trace", csv, "--search-max-num-seqs", "4",
                            "--rate-factors", "1,2")
            plan = json.loads(p.stdout)
            assert plan["trace"]["dataset"] == "burstgpt" and plan["trace"]["num_prompts"] == 40, plan["trace"]
            assert abs(plan["best"]["predicted_curve"][0]["request_rate_rps"] - 2.0) < 1e-9, plan["best"]

        res.run("plan with a calibrated file: CPU instances", plan_cpu)

        def plan_pd():
            cost = os.path.join(work, "cpu.json")
            pd_out = os.path.join(work, "plan-pd")
            tessera_run(tessera, env, "plan", "--cost-model", cost, "--model", model, "--num-kv-blocks", "256",
                        "--budget", "3", "--search-pd", "--slo", "ttft:3000", "--num-prompts", "40",
                        "--input-len", "200", "--output-len", "8", "--request-rate", "2",
                        "--search-max-num-seqs", "8", "--output-dir", pd_out)
            plan = json.load(open(os.path.join(pd_out, "plan.json")))
            splits = sorted({(c["plan"]["prefill_instances"], c["plan"]["decode_instances"])
                             for c in plan["candidates"]})
            assert splits == [(0, 0), (1, 2), (2, 1)], splits
            # Llama-3-8B's f32 KV (the CPU pool): 2 * 32 layers * 8 heads * 128 * 4 bytes per token.
            assert plan["kv_transfer"]["kv_bytes_per_token"] == 262144, plan["kv_transfer"]
            best = plan["best"]["plan"]
            base = "overlays/disaggregated" if best["prefill_instances"] else "overlays/cpu"
            assert base in open(os.path.join(pd_out, "k8s", "kustomization.yaml")).read()
            if shutil.which("kubectl"):
                p = subprocess.run(["kubectl", "kustomize", os.path.join(pd_out, "k8s")], capture_output=True,
                                   text=True, timeout=60)
                assert p.returncode == 0, p.stderr[-2000:]

        res.run("plan --search-pd: prefill:decode splits on the cluster twin", plan_pd)

        def refusals():
            base = ["plan", "--model", model, "--budget", "2", *workload]
            for flags, words in [
                (["--hardware", "h100", "--slo", "ttft:500"], "h100-sxm"),
                (["--hardware", "h100-sxm", "--slo", "ttfb:500"], "ttfb"),
                (["--slo", "ttft:500"], "--hardware"),
                (["--hardware", "h100-sxm", "--slo", "ttft:500", "--cost-model", os.path.join(work, "h100.json")],
                 "one of the two"),
                (["--hardware", "h100-sxm", "--slo", "ttft:500", "-tp", "2"], "--budget"),
                (["--hardware", "l40s", "--hardware-memory-gb", "4", "--slo", "ttft:500"], "does not fit"),
            ]:
                p = tessera_run(tessera, env, *base, *flags, expect_rc=1)
                assert words in p.stderr, (flags, p.stderr[-800:])

        res.run("refusals name the flag", refusals)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
