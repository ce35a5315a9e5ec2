#!/usr/bin/env python3
"""End-to-end test of mixture-of-experts models behind `tessera serve`.

For each MoE architecture (Mixtral, Qwen2-MoE with a skewed router, Qwen3-MoE
as a safetensors directory AND as its GGUF twin): the server loads a tiny
synthetic checkpoint, answers /v1/completions and /v1/chat/completions, greedy
completions are deterministic, the safetensors and GGUF copies give identical
greedy text, /metrics exports tessera:moe_expert_tokens_total per layer and
expert (counts that grow with the tokens served), and tessera-bench runs
against the server.

Run: python3 tests/e2e/test_moe_serve.py --tessera build/tessera
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import PROMPT, Results, Server, chat, complete, request  # noqa: E402

EXPERT_METRIC = "tessera:moe_expert_tokens_total"
_SERIES = re.compile(r'^tessera:moe_expert_tokens_total\{([^}]*)\}\s+(\S+)')


def expert_series(port):
    """{(layer, expert): value} of the expert-load counter."""
    status, headers, _ = request(port, "GET", "/metrics")
    assert status == 200, status
    out = {}
    for line in headers["_body"].splitlines():
        m = _SERIES.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[(labels["layer"], labels["expert"])] = float(m.group(2))
    return out


def synth(tessera, out, arch, dtype="f32", fmt="safetensors", skew=None):
    cmd = [tessera, "synth", "--arch", arch, "--size", "tiny", "--dtype", dtype, "--format", fmt, "--out", out]
    if skew:
        cmd += ["--router-skew", str(skew)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def serve_checks(res, tessera, name, model, workdir, layers, experts, bench=None):
    """Runs one server on `model`; returns its greedy completion text (or None)."""
    srv = Server(tessera, ["--model", model, "--threads", "2"], workdir, name)
    res.server = srv
    text = {}
    try:
        if not res.run(f"{name}: ready", srv.wait_ready):
            return None
        port = srv.port

        def completion():
            runs = []
            for _ in range(2):
                status, _, body = complete(port, prompt=PROMPT, max_tokens=8, temperature=0, ignore_eos=True)
                assert status == 200, (status, body)
                assert body["usage"]["completion_tokens"] == 8, body["usage"]
                runs.append(body["choices"][0]["text"])
            assert runs[0] == runs[1], f"greedy completions differ: {runs}"
            text["completion"] = runs[0]
        res.run(f"{name}: /v1/completions greedy, deterministic", completion)

        def chat_completion():
            status, _, body = chat(port, messages=[{"role": "user", "content": "Hello"}], max_tokens=6,
                                   temperature=0)
            assert status == 200, (status, body)
            msg = body["choices"][0]["message"]
            assert msg["role"] == "assistant" and isinstance(msg["content"], str), msg
            assert body["usage"]["completion_tokens"] >= 1, body["usage"]
        res.run(f"{name}: /v1/chat/completions", chat_completion)

        def metrics():
            before = expert_series(port)
            assert len(before) == layers * experts, f"{len(before)} series, want {layers} x {experts}"
            assert {k[0] for k in before} == {str(i) for i in range(layers)}, sorted(before)[:4]
            status, _, _ = complete(port, prompt=PROMPT, max_tokens=4, temperature=0, ignore_eos=True)
            assert status == 200
            # Each token run goes to top_k = 2 experts in every MoE layer: the 6
            # prompt tokens and 3 generated ones, and the 4th too when the loop
            # runs one more step before it retires the sequence. The engine loop
            # snapshots the counters at the end of a step, which may come just
            # after the response: poll briefly (bounded), then let it settle.
            low, high = (len(PROMPT) + 3) * 2, (len(PROMPT) + 4) * 2
            for _ in range(50):
                after = expert_series(port)
                grew = [sum(after[(str(layer), str(e))] - before[(str(layer), str(e))] for e in range(experts))
                        for layer in range(layers)]
                if all(g >= low for g in grew):
                    break
                time.sleep(0.05)
            time.sleep(0.3)
            after = expert_series(port)
            grew = [sum(after[(str(layer), str(e))] - before[(str(layer), str(e))] for e in range(experts))
                    for layer in range(layers)]
            assert len(set(grew)) == 1 and grew[0] in (low, high), f"per-layer growth {grew}, want {low} or {high}"
        res.run(f"{name}: /metrics {EXPERT_METRIC} per layer and expert", metrics)

        if bench and not os.path.exists(bench):
            res.skip(f"{name}: tessera-bench against the server", f"{bench} not built (TESSERA_BUILD_BENCH=OFF)")
        elif bench:
            def run_bench():
                out_json = os.path.join(workdir, f"{name}-bench.json")
                p = subprocess.run([bench, "--base-url", f"http://127.0.0.1:{port}", "--no-progress",
                                    "--result-json", out_json, "--num-prompts", "4", "--input-len", "8",
                                    "--output-len", "4", "--max-concurrency", "2"],
                                   capture_output=True, text=True, timeout=120)
                assert p.returncode == 0, p.stderr[-2000:]
                with open(out_json) as f:
                    doc = json.load(f)
                run = doc["runs"][0]
                assert run["completed"] == 4, f"completed {run['completed']}; errors {run.get('errors')}"
            res.run(f"{name}: tessera-bench against the server", run_bench)
    finally:
        srv.stop()
        res.server = None
    return text.get("completion")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    bench = os.path.join(os.path.dirname(tessera), "bench", "tessera-bench")
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-moe-")
    res = Results()
    start = time.time()
    try:
        mixtral = synth(tessera, os.path.join(workdir, "tiny-mixtral"), "mixtral")
        serve_checks(res, tessera, "mixtral", mixtral, workdir, 2, 8, bench)
        q2 = synth(tessera, os.path.join(workdir, "tiny-qwen2-moe"), "qwen2_moe", "bf16", skew=3)
        serve_checks(res, tessera, "qwen2_moe-skewed", q2, workdir, 2, 8)
        q3 = synth(tessera, os.path.join(workdir, "tiny-qwen3-moe"), "qwen3_moe", "bf16", "both")
        a = serve_checks(res, tessera, "qwen3_moe-safetensors", q3, workdir, 2, 8)
        b = serve_checks(res, tessera, "qwen3_moe-gguf", q3 + ".gguf", workdir, 2, 8)

        def twins():
            assert a is not None and a == b, f"safetensors {a!r} vs gguf {b!r}"
        res.run("qwen3_moe: safetensors and GGUF twins give identical greedy text", twins)
    except AssertionError as e:
        res.failed += 1
        print(f"FAIL setup: {e}")
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
