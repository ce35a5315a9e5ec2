#!/usr/bin/python3
"""Independent NumPy reference forward pass for DeepSeek-V2 / V3 decoders (float64).

Written from the published multi-head latent attention (MLA) equations (DeepSeek-V2
paper, section 2.1; transformers' modeling_deepseek_v2.py / DeepseekV2Config), not from
Tessera's sources.  Per layer, token t, head h (d_n = qk_nope_head_dim, d_r =
qk_rope_head_dim, d_v = v_head_dim, r = kv_lora_rank):

    q_t        = q_proj x  or  q_b_proj RMSNorm(q_a_proj x)        head h = [q_n | q_r]
    [c~ | k_r] = kv_a_proj_with_mqa x;  c = RMSNorm(c~)             (k_r: one for all heads)
    q_r, k_r   rotated in interleaved pairs (2i, 2i+1) by position
    W_UK[h], W_UV[h] = rows [h(d_n+d_v), +d_n) and the next d_v rows of kv_b_proj
    expanded:  k_h,j = [W_UK[h] c_j | k_r,j], v_h,j = W_UV[h] c_j,
               o_h,t = sum_j softmax_j(scale q_h,t . k_h,j) v_h,j
    absorbed:  q^_h,t = [W_UK[h]^T q_n | q_r];  o_h,t = W_UV[h] sum_j softmax_j(scale q^ . [c_j | k_r,j]) c_j
    scale      = (d_n + d_r)^-1/2 * mscale(factor, mscale_all_dim)^2 under YaRN
    out        = o_proj [o_0 .. o_{H-1}]

The two forms are equal in exact arithmetic; forward() takes either, and self_check()
shows they agree.  DeepSeekMoE routing (DeepSeek-V3 paper section 2.1.2; transformers'
DeepseekV3 router and vLLM's grouped top-k), per token, from router logits l:

    p   = softmax(l) (scoring_func softmax) or sigmoid(l) elementwise (sigmoid)
    s   = p + e_score_correction_bias (noaux_tc; s only chooses)   else s = p
    groups (group_limited_greedy, noaux_tc): n_group runs of consecutive experts,
          scored by max(s) (group_limited_greedy) or the sum of the two largest s
          (noaux_tc); experts outside the topk_group best groups: s = -inf
    ids = top-k of s (ties: lower id);  w = p[ids] (unbiased)
    w  /= sum(w) + 1e-20 when norm_topk_prob;  w *= routed_scaling_factor
    out = sum_j w_j expert_ids_j(x) + shared_experts(x)   (no gate on the shared FFN)

HF masks the other groups with 0 rather than -inf; the two differ only when biased
scores are negative.  Layers: first_k_dense_replace, moe_layer_freq as in HF.

    model  = load("/path/to/deepseek_checkpoint_dir")
    logits = forward(model, [0, 10, 11], form="expanded")

`python3 reference_deepseek.py` runs its self-checks.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")


def is_deepseek(cfg_json):
    return (cfg_json.get("architectures") or [None])[0] in ARCHS


def parse_config(cj):
    scoring, method = cj.get("scoring_func", "softmax"), cj.get("topk_method", "greedy")
    if scoring not in ("softmax", "sigmoid") or method not in ("greedy", "group_limited_greedy", "noaux_tc"):
        raise ValueError(f"unsupported routing {scoring} / {method}")
    n = cj["num_hidden_layers"]
    nope, rope = cj["qk_nope_head_dim"], cj["qk_rope_head_dim"]
    rs = cj.get("rope_scaling")
    scale = (nope + rope) ** -0.5
    if rs and rs.get("rope_type", rs.get("type")) == "yarn" and rs.get("mscale_all_dim"):
        m = reference.yarn_mscale(rs["factor"], rs["mscale_all_dim"])
        scale *= m * m
    experts = cj.get("n_routed_experts") or 0
    first, freq = cj.get("first_k_dense_replace", 0), cj.get("moe_layer_freq", 1)
    moe = None
    if experts:
        moe = {"experts": experts, "top_k": cj["num_experts_per_tok"], "inter": cj["moe_intermediate_size"],
               "norm": bool(cj.get("norm_topk_prob", False)), "shared": 0,
               "scaling": float(cj.get("routed_scaling_factor", 1.0)),
               "shared_experts": (cj.get("n_shared_experts") or 0) * cj["moe_intermediate_size"],
               "sparse": [i >= first and i % freq == 0 for i in range(n)],
               "scoring": scoring, "method": method,
               "n_group": cj.get("n_group") or 1, "topk_group": cj.get("topk_group") or 1,
               "prefix": "mlp.", "names": ("gate_proj", "up_proj", "down_proj")}
    return {
        "mla": True, "hidden": cj["hidden_size"], "n_layers": n, "n_heads": cj["num_attention_heads"],
        "q_lora": cj.get("q_lora_rank") or 0, "r": cj["kv_lora_rank"], "nope": nope, "rope": rope,
        "v": cj["v_head_dim"], "head_dim": nope + rope, "rot_dim": rope, "vocab": cj["vocab_size"],
        "eps": cj.get("rms_norm_eps", 1e-6), "rope_theta": float(cj.get("rope_theta", 10000.0)),
        "rope_scaling": rs, "max_pos": cj.get("max_position_embeddings", 4096),
        "tie": bool(cj.get("tie_word_embeddings", False)), "attn_scale": scale, "moe": moe,
    }


def layer_shapes(cfg, i):
    E, H, r = cfg["hidden"], cfg["n_heads"], cfg["r"]
    p = f"model.layers.{i}."
    a = p + "self_attn."
    out = {p + "input_layernorm.weight": (E,), p + "post_attention_layernorm.weight": (E,),
           a + "kv_a_proj_with_mqa.weight": (r + cfg["rope"], E), a + "kv_a_layernorm.weight": (r,),
           a + "kv_b_proj.weight": (H * (cfg["nope"] + cfg["v"]), r), a + "o_proj.weight": (E, H * cfg["v"])}
    qd = H * cfg["head_dim"]
    if cfg["q_lora"]:
        out.update({a + "q_a_proj.weight": (cfg["q_lora"], E), a + "q_a_layernorm.weight": (cfg["q_lora"],),
                    a + "q_b_proj.weight": (qd, cfg["q_lora"])})
    else:
        out[a + "q_proj.weight"] = (qd, E)
    return out


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = parse_config(json.load(f))
    return build_model(cfg, reference.read_checkpoint_tensors(model_dir))


def build_model(cfg, tensors):
    expect = reference.end_tensor_shapes(cfg)
    for i in range(cfg["n_layers"]):
        expect.update(layer_shapes(cfg, i))
        p = f"model.layers.{i}.mlp."
        if reference.is_sparse(cfg, i):
            expect.update(reference.moe_tensor_shapes(cfg, i))
            m, E = cfg["moe"], cfg["hidden"]
            if m["method"] == "noaux_tc":
                expect[p + "gate.e_score_correction_bias"] = (m["experts"],)
            if m["shared_experts"]:
                s = p + "shared_experts."
                si = m["shared_experts"]
                expect.update({s + "gate_proj.weight": (si, E), s + "up_proj.weight": (si, E),
                               s + "down_proj.weight": (E, si)})
        else:
            inter = tensors.get(p + "gate_proj.weight", np.zeros((0, 0))).shape[0]
            E = cfg["hidden"]
            expect.update({p + "gate_proj.weight": (inter, E), p + "up_proj.weight": (inter, E),
                           p + "down_proj.weight": (E, inter)})
    w = reference.checked_weights(tensors, expect, cfg["tie"])
    inv_freq, attn_factor = reference.rope_parameters(cfg)
    return {"cfg": cfg, "w": w, "inv_freq": inv_freq, "attn_factor": attn_factor}


def rope_pairs(x, cos, sin):
    """x [T, heads, d_r] rotated in interleaved pairs: (x_2i, x_2i+1) by angle_i.
    cos/sin [T, d_r/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    y = np.empty_like(x)
    y[..., 0::2] = x0 * c - x1 * s
    y[..., 1::2] = x1 * c + x0 * s
    return y


def mla_attention(x, model, i, form):
    """One layer's MLA block on normed input x [T, hidden]; form 'expanded' or 'absorbed'."""
    cfg, w = model["cfg"], model["w"]
    a = f"model.layers.{i}.self_attn."
    T, H, dn, dr, dv, r = x.shape[0], cfg["n_heads"], cfg["nope"], cfg["rope"], cfg["v"], cfg["r"]
    if cfg["q_lora"]:
        qa = reference.rms_norm(reference.linear(x, w[a + "q_a_proj.weight"]), w[a + "q_a_layernorm.weight"], cfg["eps"])
        q = reference.linear(qa, w[a + "q_b_proj.weight"])
    else:
        q = reference.linear(x, w[a + "q_proj.weight"])
    q = q.reshape(T, H, dn + dr)
    kv = reference.linear(x, w[a + "kv_a_proj_with_mqa.weight"])
    c = reference.rms_norm(kv[:, :r], w[a + "kv_a_layernorm.weight"], cfg["eps"])  # [T, r]
    ang = np.outer(np.arange(T, dtype=np.float64), model["inv_freq"])
    cos, sin = np.cos(ang) * model["attn_factor"], np.sin(ang) * model["attn_factor"]
    q_n, q_r = q[..., :dn], rope_pairs(q[..., dn:], cos, sin)
    k_r = rope_pairs(kv[:, None, r:], cos, sin)[:, 0, :]                         # [T, dr]
    kvb = w[a + "kv_b_proj.weight"].reshape(H, dn + dv, r)
    w_uk, w_uv = kvb[:, :dn, :], kvb[:, dn:, :]                                  # [H, dn, r], [H, dv, r]
    allowed = reference.attention_mask(T)
    if form == "expanded":
        k_n = np.einsum("hdr,jr->jhd", w_uk, c)                                  # [T, H, dn]
        v = np.einsum("hdr,jr->jhd", w_uv, c)                                    # [T, H, dv]
        scores = np.einsum("phd,jhd->hpj", q_n, k_n) + np.einsum("phd,jd->hpj", q_r, k_r)
        p = reference.softmax(np.where(allowed[None], scores * cfg["attn_scale"], -np.inf))
        o = np.einsum("hpj,jhd->phd", p, v)
    elif form == "absorbed":
        q_hat = np.concatenate([np.einsum("hdr,phd->phr", w_uk, q_n), q_r], axis=-1)  # [T, H, r + dr]
        rows = np.concatenate([c, k_r], axis=-1)                                 # [T, r + dr]: the cache
        scores = np.einsum("phk,jk->hpj", q_hat, rows)
        p = reference.softmax(np.where(allowed[None], scores * cfg["attn_scale"], -np.inf))
        o_hat = np.einsum("hpj,jr->phr", p, c)
        o = np.einsum("hdr,phr->phd", w_uv, o_hat)
    else:
        raise ValueError(f"unknown MLA form {form}")
    return reference.linear(o.reshape(T, H * dv), w[a + "o_proj.weight"])


def route(logits, m, bias):
    """Expert ids [T, k] and weights [T, k] of DeepSeekMoE routing (module docstring)."""
    if m["scoring"] == "sigmoid":
        p = 1.0 / (1.0 + np.exp(-logits))
    else:
        p = reference.softmax(logits)
    s = p + bias if bias is not None else p.copy()
    T, E = s.shape
    if m["method"] != "greedy":
        grouped = s.reshape(T, m["n_group"], E // m["n_group"])
        if m["method"] == "group_limited_greedy":
            group_score = grouped.max(axis=-1)
        else:
            group_score = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)
        best = np.argsort(-group_score, axis=-1, kind="stable")[:, :m["topk_group"]]
        keep = np.zeros((T, m["n_group"]), dtype=bool)
        np.put_along_axis(keep, best, True, axis=-1)
        s = np.where(np.repeat(keep, E // m["n_group"], axis=-1), s, -np.inf)
    ids = np.argsort(-s, axis=-1, kind="stable")[:, :m["top_k"]]
    weights = np.take_along_axis(p, ids, axis=-1)
    if m["norm"]:
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
    return ids, weights * m["scaling"]


def moe_block(x, model, i):
    """DeepSeekMoE: routed experts weighted by route(), plus the ungated shared experts."""
    m, w = model["cfg"]["moe"], model["w"]
    p = f"model.layers.{i}.mlp."
    ids, weights = route(reference.linear(x, w[p + "gate.weight"]), m, w.get(p + "gate.e_score_correction_bias"))
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j, e in enumerate(ids[t]):
            out[t] += weights[t, j] * reference.swiglu_mlp(x[t:t + 1], w, f"{p}experts.{e}.", lambda n: None)[0]
    if m["shared_experts"]:
        out = out + reference.swiglu_mlp(x, w, p + "shared_experts.", lambda n: None)
    return out


def forward(model, token_ids, form="expanded"):
    """Logits float64 [len, vocab] of one sequence at positions 0..len-1."""
    cfg, w = model["cfg"], model["w"]
    h = w["model.embed_tokens.weight"][np.asarray(token_ids, dtype=np.int64)]
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        h = h + mla_attention(reference.rms_norm(h, w[p + "input_layernorm.weight"], cfg["eps"]), model, i, form)
        x = reference.rms_norm(h, w[p + "post_attention_layernorm.weight"], cfg["eps"])
        h = h + (moe_block(x, model, i) if reference.is_sparse(cfg, i) else reference.swiglu_mlp(x, w, p + "mlp.", w.get))
    return reference.linear(reference.rms_norm(h, w["model.norm.weight"], cfg["eps"]), w["lm_head.weight"])


def self_check():
    """The expanded and absorbed forms agree (both q_lora variants), and the interleaved
    rope is a rotation (norm-preserving, position 0 the identity)."""
    rng = np.random.default_rng(7)
    ok = True
    for q_lora in (0, 12):
        cj = {"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 24, "num_hidden_layers": 1,
              "num_attention_heads": 3, "q_lora_rank": q_lora or None, "kv_lora_rank": 10, "qk_nope_head_dim": 6,
              "qk_rope_head_dim": 4, "v_head_dim": 5, "vocab_size": 40, "intermediate_size": 16,
              "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 16,
                               "mscale": 0.707, "mscale_all_dim": 0.707}}
        cfg = parse_config(cj)
        shapes = {**reference.end_tensor_shapes(cfg), **layer_shapes(cfg, 0),
                  "model.layers.0.mlp.gate_proj.weight": (16, 24), "model.layers.0.mlp.up_proj.weight": (16, 24),
                  "model.layers.0.mlp.down_proj.weight": (24, 16)}
        model = build_model(cfg, {k: rng.standard_normal(s) * 0.3 for k, s in shapes.items()})
        ids = rng.integers(0, 40, size=9)
        e, a = forward(model, ids, "expanded"), forward(model, ids, "absorbed")
        rel = np.max(np.abs(e - a)) / np.max(np.abs(e))
        print(f"  q_lora {q_lora}: expanded vs absorbed max rel {rel:.1e}")
        ok &= rel < 1e-12
    # Routing: group max and top-2 sum choose different groups; the bias chooses, never weighs.
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    m = {"scoring": "sigmoid", "method": "group_limited_greedy", "n_group": 2, "topk_group": 1, "top_k": 1,
         "norm": False, "scaling": 1.0}
    ell = logit(np.array([[0.9, 0.1, 0.6, 0.6]]))
    ok &= route(ell, m, None)[0].tolist() == [[0]]
    ok &= route(ell, dict(m, method="noaux_tc"), None)[0].tolist() == [[2]]
    ids, w = route(ell, dict(m, method="greedy", top_k=2), np.array([0.0, 2.0, 0.0, 0.0]))
    ok &= ids.tolist() == [[1, 0]] and np.allclose(w, [[0.1, 0.9]])
    print(f"  routing hand cases: {'ok' if ok else 'FAIL'}")
    x = rng.standard_normal((5, 2, 8))
    ang = np.outer(np.arange(5.0), [1.0, 0.1, 0.01, 0.001])
    y = rope_pairs(x, np.cos(ang), np.sin(ang))
    ok &= bool(np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1)) and np.allclose(y[0], x[0]))
    return bool(ok)


if __name__ == "__main__":
    good = self_check()
    print("PASS" if good else "FAIL")
    sys.exit(0 if good else 1)
