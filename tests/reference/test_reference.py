#!/usr/bin/python3
"""Tessera's logits against the independent NumPy reference (reference.py).

    /usr/bin/python3 tests/reference/test_reference.py --tessera build/tessera [--only SUBSTR] [--keep]

Each case synthesises a random-weight HF checkpoint with `tessera synth`, runs one
flattened batch of several sequences through `tessera logits`, and compares every
requested row with reference.forward() (float64).  Prints one line per case and
ends with `N passed, M failed`; exits non-zero when anything failed.
"""
import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import reference_deepseek  # noqa: E402
import reference_gemma  # noqa: E402
import reference_gptoss  # noqa: E402

# Tolerance: max |tessera - ref| / max |ref| per row.  Tessera computes in f32 (the
# reference in f64), so for f32 weights the gap is f32 rounding accumulated over a few
# tiny layers: ~1e-6 expected, 1e-4 leaves ample margin while still catching any real
# equation error (a wrong rope angle, mask or scale moves logits by >1e-2).  bf16/f16
# cases feed the reference the very same rounded weights, so the same bound applies.
REL_TOL = 1e-4
CMD_TIMEOUT = 180  # seconds per tessera invocation

# (lengths, logits_at per sequence); one sequence asks for rows out of order.
SEQUENCES = [(5, [0, 2, 4]), (17, [16, 3, 8, 11]), (33, [0, 7, 15, 31, 32])]

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
LINEAR = {"rope_type": "linear", "factor": 2.0}
# Phi-3.5 / Phi-4-mini style: half the head rotates (tiny head_dim 16 -> 8 dims, 4 factors), LongRoPE
# stretching an original context of 16 to the synth's 4096 positions.  Factors are exact in f32 (GGUF
# stores them so).  max_model_len 16 selects the short set, anything above 16 the long one.
GEMMA_VOCAB = {"vocab_size": 32768}
DEEPSEEK_VOCAB = {"vocab_size": 32768}  # a 32k-row head keeps the cases fast (tokenizer: 128815 ids)
PHI3_LONGROPE = {"partial_rotary_factor": 0.5, "original_max_position_embeddings": 16,
                 "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.25, 1.5, 2.0],
                                  "long_factor": [1.0, 4.0, 16.0, 64.0]}}


def case(name, arch, dtype="f32", sets=None, shards=None, chunk=None, seed=1, skew=0.0, max_model_len=None,
         gguf=False):
    """max_model_len: passed to `tessera logits` and the reference (LongRoPE's factor set);
    gguf: run `tessera logits` on the GGUF twin (synth --format both) of the same weights."""
    return {"name": name, "arch": arch, "dtype": dtype, "sets": sets or {}, "shards": shards,
            "chunk": chunk, "seed": seed, "skew": skew, "max_model_len": max_model_len, "gguf": gguf}


# Sensitivity guard.  Each ablation is a plausible implementation mistake applied to the
# reference; on the case's checkpoint it must move the logits by >= SENSITIVITY_MIN
# (relative), else the case could not tell the right equation from the wrong one (e.g.
# a window wider than every sequence) and fails as "does not exercise".
SENSITIVITY_MIN = 100 * REL_TOL


def _with(model, **cfg_changes):
    return dict(model, cfg=dict(model["cfg"], **cfg_changes))


def _no_bias(model):
    return dict(model, w={k: (0 * v if k.endswith(".bias") else v) for k, v in model["w"].items()})


def _default_rope(model):
    return dict(model, inv_freq=reference.default_inv_freq(model["cfg"]["rope_theta"], model["cfg"]["rot_dim"]),
                attn_factor=1.0)


def _other_longrope_set(model):  # the factor set the deployment did not choose
    cfg = model["cfg"]
    flip = cfg["original_max_pos"] if cfg["max_model_len"] > cfg["original_max_pos"] else 1 << 30
    inv, af = reference.rope_parameters(dict(cfg, max_model_len=flip))
    return dict(model, inv_freq=inv, attn_factor=af)


