#!/usr/bin/python3
"""Independent NumPy reference forward pass for Gemma 2 and Gemma 3 text models (float64).

Written from the published equations of Hugging Face transformers' modeling_gemma2.py /
modeling_gemma3.py and their configuration classes, not from Tessera's sources.  Shares
the generic pieces (safetensors reader, RoPE frequencies, masks, softmax) with
reference.py; everything Gemma-specific is here:

  * embeddings scaled by sqrt(hidden_size), the normalizer rounded to the checkpoint dtype;
  * RMSNorm x / sqrt(mean(x^2) + eps) * (1 + w), also for the q/k norms (Gemma 3);
  * sandwich norms: h += post_attention_norm(attn(input_norm(h)));
                    h += post_feedforward_norm(mlp(pre_feedforward_norm(h)));
  * GeGLU with tanh-GELU: down(gelu_tanh(gate x) * up x);
  * attention scale query_pre_attn_scalar^-0.5, scores soft-capped cap * tanh(s / cap);
  * sliding and global layers (Gemma 2: even layers slide; Gemma 3: all but every
    sliding_window_pattern-th, or layer_types), Gemma 3's sliding layers with their own
    RoPE base rope_local_base_freq and no scaling;
  * final logits soft-capped.

    model  = load("/path/to/gemma_checkpoint_dir")
    logits = forward(model, [2, 10, 11])

`python3 reference_gemma.py` runs its self-checks.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

ARCHS = {"Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3", "Gemma3ForConditionalGeneration": "gemma3"}

# Gemma2Config / Gemma3TextConfig defaults for omitted fields.
DEFAULTS = {
    "gemma2": {"vocab_size": 256000, "head_dim": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "final_logit_softcapping": 30.0,
               "attn_logit_softcapping": 50.0, "tie_word_embeddings": True, "num_key_value_heads": 4},
    "gemma3": {"vocab_size": 262208, "head_dim": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "final_logit_softcapping": None,
               "attn_logit_softcapping": None, "tie_word_embeddings": True, "num_key_value_heads": 4,
               "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6},
}


def is_gemma(cfg_json):
    return (cfg_json.get("architectures") or [None])[0] in ARCHS


def round_to_dtype(x, torch_dtype):
    """x as a value of the checkpoint's dtype (transformers builds the normalizer so)."""
    f = np.float32(x)
    if torch_dtype == "bfloat16":
        u = int(f.view(np.uint32))
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
        return float(np.array([u << 16], dtype=np.uint32).view(np.float32)[0])
    if torch_dtype == "float16":
        return float(np.float16(f))
    return float(f)


def parse_config(cfg_json):
    arch = ARCHS[(cfg_json.get("architectures") or [None])[0]]
    src = dict(cfg_json.get("text_config", cfg_json)) if "text_config" in cfg_json else dict(cfg_json)
    cfg = dict(DEFAULTS[arch])
    cfg.update(src)
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"unsupported activation {act}")
    n = cfg["num_hidden_layers"]
    if cfg.get("layer_types"):
        sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
    elif arch == "gemma2":
        sliding = [i % 2 == 0 for i in range(n)]
    else:
        pattern = cfg["sliding_window_pattern"]
        sliding = [(i + 1) % pattern != 0 for i in range(n)]
    hidden = cfg["hidden_size"]
    torch_dtype = cfg_json.get("torch_dtype", cfg.get("torch_dtype", "float32"))
    return {
        "arch": arch,
        "hidden": hidden,
        "n_layers": n,
        "n_heads": cfg["num_attention_heads"],
        "n_kv_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["head_dim"],
        "vocab": cfg["vocab_size"],
        "eps": cfg["rms_norm_eps"],
        "rope_theta": float(cfg["rope_theta"]),
        "rope_scaling": cfg.get("rope_scaling"),
        "local_theta": float(cfg["rope_local_base_freq"]) if arch == "gemma3" else None,
        "max_pos": cfg.get("max_position_embeddings"),
        "tie": bool(cfg.get("tie_word_embeddings", True)),
        "qk_norm": arch == "gemma3",
        "attn_scale": float(cfg["query_pre_attn_scalar"]) ** -0.5,
        "attn_cap": cfg.get("attn_logit_softcapping"),
        "final_cap": cfg.get("final_logit_softcapping"),
        "window": cfg["sliding_window"],
        "sliding": sliding,
        "normalizer": round_to_dtype(math.sqrt(hidden), torch_dtype),
        "norm_offset": 1.0,
        "post_norms": True,
        "gelu": True,
    }


