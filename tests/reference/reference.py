#!/usr/bin/python3
"""Independent NumPy reference forward pass for HF decoder checkpoints (float64).

Written from the published model equations of Hugging Face transformers'
Llama / Mistral / Qwen2 / Qwen3, Phi-3 (fused qkv_proj / gate_up_proj, partial
rotary, LongRoPE) and the mixture-of-experts Mixtral / Qwen2-MoE /
Qwen3-MoE (modeling_*.py, modeling_rope_utils.py), not from Tessera's sources.  One function per equation; everything is computed in float64
on weights upcast from F32/F16/BF16.

    model  = load("/path/to/hf_checkpoint_dir")
    logits = forward(model, [1, 2, 3])        # float64 [len, vocab], positions 0..len-1

`python3 reference.py` runs the self-checks (no checkpoint needed).
"""
import json
import math
import os
import struct
import sys

import numpy as np

ARCHS = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Phi3ForCausalLM": "phi3",
}
# The dense architecture whose attention (bias, q/k norm, window rules) each MoE one shares.
ATTENTION_OF = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}

# --------------------------------------------------------------------------- safetensors

_NP_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
              "F64": np.dtype("<f8"), "U8": np.dtype("u1")}  # U8: MXFP4 blocks/scales (gpt-oss)


def read_safetensors(path):
    """{name: float64 array} from one .safetensors file (u64 LE header length, JSON header, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _NP_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        arr = np.frombuffer(data[b:e], dtype=_NP_DTYPES[dt])
        if arr.size != math.prod(shape):
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        if dt == "BF16":  # bf16 is the high half of an IEEE f32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float64).reshape(shape)
    return out


def read_checkpoint_tensors(model_dir):
    """All tensors of model.safetensors or of the shards listed in model.safetensors.index.json."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for fname in sorted(set(weight_map.values())):
            for name, arr in read_safetensors(os.path.join(model_dir, fname)).items():
                if weight_map.get(name) != fname:
                    raise ValueError(f"{fname}: tensor {name} not mapped to this shard by the index")
                tensors[name] = arr
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError(f"index names tensors absent from their shards: {sorted(missing)[:5]}")
        return tensors
    if os.path.exists(single):
        return read_safetensors(single)
    raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")


# --------------------------------------------------------------------------- config


def parse_config(cfg):
    """The hyper-parameters of the forward pass, with HF's per-architecture defaults."""
    moe_arch = ARCHS.get((cfg.get("architectures") or [None])[0])
    if moe_arch is None:
        raise ValueError(f"unsupported architectures {cfg.get('architectures')}")
    arch = ATTENTION_OF.get(moe_arch, moe_arch)
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported hidden_act {cfg.get('hidden_act')}")
    n_heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        # Qwen3Config's own default is 128; the others derive it from the hidden size.
        head_dim = 128 if arch == "qwen3" and "head_dim" not in cfg else hidden // n_heads
    rope = cfg.get("rope_parameters")  # transformers v5 spelling: theta inside
    if isinstance(rope, dict):
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        scaling = rope
    else:
        theta = cfg.get("rope_theta", 10000.0)
        scaling = cfg.get("rope_scaling")
    # Phi3RotaryEmbedding: the first int(head_dim * partial_rotary_factor) dims rotate.
    prf = cfg.get("partial_rotary_factor", 1.0)
    if prf != 1.0 and arch != "phi3":
        raise ValueError("partial_rotary_factor != 1 is only Phi-3's")
    rot_dim = int(head_dim * prf)
    n_layers = cfg["num_hidden_layers"]
    # Sliding window: which layers use it, and its width W.
    if arch == "mistral":
        # MistralConfig defaults the window to 4096, MixtralConfig to None.
        window = cfg.get("sliding_window", None if moe_arch == "mixtral" else 4096)
        windowed = [window is not None] * n_layers
    elif arch == "phi3":  # Phi3Config default None; when set, every layer
        window = cfg.get("sliding_window")
        windowed = [window is not None] * n_layers
    elif arch in ("qwen2", "qwen3"):
        window = cfg.get("sliding_window", 4096) if cfg.get("use_sliding_window", False) else None
        mwl = cfg.get("max_window_layers", 28)
        windowed = [window is not None and i >= mwl for i in range(n_layers)]
    else:
        window, windowed = None, [False] * n_layers
    attn_bias = bool(cfg.get("attention_bias", False))
    qwen2_bias = bool(cfg.get("qkv_bias", True)) if moe_arch == "qwen2_moe" else True
    return {
        "arch": arch,
        "moe_arch": moe_arch,
        "moe": parse_moe(cfg, moe_arch, n_layers),
        "hidden": hidden,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "n_kv_heads": cfg.get("num_key_value_heads") or n_heads,
        "head_dim": head_dim,
        "rot_dim": rot_dim,
        # LongRoPE: factor set chosen per deployment from its max model length
        # (load(..., max_model_len)); the top-level original context is Phi-3's spelling.
        "original_max_pos": cfg.get("original_max_position_embeddings"),
        "max_model_len": cfg.get("max_position_embeddings"),
        "fused": arch == "phi3",
        "vocab": cfg["vocab_size"],
        "eps": cfg.get("rms_norm_eps", 1e-6),
        "rope_theta": float(theta),
        "rope_scaling": scaling,
        "max_pos": cfg.get("max_position_embeddings"),
        "tie": bool(cfg.get("tie_word_embeddings", False)),
        # q/k/v bias: Qwen2 always; others by attention_bias.  o bias: attention_bias (not Qwen2).
        "qkv_bias": (arch == "qwen2" and qwen2_bias) or attn_bias,
        "o_bias": arch != "qwen2" and attn_bias,
        "mlp_bias": arch == "llama" and bool(cfg.get("mlp_bias", False)),
        "qk_norm": arch == "qwen3",
        "window": window,
        "windowed": windowed,
    }


