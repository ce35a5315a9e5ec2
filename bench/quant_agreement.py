#!/usr/bin/env python3
"""Greedy agreement of Tessera and llama.cpp on the same GGUF file: a second opinion beside
the NumPy reference for the quantized files of run_quant_results.sh.

    bench/quant_agreement.py --tessera build/tessera --llama-server DIR/llama-server \\
        --model FILE.gguf --threads 2 --out DIR [--name NAME] [--tokens 64]

Eight fixed prompts (token ids, the same list to both servers, so no tokenizer is involved)
are completed greedily, max `--tokens` tokens with end-of-sequence ignored, by `tessera serve`
(/v1/completions, temperature 0, return_token_ids) and then by `llama-server` (/completion,
temperature 0, return_tokens, cache_prompt off, n_probs 5), one server at a time, each stopped
by its PID. For each prompt: how many leading generated tokens agree; at the first divergence,
the rank of Tessera's token among llama.cpp's top 5 there and llama.cpp's log-probability gap
between its choice and Tessera's (random-weight models have near-ties, so a divergence at a
small gap is data, not a failure). Writes OUT/agreement-NAME.json; prints a one-line summary.
Exit status 1 when a server fails or answers something other than the requested tokens.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_bench import Proc, call, free_port, log  # noqa: E402  (the servers' process handling)

N_PROMPTS = 8
TOP_N = 5


def prompts():
    """Eight fixed prompts of 4..64 token ids in [100, 30000): inside the vocabulary of every
    architecture synth writes (Llama 3: 128256, Phi-3: 32064, Gemma: 262144)."""
    out, x = [], 12345
    for i, n in enumerate((4, 8, 12, 16, 24, 32, 48, 64)):
        ids = []
        for _ in range(n):
            x = (x * 1103515245 + 12345 + i) % (1 << 31)
            ids.append(100 + x % 29900)
        out.append(ids)
    return out


def post(port, path, body):
    st, raw = call(port, "POST", path, body)
    if st != 200:
        raise RuntimeError(f"POST {path}: HTTP {st}: {raw[:300]!r}")
    return json.loads(raw)


def run_tessera(args, name, ps):
    port = free_port()
    srv = Proc([args.tessera, "--log-level", "warn", "serve", "--model", args.model, "--threads",
                str(args.threads), "--host", "127.0.0.1", "--port", str(port), "--grpc-port", "-1"],
               args.out, f"agreement-tessera-{name}", port, "/ready")
    try:
        srv.wait_ready()
        model = json.loads(call(port, "GET", "/v1/models")[1])["data"][0]["id"]
        res = []
        for ids in ps:
            r = post(port, "/v1/completions", {"model": model, "prompt": ids, "max_tokens": args.tokens,
                                               "temperature": 0, "ignore_eos": True, "return_token_ids": True})
            if r["usage"]["prompt_tokens"] != len(ids):
                raise RuntimeError(f"tessera read {r['usage']['prompt_tokens']} prompt tokens of {len(ids)}")
            res.append(r["choices"][0]["token_ids"])
        return res
    finally:
        srv.stop()


def run_llama(args, name, ps):
    port = free_port()
    srv = Proc([args.llama_server, "-m", args.model, "-t", str(args.threads), "--host", "127.0.0.1", "--port",
                str(port), "-np", "1", "-c", str(2 * (max(map(len, ps)) + args.tokens))],
               args.out, f"agreement-llama-{name}", port, "/health")
    try:
        srv.wait_ready()
        res = []
        for ids in ps:
            r = post(port, "/completion", {"prompt": ids, "n_predict": args.tokens, "temperature": 0,
                                           "ignore_eos": True, "return_tokens": True, "cache_prompt": False,
                                           "n_probs": TOP_N})
            if r.get("tokens_evaluated") != len(ids):
                raise RuntimeError(f"llama-server read {r.get('tokens_evaluated')} prompt tokens of {len(ids)}")
            res.append((r["tokens"], r.get("completion_probabilities", [])))
        return res
    finally:
        srv.stop()


def compare(t_ids, l_ids, l_probs, tokens):
    agree = 0
    while agree < min(len(t_ids), len(l_ids)) and t_ids[agree] == l_ids[agree]:
        agree += 1
    rec = {"agree": agree, "of": tokens, "tessera": t_ids, "llama": l_ids}
    if agree < min(len(t_ids), len(l_ids)) and agree < len(l_probs):
        top = l_probs[agree].get("top_logprobs", [])
        ranks = [k for k, e in enumerate(top) if e["id"] == t_ids[agree]]
        rec["divergence"] = {
            "position": agree, "tessera_token": t_ids[agree], "llama_token": l_ids[agree],
            # 1-based rank of Tessera's token in llama.cpp's top TOP_N; None: not among them.
            "tessera_rank_in_llama": ranks[0] + 1 if ranks else None,
            "llama_logprob_gap": top[0]["logprob"] - top[ranks[0]]["logprob"] if ranks else None,
        }
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True, help="the GGUF file both servers load")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per prompt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="")
    args = ap.parse_args()
    name = args.name or os.path.basename(args.model).removesuffix(".gguf")
    os.makedirs(args.out, exist_ok=True)
    ps = prompts()
    try:
        tessera = run_tessera(args, name, ps)
        llama = run_llama(args, name, ps)
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        log(f"quant_agreement {name}: {e}")
        return 1
    recs = [dict(prompt_tokens=len(p), **compare(t, l, lp, args.tokens)) for p, t, (l, lp) in zip(ps, tessera, llama)]
    with open(os.path.join(args.out, f"agreement-{name}.json"), "w") as f:
        json.dump({"model": args.model, "tokens": args.tokens, "prompts": recs}, f, indent=1)
    log(f"quant_agreement {name}: {sum(r['agree'] for r in recs)} of {sum(r['of'] for r in recs)} tokens agree "
        f"({', '.join(str(r['agree']) for r in recs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