def tensor_prefix(cfg_json):
    if (cfg_json.get("architectures") or [None])[0] == "Gemma3ForConditionalGeneration":
        return "language_model.model."
    return "model."


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cj = json.load(f)
    cfg = parse_config(cj)
    tensors = reference.read_checkpoint_tensors(model_dir)
    prefix = tensor_prefix(cj)
    tensors = {("model." + k[len(prefix):] if k.startswith(prefix) else k): v for k, v in tensors.items()
               if k.startswith(prefix) or k == "lm_head.weight"}  # the vision tower is not ours
    return build_model(cfg, tensors)


def build_model(cfg, tensors):
    H, KV, D, E = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["hidden"]
    expect = reference.end_tensor_shapes(cfg)
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        inter = tensors.get(p + "mlp.gate_proj.weight", np.zeros((0, 0))).shape[0]
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            expect[p + n + ".weight"] = (E,)
        expect.update({p + "self_attn.q_proj.weight": (H * D, E), p + "self_attn.k_proj.weight": (KV * D, E),
                       p + "self_attn.v_proj.weight": (KV * D, E), p + "self_attn.o_proj.weight": (E, H * D),
                       p + "mlp.gate_proj.weight": (inter, E), p + "mlp.up_proj.weight": (inter, E),
                       p + "mlp.down_proj.weight": (E, inter)})
        if cfg["qk_norm"]:
            expect.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    w = reference.checked_weights(tensors, expect, cfg["tie"])
    glob = reference.rope_parameters(cfg)
    local = (reference.default_inv_freq(cfg["local_theta"], cfg["head_dim"]), 1.0) if cfg["local_theta"] else glob
    return {"cfg": cfg, "w": w, "rope_global": glob, "rope_local": local}


# --------------------------------------------------------------------------- equations


def gemma_rms_norm(x, w, cfg):
    """x / sqrt(mean(x^2) + eps) * (1 + w)  (Gemma2RMSNorm / Gemma3RMSNorm)."""
    return reference.rms_norm(x, cfg["norm_offset"] + w, cfg["eps"])


def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (gelu_pytorch_tanh)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def soft_cap(x, cap):
    """cap * tanh(x / cap); no-op when cap is None."""
    return x if not cap else cap * np.tanh(x / cap)


def geglu_mlp(x, w, p, cfg):
    g = reference.linear(x, w[p + "gate_proj.weight"])
    u = reference.linear(x, w[p + "up_proj.weight"])
    act = gelu_tanh(g) if cfg["gelu"] else reference.silu(g)
    return reference.linear(act * u, w[p + "down_proj.weight"])


def attention(x, model, i, positions):
    cfg, w = model["cfg"], model["w"]
    p = f"model.layers.{i}.self_attn."
    T, H, KV, D = x.shape[0], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    q = reference.linear(x, w[p + "q_proj.weight"]).reshape(T, H, D)
    k = reference.linear(x, w[p + "k_proj.weight"]).reshape(T, KV, D)
    v = reference.linear(x, w[p + "v_proj.weight"]).reshape(T, KV, D)
    if cfg["qk_norm"]:
        q = gemma_rms_norm(q, w[p + "q_norm.weight"], cfg)
        k = gemma_rms_norm(k, w[p + "k_norm.weight"], cfg)
    sliding = cfg["sliding"][i]
    inv_freq, factor = model["rope_local"] if sliding else model["rope_global"]
    cos, sin = reference.rope_cos_sin(positions, inv_freq, factor)
    q, k = reference.apply_rope(q, cos, sin), reference.apply_rope(k, cos, sin)
    kv_index = np.array([reference.kv_head_of(h, H, KV) for h in range(H)])
    scores = np.einsum("phd,jhd->hpj", q, k[:, kv_index, :]) * cfg["attn_scale"]
    scores = soft_cap(scores, cfg["attn_cap"])
    allowed = reference.attention_mask(T, cfg["window"] if sliding else None)
    scores = np.where(allowed[None], scores, -np.inf)
    o = np.einsum("hpj,jhd->phd", reference.softmax(scores), v[:, kv_index, :])
    return reference.linear(o.reshape(T, H * D), w[p + "o_proj.weight"])


def decoder_layer(h, model, i, positions):
    cfg, w = model["cfg"], model["w"]
    p = f"model.layers.{i}."
    norm = lambda x, n: gemma_rms_norm(x, w[p + n + ".weight"], cfg)  # noqa: E731
    a = attention(norm(h, "input_layernorm"), model, i, positions)
    h = h + (norm(a, "post_attention_layernorm") if cfg["post_norms"] else a)
    m = geglu_mlp(norm(h, "pre_feedforward_layernorm"), w, p + "mlp.", cfg)
    return h + (norm(m, "post_feedforward_layernorm") if cfg["post_norms"] else m)


