#!/usr/bin/python3
"""End-to-end test of tessera-bench (bench/tessera_bench/) against `tessera serve`.

    /usr/bin/python3 tests/e2e/test_tessera_bench.py --tessera build/tessera

Synthesises a tiny qwen3 checkpoint, serves it on 127.0.0.1, and runs
tessera-bench (dirname(--tessera)/bench/tessera-bench) for: fixed concurrency
on /v1/completions, a two-rate sweep on /v1/chat/completions with an SVG, a
BurstGPT CSV replay with time scaling, a ShareGPT file, the shared-prefix
dataset, --sweep, --max-duration cancellation, API keys, and bad flags. The checks use the
server's own view where they can (usage in the JSON comes from the server;
prefix-cache hits from /metrics) and Python's XML parser for the SVG.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, get_metrics, request, skip_test, synth_model  # noqa: E402

BENCH_TIMEOUT = 120  # seconds per tessera-bench invocation


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    start = time.time()
    tessera = os.path.abspath(args.tessera)
    bench = os.path.join(os.path.dirname(tessera), "bench", "tessera-bench")
    if not os.path.exists(bench):
        return skip_test(f"{bench} not built (TESSERA_BUILD_BENCH=OFF)")
    res = Results()
    with tempfile.TemporaryDirectory(prefix="tessera-bench-e2e-") as work:
        model = synth_model(tessera, work)
        srv = Server(tessera, ["--model", model, "--threads", "2"], work, "main")
        try:
            res.server = srv
            if not res.run("ready", srv.wait_ready):
                return res.summary(start)
            base = f"http://127.0.0.1:{srv.port}"

            def run_bench(name, *flags, expect_rc=0):
                out_json = os.path.join(work, name + ".json")
                target = [] if "--base-url" in flags else ["--base-url", base]
                cmd = [bench] + target + ["--no-progress", "--result-json", out_json] + list(flags)
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT)
                if expect_rc == 0:
                    assert p.returncode == 0, f"rc {p.returncode}\nstdout:\n{p.stdout[-2000:]}\nstderr:\n{p.stderr[-2000:]}"
                    with open(out_json) as f:
                        return json.load(f), p
                assert p.returncode != 0, f"expected failure, rc 0\nstdout:\n{p.stdout[-1000:]}"
                return None, p

            def check_run(run, n, output_len=None):
                """Consistency of one run's summary: counts, tokens, ordering."""
                assert run["completed"] == n, f"completed {run['completed']} != {n}; errors {run['errors']}"
                assert run["failed"] == 0 and run["cancelled"] == 0 and run["not_sent"] == 0, run["errors"]
                assert run["usage_reported"] is True
                reqs = run["requests"]
                assert len(reqs) == n
                assert run["total_output_tokens"] == sum(r["output_tokens"] for r in reqs)
                assert run["total_input_tokens"] == sum(r["prompt_tokens"] for r in reqs)
                if output_len is not None:  # ignore_eos: exactly max_tokens each
                    assert run["total_output_tokens"] == n * output_len, (run["total_output_tokens"], n, output_len)
                for r in reqs:
                    assert r["ok"] and r["output_tokens"] == r["max_tokens"], r
                    assert 0 <= r["ttft_ms"] <= r["e2el_ms"], r
                # ITL samples come from content chunks: a short output may arrive as one
                # chunk (a token with no text yet, or two tokens in one write), so its
                # count is checked against the per-request lists, not required > 0.
                assert run["itl_ms"]["count"] == sum(len(r["itl_ms"]) for r in reqs), run["itl_ms"]
                assert all(len(r["itl_ms"]) <= r["output_tokens"] - 1 for r in reqs), reqs
                for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
                    s = run[metric]
                    if metric == "itl_ms" and s["count"] == 0:
                        continue
                    assert s["count"] > 0, (metric, s)
                    assert s["min"] <= s["median"] <= s["p90"] <= s["p99"] <= s["max"], (metric, s)
                    assert s["min"] <= s["mean"] <= s["max"], (metric, s)
                assert run["ttft_ms"]["max"] <= run["e2el_ms"]["max"]
                d = run["duration_s"]
                assert d > 0
                assert abs(run["request_throughput"] - n / d) < 1e-6 * max(1, n / d)
                assert abs(run["output_throughput"] - run["total_output_tokens"] / d) < 1e-6 * max(1, run["output_throughput"])
                if run["goodput"] is not None:
                    assert 0 <= run["goodput"] <= run["request_throughput"] + 1e-9, run

            def concurrency():
                doc, p = run_bench("conc", "--endpoint", "/v1/completions", "--num-prompts", "8", "--input-len", "16",
                                   "--output-len", "8", "--max-concurrency", "2", "--tokenizer", model,
                                   "--goodput", "ttft:60000", "tpot:60000")
                assert "Serving Benchmark Result" in p.stdout and "Mean TTFT (ms):" in p.stdout, p.stdout
                assert doc["config"]["model"] == "tiny-qwen3", doc["config"]  # learned from GET /v1/models
                run = doc["runs"][0]
                check_run(run, 8, output_len=8)
                assert 1 <= run["peak_in_flight"] <= 2, run["peak_in_flight"]
                # Exact-length prompts: the server's usage counts 16 prompt tokens each.
                lens = [r["prompt_tokens"] for r in run["requests"]]
                assert lens == [16] * 8, lens
                assert run["good_requests"] == 8 and run["goodput"] > 0, run  # generous SLOs

            def sweep():
                svg = os.path.join(work, "sweep.svg")
                doc, _ = run_bench("sweep", "--endpoint", "/v1/chat/completions", "--num-prompts", "6",
                                   "--input-len", "12", "--output-len", "4", "--request-rate", "40,inf", "--svg", svg)
                runs = doc["runs"]
                assert [r["request_rate"] for r in runs] == [40, "inf"], [r["request_rate"] for r in runs]
                for r in runs:
                    check_run(r, 6, output_len=4)
                # Rate 40: the last of 6 Poisson arrivals comes after 0 s almost surely;
                # rate inf: all are sent at once.
                assert max(q["send_time_s"] for q in runs[1]["requests"]) < 2.0
                root = ET.parse(svg).getroot()
                tags = [e.tag.split("}")[-1] for e in root.iter()]
                assert root.tag.endswith("svg"), root.tag
                assert tags.count("polyline") >= 4 and tags.count("circle") >= 8, (tags.count("polyline"), tags.count("circle"))
                texts = " ".join(e.text or "" for e in root.iter())
                assert "rate 40" in texts and "rate inf" in texts, texts[:500]

            def auto_sweep():
                doc, _ = run_bench("autosweep", "--num-prompts", "4", "--input-len", "8", "--output-len", "2",
                                   "--sweep", "2")
                runs = doc["runs"]
                assert len(runs) == 2 and runs[0]["request_rate"] == "inf", [r["request_rate"] for r in runs]
                for r in runs:
                    check_run(r, 4, output_len=2)
                # The second rate is half the saturation run's achieved request rate.
                want = runs[0]["request_throughput"] / 2
                assert abs(runs[1]["request_rate"] - want) < 1e-6 * want, (runs[1]["request_rate"], want)

            def burstgpt():
                csv = os.path.join(work, "trace.csv")
                with open(csv, "w") as f:
                    f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                            "100,ChatGPT,20,5,25,Conversation log\n"
                            "101,ChatGPT,30,0,30,Conversation log\n"   # failed request: skipped
                            "102,GPT-4,10,3,13,API log\n"
                            "103,ChatGPT,15,6,21,Conversation log\n"
                            "104,ChatGPT,8,2,10,Conversation log\n")
                doc, p = run_bench("trace", "--dataset", "burstgpt", "--dataset-path", csv, "--time-scale", "0.1")
                assert "skipped 1 rows" in p.stderr, p.stderr
                run = doc["runs"][0]
                assert run["request_rate"] == "trace"
                check_run(run, 4)
                reqs = run["requests"]
                assert [r["max_tokens"] for r in reqs] == [5, 3, 6, 2]
                # Offsets 0, 0.2, 0.3, 0.4 s after time scaling by 0.1: never early, in
                # order, and late by less than a second even on a loaded machine (unscaled
                # offsets would be 2, 3 and 4 s).
                for r, want in zip(reqs, [0.0, 0.2, 0.3, 0.4]):
                    assert want - 0.005 <= r["send_time_s"] <= want + 1.0, (r["send_time_s"], want)
                sends = [r["send_time_s"] for r in reqs]
                assert sends == sorted(sends), sends
                assert run["duration_s"] >= 0.4

            def sharegpt():
                path = os.path.join(work, "sharegpt.json")
                with open(path, "w") as f:
                    json.dump([
                        {"id": "1", "conversations": [{"from": "human", "value": "Tell me a story about a cat."},
                                                      {"from": "gpt", "value": "Once upon a time a cat sat."}]},
                        {"id": "2", "conversations": [{"from": "gpt", "value": "no question"}]},
                        {"id": "3", "conversations": [{"from": "human", "value": "What is two plus two?"},
                                                      {"from": "gpt", "value": "Four."}]},
                    ], f)
                doc, p = run_bench("sharegpt", "--dataset", "sharegpt", "--dataset-path", path, "--num-prompts", "10",
                                   "--tokenizer", model)
                assert "skipped 1 conversations" in p.stderr, p.stderr
                run = doc["runs"][0]
                check_run(run, 2)  # only two usable conversations
                assert sorted(r["max_tokens"] for r in run["requests"]) == [2, 8], run["requests"]

            def shared_prefix():
                before = get_metrics(srv.port).get("tessera:prefix_cache_hits_total", 0)
                doc, _ = run_bench("prefix", "--dataset", "shared-prefix", "--prefix-len", "48", "--num-prefix-groups",
                                   "2", "--input-len", "8", "--output-len", "3", "--num-prompts", "6",
                                   "--max-concurrency", "1", "--endpoint", "/v1/chat/completions")
                run = doc["runs"][0]
                check_run(run, 6, output_len=3)
                assert doc["config"]["prefix_len"] == 48 and doc["config"]["num_prefix_groups"] == 2
                assert all(r["prompt_tokens"] >= 56 for r in run["requests"]), [r["prompt_tokens"] for r in run["requests"]]
                after = get_metrics(srv.port).get("tessera:prefix_cache_hits_total", 0)
                assert after > before, f"no prefix-cache hits ({before} -> {after}): the prefixes are not shared"

            def max_duration():
                out_json = os.path.join(work, "maxdur.json")
                p = subprocess.run([bench, "--base-url", base, "--no-progress", "--result-json", out_json,
                                    "--num-prompts", "6", "--input-len", "4", "--output-len", "3000",
                                    "--max-concurrency", "2", "--max-duration", "0.5"],
                                   capture_output=True, text=True, timeout=BENCH_TIMEOUT)
                with open(out_json) as f:
                    run = json.load(f)["runs"][0]
                # Nothing can finish 3000 tokens in 0.5 s on a CPU: two cancelled, four never sent.
                assert run["cancelled"] + run["completed"] == 2 and run["not_sent"] == 4, run
                assert run["duration_s"] < 5, run["duration_s"]
                assert p.returncode == (0 if run["completed"] else 1), p.returncode
                status, _, _ = request(srv.port, "GET", "/health")
                assert status == 200

            def bad_flags():
                _, p = run_bench("bad1", "--base-url", "http://10.1.2.3:8000", expect_rc=1)
                assert "loopback" in p.stderr and "--allow-remote" in p.stderr, p.stderr
                _, p = run_bench("bad2", "--dataset", "nope", expect_rc=1)
                assert "--dataset" in p.stderr and "nope" in p.stderr, p.stderr
                csv = os.path.join(work, "bad.csv")
                with open(csv, "w") as f:
                    f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                            "1,m,5,5,10,x\n2,m,5,five,10,x\n")
                _, p = run_bench("bad3", "--dataset", "burstgpt", "--dataset-path", csv, expect_rc=1)
                assert "line 3" in p.stderr and "column 4" in p.stderr and "Response tokens" in p.stderr, p.stderr
                _, p = run_bench("bad4", "--goodput", "ttft:fast", expect_rc=1)
                assert "ttft" in p.stderr and "fast" in p.stderr, p.stderr
                _, p = run_bench("bad5", "--request-rate", "0", expect_rc=1)
                assert "--request-rate" in p.stderr, p.stderr

            res.run("concurrency_completions", concurrency)
            res.run("rate_sweep_chat_svg", sweep)
            res.run("auto_sweep", auto_sweep)
            res.run("burstgpt_replay", burstgpt)
            res.run("sharegpt", sharegpt)
            res.run("shared_prefix_chat", shared_prefix)
            res.run("max_duration_cancels", max_duration)
            res.run("bad_flags", bad_flags)
        finally:
            srv.stop()

        # A server requiring an API key: $OPENAI_API_KEY is sent as a Bearer token.
        keyed = Server(tessera, ["--model", model, "--threads", "2", "--api-key", "sekrit"], work, "keyed")
        try:
            res.server = keyed

            def api_key():
                keyed.wait_ready()
                cmd = [bench, "--base-url", f"http://127.0.0.1:{keyed.port}", "--no-progress", "--num-prompts", "2",
                       "--input-len", "4", "--output-len", "2"]
                env = dict(os.environ, OPENAI_API_KEY="sekrit")
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT, env=env)
                assert p.returncode == 0 and "Successful requests:                                2" in p.stdout, \
                    p.stdout + p.stderr
                env.pop("OPENAI_API_KEY")
                p = subprocess.run(cmd + ["--model", "tiny-qwen3"], capture_output=True, text=True,
                                   timeout=BENCH_TIMEOUT, env=env)
                assert p.returncode == 1 and "HTTP 401" in p.stdout, p.stdout + p.stderr
                p = subprocess.run(cmd + ["--api-key", "sekrit"], capture_output=True, text=True,
                                   timeout=BENCH_TIMEOUT, env=env)
                assert p.returncode == 0, p.stdout + p.stderr

            res.run("api_key", api_key)
        finally:
            keyed.stop()
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