def _full_rotary(model):  # rotate every head dim (partial_rotary_factor ignored)
    cfg = dict(model["cfg"], rot_dim=model["cfg"]["head_dim"], rope_scaling=None)
    return dict(model, cfg=cfg, inv_freq=reference.default_inv_freq(cfg["rope_theta"], cfg["head_dim"]),
                attn_factor=1.0)


def _swap_gate_up(model):  # gate_up_proj halves read the wrong way round
    w = dict(model["w"])
    for i in range(model["cfg"]["n_layers"]):
        p = f"model.layers.{i}.mlp."
        w[p + "gate_proj.weight"], w[p + "up_proj.weight"] = w[p + "up_proj.weight"], w[p + "gate_proj.weight"]
    return dict(model, w=w)


def _gptoss_swap_gate_up(model):  # gate = odd, up = even columns of gate_up_proj
    w = dict(model["w"])
    for i in range(model["cfg"]["n_layers"]):
        for n in ("gate_up_proj", "gate_up_proj_bias"):
            k = f"model.layers.{i}.mlp.experts.{n}"
            x = w[k].copy()
            x[..., 0::2], x[..., 1::2] = w[k][..., 1::2], w[k][..., 0::2]
            w[k] = x
    return dict(model, w=w)


def _gptoss_no_expert_bias(model):
    return dict(model, w={k: (0 * v if k.endswith("_proj_bias") else v) for k, v in model["w"].items()})


def _gptoss_yarn_truncated(model, rs):  # llama.cpp's rounding of the YaRN correction range
    inv, af = reference.yarn_inv_freq(150000.0, model["cfg"]["head_dim"], dict(rs, truncate=True), 131072)
    return dict(model, inv_freq=inv, attn_factor=af)


@contextlib.contextmanager
def _patched(name, fn, module=reference):
    old = getattr(module, name)
    setattr(module, name, fn)
    try:
        yield
    finally:
        setattr(module, name, old)


def _rope_halves(x, cos, sin):  # NeoX halves (i, i + d/2) instead of DeepSeek's interleaved pairs
    h = x.shape[-1] // 2
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x[..., :h] * c - x[..., h:] * s, x[..., h:] * c + x[..., :h] * s], axis=-1)


def _rope_interleaved(x, cos, sin):  # GPT-J pairing (2i, 2i+1) instead of HF halves
    h = x.shape[-1] // 2
    c, s = np.repeat(cos[:, None, :h], 2, -1), np.repeat(sin[:, None, :h], 2, -1)
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return x * c + y * s