def forward(model, token_ids, rows=None):
    """Logits float64 [len, vocab] of one sequence at positions 0..len-1 (only `rows`, in
    that order, when given: the 262k-entry vocabulary makes the head the dearest part)."""
    cfg, w = model["cfg"], model["w"]
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= cfg["vocab"]:
        raise ValueError("token_ids must be a non-empty list of ids < vocab_size")
    h = w["model.embed_tokens.weight"][ids] * cfg["normalizer"]
    positions = np.arange(len(ids))
    for i in range(cfg["n_layers"]):
        h = decoder_layer(h, model, i, positions)
    if rows is not None:
        h = h[np.asarray(rows, dtype=np.int64)]
    logits = reference.linear(gemma_rms_norm(h, w["model.norm.weight"], cfg), w["lm_head.weight"])
    return soft_cap(logits, cfg["final_cap"])


# --------------------------------------------------------------------------- self-checks


def _naive_forward(model, ids):
    """Second, per-position/per-head loop implementation of the same equations."""
    cfg, w = model["cfg"], model["w"]
    H, KV, D, eps = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["eps"]
    half = D // 2

    def norm(v, g):
        return v / math.sqrt(float(np.dot(v, v)) / len(v) + eps) * (1.0 + g)

    def rot(vec, pos, inv_freq):
        out = np.empty(D)
        for i in range(half):
            c, s = math.cos(pos * inv_freq[i]), math.sin(pos * inv_freq[i])
            out[i] = vec[i] * c - vec[i + half] * s
            out[i + half] = vec[i + half] * c + vec[i] * s
        return out

    def cap(v, c):
        return c * math.tanh(v / c) if c else v

    hs = [w["model.embed_tokens.weight"][t] * cfg["normalizer"] for t in ids]
    for li in range(cfg["n_layers"]):
        p = f"model.layers.{li}."
        inv = (model["rope_local"] if cfg["sliding"][li] else model["rope_global"])[0]
        qs, ks, vs = [], [], []
        for pos, h in enumerate(hs):
            x = norm(h, w[p + "input_layernorm.weight"])
            q = (w[p + "self_attn.q_proj.weight"] @ x).reshape(H, D)
            k = (w[p + "self_attn.k_proj.weight"] @ x).reshape(KV, D)
            if cfg["qk_norm"]:
                q = np.stack([norm(r, w[p + "self_attn.q_norm.weight"]) for r in q])
                k = np.stack([norm(r, w[p + "self_attn.k_norm.weight"]) for r in k])
            qs.append([rot(r, pos, inv) for r in q])
            ks.append([rot(r, pos, inv) for r in k])
            vs.append((w[p + "self_attn.v_proj.weight"] @ x).reshape(KV, D))
        new = []
        for pos in range(len(hs)):
            heads = []
            for hh in range(H):
                g = hh * KV // H
                js = [j for j in range(pos + 1) if not cfg["sliding"][li] or pos - j < cfg["window"]]
                sc = np.array([cap(float(qs[pos][hh] @ ks[j][g]) * cfg["attn_scale"], cfg["attn_cap"]) for j in js])
                pr = np.exp(sc - sc.max())
                heads.append(sum(pr[n] / pr.sum() * vs[j][g] for n, j in enumerate(js)))
            a = w[p + "self_attn.o_proj.weight"] @ np.concatenate(heads)
            h1 = hs[pos] + norm(a, w[p + "post_attention_layernorm.weight"])
            x = norm(h1, w[p + "pre_feedforward_layernorm.weight"])
            gt, up = w[p + "mlp.gate_proj.weight"] @ x, w[p + "mlp.up_proj.weight"] @ x
            gelu = np.array([0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in gt])
            m = w[p + "mlp.down_proj.weight"] @ (gelu * up)
            new.append(h1 + norm(m, w[p + "post_feedforward_layernorm.weight"]))
        hs = new
    out = np.stack([w["lm_head.weight"] @ norm(h, w["model.norm.weight"]) for h in hs])
    return np.vectorize(lambda v: cap(v, cfg["final_cap"]))(out)



