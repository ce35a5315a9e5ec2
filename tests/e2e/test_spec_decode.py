#!/usr/bin/python3
"""Speculative decoding end to end through `tessera serve --speculative-config` (stdlib only).

    /usr/bin/python3 tests/e2e/test_spec_decode.py --tessera build/tessera [--keep]

Synthesises a tiny random-weight qwen3 target and a smaller draft with the same
vocabulary. For an n-gram server and a draft-model server: greedy completions
(plain, streamed, n=2, logprobs, stop strings) equal those of `tessera generate`
with speculation off, seeded sampling too, and /metrics exports the
spec_decode counters (drafts verified, tokens accepted). Bad configurations
(k out of range, unknown method or field, a draft with another vocabulary)
make the server exit 1 with a message naming the field. `tessera generate
--speculative-config` gives the same tokens as without.
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
from serve_util import Results, Server, complete, get_metrics, request, stream_events  # noqa: E402

# Prompts the n-gram proposer finds matches in (a repeated phrase), and one it does not.
PROMPTS = [[9707, 11, 1879, 0, 576, 374] * 4, [151, 2000, 3000, 151, 2000] * 3, [5, 6, 7, 8, 9]]
MAX_TOKENS = 24


def synth(tessera, out, *extra):
    r = subprocess.run([tessera, "--log-level", "warn", "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32",
                        "--out", out, *extra], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    return out


def generate(tessera, model, flags):
    """`tessera generate` over PROMPTS; returns the JSON result per prompt."""
    jsonl = "".join(json.dumps(p) + "\n" for p in PROMPTS)
    r = subprocess.run([tessera, "--log-level", "warn", "generate", "--model", model, "-i", "-", "--no-progress",
                        "--max-tokens", str(MAX_TOKENS), "--ignore-eos", *flags], input=jsonl.encode(),
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]


def expect_startup_error(tessera, workdir, model, config, words):
    """The server exits 1 with every word of `words` in its log."""
    log = os.path.join(workdir, "bad.log")
    with open(log, "wb") as f:
        p = subprocess.Popen([tessera, "serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "-1",
                              "--model", model, "--speculative-config", config], stdout=f, stderr=subprocess.STDOUT)
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise AssertionError(f"server kept running with --speculative-config {config}")
    text = open(log, encoding="utf-8", errors="replace").read()
    assert rc == 1, f"exit status {rc} for {config}: {text[-800:]}"
    for w in words:
        assert w in text, f"'{w}' not in the error for {config}: {text[-800:]}"


def check_server(res, tessera, workdir, model, name, config, reference, seeded_reference):
    srv = Server(tessera, ["--model", model, "--served-model-name", "target", "--kv-cache-mb", "64",
                           "--speculative-config", json.dumps(config)], workdir, name)
    model = "target"  # the served name
    res.server = srv
    try:
        if not res.run(f"{name}: ready", srv.wait_ready):
            return

        def greedy():
            for prompt, ref in zip(PROMPTS, reference):
                want = ref["choices"][0]["token_ids"]
                st, _, body = complete(srv.port, model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                       ignore_eos=True, logprobs=1)
                assert st == 200, body
                c = body["choices"][0]
                assert c["text"] == ref["choices"][0]["text"], (c["text"], ref["choices"][0]["text"])
                assert len(c["logprobs"]["token_logprobs"]) == len(want), c["logprobs"]
                lp = [x["logprob"] for x in ref["choices"][0].get("logprobs", [])]
                assert len(lp) == len(want), ref
                got = c["logprobs"]["token_logprobs"]
                assert all(abs(a - b) < 1e-4 for a, b in zip(got, lp)), (got, lp)
        res.run(f"{name}: greedy completions equal speculation off (text, logprobs)", greedy)

        def streamed_and_n2():
            ref = reference[0]["choices"][0]["text"]
            st, _, events, done = stream_events(srv.port, "/v1/completions", {"model": model, "prompt": PROMPTS[0], "stream": True,
                                                                 "max_tokens": MAX_TOKENS, "temperature": 0,
                                                                 "ignore_eos": True})
            assert st == 200 and done, events
            text = "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict) and e.get("choices"))
            assert text == ref, (text, ref)
            st, _, body = complete(srv.port, model=model, prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0,
                                   ignore_eos=True, n=2)
            assert st == 200, body
            assert [c["text"] for c in body["choices"]] == [ref, ref], body
        res.run(f"{name}: streamed and n=2 equal speculation off", streamed_and_n2)

        def stop_string_and_max_tokens():
            ref = reference[1]["choices"][0]["text"]
            if len(ref) < 4:
                return
            stop = ref[len(ref) // 2:len(ref) // 2 + 3]
            st, _, body = complete(srv.port, model=model, prompt=PROMPTS[1], max_tokens=MAX_TOKENS, temperature=0,
                                   ignore_eos=True, stop=[stop])
            assert st == 200, body
            c = body["choices"][0]
            assert c["finish_reason"] == "stop" and c["text"] == ref[:ref.index(stop)], (c, stop, ref)
            st, _, body = complete(srv.port, model=model, prompt=PROMPTS[0], max_tokens=5, temperature=0,
                                   ignore_eos=True)
            assert st == 200 and body["usage"]["completion_tokens"] == 5, body
            assert body["choices"][0]["finish_reason"] == "length", body
        res.run(f"{name}: stop strings and max_tokens as without speculation", stop_string_and_max_tokens)

        def seeded():
            for prompt, ref in zip(PROMPTS, seeded_reference):
                st, _, body = complete(srv.port, model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.9,
                                       top_p=0.95, seed=11, ignore_eos=True)
                assert st == 200, body
                assert body["choices"][0]["text"] == ref["choices"][0]["text"], (body, ref)
        res.run(f"{name}: seeded sampling equals speculation off", seeded)

        def metrics():
            m = get_metrics(srv.port)
            for key in ("tessera:spec_decode_num_drafts_total", "tessera:spec_decode_num_draft_tokens_total",
                        "tessera:spec_decode_num_accepted_tokens_total",
                        "tessera:spec_decode_num_accepted_tokens_per_pos_total"):
                assert key in m, (key, sorted(k for k in m if "spec" in k))
            assert m["tessera:spec_decode_num_drafts_total"] > 0, m
            assert m["tessera:spec_decode_num_accepted_tokens_total"] > 0, m
            assert (m["tessera:spec_decode_num_accepted_tokens_per_pos_total"] ==
                    m["tessera:spec_decode_num_accepted_tokens_total"]), m
            _, headers, _ = request(srv.port, "GET", "/metrics")
            assert 'position="0"' in headers["_body"]
        res.run(f"{name}: /metrics exports the spec_decode counters", metrics)
        res.run(f"{name}: SIGTERM -> exit 0", lambda: _eq(srv.terminate_and_wait(), 0))
    finally:
        srv.stop()
        res.server = None


def _eq(a, b):
    assert a == b, (a, b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-spec-")
    res = Results()
    start = time.time()
    try:
        model = synth(tessera, os.path.join(workdir, "target"))
        draft = synth(tessera, os.path.join(workdir, "draft"), "--seed", "1", "--set", "num_hidden_layers=1")
        other = synth(tessera, os.path.join(workdir, "other"), "--set", "vocab_size=1000")
        state = {}

        def reference():
            state["greedy"] = generate(tessera, model, ["--temperature", "0", "--logprobs"])
            state["seeded"] = generate(tessera, model, ["--temperature", "0.9", "--top-p", "0.95", "--seed", "11"])
            assert len(state["greedy"]) == len(PROMPTS)
        if not res.run("reference outputs (tessera generate, speculation off)", reference):
            return res.summary(start)

        def generate_with_spec():
            for cfg in ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
                         "prompt_lookup_max": 3},
                        {"method": "draft_model", "model": draft, "num_speculative_tokens": 3}):
                out = generate(tessera, model, ["--temperature", "0", "--logprobs", "--speculative-config",
                                                json.dumps(cfg)])
                assert [o["choices"] for o in out] == [o["choices"] for o in state["greedy"]], cfg["method"]
        res.run("tessera generate --speculative-config: same tokens", generate_with_spec)

        check_server(res, tessera, workdir, model, "ngram",
                     {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
                     state["greedy"], state["seeded"])
        check_server(res, tessera, workdir, model, "draft",
                     {"method": "draft_model", "model": draft, "num_speculative_tokens": 3},
                     state["greedy"], state["seeded"])

        bad = [('{"method": "ngram", "num_speculative_tokens": 0}', ["num_speculative_tokens"]),
               ('{"method": "ngram", "num_speculative_tokens": 99}', ["num_speculative_tokens"]),
               ('{"method": "eagle", "num_speculative_tokens": 2}', ["method", "eagle"]),
               ('{"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}', ["bogus"]),
               ('not json', ["--speculative-config"]),
               (json.dumps({"method": "draft_model", "model": other, "num_speculative_tokens": 2}),
                ["model", "vocabulary"])]
        for config, words in bad:
            res.run(f"bad config {config[:60]} -> exit 1 naming {words[0]}",
                    lambda c=config, w=words: expect_startup_error(tessera, workdir, model, c, w))
    finally:
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