def parse_moe(cfg, moe_arch, n_layers):
    """MoE hyper-parameters (None for dense models) and which layers are sparse.

    Mixtral (MixtralSparseMoeBlock): every layer; num_local_experts, num_experts_per_tok,
    experts intermediate_size wide, top-k weights always renormalised.
    Qwen2-MoE / Qwen3-MoE (Qwen2MoeDecoderLayer): layer i is sparse when i is not in
    mlp_only_layers and (i + 1) % decoder_sparse_step == 0; norm_topk_prob (default False);
    Qwen2-MoE adds a shared expert scaled by sigmoid(shared_expert_gate(x)).
    """
    if moe_arch == "mixtral":
        return {"experts": cfg.get("num_local_experts", 8), "top_k": cfg.get("num_experts_per_tok", 2),
                "inter": cfg["intermediate_size"], "norm": True, "shared": 0,
                "sparse": [True] * n_layers, "prefix": "block_sparse_moe.",
                "names": ("w1", "w3", "w2")}
    if moe_arch not in ("qwen2_moe", "qwen3_moe"):
        return None
    step = cfg.get("decoder_sparse_step", 1)
    only = cfg.get("mlp_only_layers", []) or []
    n_exp = cfg["num_experts"]
    return {"experts": n_exp, "top_k": cfg["num_experts_per_tok"], "inter": cfg["moe_intermediate_size"],
            "norm": bool(cfg.get("norm_topk_prob", False)),
            "shared": cfg.get("shared_expert_intermediate_size", 0) if moe_arch == "qwen2_moe" else 0,
            "sparse": [i not in only and n_exp > 0 and (i + 1) % step == 0 for i in range(n_layers)],
            "prefix": "mlp.", "names": ("gate_proj", "up_proj", "down_proj")}


def moe_tensor_shapes(cfg, i):
    """{name: shape} of layer i's sparse MoE block."""
    m, E = cfg["moe"], cfg["hidden"]
    p = f"model.layers.{i}." + m["prefix"]
    g, u, d = m["names"]
    out = {p + "gate.weight": (m["experts"], E)}
    for e in range(m["experts"]):
        out.update({f"{p}experts.{e}.{g}.weight": (m["inter"], E), f"{p}experts.{e}.{u}.weight": (m["inter"], E),
                    f"{p}experts.{e}.{d}.weight": (E, m["inter"])})
    if m["shared"]:
        s = f"model.layers.{i}.mlp.shared_expert."
        out.update({s + "gate_proj.weight": (m["shared"], E), s + "up_proj.weight": (m["shared"], E),
                    s + "down_proj.weight": (E, m["shared"]), f"model.layers.{i}.mlp.shared_expert_gate.weight": (1, E)})
    return out


def is_sparse(cfg, i):
    return cfg["moe"] is not None and cfg["moe"]["sparse"][i]


