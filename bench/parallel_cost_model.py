#!/usr/bin/env python3
"""Cost model of a tensor/expert-parallel step:

    step time = compute / ranks (experts: x the busiest rank's share of the load)
              + sum over collectives of (latency + bytes on the wire / bus bandwidth)

where compute per rank = multiply-adds / rate + weight bytes read / memory
bandwidth (the rank's own share: TP slices everything; EP with data-parallel
attention splits the sequences but every rank reads the whole dense weights,
and its expert slots' weights). CPU check: the memory bandwidth is given
(--membw, tessera-membw's one-thread figure), the rate is calibrated from the
one-rank step time measured by bench/eplb_bench.py, ranks beyond the cores
time-share them (--cores), and collective times come from tessera-comm-bench's
JSON (same implementation, ranks and machine), interpolated on message size.
The prediction is printed beside the measured step time of each layout.

Paper projection (not measured): the same formula on 8 x H100 SXM for a
Mixtral-8x7B-shaped model in BF16, with the H100 figures stated in H100 below.

  bench/parallel_cost_model.py --eplb eplb.json --comm comm.json
"""
import argparse
import bisect
import json
import math

# NVIDIA H100 SXM5 datasheet (nvidia.com/en-us/data-center/h100): BF16 Tensor Core
# 989 TFLOPS dense (1,979 with sparsity), HBM3 3.35 TB/s, NVLink 900 GB/s per GPU
# (bidirectional; 450 GB/s each way). Achievable fractions are assumptions:
# nccl-tests on DGX H100 report all-reduce busbw around 450 GB/s for large
# messages (NVIDIA's nccl-tests results); we take 360 GB/s and 15 us per call.
H100 = {"flops": 989e12, "flops_eff": 0.6, "hbm": 3.35e12, "hbm_eff": 0.8, "busbw": 360e9, "lat": 15e-6}
MIXTRAL_8X7B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32000, "num_local_experts": 8,
                "num_experts_per_tok": 2}


def weight_bytes(m, bpe):
    """Dense (attention + embedding + lm_head + routers) and per-expert weight bytes."""
    h, L, d = m["hidden_size"], m["num_hidden_layers"], m.get("head_dim", m["hidden_size"] // m["num_attention_heads"])
    q, kv, E = m["num_attention_heads"], m["num_key_value_heads"], m["num_local_experts"]
    dense = L * (h * (q + 2 * kv) * d + q * d * h + h * E) + 2 * m["vocab_size"] * h
    return dense * bpe, L * 3 * h * m["intermediate_size"] * bpe


def macs(m, tokens, logits_rows):
    """Multiply-adds of one step by part (per token matrices; attention scores left out)."""
    h, L, d = m["hidden_size"], m["num_hidden_layers"], m.get("head_dim", m["hidden_size"] // m["num_attention_heads"])
    q, kv, k, inter = m["num_attention_heads"], m["num_key_value_heads"], m["num_experts_per_tok"], m["intermediate_size"]
    attn = L * tokens * h * (q + 2 * kv) * d + L * tokens * q * d * h
    router = L * tokens * h * m["num_local_experts"]
    expert = L * tokens * k * 3 * h * inter
    head = logits_rows * h * m["vocab_size"]
    return {"dense": attn + router + head, "expert": expert}


class CommTable:
    """Mean seconds per call by (impl, op, ranks), interpolated log-log on bytes."""

    def __init__(self, doc):
        self.t = {}
        for r in doc["rows"]:
            key = (r["impl"], r["op"], int(r["ranks"]))
            self.t.setdefault(key, []).append((float(r["size"]), float(r["time_us"]) * 1e-6))
        for v in self.t.values():
            v.sort()

    def seconds(self, impl, op, ranks, nbytes):
        pts = self.t[(impl, op, ranks)]
        xs = [p[0] for p in pts]
        nbytes = max(nbytes, 1.0)
        if nbytes <= xs[0]:
            return pts[0][1]  # latency-bound below the smallest size measured
        if nbytes >= xs[-1]:
            return pts[-1][1] * nbytes / xs[-1]
        i = bisect.bisect_left(xs, nbytes)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        f = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))