ABLATIONS = {  # name: (model -> model, patch context or None)
    "gqa-interleaved": (lambda m: m, lambda: _patched("kv_head_of", lambda h, H, KV: h % KV)),
    "rope-interleaved": (lambda m: m, lambda: _patched("apply_rope", _rope_interleaved)),
    "no-qk-norm": (lambda m: _with(m, qk_norm=False), None),
    "no-bias": (_no_bias, None),
    "default-rope": (_default_rope, None),
    "no-attn-factor": (lambda m: dict(m, attn_factor=1.0), None),
    "attn-factor-once": (lambda m: dict(m, attn_factor=m["attn_factor"] ** 0.5), None),
    "linear-rope-x8": (lambda m: dict(_default_rope(m), inv_freq=_default_rope(m)["inv_freq"] / 8), None),
    "no-window": (lambda m: _with(m, windowed=[False] * m["cfg"]["n_layers"]), None),
    "window-all-layers": (lambda m: _with(m, windowed=[True] * m["cfg"]["n_layers"]), None),
    "flip-norm-topk": (lambda m: _with(m, moe=dict(m["cfg"]["moe"], norm=not m["cfg"]["moe"]["norm"])), None),
    "top-k-minus-1": (lambda m: _with(m, moe=dict(m["cfg"]["moe"], top_k=m["cfg"]["moe"]["top_k"] - 1)), None),
    "no-shared-gate": (lambda m: m, lambda: _patched("sigmoid", lambda x: np.ones_like(x))),
    "other-longrope-set": (_other_longrope_set, None),
    "full-rotary": (_full_rotary, None),
    "swap-gate-up": (_swap_gate_up, None),
    # Gemma (reference_gemma.py): each of its equations left out or replaced by Llama's.
    "no-norm-offset": (lambda m: _with(m, norm_offset=0.0), None),
    "no-post-norms": (lambda m: _with(m, post_norms=False), None),
    "silu-mlp": (lambda m: _with(m, gelu=False), None),
    "no-embed-scale": (lambda m: _with(m, normalizer=1.0), None),
    "no-attn-softcap": (lambda m: _with(m, attn_cap=None), None),
    "no-final-softcap": (lambda m: _with(m, final_cap=None), None),
    "head-dim-scale": (lambda m: _with(m, attn_scale=m["cfg"]["head_dim"] ** -0.5), None),
    "one-rope": (lambda m: dict(m, rope_local=m["rope_global"]), None),
    "no-sliding": (lambda m: _with(m, sliding=[False] * m["cfg"]["n_layers"]), None),
    "default-rope-global": (lambda m: dict(m, rope_global=(_default_rope(m)["inv_freq"], 1.0)), None),
    "sliding-all-layers": (lambda m: _with(m, sliding=[True] * m["cfg"]["n_layers"]), None),
    # gpt-oss (reference_gptoss.py): each of its equations left out or replaced by a neighbour's.
    "no-sinks": (lambda m: _with(m, sinks=False), None),
    "softmax-over-all-experts": (lambda m: _with(m, softmax_topk=False), None),
    "no-swiglu-clamp": (lambda m: _with(m, limit=None), None),
    "gptoss-swap-gate-up": (_gptoss_swap_gate_up, None),
    "no-expert-bias": (_gptoss_no_expert_bias, None),
    "yarn-truncated": (lambda m: _gptoss_yarn_truncated(m, GPTOSS_YARN), None),
    # DeepSeek MLA (reference_deepseek.py).
    "mla-rope-halves": (lambda m: m, lambda: _patched("rope_pairs", _rope_halves, reference_deepseek)),
    "mla-no-mscale2": (lambda m: _with(m, attn_scale=m["cfg"]["head_dim"] ** -0.5), None),
    "no-routed-scaling": (lambda m: _with(m, moe=dict(m["cfg"]["moe"], scaling=1.0)), None),
    "mla-no-latent-norm": (lambda m: dict(m, w={k: (np.ones_like(v) if "kv_a_layernorm" in k else v)
                                               for k, v in m["w"].items()}), None),
    # DeepSeekMoE routing (reference_deepseek.route).
    "no-correction-bias": (lambda m: dict(m, w={k: v for k, v in m["w"].items()
                                               if not k.endswith("e_score_correction_bias")}), None),
    "no-group-limit": (lambda m: _with(m, moe=dict(m["cfg"]["moe"], method="greedy")), None),
    "no-shared-experts": (lambda m: _with(m, moe=dict(m["cfg"]["moe"], shared_experts=0)), None),
    "softmax-not-sigmoid": (lambda m: _with(m, moe=dict(m["cfg"]["moe"], scoring="softmax")), None),
}
MOE_ARCHS = ("mixtral", "qwen2_moe", "qwen3_moe")
GEMMA_ARCHS = ("gemma2", "gemma3")
# gpt-oss's YaRN (factor 32, no truncation) over an original context of 32: with head_dim 16
# the correction range then has fractional ends, so rounding them (llama.cpp's truncation)
# turns some dims by ~3 rad within the test's 33 positions.
GPTOSS_YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
               "original_max_position_embeddings": 32, "truncate": False}
# swiglu_limit 0.5: a clamp that bites on a tiny random model (the published 7 hardly does).
GPTOSS_CLAMP = {"rope_scaling": GPTOSS_YARN, "vocab_size": 32768, "swiglu_limit": 0.5}


def gemma_ablations_for(c):
    names = ["gqa-interleaved", "rope-interleaved", "no-norm-offset", "no-post-norms", "silu-mlp",
             "no-embed-scale", "no-sliding", "sliding-all-layers"]
    names += ["no-qk-norm", "one-rope"] if c["arch"] == "gemma3" else ["no-final-softcap"]
    if c["sets"].get("attn_logit_softcapping"):
        names += ["no-attn-softcap"]
    if c["sets"].get("final_logit_softcapping") and c["arch"] == "gemma3":
        names += ["no-final-softcap"]
    if "query_pre_attn_scalar" in c["sets"]:
        names += ["head-dim-scale"]
    if (c["sets"].get("rope_scaling") or {}).get("rope_type") == "linear":
        names += ["default-rope-global"]
    return names


