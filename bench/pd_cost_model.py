#!/usr/bin/python3
"""Cost model: goodput of prefill/decode disaggregation vs unified instances on H100 GPUs.

    bench/pd_cost_model.py [--input-len 1024 --output-len 256 --ttft-ms 250 --tpot-ms 25] [--json OUT]

Projects the comparison that bench/pd_goodput.py measures on 2 CPU cores to GPU nodes:
1 prefill + 1 decode GPU vs 2 unified GPUs, and 2P + 2D vs 4 unified, for a Llama-3.1-8B shape in bf16.
Prints a table (markdown) and optionally writes JSON. Every input is a flag; the defaults and their sources:

Hardware (NVIDIA H100 SXM5 datasheet): HBM3 3.35 TB/s; BF16 dense tensor 989 TFLOPS; 80 GB HBM;
NVLink 4: 900 GB/s total per GPU = 450 GB/s each way; InfiniBand NDR (ConnectX-7): 400 Gb/s = 50 GB/s per
GPU. Efficiencies (assumed, typical of vLLM/TRT-LLM reports, not measured here): prefill MFU 0.5, decode
reaches 0.6 of HBM bandwidth, a KV transfer 0.8 of its link.

Model (Llama-3.1-8B config.json): 32 layers, hidden 4096, 8 KV heads x 128, 8.03e9 parameters, bf16.
  W  = 2 B x params (weight bytes);   kv = 2 (K,V) x layers x kv_heads x head_dim x 2 B per token (128 KiB)

Per step (one forward pass of the batch), roofline:
  t_mem(B, C)   = (W + B x C x kv) / (eff_bw x BW)               weights once + each sequence's KV (context C)
  t_comp(T, C)  = (2 x params x T + 4 x layers x hidden x T x C) / (MFU x FLOPS)   T tokens in the pass
  t_step        = max(t_mem, t_comp)

Prefill/decode (DistServe's decomposition, one request rate lam split evenly over each pool):
  prefill GPU   one prompt per pass, s_p = t_step(T = I, C = I/2); an M/D/1 queue at rho = lam_p x s_p:
                TTFT = s_p + rho x s_p / (2 (1 - rho)) + t_xfer + t_step of the decode's first token
  transfer      t_xfer = I x kv / (eff_link x link)   (NVLink inside a node for 1P+1D; InfiniBand between
                the prefill node and the decode node for 2P+2D)
  decode GPU    batch B of running sequences, context C = I + O/2 on average; Little's law B = lam_d x O x TPOT
                and TPOT = t_step(T = B, C) (fixed point); B x (I + O) x kv must fit in HBM - W
Unified (vLLM-style chunked prefill, token budget K per pass, prefill chunks ride with the decode batch):
  a pass with a chunk: t_mix = t_step(T = B + K) with the chunk's attention over I/2; a prompt takes
  ceil(I / K) such passes, so its prefill service is s_u = ceil(I/K) x t_mix; passes with a chunk are a
  fraction f = lam_u x s_u of the time (the M/D/1 utilisation of prefill), so
                TPOT = f x t_mix + (1 - f) x t_step(T = B),  B = lam_u x O x TPOT (fixed point)
                TTFT = s_u + f x s_u / (2 (1 - f))
Goodput: the largest total request rate whose mean TTFT and mean TPOT are within the SLOs (searched by
bisection); DistServe counts the rate at which 90% of requests meet them, so these are optimistic for both
sides alike. Per GPU = total / GPUs.
"""
import argparse
import json
import math


def step(a, T, C, B):
    """Seconds for one pass of T tokens, B sequences holding context C each."""
    mem = (a.weight_bytes + B * C * a.kv_bytes) / (a.eff_bw * a.hbm_bw)
    comp = (2 * a.params * T + 4 * a.layers * a.hidden * T * C) / (a.mfu * a.flops)
    return max(mem, comp)


def md1(s, rho):
    return math.inf if rho >= 1 else s + rho * s / (2 * (1 - rho))


def decode_tpot(a, lam_d, ctx, chunk=None):
    """Fixed point of TPOT with B = lam_d x O x TPOT; chunk = (f, extra tokens, prefill context) for unified."""
    tpot = step(a, 1, ctx, 1)
    for _ in range(200):
        B = max(1.0, lam_d * a.output_len * tpot)
        if B * (a.input_len + a.output_len) * a.kv_bytes > a.hbm_bytes - a.weight_bytes:
            return math.inf, B
        plain = step(a, B, ctx, B)
        if chunk is None:
            new = plain
        else:
            f, k, _ = chunk
            new = f * step(a, B + k, ctx, B) + (1 - f) * plain
        if abs(new - tpot) < 1e-9:
            break
        tpot = new
    return tpot, B