def collectives(m, layout, n, tokens, logits_rows, bpe):
    """(op, bytes per rank per call) of one step."""
    h, L, k, V = m["hidden_size"], m["num_hidden_layers"], m["num_experts_per_tok"], m["vocab_size"]
    if layout == "tp":  # embedding + o_proj + down_proj all-reduces; lm_head all-gather
        out = [("all_reduce", tokens * h * bpe)] * (1 + 2 * L)
        out.append(("all_gather", logits_rows * V * bpe / n))
        return out
    # ep with data-parallel attention: per MoE layer counts, x, ids, y back; logits to rank 0.
    per = tokens / n * k
    out = []
    for _ in range(L):
        out += [("all_to_all", 8 * n), ("all_to_all", per * h * bpe), ("all_to_all", per * 4),
                ("all_to_all", per * h * bpe)]
    out.append(("all_to_all", logits_rows / n * V * bpe))
    return out


def rank_work(m, layout, n, tokens, rows, imb, slots_per_rank, bpe):
    """(multiply-adds, weight bytes) of the busiest rank in one step."""
    c = macs(m, tokens, rows)
    dense_b, expert_b = weight_bytes(m, bpe)
    if layout == "one":
        return c["dense"] + c["expert"], dense_b + expert_b * m["num_local_experts"]
    if layout == "tp":
        return (c["dense"] + c["expert"]) / n, (dense_b + expert_b * m["num_local_experts"]) / n
    return c["dense"] / n + c["expert"] * imb / n, dense_b + expert_b * slots_per_rank


def predict_cpu(eplb, comm, membw, cores):
    m = eplb["model"]
    one = next(r for r in eplb["rows"] if r["layout"] == "one rank")
    threads = eplb["threads_per_rank"]
    steps1 = one["steps"]
    t1 = eplb["requests"] * (eplb.get("prompt_len", 24) + eplb["max_tokens"] - 1) / steps1
    macs1, bytes1 = rank_work(m, "one", 1, t1, eplb["requests"] * eplb["max_tokens"] / steps1, 1, 0, 2)
    rate = macs1 / max(one["step_s"] - bytes1 / membw, 1e-9)  # multiply-adds per second of one rank
    print(f"model {m}\nworkload: {eplb['requests']} requests of {eplb.get('prompt_len', 24)} prompt tokens, "
          f"{eplb['max_tokens']} generated, {threads} thread(s) per rank; calibrated {rate / 1e9:.2f} GMAC/s, "
          f"memory {membw / 1e9:.0f} GB/s, {cores} cores")
    print(f"{'layout':<11} {'measured ms':>11} {'(coll)':>7} {'predicted ms':>12} {'(compute':>9} {'+ comm)':>8} "
          f"{'ratio':>6}")
    out = []
    for r in eplb["rows"]:
        if r["layout"] == "one rank":
            continue
        n = len(r["rank_step_s"])
        tokens = eplb["requests"] * (eplb.get("prompt_len", 24) + eplb["max_tokens"] - 1) / r["steps"]
        rows = eplb["requests"] * eplb["max_tokens"] / r["steps"]
        layout = "tp" if r["layout"].startswith("tp") else "ep"
        imb = r.get("load_max_over_mean", 1.0) if layout == "ep" else 1.0
        E = m["num_local_experts"]
        slots = (E + (n if "eplb" in r["layout"] else 0)) / n
        mac, byt = rank_work(m, layout, n, tokens, rows, imb, slots, 2)
        share = max(1.0, n * threads / cores)  # ranks time-sharing the cores
        compute = (mac / rate + byt / membw) * share
        coll = sum(comm.seconds("inproc", op, n, b) for op, b in collectives(m, layout, n, tokens, rows, 4))
        pred = compute + coll
        print(f"{r['layout']:<11} {r['step_s'] * 1e3:11.1f} {r['coll_s'] * 1e3:7.1f} {pred * 1e3:12.1f} "
              f"{compute * 1e3:9.1f} "
              f"{coll * 1e3:8.1f} {pred / r['step_s']:6.2f}")
        out.append({"layout": r["layout"], "measured_s": r["step_s"], "predicted_s": pred, "compute_s": compute,
                    "comm_s": coll})
    return out