def load(model_dir, max_model_len=None):
    """{'cfg': parsed config, 'w': {name: float64 array}, 'inv_freq', 'attn_factor'}.

    max_model_len: the deployment's longest sequence (default max_position_embeddings);
    LongRoPE uses its long factors when it exceeds the original context."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = parse_config(json.load(f))
    if max_model_len:
        cfg["max_model_len"] = max_model_len
    return build_model(cfg, read_checkpoint_tensors(model_dir))


def split_fused(cfg, tensors):
    """Phi-3: qkv_proj rows are [q | k | v] and gate_up_proj rows [gate | up]
    (Phi3Attention slices, Phi3MLP chunk(2)); returned as the separate projections."""
    H, KV, D = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    out = dict(tensors)
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        qkv = out.pop(p + "self_attn.qkv_proj.weight", None)
        if qkv is None or qkv.shape[0] != (H + 2 * KV) * D:
            raise ValueError(f"tensor {p}self_attn.qkv_proj.weight: missing or not {(H + 2 * KV) * D} rows")
        out[p + "self_attn.q_proj.weight"] = qkv[:H * D]
        out[p + "self_attn.k_proj.weight"] = qkv[H * D:(H + KV) * D]
        out[p + "self_attn.v_proj.weight"] = qkv[(H + KV) * D:]
        gu = out.pop(p + "mlp.gate_up_proj.weight", None)
        if gu is None or gu.shape[0] % 2:
            raise ValueError(f"tensor {p}mlp.gate_up_proj.weight: missing or odd row count")
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gu[:gu.shape[0] // 2], gu[gu.shape[0] // 2:]
    return out


def end_tensor_shapes(cfg):
    """Shapes of the tensors outside the layers: embedding, final norm, untied lm_head."""
    V, E = cfg["vocab"], cfg["hidden"]
    return {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,),
            **({} if cfg["tie"] else {"lm_head.weight": (V, E)})}


def checked_weights(tensors, expect, tie):
    """The tensors, once each name in `expect` is present with its shape and nothing else
    is (a stored lm_head.weight is tolerated beside tied embeddings); when tied,
    lm_head.weight is the embedding."""
    for name, shape in expect.items():
        if name not in tensors:
            raise ValueError(f"missing tensor {name}")
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"tensor {name}: shape {tensors[name].shape}, expected {shape}")
    extra = set(tensors) - set(expect) - ({"lm_head.weight"} if tie else set())
    if extra:
        raise ValueError(f"unexpected tensors for this config: {sorted(extra)[:5]}")
    w = dict(tensors)
    if tie:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    return w


def build_model(cfg, tensors):
    """Checks names and shapes against the config, resolves tying and rope tables."""
    H, KV, D, E = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["hidden"]
    if cfg.get("fused"):
        tensors = split_fused(cfg, tensors)
    if H % KV:
        raise ValueError(f"num_attention_heads {H} not a multiple of num_key_value_heads {KV}")
    expect = end_tensor_shapes(cfg)
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        inter = tensors.get(p + "mlp.gate_proj.weight", np.zeros((0, 0))).shape[0]
        dense_mlp = {p + "mlp.gate_proj.weight": (inter, E), p + "mlp.up_proj.weight": (inter, E),
                     p + "mlp.down_proj.weight": (E, inter)}
        expect.update(moe_tensor_shapes(cfg, i) if is_sparse(cfg, i) else dense_mlp)
        expect.update({
            p + "input_layernorm.weight": (E,),
            p + "post_attention_layernorm.weight": (E,),
            p + "self_attn.q_proj.weight": (H * D, E),
            p + "self_attn.k_proj.weight": (KV * D, E),
            p + "self_attn.v_proj.weight": (KV * D, E),
            p + "self_attn.o_proj.weight": (E, H * D),
        })
        if cfg["qkv_bias"]:
            expect.update({p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (KV * D,),
                           p + "self_attn.v_proj.bias": (KV * D,)})
        if cfg["o_bias"]:
            expect[p + "self_attn.o_proj.bias"] = (E,)
        if cfg["mlp_bias"]:
            expect.update({p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                           p + "mlp.down_proj.bias": (E,)})
        if cfg["qk_norm"]:
            expect.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    w = checked_weights(tensors, expect, cfg["tie"])
    inv_freq, attn_factor = rope_parameters(cfg)
    return {"cfg": cfg, "w": w, "inv_freq": inv_freq, "attn_factor": attn_factor}


# --------------------------------------------------------------------------- RoPE frequencies


def default_inv_freq(theta, d):
    """inv_freq_i = 1 / theta^(2i/d), i = 0..d/2-1."""
    return 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)


def linear_inv_freq(inv_freq, factor):
    """Position interpolation: every frequency divided by factor."""
    return inv_freq / factor


def llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor, original_max_pos):
    """Llama 3.1: long wavelengths divided by factor, short kept, the band between smoothed."""
    low_freq_wavelen = original_max_pos / low_freq_factor
    high_freq_wavelen = original_max_pos / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, scaled)


def yarn_mscale(scale, mscale=1.0):
    """YaRN attention temperature: 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_dim(n_rotations, d, theta, max_pos):
    """Index i (of d/2 pairs) whose frequency makes n_rotations turns over max_pos positions."""
    return d * math.log(max_pos / (n_rotations * 2 * math.pi)) / (2 * math.log(theta))


def yarn_inv_freq(theta, d, rs, max_pos):
    """HF _compute_yarn_parameters: (inv_freq, attention_factor)."""
    factor = rs["factor"]
    orig = rs.get("original_max_position_embeddings") or max_pos
    attention_factor = rs.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1
    low = yarn_correction_dim(beta_fast, d, theta, orig)
    high = yarn_correction_dim(beta_slow, d, theta, orig)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # 1: keep the original frequency, 0: interpolate (divide by factor)
    pos_freqs = theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


