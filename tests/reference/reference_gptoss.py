#!/usr/bin/python3
"""Independent NumPy reference forward pass for gpt-oss (GptOssForCausalLM), float64.

Written from the published equations of Hugging Face transformers' modeling_gpt_oss.py,
its GptOssConfig and integrations/mxfp4.py (the HF MXFP4 layout), not from Tessera's
sources.  Shares the generic pieces (safetensors reader, YaRN frequencies, masks) with
reference.py; everything gpt-oss-specific is here:

  * attention with q/k/v/o biases, GQA, and a learned sink logit S_h per query head that
    joins the softmax denominator without a value:
        m = max(max_j s_j, S_h);  o = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(S_h - m));
  * sliding (sliding_window) and full layers: layer_types, or layer i slides iff i is even;
  * YaRN RoPE as configured (gpt-oss: truncate false, the correction range not rounded);
  * the MoE: router logits l = W_r x + b_r; the top-k logits (ties to the lower id), and
    weights softmax over those k only;  per expert [g | u] = x W_gu + b_gu with g the even
    and u the odd columns of gate_up_proj [E, hidden, 2 inter] (x @ W), g = min(g, L),
    u = clamp(u, -L, L), a = g sigmoid(alpha g) (u + 1), y = a W_d + b_d (down bias before
    the routing weight), out = sum_j w_j y_j;
  * MXFP4 experts (*_blocks u8 [E, rows, cols/32, 16], *_scales u8 [E, rows, cols/32]):
    element 2i is the low and 2i+1 the high nibble of byte i, FP4 e2m1 values times
    2^(scale - 127); stored [out, in], i.e. transposed against the bf16 x @ W layout.
    Tessera's CPU Linear quantizes the activations of a quantized matmul to int8 blocks of
    32 (documented in kernels/cpu/ops.h), so with MXFP4 experts `act_quant` mirrors that.

    model  = load("/path/to/gpt_oss_checkpoint_dir")
    logits = forward(model, [2, 10, 11])
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def is_gpt_oss(cfg_json):
    return (cfg_json.get("architectures") or [None])[0] == "GptOssForCausalLM"


def dequant_mxfp4(blocks, scales):
    """HF MXFP4 -> float64 [..., rows, cols]: blocks [..., rows, nb, 16], scales [..., rows, nb]."""
    b = blocks.astype(np.uint8)
    lo, hi = FP4_VALUES[b & 0x0F], FP4_VALUES[b >> 4]
    vals = np.empty(b.shape[:-1] + (32,))
    vals[..., 0::2], vals[..., 1::2] = lo, hi
    vals = vals * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(b.shape[:-2] + (b.shape[-2] * 32,))


def quantize_acts(x):
    """Int8 activation blocks of 32 as Tessera's quantized Linear: d = amax/127 (f32), q = rint(x/d)."""
    m, k = x.shape
    xb = x.reshape(m, k // 32, 32).astype(np.float32)
    d = (np.abs(xb).max(axis=-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint(np.clip(xb * inv[..., None], np.float32(-127), np.float32(127)))
    return (q * d[..., None].astype(np.float64)).reshape(m, k)


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cj = json.load(f)
    t = reference.read_checkpoint_tensors(model_dir)
    n = cj["num_hidden_layers"]
    hidden, heads = cj["hidden_size"], cj["num_attention_heads"]
    head_dim = cj.get("head_dim") or hidden // heads
    types = cj.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    cfg = {"vocab": cj["vocab_size"], "hidden": hidden, "n_layers": n, "n_heads": heads,
           "n_kv_heads": cj.get("num_key_value_heads", heads), "head_dim": head_dim,
           "eps": cj.get("rms_norm_eps", 1e-5), "window": cj.get("sliding_window", 128),
           "sliding": [ty == "sliding_attention" for ty in types],
           "experts": cj.get("num_local_experts", 128),
           "top_k": cj.get("num_experts_per_tok", cj.get("experts_per_token", 4)),
           "inter": cj["intermediate_size"], "limit": cj.get("swiglu_limit", 7.0), "alpha": cj.get("swiglu_alpha", 1.702),
           "softmax_topk": True, "sinks": True, "tie": cj.get("tie_word_embeddings", False)}
    w, mxfp4 = {}, False
    for name, arr in t.items():
        if name.endswith("_blocks"):
            base = name[:-len("_blocks")]
            w[base] = np.swapaxes(dequant_mxfp4(arr, t[base + "_scales"]), -1, -2)  # -> [E, in, out] (x @ W)
            mxfp4 = True
        elif not name.endswith("_scales"):
            w[name] = arr
    cfg["act_quant"] = mxfp4
    rs = cj.get("rope_scaling") or {}
    theta = cj.get("rope_theta", 150000.0)
    if rs.get("rope_type", rs.get("type")) == "yarn":
        inv_freq, attn_factor = reference.yarn_inv_freq(theta, head_dim, rs, cj.get("max_position_embeddings", 131072))
    else:
        inv_freq, attn_factor = reference.default_inv_freq(theta, head_dim), 1.0
    return {"cfg": cfg, "w": w, "inv_freq": inv_freq, "attn_factor": attn_factor}


def attention(x, model, i, cos, sin):
    cfg, w = model["cfg"], model["w"]
    p = f"model.layers.{i}.self_attn."
    T, H, KV, D = x.shape[0], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    q = reference.linear(x, w[p + "q_proj.weight"], w[p + "q_proj.bias"]).reshape(T, H, D)
    k = reference.linear(x, w[p + "k_proj.weight"], w[p + "k_proj.bias"]).reshape(T, KV, D)
    v = reference.linear(x, w[p + "v_proj.weight"], w[p + "v_proj.bias"]).reshape(T, KV, D)
    q, k = reference.apply_rope(q, cos, sin), reference.apply_rope(k, cos, sin)
    idx = np.array([reference.kv_head_of(h, H, KV) for h in range(H)])
    s = np.einsum("phd,jhd->hpj", q, k[:, idx]) / math.sqrt(D)  # [H, T, T]
    allowed = reference.attention_mask(T, cfg["window"] if cfg["sliding"][i] else None)
    s = np.where(allowed[None], s, -np.inf)
    sink = w[p + "sinks"][:, None, None] if cfg["sinks"] else np.full((H, 1, 1), -np.inf)
    m = np.maximum(s.max(axis=-1, keepdims=True), sink)
    e = np.exp(s - m)
    probs = e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - m))
    o = np.einsum("hpj,jhd->phd", probs, v[:, idx]).reshape(T, H * D)
    return reference.linear(o, w[p + "o_proj.weight"], w[p + "o_proj.bias"])


def moe(x, model, i):
    cfg, w = model["cfg"], model["w"]
    p = f"model.layers.{i}.mlp."
    logits = reference.linear(x, w[p + "router.weight"], w[p + "router.bias"])
    k = cfg["top_k"]
    chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    top = np.take_along_axis(logits, chosen, axis=-1)
    weights = reference.softmax(top) if cfg["softmax_topk"] else np.take_along_axis(reference.softmax(logits), chosen, -1)
    gu, gub = w[p + "experts.gate_up_proj"], w[p + "experts.gate_up_proj_bias"]
    dn, dnb = w[p + "experts.down_proj"], w[p + "experts.down_proj_bias"]
    q = quantize_acts if cfg["act_quant"] else (lambda a: a)
    L, alpha = cfg["limit"], cfg["alpha"]
    out = np.zeros_like(x)
    for e in np.unique(chosen):
        rows, slots = np.nonzero(chosen == e)
        h = q(x[rows]) @ gu[e] + gub[e]
        g, u = h[:, 0::2], h[:, 1::2]
        if L is not None:
            g, u = np.minimum(g, L), np.clip(u, -L, L)
        a = g * reference.sigmoid(alpha * g) * (u + 1)
        y = q(a) @ dn[e] + dnb[e]
        np.add.at(out, rows, weights[rows, slots][:, None] * y)
    return out


def forward(model, token_ids, logits_at=None):
    cfg, w = model["cfg"], model["w"]
    ids = np.asarray(token_ids, dtype=np.int64)
    h = w["model.embed_tokens.weight"][ids]
    cos, sin = reference.rope_cos_sin(np.arange(len(ids)), model["inv_freq"], model["attn_factor"])
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        h = h + attention(reference.rms_norm(h, w[p + "input_layernorm.weight"], cfg["eps"]), model, i, cos, sin)
        h = h + moe(reference.rms_norm(h, w[p + "post_attention_layernorm.weight"], cfg["eps"]), model, i)
    h = reference.rms_norm(h if logits_at is None else h[logits_at], w["model.norm.weight"], cfg["eps"])
    return reference.linear(h, w["model.embed_tokens.weight" if cfg["tie"] else "lm_head.weight"])


def self_check():
    """The sink formula equals a softmax over the keys plus one value-less zero key at S_h,
    and the HF MXFP4 decoding matches hand-decoded nibbles."""
    ok = True
    rng = np.random.default_rng(0)
    s, sink = rng.normal(size=5), 0.7
    m = max(s.max(), sink)
    got = np.exp(s - m) / (np.exp(s - m).sum() + np.exp(sink - m))
    want = reference.softmax(np.append(s, sink))[:5]
    ok &= bool(np.allclose(got, want, rtol=1e-14))
    blocks = np.array([[[0x21] + [0] * 15]], dtype=np.uint8)  # element 0: nibble 1 (0.5), element 1: nibble 2 (1.0)
    deq = dequant_mxfp4(blocks, np.array([[128]]))
    ok &= bool(deq[0, 0] == 1.0 and deq[0, 1] == 2.0 and np.all(deq[0, 2:] == 0))
    print(f"self-check gpt-oss: {'ok' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    sys.exit(0 if self_check() else 1)