def ablations_for(c):
    if c["arch"] in GEMMA_ARCHS:
        return gemma_ablations_for(c)
    if c["arch"] == "gpt_oss":
        return ["gqa-interleaved", "no-sinks", "softmax-over-all-experts", "gptoss-swap-gate-up", "no-expert-bias",
                "yarn-truncated", "no-sliding", "sliding-all-layers"] + (
                    ["no-swiglu-clamp"] if "swiglu_limit" in c["sets"] else [])
    names = ["gqa-interleaved", "rope-interleaved"]
    if c["arch"] == "deepseek_v2_lite":
        names = ["mla-rope-halves", "mla-no-mscale2", "mla-no-latent-norm", "flip-norm-topk", "top-k-minus-1",
                 "no-shared-experts"]
        names += ["no-routed-scaling"] if c["sets"].get("routed_scaling_factor", 1.0) != 1.0 else []
    if c["arch"] == "deepseek_v3":
        names = ["mla-no-mscale2", "no-routed-scaling", "no-correction-bias", "no-group-limit", "no-shared-experts",
                 "softmax-not-sigmoid"]
    names += {"qwen3": ["no-qk-norm"], "qwen2": ["no-bias"], "qwen3_moe": ["no-qk-norm"],
              "qwen2_moe": ["no-bias", "no-shared-gate"]}.get(c["arch"], [])
    if c["arch"] in MOE_ARCHS:
        names += ["flip-norm-topk", "top-k-minus-1"]
    rs = c["sets"].get("rope_scaling") or {}
    rope = rs.get("rope_type", rs.get("type"))
    names += {"llama3": ["default-rope", "linear-rope-x8"], "linear": ["default-rope"],
              "yarn": ["default-rope", "no-attn-factor", "attn-factor-once"],
              "longrope": ["default-rope", "no-attn-factor", "other-longrope-set"]}.get(rope, [])
    if c["arch"] == "phi3":
        names += ["swap-gate-up"]
    if c["sets"].get("partial_rotary_factor", 1.0) != 1.0:
        names += ["full-rotary"]
    if "sliding_window" in c["sets"]:
        names += ["no-window"] + (["window-all-layers"] if "max_window_layers" in c["sets"] else [])
    if c["sets"].get("attention_bias"):
        names += ["no-bias"]
    return names


def reference_rows(model, seqs, ablation=None, mla_form="expanded"):
    fn, patch = ABLATIONS[ablation] if ablation else (lambda m: m, None)
    with (patch() if patch else contextlib.nullcontext()):
        m = fn(model)
        if "sinks" in m["cfg"]:  # a gpt-oss model (reference_gptoss.load)
            return np.concatenate([reference_gptoss.forward(m, s["tokens"], s["logits_at"]) for s in seqs])
        if "rope_local" in m:  # a Gemma model (reference_gemma.load)
            return np.concatenate([reference_gemma.forward(m, s["tokens"], s["logits_at"]) for s in seqs])
        if m["cfg"].get("mla"):  # DeepSeek (reference_deepseek.load)
            return np.concatenate([reference_deepseek.forward(m, s["tokens"], mla_form)[s["logits_at"]]
                                   for s in seqs])
        return np.concatenate([reference.forward(m, s["tokens"])[s["logits_at"]] for s in seqs])


def row_rel(a, ref):
    return np.max(np.abs(a - ref), axis=1) / np.max(np.abs(ref), axis=1)