def pd(a, lam, n_p, n_d, link):
    lam_p, lam_d = lam / n_p, lam / n_d
    s_p = step(a, a.input_len, a.input_len / 2, 1)
    xfer = a.input_len * a.kv_bytes / (a.eff_link * link)
    ctx = a.input_len + a.output_len / 2
    tpot, B = decode_tpot(a, lam_d, ctx)
    ttft = md1(s_p, lam_p * s_p) + xfer + step(a, 1, a.input_len, 1)
    return {"ttft_ms": ttft * 1e3, "tpot_ms": tpot * 1e3, "decode_batch": B, "prefill_util": lam_p * s_p,
            "transfer_ms": xfer * 1e3}


def unified(a, lam, n):
    lam_u = lam / n
    ctx = a.input_len + a.output_len / 2
    tpot = step(a, 1, ctx, 1)
    f = 0.0
    for _ in range(200):
        B = max(1.0, lam_u * a.output_len * tpot)
        t_mix = step(a, B + a.chunk, ctx, B)
        s_u = math.ceil(a.input_len / a.chunk) * t_mix
        f = lam_u * s_u
        if f >= 1:
            return {"ttft_ms": math.inf, "tpot_ms": math.inf, "decode_batch": B, "prefill_util": f}
        new, B = decode_tpot(a, lam_u, ctx, chunk=(f, a.chunk, a.input_len / 2))
        if abs(new - tpot) < 1e-9 or math.isinf(new):
            tpot = new
            break
        tpot = new
    return {"ttft_ms": md1(s_u, f) * 1e3, "tpot_ms": tpot * 1e3, "decode_batch": B, "prefill_util": f}


def goodput(a, fn):
    """Largest total rate with mean TTFT and TPOT within the SLOs (bisection; both grow with the rate)."""
    def ok(lam):
        r = fn(lam)
        return r["ttft_ms"] <= a.ttft_ms and r["tpot_ms"] <= a.tpot_ms
    if not ok(1e-6):
        return 0.0
    lo, hi = 1e-6, 1.0
    while ok(hi) and hi < 1e6:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = ap.add_argument
    add("--input-len", type=int, default=1024)
    add("--output-len", type=int, default=256)
    add("--ttft-ms", type=float, default=250.0, help="TTFT SLO")
    add("--tpot-ms", type=float, default=25.0, help="TPOT SLO")
    add("--chunk", type=int, default=512, help="unified: prefill tokens per pass (chunked prefill budget)")
    add("--params", type=float, default=8.03e9)
    add("--layers", type=int, default=32)
    add("--hidden", type=int, default=4096)
    add("--kv-heads", type=int, default=8)
    add("--head-dim", type=int, default=128)
    add("--dtype-bytes", type=int, default=2)
    add("--hbm-bw", type=float, default=3.35e12, help="bytes/s (H100 SXM5 HBM3)")
    add("--flops", type=float, default=989e12, help="BF16 dense FLOP/s (H100 SXM5)")
    add("--hbm-bytes", type=float, default=80e9)
    add("--nvlink", type=float, default=450e9, help="bytes/s one way (NVLink 4: 900 GB/s total)")
    add("--ib", type=float, default=50e9, help="bytes/s per GPU (InfiniBand NDR 400 Gb/s)")
    add("--mfu", type=float, default=0.5)
    add("--eff-bw", type=float, default=0.6)
    add("--eff-link", type=float, default=0.8)
    add("--json", help="write the results here")
    a = ap.parse_args()
    a.weight_bytes = a.params * a.dtype_bytes
    a.kv_bytes = 2 * a.layers * a.kv_heads * a.head_dim * a.dtype_bytes

    setups = [("1P+1D (NVLink)", 2, lambda lam: pd(a, lam, 1, 1, a.nvlink)),
              ("2 unified", 2, lambda lam: unified(a, lam, 2)),
              ("2P+2D (InfiniBand between nodes)", 4, lambda lam: pd(a, lam, 2, 2, a.ib)),
              ("4 unified", 4, lambda lam: unified(a, lam, 4))]
    rows = []
    for name, gpus, fn in setups:
        g = goodput(a, fn)
        at = fn(g) if g > 0 else {}
        rows.append({"setup": name, "gpus": gpus, "goodput_rps": g, "per_gpu_rps": g / gpus,
                     "at_goodput": {k: round(v, 3) for k, v in at.items()}})
    base = {2: rows[1]["goodput_rps"], 4: rows[3]["goodput_rps"]}
    print(f"Llama-3.1-8B bf16 on H100 SXM5, {a.input_len} in / {a.output_len} out tokens, SLO TTFT <= "
          f"{a.ttft_ms:g} ms and TPOT <= {a.tpot_ms:g} ms (means), unified chunk {a.chunk} tokens\n")
    print("| setup | GPUs | goodput (req/s) | per GPU | vs unified, same GPUs | TTFT / TPOT at goodput (ms) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        at = r["at_goodput"]
        ratio = r["goodput_rps"] / base[r["gpus"]] if base[r["gpus"]] > 0 else math.inf
        print(f"| {r['setup']} | {r['gpus']} | {r['goodput_rps']:.2f} | {r['per_gpu_rps']:.2f} | {ratio:.2f}x | "
              f"{at.get('ttft_ms', math.nan):.0f} / {at.get('tpot_ms', math.nan):.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items() if k != "json"}, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