def self_check():
    ok = lambda c, m: print(("ok   " if c else "FAIL ") + m) or c  # noqa: E731
    good = True
    x = np.linspace(-6, 6, 101)
    erf_gelu = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    good &= ok(np.max(np.abs(gelu_tanh(x) - erf_gelu)) < 1e-3 and gelu_tanh(np.array([0.0]))[0] == 0,
               "tanh-GELU close to the erf GELU")
    c = soft_cap(np.array([0.0, 1e-3, 1e6, -1e6]), 30.0)
    good &= ok(c[0] == 0 and abs(c[1] - 1e-3) < 1e-12 and c[2] == 30.0 and c[3] == -30.0, f"soft cap {c}")
    good &= ok(round_to_dtype(math.sqrt(3072), "bfloat16") == 55.5 and round_to_dtype(48.0, "bfloat16") == 48.0,
               "bf16 normalizer")
    g2 = parse_config({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 8, "num_hidden_layers": 4,
                       "num_attention_heads": 2})
    g3 = parse_config({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 8, "num_hidden_layers": 7,
                       "num_attention_heads": 2})
    good &= ok(g2["sliding"] == [True, False, True, False] and g2["attn_cap"] == 50.0 and g2["final_cap"] == 30.0,
               "gemma2 defaults: even layers slide, caps 50/30")
    good &= ok(g3["sliding"] == [True] * 5 + [False, True] and g3["attn_cap"] is None and g3["local_theta"] == 1e4,
               "gemma3 defaults: pattern 6, no caps, local base 1e4")
    # A 1-layer model: position p depends on token j iff p - W < j <= p on a sliding layer.
    rng = np.random.default_rng(0)
    cfgj = {"architectures": ["Gemma3ForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 6,
            "vocab_size": 9, "sliding_window": 3, "query_pre_attn_scalar": 4, "layer_types": ["sliding_attention"]}
    cfg = parse_config(cfgj)
    t = {"model.embed_tokens.weight": rng.normal(size=(9, 8)), "model.norm.weight": 0.1 * rng.normal(size=8)}
    p = "model.layers.0."
    for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
              "post_feedforward_layernorm"):
        t[p + n + ".weight"] = 0.1 * rng.normal(size=8)
    shapes = {"self_attn.q_proj": (8, 8), "self_attn.k_proj": (4, 8), "self_attn.v_proj": (4, 8),
              "self_attn.o_proj": (8, 8), "mlp.gate_proj": (6, 8), "mlp.up_proj": (6, 8), "mlp.down_proj": (8, 6)}
    t.update({p + n + ".weight": rng.normal(size=sh) for n, sh in shapes.items()})
    for n in ("q_norm", "k_norm"):
        t[p + "self_attn." + n + ".weight"] = 0.1 * rng.normal(size=4)
    model = build_model(cfg, t)
    ids = rng.integers(0, 9, size=7)
    base = forward(model, ids)
    good &= ok(np.allclose(base, _naive_forward(model, ids), rtol=1e-12, atol=1e-12),
               "forward == naive: gemma3 sliding")
    for arch, over in (("Gemma2ForCausalLM", {"layer_types": ["sliding_attention"], "attn_logit_softcapping": 0.5,
                                              "final_logit_softcapping": 1.5}),
                       ("Gemma3ForCausalLM", {"layer_types": ["full_attention"],
                                              "rope_scaling": {"rope_type": "linear", "factor": 4.0}})):
        c2 = parse_config(dict(cfgj, architectures=[arch], **over))
        t2 = {k: v for k, v in t.items() if arch == "Gemma3ForCausalLM" or "_norm." not in k}
        m2 = build_model(c2, t2)
        good &= ok(np.allclose(forward(m2, ids), _naive_forward(m2, ids), rtol=1e-12, atol=1e-12),
                   f"forward == naive: {arch} {over}")
    dep = np.zeros((7, 7), bool)
    for j in range(7):
        ids2 = ids.copy()
        ids2[j] = (ids2[j] + 1) % 9
        dep[:, j] = np.any(np.abs(forward(model, ids2) - base) > 1e-12, axis=1)
    good &= ok(np.array_equal(dep, reference.attention_mask(7, 3)), "sliding layer dependence pattern")
    # Zero norm weights are the identity scale (1 + 0), not zero.
    z = gemma_rms_norm(np.array([[3.0, 4.0]]), np.zeros(2), cfg)
    good &= ok(np.allclose(z, [[3 / math.sqrt(12.5 + cfg["eps"]), 4 / math.sqrt(12.5 + cfg["eps"])]]),
               "(1 + w) norm with w = 0")
    print("self-check", "passed" if good else "FAILED")
    return good


if __name__ == "__main__":
    sys.exit(0 if self_check() else 1)