CASES = [case(f"{a}-{d}", a, d, seed=10 + i) for i, (a, d) in enumerate(
    [(a, d) for d in ("f32", "bf16") for a in ("llama", "mistral", "qwen2", "qwen3")])] + [
    case("llama-f16", "llama", "f16", seed=30),
    case("llama-rope-llama3", "llama", sets={"rope_scaling": LLAMA3}, seed=31),
    case("llama-rope-linear", "llama", sets={"rope_scaling": LINEAR}, seed=32),
    case("qwen2-rope-yarn", "qwen2", sets={"rope_scaling": YARN}, seed=33),
    case("mistral-sliding-window-8", "mistral", sets={"sliding_window": 8}, seed=34),
    case("qwen3-sliding-window-layers", "qwen3",
         sets={"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1}, seed=35),
    case("llama-sharded-3", "llama", shards=3, seed=36),
    case("llama-attention-bias", "llama", sets={"attention_bias": True}, seed=37),
    case("llama-chunked-7", "llama", chunk=7, seed=38),
    case("mistral-window-8-chunked-7", "mistral", sets={"sliding_window": 8}, chunk=7, seed=39),
    case("qwen3-bf16-chunked-7", "qwen3", "bf16", chunk=7, seed=40),
] + [case(f"{a}-{d}", a, d, seed=50 + i) for i, (a, d) in enumerate(
    [(a, d) for d in ("f32", "bf16") for a in MOE_ARCHS])] + [
    case("qwen2_moe-mlp-only-layer-0", "qwen2_moe", sets={"mlp_only_layers": [0]}, seed=60),
    case("qwen3_moe-norm-topk-off-chunked-7", "qwen3_moe", "bf16", sets={"norm_topk_prob": False}, chunk=7, seed=61),
    case("mixtral-sliding-window-8", "mixtral", sets={"sliding_window": 8}, seed=62),
    case("qwen2_moe-f16-router-skew", "qwen2_moe", "f16", skew=3.0, seed=63),
    case("phi3-f32", "phi3", seed=70),
    case("phi3-bf16-window-8-chunked-7", "phi3", "bf16", sets={"sliding_window": 8}, chunk=7, seed=71),
    case("phi3-longrope-long-partial-rotary", "phi3", sets=PHI3_LONGROPE, seed=72),
    case("phi3-longrope-short-partial-rotary", "phi3", sets=PHI3_LONGROPE, max_model_len=16, seed=73),
    case("phi3-gguf-longrope-long", "phi3", sets=PHI3_LONGROPE, gguf=True, seed=74),
    case("phi3-gguf-longrope-short", "phi3", sets=PHI3_LONGROPE, max_model_len=16, gguf=True, seed=75),
    # Gemma (tiny: 16-token windows on alternate layers; gemma3 pattern 2, so both RoPE
    # tables run): gemma2 from the HF checkpoint with a score cap that bends (the default
    # 50 hardly does on a tiny model) and query_pre_attn_scalar != head_dim; gemma3 from
    # its GGUF twin (1 + w norms, llama.cpp's names and keys). A 32k vocabulary (the
    # reference's head over Gemma 3's 262k rows was most of each case's time).
    case("gemma2-f32-attn-softcap-1-qpas-24", "gemma2",
         sets={"attn_logit_softcapping": 1.0, "query_pre_attn_scalar": 24, **GEMMA_VOCAB}, seed=76),
    case("gemma3-gguf-f32", "gemma3", sets=GEMMA_VOCAB, gguf=True, seed=77),
    # gpt-oss (tiny: 16-token windows on even layers, sinks, biases, clamped SwiGLU): f32
    # from the HF checkpoint (gate_up_proj stacked x @ W); MXFP4 experts from the HF
    # blocks/scales, chunked. The GGUF twin gives these logits bit for bit
    # (tests/unit/engine/moe/gpt_oss_model_test.cc); writing its 200k-token vocabulary
    # would double this file's gpt-oss time.
    case("gpt_oss-f32", "gpt_oss", sets=GPTOSS_CLAMP, seed=80),
    case("gpt_oss-mxfp4-chunked-7", "gpt_oss", "mxfp4", sets=GPTOSS_CLAMP, chunk=7, seed=81),
    # DeepSeek-V2-Lite layout (MLA without q_lora, YaRN with mscale_all_dim, layer 0 dense,
    # layer 1 MoE); the reference runs the expanded form, Tessera the absorbed one. The
    # q_lora case adds q_a_proj -> q_a_layernorm -> q_b_proj (DeepSeek-V2 / V3 style).
    case("deepseek_v2_lite-f32-routed-scaling", "deepseek_v2_lite", sets={"routed_scaling_factor": 2.5, **DEEPSEEK_VOCAB},
         seed=80),
    case("deepseek_v2_lite-bf16-q-lora-chunked-7", "deepseek_v2_lite", "bf16",
         sets={"q_lora_rank": 24, **DEEPSEEK_VOCAB}, chunk=7, seed=81),
    # DeepSeek-V3 layout (q_lora; layer 0 dense, layers 1-2 MoE: sigmoid scores, the
    # correction bias choosing, noaux_tc over 2 groups of 4 keeping 1, one shared expert).
    case("deepseek_v3-f32", "deepseek_v3", sets=DEEPSEEK_VOCAB, seed=82),
]


class CaseError(Exception):
    pass


def run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise CaseError(f"timed out after {CMD_TIMEOUT}s: {' '.join(cmd)}")
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise CaseError(f"exit {p.returncode}: {' '.join(cmd)}\n      " + "\n      ".join(tail))
    return p


def run_case(tessera, c, work, threads):
    model_dir = os.path.join(work, "model")
    cmd = [tessera, "synth", "--arch", c["arch"], "--size", "tiny", "--dtype", c["dtype"],
           "--out", model_dir, "--seed", str(c["seed"])] + (["--format", "both"] if c["gguf"] else [])
    if c["shards"]:
        cmd += ["--shards", str(c["shards"])]
    if c["skew"]:
        cmd += ["--router-skew", str(c["skew"])]
    for k, v in c["sets"].items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    run(cmd)
    if c["shards"] and not os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")):
        raise CaseError("--shards given but no model.safetensors.index.json written")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    for k, v in c["sets"].items():  # the override must really be in the checkpoint we test
        if config.get(k) != v:
            raise CaseError(f"config.json {k}={config.get(k)!r}, --set asked for {v!r}")
    model = (reference_gemma.load(model_dir) if reference_gemma.is_gemma(config)
             else reference_gptoss.load(model_dir) if reference_gptoss.is_gpt_oss(config)
             else reference_deepseek.load(model_dir) if reference_deepseek.is_deepseek(config)
             else reference.load(model_dir, c["max_model_len"]))
    vocab = model["cfg"]["vocab"]
    if c["sets"].get("sliding_window") and max(n for n, _ in SEQUENCES) <= c["sets"]["sliding_window"]:
        raise CaseError("window case needs a sequence longer than the window")

    rng = np.random.default_rng(c["seed"])
    seqs = [{"tokens": rng.integers(0, vocab, size=n).tolist(), "logits_at": at} for n, at in SEQUENCES]
    batch = {"sequences": seqs}
    if c["chunk"]:
        batch["chunk_size"] = c["chunk"]
    batch_path, out_path = os.path.join(work, "batch.json"), os.path.join(work, "out.npy")
    with open(batch_path, "w") as f:
        json.dump(batch, f)
    weights = model_dir.rstrip("/") + ".gguf" if c["gguf"] else model_dir
    run([tessera, "logits", "--model", weights, "--batch", batch_path, "--out", out_path,
         "--threads", str(threads)] + (["--max-model-len", str(c["max_model_len"])] if c["max_model_len"] else []))
    ours = np.load(out_path)
    ref = reference_rows(model, seqs)
    if ours.dtype != np.float32 or ours.shape != ref.shape:
        raise CaseError(f"output {ours.dtype}{list(ours.shape)}, expected float32{list(ref.shape)}")
    if not np.all(np.isfinite(ours)):
        raise CaseError("non-finite logits")

    scale = np.max(np.abs(ref), axis=1)
    rel = row_rel(ours, ref)
    problems = []
    sens = {a: float(row_rel(reference_rows(model, seqs, a), ref).max()) for a in ablations_for(c)}
    for a, v in sens.items():
        if v < SENSITIVITY_MIN:
            problems.append(f"case does not exercise it: ablation {a} moves logits only {v:.1e}")
    if model["cfg"].get("mla"):  # the two published forms of MLA agree on this checkpoint
        forms = float(row_rel(reference_rows(model, seqs, mla_form="absorbed"), ref).max())
        if forms >= REL_TOL:
            problems.append(f"reference MLA forms disagree: absorbed vs expanded {forms:.1e}")
    bad = np.nonzero(rel >= REL_TOL)[0]
    if bad.size:
        problems.append(f"{bad.size}/{len(rel)} rows over rel tol {REL_TOL:g} (rows {bad.tolist()[:8]})")
    # Top-1: ours must pick the reference's argmax.  A row whose reference top-2 gap is
    # inside the tolerance band cannot decide its argmax at this precision; such a
    # near-tie is reported, and passes only if ours picks one of the tied tokens.
    top_ref, top_ours = np.argmax(ref, axis=1), np.argmax(ours, axis=1)
    ties, wrong = 0, []
    for r in np.nonzero(top_ref != top_ours)[0]:
        gap = ref[r, top_ref[r]] - ref[r, top_ours[r]]
        if gap < 2 * REL_TOL * scale[r]:
            ties += 1
        else:
            wrong.append(f"row {r}: {top_ours[r]} vs ref {top_ref[r]} (ref gap {gap:.3g})")
    if wrong:
        problems.append(f"top-1 differs on {len(wrong)}/{len(rel)} rows: " + "; ".join(wrong[:3])
                        + ("; ..." if len(wrong) > 3 else ""))
    # Where the error is: per sequence, which positions; and the least-squares scale
    # k in ours ~ k * ref per row (k != 1 with a small residual points at a norm/scale bug).
    k = np.sum(ours * ref, axis=1) / np.sum(ref * ref, axis=1)
    detail = ["best-fit scale ours/ref per row: " + " ".join(f"{v:.4f}" for v in k)]
    row = 0
    for si, s in enumerate(seqs):
        n = len(s["logits_at"])
        detail.append(f"seq{si}(len {len(s['tokens'])}) " + " ".join(
            f"@{p}:{e:.1e}" for p, e in zip(s["logits_at"], rel[row:row + n])))
        row += n
    return float(rel.max()), ties, problems, detail, sens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", required=True, help="path to the tessera binary")
    ap.add_argument("--only", default="", help="run only cases whose name contains this")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (printed)")
    ap.add_argument("--verbose", action="store_true", help="print per-position errors")
    args = ap.parse_args()

    passed = failed = 0
    for name, check in (("reference-self-check", reference.self_check),
                        ("reference-gemma-self-check", reference_gemma.self_check),
                        ("reference-gptoss-self-check", reference_gptoss.self_check),
                        ("reference-deepseek-self-check", reference_deepseek.self_check)):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            ok = check()
        print(f"{'PASS' if ok else 'FAIL'} {name}")
        if not ok:
            print(buf.getvalue())
        passed, failed = passed + ok, failed + (not ok)

    tessera = os.path.abspath(args.tessera)
    if not (os.path.isfile(tessera) and os.access(tessera, os.X_OK)):
        print(f"FAIL tessera binary not found or not executable: {tessera}")
        print(f"{passed} passed, {failed + 1} failed")
        return 1

    t_all = time.time()
    for c in CASES:
        if args.only not in c["name"]:
            continue
        work = tempfile.mkdtemp(prefix=f"tessera-ref-{c['name']}-")
        t0 = time.time()
        try:
            err, ties, problems, detail, sens = run_case(tessera, c, work, args.threads)
            status = "FAIL" if problems else "PASS"
            note = f" ({ties} near-tie rows)" if ties else ""
            weakest = min(sens, key=sens.get)
            print(f"{status} {c['name']}: max rel err {err:.2e}{note}; ablations {len(sens)}, weakest "
                  f"{weakest} {sens[weakest]:.1e} [{time.time() - t0:.1f}s]")
            if args.verbose:
                print("      ablations: " + ", ".join(f"{a} {v:.1e}" for a, v in sens.items()))
            for p in problems:
                print(f"      {p}")
            if problems or args.verbose:
                for d in detail:
                    print(f"      {d}")
        except (CaseError, ValueError, OSError) as e:
            problems = [str(e)]
            print(f"FAIL {c['name']}: {e}")
        if problems:
            failed += 1
        else:
            passed += 1
        if args.keep:
            print(f"      kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"total {time.time() - t_all:.1f}s")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