def project_h100(imbalances):
    m, g, n, bpe = MIXTRAL_8X7B, H100, 8, 2
    h, L, E = m["hidden_size"], m["num_hidden_layers"], m["num_local_experts"]
    attn_params = L * (h * (m["num_attention_heads"] + 2 * m["num_key_value_heads"]) * m["head_dim"]
                       + m["num_attention_heads"] * m["head_dim"] * h)
    expert_params = L * E * 3 * h * m["intermediate_size"]
    other = 2 * m["vocab_size"] * h
    print(f"\n8 x H100 SXM on paper, {m['num_hidden_layers']}-layer Mixtral-8x7B shape, BF16 "
          f"({(attn_params + expert_params + other) / 1e9:.1f}B parameters); assumed {g}")
    print(f"{'case':<34} {'layout':<9} {'compute ms':>10} {'weights ms':>10} {'comm ms':>8} {'step ms':>8}")
    res = []
    for case, tokens, rows in [("decode, 256 sequences", 256, 256), ("prefill, 8192 tokens", 8192, 1)]:
        c = macs(m, tokens, rows)
        for layout, imb in [("tp8", 1.0)] + [(f"ep8 {k}", v) for k, v in imbalances.items()]:
            if layout == "tp8":
                flops = 2 * (c["dense"] + c["expert"]) / n
                wbytes = (attn_params + expert_params + other) * bpe / n
            else:  # attention replicated, sequences split; expert slots per GPU, busiest GPU's share
                flops = 2 * (c["dense"] / n + c["expert"] * imb / n)
                slots = (E + (n if layout.endswith("eplb") else 0)) / n  # eplb: one redundant slot per GPU
                wbytes = (attn_params + other) * bpe + expert_params * bpe / E * slots
            t_flops = flops / (g["flops"] * g["flops_eff"])
            t_mem = wbytes / (g["hbm"] * g["hbm_eff"])
            coll = sum(g["lat"] + b * (2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n) / g["busbw"]
                       for op, b in collectives(m, "tp" if layout == "tp8" else "ep", n, tokens, rows, bpe))
            step = max(t_flops, t_mem) + coll
            print(f"{case:<34} {layout:<9} {t_flops * 1e3:10.2f} {t_mem * 1e3:10.2f} {coll * 1e3:8.2f} "
                  f"{step * 1e3:8.2f}")
            res.append({"case": case, "layout": layout, "compute_s": t_flops, "weights_s": t_mem, "comm_s": coll,
                        "step_s": step})
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eplb", required=True, help="bench/eplb_bench.py --out JSON")
    ap.add_argument("--comm", required=True, help="tessera-comm-bench --json output")
    ap.add_argument("--membw", type=float, default=26e9, help="bytes/s one thread reads (tessera-membw)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    eplb = json.load(open(args.eplb))
    comm = CommTable(json.load(open(args.comm)))
    cpu = predict_cpu(eplb, comm, args.membw, args.cores)
    # The largest world size measured stands in for the skew at 8 GPUs (an assumption).
    ep = [r for r in eplb["rows"] if r["layout"].startswith("ep") and "load_max_over_mean" in r]
    top = max((len(r["rank_step_s"]) for r in ep), default=0)
    imb = {("eplb" if "eplb" in r["layout"] else "plain"): r["load_max_over_mean"]
           for r in ep if len(r["rank_step_s"]) == top}
    h100 = project_h100(imb or {"plain": 1.0})
    if args.out:
        json.dump({"cpu": cpu, "h100": h100}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
