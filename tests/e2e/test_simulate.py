#!/usr/bin/python3
"""End-to-end test of `tessera simulate` (the twin: runtime/sim/, docs/architecture.md "Twin").

    /usr/bin/python3 tests/e2e/test_simulate.py --tessera build/tessera

Runs the command on small workloads and checks its JSON: tessera-bench's metric
names, every request completed with its output length (ignore_eos), the twin's
figures (preemptions under a small KV pool, prefix-cache hits on shared
prefixes), the same JSON for the same seed, a BurstGPT CSV's arrivals, a cost
model file's times, the SVG chart, serve's --config file, the KV pool sized from a model's
config as serve sizes it, the multi-instance layout behind the router's kv-aware
policy, the PD layout's transfer times (from a router's address lists), and
refusals naming the flag. The runs go in
parallel (each is mostly process start-up).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results  # noqa: E402


def simulate(tessera, env, *flags, expect_rc=0):
    p = subprocess.run([tessera, "--log-level", "warn", "simulate", *flags], capture_output=True, text=True,
                       timeout=120, env=env)
    if expect_rc == 0:
        assert p.returncode == 0, f"rc {p.returncode}: {p.stderr[-2000:]}"
        return json.loads(p.stdout), p.stderr
    assert p.returncode != 0, "expected a failure, rc 0"
    return None, p.stderr


def deterministic(doc):
    """The JSON without the wall-clock figures."""
    d = json.loads(json.dumps(doc))
    for run in d["runs"]:
        run["twin"].pop("wall_s")
        run["twin"].pop("simulated_requests_per_wall_s")
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    start = time.time()
    tessera = os.path.abspath(args.tessera)
    res = Results()
    with tempfile.TemporaryDirectory(prefix="tessera-simulate-e2e-") as work:
        env = dict(os.environ, TESSERA_HOME=work)  # no built-in model there: --num-kv-blocks decides
        base = ["--num-kv-blocks", "64", "--max-num-seqs", "16", "--max-num-batched-tokens", "256",
                "--dataset", "shared-prefix", "--num-prompts", "2000", "--input-len", "64", "--output-len", "16",
                "--prefix-len", "64", "--num-prefix-groups", "4", "--request-rate", "8", "--seed", "3"]
        csv = os.path.join(work, "trace.csv")
        with open(csv, "w") as f:
            f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
            for i in range(50):
                f.write(f"{i * 2.0},ChatGPT,{20 + i},{5 + i % 7},{25 + i + i % 7},Conversation log\n")
        cost = os.path.join(work, "cost.json")
        with open(cost, "w") as f:
            json.dump({"model": "linear", "base_ms": 10}, f)  # every step 10 ms
        toml = os.path.join(work, "serve.toml")
        with open(toml, "w") as f:
            f.write('port = 8123\nmax-num-seqs = 3\nnum-kv-blocks = 40\nmax-step-ms = 50\n')
        typo = os.path.join(work, "typo.toml")
        with open(typo, "w") as f:
            f.write("max-num-sqs = 3\n")
        model = os.path.join(work, "model")  # a config alone: the twin reads no weights
        os.makedirs(model)
        layers, kv_heads, head_dim = 3, 2, 16
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                       "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": kv_heads,
                       "head_dim": head_dim, "intermediate_size": 128, "vocab_size": 1000,
                       "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}, f)
        runs = {
            "shared": (base, 0),
            "shared again": (base, 0),
            "trace": (["--num-kv-blocks", "256", "--dataset", "burstgpt", "--dataset-path", csv, "--per-request",
                       "--cost-model", cost, "--svg", os.path.join(work, "trace.svg")], 0),
            "config": (["--config", toml, "--num-prompts", "20"], 0),
            "model": (["--model", model, "--kv-cache-mb", "8", "--num-prompts", "10"], 0),
            "instances": (["--num-kv-blocks", "64", "--max-num-seqs", "16", "--max-num-batched-tokens", "256",
                           "--dataset", "shared-prefix", "--num-prompts", "300", "--input-len", "64",
                           "--output-len", "16", "--prefix-len", "64", "--num-prefix-groups", "4",
                           "--request-rate", "8", "--seed", "3", "--instances", "3", "--routing-logic", "kv-aware"], 0),
            "pd": (["--model", model, "--kv-cache-mb", "8", "--dataset", "random", "--num-prompts", "5",
                    "--input-len", "200", "--range-ratio", "0.2", "--output-len", "4", "--request-rate", "1",
                    "--burstiness", "1e9", "--cost-model", cost, "--per-request",
                    "--prefill-instances", "127.0.0.1:8001", "--decode-instances", "127.0.0.1:8002,127.0.0.1:8003",
                    "--kv-transfer-bandwidth", "0.5", "--kv-transfer-latency-ms", "3"], 0),
            "pd without model": (["--num-kv-blocks", "64", "--prefill-instances", "1", "--decode-instances", "1"], 1),
            "speculative": (["--num-kv-blocks", "8", "--speculative-config",
                             '{"method": "ngram", "num_speculative_tokens": 2}'], 1),
            "no pool": (["--num-prompts", "4"], 1),
            "typo": (["--config", typo], 1),
        }
        # Each run is mostly process start-up: all at once.
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            futures = {k: pool.submit(simulate, tessera, env, *flags, expect_rc=rc) for k, (flags, rc) in runs.items()}
        out = {}

        def result(name):
            if name not in out:
                out[name] = futures[name].result()
            return out[name]

        def shared_prefix():
            doc, log = result("shared")
            assert doc["tool"] == "tessera simulate"
            run = doc["runs"][0]
            for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
                for stat in ("mean", "median", "p90", "p99"):
                    assert isinstance(run[key][stat], (int, float)), (key, stat)
            assert run["completed"] == 2000 and run["failed"] == 0, run
            assert run["total_output_tokens"] == 2000 * 16, run["total_output_tokens"]
            assert run["output_throughput"] > 0 and run["request_throughput"] > 0
            twin = run["twin"]
            assert twin["preemptions"] > 0, twin  # 64 blocks of 16 tokens for 16 sequences of 144
            assert twin["prefix_cache_hits"] > 0, twin
            assert 0 < twin["kv_usage_mean"] <= twin["kv_usage_max"] <= 1, twin
            assert twin["wall_s"] < 10, twin["wall_s"]
            assert doc["config"]["num_kv_blocks"] == 64 and doc["config"]["max_num_seqs"] == 16
            assert "Mean TTFT (ms)" in log, log[-500:]  # tessera-bench's summary table

        def same_seed_same_json():
            assert deterministic(result("shared again")[0]) == deterministic(result("shared")[0])

        def burstgpt_trace_and_cost_model():
            run = result("trace")[0]["runs"][0]
            assert run["completed"] == 50 and run["request_rate"] == "trace"
            sends = [r["send_time_s"] for r in run["requests"]]
            assert sends == [i * 2.0 for i in range(50)], sends[:5]
            assert [r["output_tokens"] for r in run["requests"]] == [5 + i % 7 for i in range(50)]
            assert run["duration_s"] >= 98
            svg = ET.parse(os.path.join(work, "trace.svg")).getroot()
            assert svg.tag.endswith("svg"), svg.tag
            # Alone on the engine, 10 ms a step: the prompt and first token in one step, then one a step.
            assert abs(run["ttft_ms"]["max"] - 10) < 1e-6 and abs(run["tpot_ms"]["max"] - 10) < 1e-6, run["ttft_ms"]

        def serve_config_file():
            c = result("config")[0]["config"]
            assert c["max_num_seqs"] == 3 and c["num_kv_blocks"] == 40 and c["max_step_ms"] == 50, c

        def model_config_sizes_the_pool():
            c = result("model")[0]["config"]
            per_token = 2 * layers * kv_heads * head_dim * 4  # f32 K and V on the CPU
            assert c["num_kv_blocks"] == (8 << 20) // (per_token * 16), (c, per_token)
            assert c["max_model_len"] == 4096, c

        def instances_behind_the_router():
            run = result("instances")[0]["runs"][0]
            assert run["completed"] == 300 and run["failed"] == 0, run
            twin = run["twin"]
            assert twin["layout"] == {"layout": "unified", "instances": 3, "routing_logic": "kv-aware",
                                      "router_poll_interval_s": 0.5}, twin["layout"]
            per = [i["requests"] for i in twin["instances"]]
            assert sum(per) == 300 and min(per) > 0, per  # every instance served some
            assert twin["router_hit_tokens"] > 0 and twin["prefix_cache_hits"] > 0, twin

        def pd_transfer_times():
            run = result("pd")[0]["runs"][0]
            twin = run["twin"]
            per_token = 2 * layers * kv_heads * head_dim * 4
            assert twin["layout"]["prefill_instances"] == 1 and twin["layout"]["decode_instances"] == 2, twin
            assert twin["layout"]["kv_transfer"]["transfers"] == 5, twin["layout"]
            for r in run["requests"]:
                # Alone, 10 ms a step: the prefill's step, the pull of every full block but the
                # last token's, then the decode's step for the rest of the prompt and its first token.
                pulled = (r["prompt_tokens"] - 1) // 16 * 16 * per_token
                assert r["kv_transfer"]["bytes"] == pulled, (r, pulled)
                want = 10 + 3 + pulled / 0.5e6 + 10
                assert abs(r["ttft_ms"] - want) < 1e-3, (r["ttft_ms"], want)
                assert r["prefill_instance"] == 0 and r["output_tokens"] == r["max_tokens"], r

        def refusals_name_the_flag():
            for name, want in (("speculative", "--speculative-config"), ("no pool", "--num-kv-blocks"),
                               ("pd without model", "--model"),
                               ("typo", "max-num-sqs")):
                err = result(name)[1]
                assert want in err, (name, err[-500:])

        for name, fn in (("shared-prefix run", shared_prefix), ("same seed, same JSON", same_seed_same_json),
                         ("BurstGPT trace, cost model file", burstgpt_trace_and_cost_model),
                         ("serve's --config file", serve_config_file),
                         ("model config sizes the KV pool", model_config_sizes_the_pool),
                         ("instances behind the kv-aware router", instances_behind_the_router),
                         ("PD: transfer times", pd_transfer_times),
                         ("refusals name the flag", refusals_name_the_flag)):
            res.run(name, fn)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
