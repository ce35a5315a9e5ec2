#!/usr/bin/env python3
"""End-to-end test of GGUF models: `tessera synth --format both` writes an HF
safetensors directory and a GGUF twin; `tessera generate` must give IDENTICAL
greedy tokens from both (bf16, f16, f32; qwen3, llama, whose Q/K rows
llama.cpp's converter permutes, phi3: fused tensors, SentencePiece vocabulary),
and `tessera serve` answers the same chats from both (qwen3, phi3, and gemma3,
whose norms the GGUF stores as 1 + w). Quantized GGUFs (q8_0, q4_0, q4_k) load and
generate, and their greedy tokens are the argmax of `tessera logits` run on
the same file. An independent NumPy reader of GGUF and safetensors (written
from the format specs, not from Tessera's code) checks the files themselves:
metadata, tensor table (against `tessera gguf-info --json`), the llama Q/K row
permutation, and that Q8_0/Q4_0 rows dequantize to within one quantization
step of the bf16 safetensors values.

Run: python3 tests/e2e/test_gguf.py --tessera build/tessera
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

results = {"passed": 0, "failed": 0}


def check(name, fn):
    try:
        fn()
        results["passed"] += 1
        print(f"PASS {name}")
    except Exception as e:  # noqa: BLE001 - report any failure
        results["failed"] += 1
        print(f"FAIL {name}: {e!r}")


def run(tessera, args):
    p = subprocess.run([tessera, "--log-level", "warn", *args], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"tessera {' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


# ---------------------------------------------------------------- independent readers

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# ggml type id -> (block elements, block bytes)
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144)}


class Gguf:
    """Minimal GGUF v2/v3 reader: header, metadata, tensor infos, raw tensor bytes."""

    def __init__(self, path):
        self.buf = open(path, "rb").read()
        self.pos = 0
        assert self.buf[:4] == b"GGUF", "magic"
        self.pos = 4
        self.version = self.u("<I")
        n_tensors, n_kv = self.u("<Q"), self.u("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = self.string()
            self.meta[key] = self.value(self.u("<I"))
        self.tensors = {}
        for _ in range(n_tensors):
            name = self.string()
            ne = [self.u("<Q") for _ in range(self.u("<I"))]
            ttype, off = self.u("<I"), self.u("<Q")
            self.tensors[name] = {"ne": ne, "type": ttype, "offset": off}
        align = self.meta.get("general.alignment", 32)
        self.data = (self.pos + align - 1) // align * align

    def u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.u("<Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.u("<I"), self.u("<Q")
            return [self.value(et) for _ in range(n)]
        return self.u(GGUF_SCALARS[t])

    def raw(self, name):
        t = self.tensors[name]
        elems, bbytes = GGML_BLOCKS[t["type"]]
        rows = int(np.prod(t["ne"][1:])) if len(t["ne"]) > 1 else 1
        nbytes = rows * t["ne"][0] // elems * bbytes
        start = self.data + t["offset"]
        return np.frombuffer(self.buf, np.uint8, nbytes, start).reshape(rows, -1), t

    def matrix(self, name):
        """f32 [rows, cols] of an F32/F16/BF16/Q8_0/Q4_0 tensor (ggml block layouts)."""
        raw, t = self.raw(name)
        cols = t["ne"][0]
        if t["type"] == 0:
            return raw.view("<f4").reshape(-1, cols)
        if t["type"] == 1:
            return raw.view("<f2").astype(np.float32).reshape(-1, cols)
        if t["type"] == 30:
            return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(-1, cols)
        blocks = raw.reshape(raw.shape[0], cols // 32, -1)
        d = blocks[:, :, :2].copy().view("<f2").astype(np.float32)  # [rows, nb, 1]
        if t["type"] == 8:  # Q8_0: d f16, 32 x int8
            q = blocks[:, :, 2:].view(np.int8).astype(np.float32)
        elif t["type"] == 2:  # Q4_0: d f16, 16 bytes; low nibbles = elements 0..15, high = 16..31
            qs = blocks[:, :, 2:]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.float32) - 8
        else:
            raise ValueError(f"no dequantizer for type {t['type']}")
        return (d * q).reshape(-1, cols), d.reshape(raw.shape[0], -1)


def read_safetensors(path):
    buf = open(path, "rb").read()
    n = struct.unpack_from("<Q", buf, 0)[0]
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = np.frombuffer(buf, np.uint8, e - b, 8 + n + b)
        if info["dtype"] == "BF16":
            arr = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            arr = raw.view("<f2").astype(np.float32)
        else:
            arr = raw.view("<f4")
        out[name] = arr.reshape(info["shape"])
    return out


# ---------------------------------------------------------------- checks

PROMPTS = ["Hello, world! How are you?", "def fib(n):\n    return n", "日本語と中文 😀 mixed"]
PROMPT_IDS = ["1,2,3,4,5", "100,2000,30000"]


def generate(t, model, max_tokens=12):
    args = ["generate", "--model", model, "--temperature", "0", "--max-tokens", str(max_tokens), "--no-progress",
            "--ignore-eos"]
    for p in PROMPTS:
        args += ["--prompt", p]
    for p in PROMPT_IDS:
        args += ["--prompt-ids", p]
    out = [json.loads(line) for line in run(t, args).splitlines() if line.strip()]
    return [(o["num_prompt_tokens"], o["choices"][0]["token_ids"]) for o in out]


def twins_identical(t, tmp, arch, dtype):
    d = os.path.join(tmp, f"{arch}_{dtype}")
    run(t, ["synth", "--arch", arch, "--size", "tiny", "--dtype", dtype, "--format", "both", "--out", d])
    a, b = generate(t, d), generate(t, d + ".gguf")
    assert a == b, f"safetensors {a} != gguf {b}"
    assert all(len(ids) == 12 for _, ids in a)


def llama_rows_permuted(t, tmp):
    d = os.path.join(tmp, "llama_bf16")  # written by the twin check
    st = read_safetensors(os.path.join(d, "model.safetensors"))
    g = Gguf(d + ".gguf")
    cfg = json.load(open(os.path.join(d, "config.json")))
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for layer in range(cfg["num_hidden_layers"]):
        for hf, gg, n in (("q_proj", "attn_q", heads), ("k_proj", "attn_k", kv)):
            w = st[f"model.layers.{layer}.self_attn.{hf}.weight"]
            # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
            expect = w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
            got = g.matrix(f"blk.{layer}.{gg}.weight")
            assert np.array_equal(got, expect), f"layer {layer} {gg} rows are not llama.cpp's permutation"
            assert not np.array_equal(got, w)
        v = st[f"model.layers.{layer}.self_attn.v_proj.weight"]
        assert np.array_equal(g.matrix(f"blk.{layer}.attn_v.weight"), v)


def gguf_file_matches_info_and_config(t, tmp):
    d = os.path.join(tmp, "qwen3_bf16")
    g = Gguf(d + ".gguf")
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert g.version == 3
    m = g.meta
    assert m["general.architecture"] == "qwen3"
    assert m["qwen3.block_count"] == cfg["num_hidden_layers"]
    assert m["qwen3.embedding_length"] == cfg["hidden_size"]
    assert m["qwen3.feed_forward_length"] == cfg["intermediate_size"]
    assert m["qwen3.attention.head_count"] == cfg["num_attention_heads"]
    assert m["qwen3.attention.head_count_kv"] == cfg["num_key_value_heads"]
    assert m["qwen3.attention.key_length"] == cfg["head_dim"]
    assert m["qwen3.context_length"] == cfg["max_position_embeddings"]
    assert abs(m["qwen3.rope.freq_base"] - cfg["rope_theta"]) < 1e-3 * cfg["rope_theta"]
    tok = json.load(open(os.path.join(d, "tokenizer.json")))
    tokens = m["tokenizer.ggml.tokens"]
    for text, i in list(tok["model"]["vocab"].items())[:2000]:
        assert tokens[i] == text
    for a in tok["added_tokens"]:
        assert tokens[a["id"]] == a["content"]
        assert m["tokenizer.ggml.token_type"][a["id"]] == (3 if a["special"] else 4)
    assert m["tokenizer.ggml.merges"][:50] == [x if isinstance(x, str) else " ".join(x) for x in tok["model"]["merges"][:50]]
    assert m["tokenizer.ggml.eos_token_id"] == cfg["eos_token_id"]
    tc = json.load(open(os.path.join(d, "tokenizer_config.json")))
    assert m["tokenizer.chat_template"] == tc["chat_template"]
    # Tied embeddings: no output.weight; every safetensors tensor has a GGUF twin of the same values.
    st = read_safetensors(os.path.join(d, "model.safetensors"))
    assert len(st) == len(g.tensors), (len(st), len(g.tensors))
    assert "output.weight" not in g.tensors
    assert np.array_equal(g.matrix("token_embd.weight"), st["model.embed_tokens.weight"])
    assert np.array_equal(g.matrix("blk.1.ffn_down.weight"), st["model.layers.1.mlp.down_proj.weight"])
    assert np.array_equal(g.matrix("blk.0.attn_q_norm.weight")[0], st["model.layers.0.self_attn.q_norm.weight"])
    # Vectors are F32 in a bf16 file, as convert_hf_to_gguf.py writes them (llama.cpp's CPU
    # backend cannot multiply by a bf16 or f16 norm), holding the bf16 values exactly.
    vectors = [k for k, v in g.tensors.items() if len(v["ne"]) == 1]
    assert vectors and all(g.tensors[k]["type"] == 0 for k in vectors), vectors
    info = json.loads(run(t, ["gguf-info", d + ".gguf", "--json"]))
    assert info["version"] == 3 and info["data_offset"] == g.data
    got = {x["name"]: (x["ne"], x["type_id"], x["offset"]) for x in info["tensors"]}
    assert got == {k: (v["ne"], v["type"], v["offset"]) for k, v in g.tensors.items()}
    md = {x["key"]: x["value"] for x in info["metadata"]}
    assert md["tokenizer.ggml.tokens"]["length"] == len(tokens)
    assert md["tokenizer.ggml.tokens"]["values"] == tokens[:16]
    assert md["qwen3.block_count"] == cfg["num_hidden_layers"]


def quantized_rows_within_a_step(t, tmp, dtype):
    d = os.path.join(tmp, f"q_{dtype}")
    run(t, ["synth", "--arch", "qwen3", "--size", "tiny", "--dtype", dtype, "--format", "both", "--out", d])
    g = Gguf(d + ".gguf")
    st = read_safetensors(os.path.join(d, "model.safetensors"))  # bf16 copy of the same f32 values
    assert g.tensors["token_embd.weight"]["type"] == {"q8_0": 8, "q4_0": 2}[dtype]
    deq, scale = g.matrix("token_embd.weight")
    ref = st["model.embed_tokens.weight"]
    assert deq.shape == ref.shape
    # Q8_0 rounds to the nearest step (half a step of error); Q4_0's clamp at
    # +7 can cost a full step on the extreme opposite the block's max. The
    # step is stored as f16 (relative error 2^-11, times |q| <= 128), and bf16
    # itself is off the f32 value by up to 2^-9 relative.
    step = np.repeat(np.abs(scale), 32, axis=1)
    qmax = 128 if dtype == "q8_0" else 8
    tol = ((0.5 if dtype == "q8_0" else 1.0) + qmax * 2.0 ** -11) * step + np.abs(ref) * 2.0 ** -8 + 1e-7
    err = np.abs(deq - ref)
    assert np.all(err <= tol), f"max excess {np.max(err - tol)}"
    assert np.mean(err) < 0.3 * np.mean(step), "dequantized values are not tracking the bf16 weights"


def quantized_generates_logits_argmax(t, tmp, dtype):
    path = os.path.join(tmp, f"m_{dtype}.gguf")
    extra = []
    if dtype == "q4_k":  # rows must be whole 256-element blocks for Q4_K
        extra = ["--set", "hidden_size=256", "--set", "intermediate_size=512", "--set", "head_dim=64"]
    run(t, ["synth", "--arch", "qwen3", "--size", "tiny", "--dtype", dtype, "--format", "gguf", "--out", path, *extra])
    g = Gguf(path)
    want = {"q8_0": 8, "q4_0": 2, "q4_k": 12}[dtype]
    assert g.tensors["blk.0.ffn_gate.weight"]["type"] == want
    out = generate(t, path, max_tokens=6)
    prompt_ids = [int(x) for x in PROMPT_IDS[0].split(",")]
    n_prompt, ids = out[len(PROMPTS)]
    assert n_prompt == len(prompt_ids)
    seq = prompt_ids + ids
    batch = os.path.join(tmp, "batch.json")
    json.dump({"sequences": [{"tokens": seq[:-1], "logits_at": list(range(len(prompt_ids) - 1, len(seq) - 1))}]},
              open(batch, "w"))
    npy = os.path.join(tmp, "logits.npy")
    run(t, ["logits", "--model", path, "--batch", batch, "--out", npy])
    argmax = np.load(npy).argmax(axis=1).tolist()
    assert argmax == ids, f"generate {ids} != logits argmax {argmax}"


def dir_with_one_gguf(t, tmp):
    d = os.path.join(tmp, "onegguf")
    os.makedirs(d)
    os.link(os.path.join(tmp, "qwen3_bf16.gguf"), os.path.join(d, "model.gguf"))
    assert generate(t, d) == generate(t, os.path.join(tmp, "qwen3_bf16"))


def serve_gguf_like_dir(t, tmp, arch="qwen3", synth=False):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import serve_util  # noqa: E402 - shared e2e helpers (stdlib only)
    answers = []
    d = os.path.join(tmp, f"{arch}_bf16")  # written by the twin check, or here
    if synth:
        run(t, ["synth", "--arch", arch, "--size", "tiny", "--dtype", "bf16", "--format", "both", "--out", d])
    for name, model in (("dir", d), ("gguf", d + ".gguf")):
        srv = serve_util.Server(t, ["--model", model], tmp, f"serve_{arch}_{name}")
        try:
            srv.wait_ready()
            out = []
            for messages in ([{"role": "user", "content": "Hi there!"}],
                             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "日本語 😀"}]):
                status, _, body = serve_util.chat(srv.port, messages=messages, max_tokens=8, temperature=0)
                assert status == 200, body
                out.append((body["usage"], body["choices"][0]["message"]["content"]))
            status, _, body = serve_util.complete(srv.port, prompt="def f(x):", max_tokens=8, temperature=0)
            assert status == 200, body
            out.append((body["usage"], body["choices"][0]["text"]))
            answers.append(out)
        finally:
            srv.stop()
    assert answers[0] == answers[1], f"dir {answers[0]} != gguf {answers[1]}"


def errors_are_clear(t, tmp):
    bad = os.path.join(tmp, "bad.gguf")
    data = open(os.path.join(tmp, "qwen3_bf16.gguf"), "rb").read()
    open(bad, "wb").write(data[: len(data) // 2])
    p = subprocess.run([t, "generate", "--model", bad, "--prompt-ids", "1,2"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "bad.gguf" in p.stderr and "past the end" in p.stderr, p.stderr[-500:]
    p = subprocess.run([t, "synth", "--dtype", "q8_0", "--out", os.path.join(tmp, "x")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "--format gguf" in p.stderr, p.stderr[-500:]
    # A well-formed container whose model metadata is invalid: gguf-info lists it but exits non-zero.
    corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "gguf")
    for flags in ([], ["--json"]):
        p = subprocess.run([t, "gguf-info", os.path.join(corpus, "bad_moe_used_over_count"), *flags],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "expert_used_count" in p.stderr, (flags, p.returncode, p.stderr[-500:])
        p = subprocess.run([t, "gguf-info", os.path.join(corpus, "valid_moe_qwen3moe"), *flags],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (flags, p.returncode, p.stderr[-500:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    t = os.path.abspath(args.tessera)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("bf16", "f16", "f32"):
            check(f"qwen3 {dtype}: safetensors and gguf give identical greedy tokens",
                  lambda: twins_identical(t, tmp, "qwen3", dtype))
        check("llama bf16: identical greedy tokens (Q/K permuted in the file)",
              lambda: twins_identical(t, tmp, "llama", "bf16"))
        check("llama gguf attn_q/attn_k rows are llama.cpp's permutation of HF's",
              lambda: llama_rows_permuted(t, tmp))
        check("phi3 bf16: identical greedy tokens (fused attn_qkv / ffn_up, SentencePiece vocabulary in GGUF)",
              lambda: twins_identical(t, tmp, "phi3", "bf16"))
        check("tessera serve phi3: Phi-3's chat template answers, the .gguf like the directory",
              lambda: serve_gguf_like_dir(t, tmp, "phi3"))
        check("gguf metadata, tokenizer and tensors match config/tokenizer/safetensors and gguf-info",
              lambda: gguf_file_matches_info_and_config(t, tmp))
        for dtype in ("q8_0", "q4_0"):
            check(f"{dtype} token_embd dequantizes to the bf16 values within a quantization step",
                  lambda: quantized_rows_within_a_step(t, tmp, dtype))
        for dtype in ("q8_0", "q4_0", "q4_k"):
            check(f"{dtype} gguf generates the argmax of tessera logits",
                  lambda: quantized_generates_logits_argmax(t, tmp, dtype))
        check("a directory holding one .gguf loads it", lambda: dir_with_one_gguf(t, tmp))
        check("tessera serve: chat template and completions from .gguf equal the directory's",
              lambda: serve_gguf_like_dir(t, tmp))
        # Gemma 3: sandwich norms, GeGLU, two RoPE bases, (1 + w) norms folded in the GGUF
        # file, Gemma's SentencePiece tokenizer and chat template carried as GGUF metadata.
        # One check (its 262k-token vocabulary makes each process start cost ~2 s): the
        # served chats and completion compare tokenizer, template and weights at once.
        check("tessera serve gemma3: chat and completion answers from .gguf equal the directory's",
              lambda: serve_gguf_like_dir(t, tmp, "gemma3", synth=True))
        check("truncated gguf, bad synth flags and invalid model metadata (gguf-info exit status) give clear errors",
              lambda: errors_are_clear(t, tmp))
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