def longrope_inv_freq(theta, d, rs, max_pos, original_max_pos, max_model_len):
    """HF _compute_longrope_parameters: inv_freq_i = 1 / (ext_i * theta^(2i/d)), ext the long
    factors when the deployment's max_model_len exceeds the original context (Tessera's and
    llama.cpp's choice, once per deployment), else the short ones; attention factor
    sqrt(1 + ln(factor) / ln(original)) with factor = max_pos / original unless given."""
    orig = rs.get("original_max_position_embeddings") or original_max_pos
    ext = rs["long_factor"] if max_model_len > orig else rs["short_factor"]
    if len(ext) != d // 2:
        raise ValueError(f"longrope factors have {len(ext)} entries, expected {d // 2}")
    factor = rs.get("factor") or max_pos / orig
    attention_factor = rs.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    inv_freq = 1.0 / (np.asarray(ext, dtype=np.float64) * theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    return inv_freq, float(attention_factor)


def rope_parameters(cfg):
    """(inv_freq [rot_dim/2], attention_factor) for the config's rope_scaling."""
    d, theta, rs = cfg.get("rot_dim", cfg["head_dim"]), cfg["rope_theta"], cfg["rope_scaling"]
    inv_freq = default_inv_freq(theta, d)
    kind = None if not rs else rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return inv_freq, 1.0
    if kind == "linear":
        return linear_inv_freq(inv_freq, rs["factor"]), 1.0
    if kind == "llama3":
        return llama3_inv_freq(inv_freq, rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"],
                               rs["original_max_position_embeddings"]), 1.0
    if kind == "yarn":
        return yarn_inv_freq(theta, d, rs, cfg["max_pos"])
    if kind in ("longrope", "su"):
        return longrope_inv_freq(theta, d, rs, cfg["max_pos"], cfg["original_max_pos"], cfg["max_model_len"])
    raise ValueError(f"unsupported rope type {kind}")


# --------------------------------------------------------------------------- layers


def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def linear(x, w, b=None):
    """x W^T + b (HF nn.Linear, W is [out, in])."""
    y = x @ w.T
    return y if b is None else y + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu_mlp(x, w, p, b):
    """down(silu(gate(x)) * up(x))."""
    g = linear(x, w[p + "gate_proj.weight"], b(p + "gate_proj.bias"))
    u = linear(x, w[p + "up_proj.weight"], b(p + "up_proj.bias"))
    return linear(silu(g) * u, w[p + "down_proj.weight"], b(p + "down_proj.bias"))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def top_k_experts(probs, k):
    """Indices [T, k] of the k largest probabilities per row, largest first, ties to the lower index."""
    return np.argsort(-probs, axis=-1, kind="stable")[:, :k]


def sparse_moe_block(x, model, i):
    """HF *SparseMoeBlock: softmax(router(x)) -> top-k -> (renormalise) -> sum_j w_j expert_j(x)
    (+ sigmoid(shared_expert_gate(x)) * shared_expert(x) for Qwen2-MoE)."""
    cfg, w = model["cfg"], model["w"]
    m = cfg["moe"]
    p = f"model.layers.{i}." + m["prefix"]
    g, u, d = m["names"]
    probs = softmax(linear(x, w[p + "gate.weight"]))        # [T, E]
    chosen = top_k_experts(probs, m["top_k"])                # [T, k]
    weights = np.take_along_axis(probs, chosen, axis=-1)     # [T, k]
    if m["norm"]:
        weights = weights / np.sum(weights, axis=-1, keepdims=True)
    out = np.zeros_like(x)
    for e in np.unique(chosen):
        rows, slots = np.nonzero(chosen == e)
        ep = f"{p}experts.{e}."
        xe = x[rows]
        ye = linear(silu(linear(xe, w[ep + g + ".weight"])) * linear(xe, w[ep + u + ".weight"]), w[ep + d + ".weight"])
        np.add.at(out, rows, weights[rows, slots][:, None] * ye)
    if m["shared"]:
        s = f"model.layers.{i}.mlp.shared_expert."
        shared = swiglu_mlp(x, w, s, lambda n: None)
        out = out + sigmoid(linear(x, w[f"model.layers.{i}.mlp.shared_expert_gate.weight"])) * shared
    return out


def rope_cos_sin(positions, inv_freq, attn_factor):
    """cos, sin [T, D]: angle p*inv_freq_i repeated for both halves, scaled by attention_factor."""
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * attn_factor, np.sin(emb) * attn_factor


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] over the last axis (halves, not interleaved pairs)."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def apply_rope(x, cos, sin):
    """x [T, heads, D] rotated per position: x*cos + rotate_half(x)*sin over the first
    cos.shape[-1] dims (partial rotary, Phi3's apply_rotary_pos_emb); the rest pass through."""
    r = cos.shape[-1]
    xr = x[..., :r]
    return np.concatenate([xr * cos[:, None, :] + rotate_half(xr) * sin[:, None, :], x[..., r:]], axis=-1)


def attention_mask(n, window=None):
    """allowed[p, j]: causal j <= p, and with a window W also p - W < j."""
    p = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= p
    if window is not None:
        allowed &= j > p - window
    return allowed


def softmax(s, axis=-1):
    e = np.exp(s - np.max(s, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def kv_head_of(q_head, n_heads, n_kv_heads):
    """GQA (HF repeat_kv): query head h reads kv head h // (n_heads / n_kv_heads)."""
    return q_head // (n_heads // n_kv_heads)


def scaled_dot_product_attention(q, k, v, allowed):
    """q [T,H,D], k/v [T,KV,D] -> [T,H,D]; softmax(q k^T / sqrt(D) masked) v per head."""
    T, H, D = q.shape
    KV = k.shape[1]
    kv_index = np.array([kv_head_of(h, H, KV) for h in range(H)])
    kh, vh = k[:, kv_index, :], v[:, kv_index, :]            # [T, H, D]
    scores = np.einsum("phd,jhd->hpj", q, kh) / math.sqrt(D)  # [H, T, T]
    scores = np.where(allowed[None], scores, -np.inf)
    return np.einsum("hpj,jhd->phd", softmax(scores), vh)


def self_attention(x, model, i, cos, sin):
    """One layer's attention block (input already normed)."""
    cfg, w = model["cfg"], model["w"]
    p = f"model.layers.{i}.self_attn."
    b = lambda n: w.get(n)  # noqa: E731  (biases present only when the config says so)
    T, H, KV, D = x.shape[0], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    q = linear(x, w[p + "q_proj.weight"], b(p + "q_proj.bias")).reshape(T, H, D)
    k = linear(x, w[p + "k_proj.weight"], b(p + "k_proj.bias")).reshape(T, KV, D)
    v = linear(x, w[p + "v_proj.weight"], b(p + "v_proj.bias")).reshape(T, KV, D)
    if cfg["qk_norm"]:  # Qwen3: per-head RMSNorm over head_dim, before RoPE
        q = rms_norm(q, w[p + "q_norm.weight"], cfg["eps"])
        k = rms_norm(k, w[p + "k_norm.weight"], cfg["eps"])
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    window = cfg["window"] if cfg["windowed"][i] else None
    o = scaled_dot_product_attention(q, k, v, attention_mask(T, window))
    return linear(o.reshape(T, H * D), w[p + "o_proj.weight"], b(p + "o_proj.bias"))


def decoder_layer(h, model, i, cos, sin):
    """Pre-norm residual block: h += attn(norm(h)); h += mlp(norm(h))."""
    cfg, w = model["cfg"], model["w"]
    p = f"model.layers.{i}."
    h = h + self_attention(rms_norm(h, w[p + "input_layernorm.weight"], cfg["eps"]), model, i, cos, sin)
    x = rms_norm(h, w[p + "post_attention_layernorm.weight"], cfg["eps"])
    if is_sparse(cfg, i):
        return h + sparse_moe_block(x, model, i)
    return h + swiglu_mlp(x, w, p + "mlp.", w.get)


def forward(model, token_ids):
    """Logits float64 [len, vocab] of one sequence at positions 0..len-1."""
    cfg, w = model["cfg"], model["w"]
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= cfg["vocab"]:
        raise ValueError("token_ids must be a non-empty list of ids < vocab_size")
    h = w["model.embed_tokens.weight"][ids]
    cos, sin = rope_cos_sin(np.arange(len(ids)), model["inv_freq"], model["attn_factor"])
    for i in range(cfg["n_layers"]):
        h = decoder_layer(h, model, i, cos, sin)
    return linear(rms_norm(h, w["model.norm.weight"], cfg["eps"]), w["lm_head.weight"])


# --------------------------------------------------------------------------- self-checks


def write_safetensors(path, tensors, dtype="F32"):
    """Minimal writer (for the self-check and tests): {name: array} in one dtype."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "F32":
            raw = a.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = a.astype("<f2").tobytes()
        elif dtype == "BF16":  # round to nearest even
            u = a.view(np.uint32).astype(np.uint64)
            raw = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")).tobytes()
        else:
            raise ValueError(dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _tiny_config(arch="llama", **over):
    cfg = {"architectures": [{v: k for k, v in ARCHS.items()}[arch]], "hidden_size": 16,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
           "intermediate_size": 24, "vocab_size": 11, "rms_norm_eps": 1e-5, "rope_theta": 100.0,
           "max_position_embeddings": 64, "tie_word_embeddings": False}
    if arch == "mistral":
        cfg["sliding_window"] = None
    cfg.update(over)
    return cfg


def _random_tensors(cfg, rng):
    c = parse_config(cfg)
    E, H, KV, D, V, I = c["hidden"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["vocab"], 24
    t = {"model.embed_tokens.weight": rng.normal(size=(V, E)), "model.norm.weight": 1 + 0.1 * rng.normal(size=E),
         "lm_head.weight": rng.normal(size=(V, E))}
    for i in range(c["n_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": 1 + 0.1 * rng.normal(size=E),
                  p + "post_attention_layernorm.weight": 1 + 0.1 * rng.normal(size=E),
                  p + "self_attn.q_proj.weight": rng.normal(size=(H * D, E)) / 2,
                  p + "self_attn.k_proj.weight": rng.normal(size=(KV * D, E)) / 2,
                  p + "self_attn.v_proj.weight": rng.normal(size=(KV * D, E)) / 2,
                  p + "self_attn.o_proj.weight": rng.normal(size=(E, H * D)) / 4})
        if is_sparse(c, i):
            t.update({n: rng.normal(size=shape) / 4 for n, shape in moe_tensor_shapes(c, i).items()})
        else:
            t.update({p + "mlp.gate_proj.weight": rng.normal(size=(I, E)) / 4,
                      p + "mlp.up_proj.weight": rng.normal(size=(I, E)) / 4,
                      p + "mlp.down_proj.weight": rng.normal(size=(E, I)) / 4})
        if c["qkv_bias"]:
            t.update({p + "self_attn.q_proj.bias": rng.normal(size=H * D),
                      p + "self_attn.k_proj.bias": rng.normal(size=KV * D),
                      p + "self_attn.v_proj.bias": rng.normal(size=KV * D)})
        if c["o_bias"]:
            t[p + "self_attn.o_proj.bias"] = rng.normal(size=E)
        if c["mlp_bias"]:
            t.update({p + "mlp.gate_proj.bias": rng.normal(size=I), p + "mlp.up_proj.bias": rng.normal(size=I),
                      p + "mlp.down_proj.bias": rng.normal(size=E)})
        if c["qk_norm"]:
            t[p + "self_attn.q_norm.weight"] = 1 + 0.1 * rng.normal(size=D)
            t[p + "self_attn.k_norm.weight"] = 1 + 0.1 * rng.normal(size=D)
        if c["fused"]:
            t[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [t.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            t[p + "mlp.gate_up_proj.weight"] = np.concatenate([t.pop(p + f"mlp.{n}_proj.weight") for n in ("gate", "up")])
    return t


def _naive_forward(model, ids):
    """Second, loop-per-position/per-head implementation of the same equations."""
    cfg, w = model["cfg"], model["w"]
    H, KV, D, eps = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["eps"]
    half = len(model["inv_freq"])  # rotary dims / 2

    def rot(vec, pos):  # pairs (i, i + rot/2) rotated by pos * inv_freq_i; dims >= rot unchanged
        out = vec.copy()
        for i in range(half):
            a = pos * model["inv_freq"][i]
            c, s = math.cos(a) * model["attn_factor"], math.sin(a) * model["attn_factor"]
            out[i] = vec[i] * c - vec[i + half] * s
            out[i + half] = vec[i + half] * c + vec[i] * s
        return out

    def norm(v, g):
        return v / math.sqrt(float(np.dot(v, v)) / len(v) + eps) * g

    def lin(name, x):
        y = w[name + ".weight"] @ x
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def swiglu(prefix, names, x):
        g_, u_ = lin(prefix + names[0], x), lin(prefix + names[1], x)
        return lin(prefix + names[2], g_ / (1 + np.exp(-g_)) * u_)

    def naive_moe(x, li):  # one token: probabilities, sorted picks, weighted sum in pick order
        m = cfg["moe"]
        p = f"model.layers.{li}." + m["prefix"]
        logits = [float(w[p + "gate.weight"][e] @ x) for e in range(m["experts"])]
        top = max(logits)
        ex = [math.exp(v - top) for v in logits]
        probs = [v / sum(ex) for v in ex]
        picks = sorted(range(m["experts"]), key=lambda e: (-probs[e], e))[:m["top_k"]]
        total = sum(probs[e] for e in picks) if m["norm"] else 1.0
        out = sum(probs[e] / total * swiglu(f"{p}experts.{e}.", m["names"], x) for e in picks)
        if m["shared"]:
            sp = f"model.layers.{li}.mlp."
            gate = float(w[sp + "shared_expert_gate.weight"][0] @ x)
            out = out + swiglu(sp + "shared_expert.", ("gate_proj", "up_proj", "down_proj"), x) / (1 + math.exp(-gate))
        return out

    T = len(ids)
    hs = [w["model.embed_tokens.weight"][t].copy() for t in ids]
    for li in range(cfg["n_layers"]):
        p = f"model.layers.{li}."
        xs = [norm(h, w[p + "input_layernorm.weight"]) for h in hs]
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            q = lin(p + "self_attn.q_proj", x).reshape(H, D)
            k = lin(p + "self_attn.k_proj", x).reshape(KV, D)
            if cfg["qk_norm"]:
                q = np.stack([norm(qh, w[p + "self_attn.q_norm.weight"]) for qh in q])
                k = np.stack([norm(kh, w[p + "self_attn.k_norm.weight"]) for kh in k])
            qs.append(np.stack([rot(qh, pos) for qh in q]))
            ks.append(np.stack([rot(kh, pos) for kh in k]))
            vs.append(lin(p + "self_attn.v_proj", x).reshape(KV, D))
        W = cfg["window"] if cfg["windowed"][li] else None
        new = []
        for pos in range(T):
            heads = []
            for h in range(H):
                g = h * KV // H
                js = [j for j in range(pos + 1) if W is None or pos - j < W]
                sc = np.array([qs[pos][h] @ ks[j][g] / math.sqrt(D) for j in js])
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                heads.append(sum(pr[n] * vs[j][g] for n, j in enumerate(js)))
            a = lin(p + "self_attn.o_proj", np.concatenate(heads))
            h1 = hs[pos] + a
            x = norm(h1, w[p + "post_attention_layernorm.weight"])
            if is_sparse(cfg, li):
                new.append(h1 + naive_moe(x, li))
                continue
            g_, u_ = lin(p + "mlp.gate_proj", x), lin(p + "mlp.up_proj", x)
            new.append(h1 + lin(p + "mlp.down_proj", g_ / (1 + np.exp(-g_)) * u_))
        hs = new
    return np.stack([w["lm_head.weight"] @ norm(h, w["model.norm.weight"]) for h in hs])


def self_check():
    import tempfile
    rng = np.random.default_rng(0)
    ok = lambda c, m: print(("ok   " if c else "FAIL ") + m) or c  # noqa: E731
    good = True

    # safetensors: round trip in every dtype, sharded index, bf16 decode of exact values.
    with tempfile.TemporaryDirectory() as d:
        cfg = _tiny_config("llama")
        t = _random_tensors(cfg, rng)
        for dt, tol in (("F32", 1e-7), ("F16", 1e-3), ("BF16", 1e-2)):
            write_safetensors(os.path.join(d, "x.safetensors"), t, dt)
            back = read_safetensors(os.path.join(d, "x.safetensors"))
            err = max(np.max(np.abs(back[k] - t[k]) / (np.abs(t[k]) + 1e-30)) for k in t)
            good &= ok(err < tol, f"safetensors {dt} round trip (max rel err {err:.1e})")
        write_safetensors(os.path.join(d, "b.safetensors"), {"v": np.array([1.0, -2.5, 0.15625, 3.0e38])}, "BF16")
        v = read_safetensors(os.path.join(d, "b.safetensors"))["v"]
        good &= ok(list(v[:3]) == [1.0, -2.5, 0.15625] and abs(v[3] / 3.0e38 - 1) < 1e-2, f"bf16 decode {v}")
        names = sorted(t)
        wm = {}
        for s in range(2):
            part = {n: t[n] for n in names[s::2]}
            write_safetensors(os.path.join(d, f"model-{s + 1:05d}-of-00002.safetensors"), part)
            wm.update({n: f"model-{s + 1:05d}-of-00002.safetensors" for n in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        m = load(d)
        good &= ok(all(np.allclose(m["w"][n], t[n], rtol=1e-6) for n in t), "sharded checkpoint load")

    # RoPE: rotate_half pairs i with i + D/2, angle p * theta^(-2i/D).
    inv = default_inv_freq(100.0, 4)  # [1, 0.1]
    c, s = rope_cos_sin([3], inv, 1.0)
    x = np.array([[[1.0, 0.0, 0.0, 0.0]]])
    y = apply_rope(x, c, s)[0, 0]
    good &= ok(np.allclose(y, [math.cos(3), 0, math.sin(3), 0]), f"rope pairing/angle {y}")
    y = apply_rope(np.array([[[0.0, 1.0, 0.0, 0.0]]]), c, s)[0, 0]
    good &= ok(np.allclose(y, [0, math.cos(0.3), 0, math.sin(0.3)]), f"rope 2nd frequency {y}")
    # relative: <R_p q, R_j k> depends on p - j only.
    q, k = rng.normal(size=(1, 1, 8)), rng.normal(size=(1, 1, 8))
    inv8 = default_inv_freq(10000.0, 8)
    dots = []
    for shift in (0, 5, 11):
        cq, sq = rope_cos_sin([7 + shift], inv8, 1.0)
        ck, sk = rope_cos_sin([2 + shift], inv8, 1.0)
        dots.append(float(np.sum(apply_rope(q, cq, sq) * apply_rope(k, ck, sk))))
    good &= ok(np.allclose(dots, dots[0]), f"rope relative-position invariance {dots}")
    # linear factor 2 at position 2p == default at position p.
    a = rope_cos_sin([6], linear_inv_freq(inv8, 2.0), 1.0)
    b = rope_cos_sin([3], inv8, 1.0)
    good &= ok(np.allclose(a, b), "linear rope = positions / factor")
    # llama3: short wavelengths kept, long ones / factor, medium strictly between.
    theta, D = 10000.0, 64
    base = default_inv_freq(theta, D)
    l3 = llama3_inv_freq(base, 8.0, 1.0, 4.0, 64)
    wl = 2 * math.pi / base
    hi, lo, mid = wl < 64 / 4, wl > 64 / 1, (wl >= 16) & (wl <= 64)
    good &= ok(np.array_equal(l3[hi], base[hi]) and np.allclose(l3[lo], base[lo] / 8)
               and np.all((l3[mid] <= base[mid]) & (l3[mid] >= base[mid] / 8)) and hi.any() and lo.any() and mid.any(),
               "llama3 rope bands")
    # llama3 smoothing endpoint: wavelength exactly orig/low gives factor 1/8, orig/high gives 1.
    e = llama3_inv_freq(np.array([2 * math.pi / 16, 2 * math.pi / 4]), 8.0, 1.0, 4.0, 16)
    good &= ok(np.allclose(e, [2 * math.pi / 16 / 8, 2 * math.pi / 4]), f"llama3 band edges {e}")
    # yarn: factor 4, orig 16, D 64, theta 1e4 -> low=floor(dim(32)), high=ceil(dim(1)).
    yi, af = yarn_inv_freq(theta, D, {"factor": 4.0, "original_max_position_embeddings": 16}, 64)
    lo_d = math.floor(D * math.log(16 / (32 * 2 * math.pi)) / (2 * math.log(theta)))
    hi_d = math.ceil(D * math.log(16 / (1 * 2 * math.pi)) / (2 * math.log(theta)))
    good &= ok(lo_d < 0 and hi_d == 4, f"yarn correction range raw ({lo_d}, {hi_d})")
    # pairs i <= 0 extrapolate (keep), i >= 4 interpolate (/4), 0<i<4 blend linearly (ramp i/4).
    expect = np.array([base[i] * (1 - min(i / 4, 1)) + base[i] / 4 * min(i / 4, 1) for i in range(D // 2)])
    good &= ok(np.allclose(yi, expect) and abs(af - (0.1 * math.log(4) + 1)) < 1e-15,
               f"yarn inv_freq blend, attention factor {af:.6f}")
    _, af2 = yarn_inv_freq(theta, D, {"factor": 4.0, "attention_factor": 0.5}, 64)
    _, af3 = yarn_inv_freq(theta, D, {"factor": 4.0, "mscale": 2, "mscale_all_dim": 1}, 64)
    good &= ok(af2 == 0.5 and abs(af3 - (0.2 * math.log(4) + 1) / (0.1 * math.log(4) + 1)) < 1e-15,
               "yarn attention_factor / mscale overrides")

    # longrope: long factors iff the deployment's max_model_len exceeds the original context;
    # one attention factor sqrt(1 + ln(max_pos / orig) / ln(orig)) for both sets.
    rs = {"short_factor": [1.0, 2.0], "long_factor": [4.0, 8.0]}
    li, la = longrope_inv_freq(100.0, 4, rs, 64, 16, 17)
    si, sa = longrope_inv_freq(100.0, 4, rs, 64, 16, 16)
    good &= ok(np.allclose(li, [0.25, 0.0125]) and np.allclose(si, [1.0, 0.05])
               and la == sa == math.sqrt(1 + math.log(4) / math.log(16)), f"longrope sets {li} {si}, factor {la}")
    # partial rotary: dims past the table's width pass through unchanged.
    c, s = rope_cos_sin([3], default_inv_freq(100.0, 2), 1.0)
    y = apply_rope(np.array([[[1.0, 0.0, 5.0, 7.0]]]), c, s)[0, 0]
    good &= ok(np.allclose(y, [math.cos(3), math.sin(3), 5.0, 7.0]), f"partial rotary {y}")

    # Masks.
    m = attention_mask(5, 2)
    good &= ok(m[4].tolist() == [False, False, False, True, True] and m[0].tolist()[0]
               and not attention_mask(5)[1, 2], "causal and window-2 masks")

    # Which layers are windowed.
    wq = parse_config(_tiny_config("qwen2", use_sliding_window=True, sliding_window=3, max_window_layers=2,
                                   num_hidden_layers=4))["windowed"]
    wq_off = parse_config(_tiny_config("qwen3", use_sliding_window=False, sliding_window=3,
                                       num_hidden_layers=2, max_window_layers=0))["windowed"]
    wm = parse_config(_tiny_config("mistral", sliding_window=5, num_hidden_layers=2))
    wm_off = parse_config(_tiny_config("mistral", sliding_window=None))["windowed"]
    good &= ok(wq == [False, False, True, True] and wq_off == [False, False] and wm["windowed"] == [True, True]
               and wm["window"] == 5 and wm_off == [False], "windowed layers: qwen max_window_layers, mistral all")

    # GQA head mapping: v constant over positions -> head h outputs v of kv head h // (H/KV).
    T, H, KV, D = 3, 6, 2, 4
    q, k = rng.normal(size=(T, H, D)), rng.normal(size=(T, KV, D))
    v = np.broadcast_to(np.arange(KV, dtype=float)[None, :, None] * 10 + np.arange(D), (T, KV, D))
    out = scaled_dot_product_attention(q, k, v, attention_mask(T))
    good &= ok(all(np.allclose(out[:, h], v[:, h // 3]) for h in range(H)),
               "GQA: q heads 0-2 read kv head 0, heads 3-5 kv head 1")

    # Whole model: vectorised vs naive loops, every arch and rope/window/bias variant.
    variants = [("llama", {}), ("llama", {"attention_bias": True, "mlp_bias": True}),
                ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
                ("llama", {"rope_scaling": {"type": "linear", "factor": 2.0}, "tie_word_embeddings": True}),
                ("mistral", {"sliding_window": 3}), ("qwen2", {}),
                ("qwen2", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 16}}),
                ("qwen2", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1,
                           "num_hidden_layers": 2}),
                ("qwen3", {"head_dim": 8}),
                ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
                ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 3}),
                ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
                               "shared_expert_intermediate_size": 12, "num_hidden_layers": 2,
                               "mlp_only_layers": [0]}),
                ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 3, "moe_intermediate_size": 8,
                               "shared_expert_intermediate_size": 12, "norm_topk_prob": True}),
                ("qwen3_moe", {"head_dim": 8, "num_experts": 5, "num_experts_per_tok": 2,
                               "moe_intermediate_size": 8, "norm_topk_prob": True, "num_hidden_layers": 2,
                               "decoder_sparse_step": 2}),
                ("phi3", {"sliding_window": 3}),
                ("phi3", {"hidden_size": 32, "head_dim": 8, "partial_rotary_factor": 0.5, "original_max_position_embeddings": 16,
                          "rope_scaling": {"type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [3.0, 5.0]}})]
    for arch, over in variants:
        cfg = parse_config(_tiny_config(arch, **over))
        tensors = _random_tensors(_tiny_config(arch, **over), rng)
        if cfg["tie"]:
            del tensors["lm_head.weight"]
        model = build_model(cfg, tensors)
        ids = rng.integers(0, cfg["vocab"], size=9)
        a, b = forward(model, ids), _naive_forward(model, ids)
        good &= ok(np.allclose(a, b, rtol=1e-12, atol=1e-12), f"forward == naive: {arch} {over}")

    # Causality and window on a 1-layer model: position p depends on token j iff p-W < j <= p.
    for W in (None, 3):
        cfg = parse_config(_tiny_config("mistral", sliding_window=W))
        model = build_model(cfg, _random_tensors(_tiny_config("mistral", sliding_window=W), rng))
        ids = rng.integers(0, cfg["vocab"], size=8)
        base_l = forward(model, ids)
        dep = np.zeros((8, 8), bool)
        for j in range(8):
            ids2 = ids.copy()
            ids2[j] = (ids2[j] + 1) % cfg["vocab"]
            dep[:, j] = np.any(np.abs(forward(model, ids2) - base_l) > 1e-12, axis=1)
        good &= ok(np.array_equal(dep, attention_mask(8, W)), f"logit dependence pattern, window {W}")
    # Windowed layers compose: 2 layers of W=3 see 2*(3-1)+1 = 5 tokens back.
    cfg_d = _tiny_config("mistral", sliding_window=3, num_hidden_layers=2)
    model = build_model(parse_config(cfg_d), _random_tensors(cfg_d, rng))
    ids = rng.integers(0, 11, size=8)
    base_l = forward(model, ids)
    far = [np.any(np.abs(forward(model, np.where(np.arange(8) == j, (ids + 1) % 11, ids))[7] - base_l[7]) > 1e-12)
           for j in range(8)]
    good &= ok(far == [False, False, False, True, True, True, True, True], f"2-layer window reach {far}")

    # MoE: top-k order and ties, layer sparsity rules, renormalisation.
    picks = top_k_experts(np.array([[0.1, 0.3, 0.3, 0.2, 0.1]]), 3)[0].tolist()
    good &= ok(picks == [1, 2, 3], f"top-k: largest first, ties to the lower expert id {picks}")
    sp = parse_config(_tiny_config("qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
                                   shared_expert_intermediate_size=8, num_hidden_layers=6, decoder_sparse_step=2,
                                   mlp_only_layers=[3]))["moe"]["sparse"]
    good &= ok(sp == [False, True, False, False, False, True], f"qwen2_moe sparse layers (step 2, mlp_only 3) {sp}")
    cm = _tiny_config("qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, head_dim=8)
    for norm in (False, True):
        mm = build_model(parse_config(dict(cm, norm_topk_prob=norm)), _random_tensors(cm, np.random.default_rng(5)))
        x = np.random.default_rng(6).normal(size=(3, 16))
        pr = softmax(linear(x, mm["w"]["model.layers.0.mlp.gate.weight"]))
        ch = top_k_experts(pr, 2)
        wt = np.take_along_axis(pr, ch, -1)
        wt = wt / wt.sum(-1, keepdims=True) if norm else wt
        p0 = "model.layers.0.mlp.experts."
        want = np.stack([sum(wt[t, j] * swiglu_mlp(x[t:t + 1], mm["w"], f"{p0}{ch[t, j]}.", lambda n: None)[0]
                             for j in range(2)) for t in range(3)])
        good &= ok(np.allclose(sparse_moe_block(x, mm, 0), want, rtol=1e-12), f"moe block weights, norm_topk_prob={norm}")

    print("self-check", "passed" if good else "FAILED")
    return good


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--logits":  # debugging aid: logits of a checkpoint
        m = load(sys.argv[2])
        np.set_printoptions(precision=5, suppress=True)
        print(forward(m, list(range(min(8, m["cfg"]["vocab"])))))
        sys.exit(0)
    sys.exit(0 if self_check() else 1)
