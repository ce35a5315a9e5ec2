#!/usr/bin/python3
"""Every GGUF weight type against llama.cpp's own Python package, gguf-py.

    /usr/bin/python3 tests/reference/test_gguf_py_oracle.py --tessera build/tessera

gguf-py (llama.cpp's gguf/quants.py: NumPy dequantization of every type, quantization of
some) comes from the llama.cpp source bundle that scripts/bootstrap unpacks under
.deps/llama.cpp/src (or $TESSERA_GGUF_PY, or bench/build_llama_cpp.sh's
~/.cache/tessera/llama.cpp/src); without it the test prints SKIP and exits 77. One line per
check:

* dequantize <type>: random valid blocks built byte by byte (random finite f16 scales,
  random nibble/byte fields) plus blocks with one scale/min field at each extreme (0, -0,
  smallest and largest subnormal, smallest normal, max, -max, inf, NaN for f16; 0/63/64/255
  for packed 6-bit scales; -128/127 for int8 scales; E8M0 0, 1, 2, 127, 128, 254, 255)
  through `tessera kernel --op dequantize` equal `gguf.quants.dequantize` bit for bit
  (uint32 patterns: a NaN must be the same NaN);
* quantize <type> (the types gguf-py can quantize): `tessera kernel --op quantize` writes
  the bytes `gguf.quants.quantize` writes;
* linear <type>: `tessera kernel --op linear` equals the float64 product of the
  gguf-py-dequantized weights with the int8-quantized activations (per block of 32, or 256
  for the K-quants and IQ4_XS) within the kernels' documented tolerance, a k/16-step chain
  of f32 roundings of the terms' magnitudes;
* gguf-info <file>: a synthetic mixed-recipe file read by gguf-py's GGUFReader and by
  `tessera gguf-info --json` lists the same tensors, types, shapes, offsets and file type.

Prints PASS/FAIL/SKIP per line and `N passed, M failed, S skipped`; exits 1 on any failure,
77 when nothing failed but something was skipped.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from test_quant_reference import quantize_acts  # noqa: E402 - the documented activation quantization

CMD_TIMEOUT = 120

# Block layouts (ggml-common.h), field by field; f2 = f16, the rest integer bytes.
LAYOUTS = {
    "q4_0": [("d", "<f2"), ("qs", "u1", 16)],
    "q4_1": [("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)],
    "q5_0": [("d", "<f2"), ("qh", "u1", 4), ("qs", "u1", 16)],
    "q5_1": [("d", "<f2"), ("m", "<f2"), ("qh", "u1", 4), ("qs", "u1", 16)],
    "q8_0": [("d", "<f2"), ("qs", "i1", 32)],
    "q2_k": [("scales", "u1", 16), ("qs", "u1", 64), ("d", "<f2"), ("dmin", "<f2")],
    "q3_k": [("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "<f2")],
    "q4_k": [("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)],
    "q5_k": [("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qh", "u1", 32), ("qs", "u1", 128)],
    "q6_k": [("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")],
    "iq4_nl": [("d", "<f2"), ("qs", "u1", 16)],
    "iq4_xs": [("d", "<f2"), ("scales_h", "<u2"), ("scales_l", "u1", 4), ("qs", "u1", 128)],
    "mxfp4": [("e", "u1"), ("qs", "u1", 16)],
}
SUPER = {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"}  # 256-element blocks
QUANTIZABLE = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4"]  # gguf-py has quantize_blocks
# Scale/min fields and their extremes (f16 as bit patterns).
F16_EXTREMES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00]
BYTE_EXTREMES = {"scales": [0x00, 0x3F, 0x40, 0xC0, 0xFF], "scales_l": [0x00, 0xFF], "e": [0, 1, 2, 127, 128, 254, 255]}
I8_EXTREMES = [-128, -1, 0, 127]
U16_EXTREMES = [0x0000, 0xFFFF, 0xAAAA]


def block_dtype(t):
    return np.dtype([(f[0], f[1], (f[2],)) if len(f) == 3 else f for f in LAYOUTS[t]])


def block_elems(t):
    return 256 if t in SUPER else 32


def random_finite_f16(rng, shape):
    bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint32)
    bits = np.where((bits & 0x7C00) == 0x7C00, bits & ~np.uint32(0x4000), bits)  # exponent 31 -> 15
    return bits.astype(np.uint16).view(np.float16)


def random_blocks(rng, t, count, moderate=False):
    """count random valid blocks; moderate: scales in a range fit for a matmul."""
    b = np.zeros(count, dtype=block_dtype(t))
    for f in b.dtype.names:
        kind = b.dtype[f].base
        if kind == np.float16:
            if moderate:
                lo, hi = (-12, -4) if t in SUPER else (-8, 0)
                mag = 2.0 ** rng.uniform(lo, hi, size=count)
                signed = (t not in SUPER and f == "d") or f == "m"
                b[f] = (mag * (rng.choice([-1.0, 1.0], size=count) if signed else 1.0)).astype(np.float16)
            else:
                b[f] = random_finite_f16(rng, count)
        elif f == "e" and moderate:
            b[f] = rng.integers(118, 131, size=count)
        else:
            info = np.iinfo(kind)
            b[f] = rng.integers(info.min, int(info.max) + 1, size=b[f].shape)
    return b


def extreme_blocks(rng, t):
    """One block per (scale/min field, extreme value), the other fields random."""
    out = []
    for f in block_dtype(t).names:
        kind = block_dtype(t)[f].base
        if kind == np.float16:
            values = [np.uint16(v).view(np.float16) for v in F16_EXTREMES]
        elif kind == np.int8 and f == "scales":
            values = I8_EXTREMES
        elif f in BYTE_EXTREMES:
            values = BYTE_EXTREMES[f]
        elif kind == np.uint16:
            values = U16_EXTREMES
        else:
            continue  # quant bits: random already covers them
        for v in values:
            b = random_blocks(rng, t, 1)
            b[f] = v
            out.append(b)
    return np.concatenate(out)


def run(tessera, args):
    p = subprocess.run([tessera] + args, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    return p.returncode, p.stdout, p.stderr


def as_rows(blocks, per_row):
    pad = (-len(blocks)) % per_row
    if pad:
        blocks = np.concatenate([blocks, blocks[:pad]])
    return blocks.view(np.uint8).reshape(len(blocks) // per_row, -1)


class Oracle:
    def __init__(self, tessera, gguf, tmp):
        self.tessera, self.gguf, self.tmp = tessera, gguf, tmp

    def qtype(self, t):
        return self.gguf.GGMLQuantizationType[t.upper()]

    def path(self, name):
        return os.path.join(self.tmp, name)

    def dequantize(self, t):
        rng = np.random.default_rng(sum(map(ord, t)))
        assert block_dtype(t).itemsize == self.gguf.GGML_QUANT_SIZES[self.qtype(t)][1], t
        blocks = np.concatenate([random_blocks(rng, t, 96), extreme_blocks(rng, t)])
        per_row = 4
        rows = as_rows(blocks, per_row)
        n, k = rows.shape[0], per_row * block_elems(t)
        rows.tofile(self.path("w.bin"))
        rc, _, err = run(self.tessera, ["kernel", "--op", "dequantize", "--dtype", t, "--k", str(k), "--n", str(n),
                                        "--weights", self.path("w.bin"), "--out", self.path("deq.f32")])
        if rc != 0:
            return f"tessera kernel failed: {err.strip()}"
        got = np.fromfile(self.path("deq.f32"), dtype=np.float32).reshape(n, k)
        with np.errstate(all="ignore"):
            want = np.asarray(self.gguf.quants.dequantize(rows, self.qtype(t)), dtype=np.float32).reshape(n, k)
        bad = got.view(np.uint32) != want.view(np.uint32)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            blk = (r * k + c) // block_elems(t)
            return (f"{int(bad.sum())} of {bad.size} values differ; first at block {blk} element "
                    f"{c % block_elems(t)}: {got[r, c]!r} ({got.view(np.uint32)[r, c]:#010x}) != gguf-py "
                    f"{want[r, c]!r} ({want.view(np.uint32)[r, c]:#010x})")
        return None

    def quantize(self, t):
        rng = np.random.default_rng(7 + sum(map(ord, t)))
        k = 4 * block_elems(t)
        x = rng.normal(size=(12, k)).astype(np.float32) * np.float32(2.0) ** rng.integers(-10, 10, size=(12, 1))
        x[1] = 0.0
        x[2] = -0.375                       # constant rows: d from a single value
        x[3, ::7] *= 50.0                   # outliers
        x[4, :32] = np.linspace(-1, 1, 32)  # ties in the nearest-value searches
        x = x.astype(np.float32)
        x.tofile(self.path("x.f32"))
        rc, _, err = run(self.tessera, ["kernel", "--op", "quantize", "--dtype", t, "--k", str(k), "--n", "12",
                                        "--x", self.path("x.f32"), "--out", self.path("q.bin")])
        if rc != 0:
            return f"tessera kernel failed: {err.strip()}"
        got = np.fromfile(self.path("q.bin"), dtype=np.uint8).reshape(12, -1)
        want = np.asarray(self.gguf.quants.quantize(x, self.qtype(t))).reshape(12, -1)
        if got.shape != want.shape:
            return f"{got.shape} bytes != gguf-py {want.shape}"
        bad = got != want
        if bad.any():
            r, c = np.argwhere(bad)[0]
            return f"{int(bad.sum())} bytes differ; first row {r} byte {c}: {got[r, c]} != gguf-py {want[r, c]}"
        return None

    def linear(self, t, m=4, k=512, n=9, threads=2):
        rng = np.random.default_rng(31 + sum(map(ord, t)))
        rows = as_rows(random_blocks(rng, t, n * k // block_elems(t), moderate=True), k // block_elems(t))
        rows.tofile(self.path("lw.bin"))
        w = np.asarray(self.gguf.quants.dequantize(rows, self.qtype(t)), dtype=np.float32).reshape(n, k)
        x = rng.uniform(-3, 3, size=(m, k)).astype(np.float32)
        x[0, :40] *= 100.0  # a block with an outlier
        bias = rng.uniform(-1, 1, size=n).astype(np.float32)
        x.tofile(self.path("x.f32"))
        bias.tofile(self.path("b.f32"))
        rc, _, err = run(self.tessera, ["kernel", "--op", "linear", "--dtype", t, "--k", str(k), "--n", str(n),
                                        "--m", str(m), "--weights", self.path("lw.bin"), "--x", self.path("x.f32"),
                                        "--bias", self.path("b.f32"), "--threads", str(threads),
                                        "--out", self.path("y.f32")])
        if rc != 0:
            return f"tessera kernel failed (rc {rc}): {err.strip()[-300:]}"
        y = np.fromfile(self.path("y.f32"), dtype=np.float32).reshape(m, n).astype(np.float64)
        block = block_elems(t)
        q, d = quantize_acts(x, block)
        xd = (q.reshape(m, -1, block) * d[..., None].astype(np.float64)).reshape(m, k)
        w64 = w.astype(np.float64)
        ref = xd @ w64.T + bias
        mag = np.abs(xd) @ np.abs(w64).T
        tol = (2 * (k // 16) + 8) * 2.0 ** -24 * mag + 1e-6 * np.abs(bias)
        err_q = np.abs(y - ref)
        if not np.all(err_q <= tol):
            i = np.unravel_index(np.argmax(err_q - tol), err_q.shape)
            return f"y{tuple(int(v) for v in i)} = {y[i]} vs reference {ref[i]} (tol {tol[i]:.3g})"
        return None

    def gguf_info(self, dtype, extra):
        """synth a tiny recipe file, then GGUFReader and gguf-info --json must agree."""
        path = self.path(f"{dtype}.gguf")
        rc, _, err = run(self.tessera, ["--log-level", "warn", "synth", "--arch", "llama", "--size", "tiny",
                                        "--dtype", dtype, "--format", "gguf", "--out", path,
                                        "--set", "vocab_size=4096"] + extra)
        if rc != 0:
            if "tokenizer files not found" in err:
                return "SKIP: no tokenizer packages for synth (scripts/bootstrap)"
            return f"synth failed: {err.strip()}"
        rc, out, err = run(self.tessera, ["gguf-info", "--json", "--max-array", "0", path])
        if rc != 0:
            return f"gguf-info failed: {err.strip()}"
        ours = json.loads(out)
        r = self.gguf.GGUFReader(path)
        theirs = [(t.name, int(t.tensor_type), [int(v) for v in t.shape], int(t.data_offset), int(t.n_bytes))
                  for t in r.tensors]
        mine = [(t["name"], t["type_id"], t["ne"], ours["data_offset"] + t["offset"], t["nbytes"])
                for t in ours["tensors"]]
        if mine != theirs:
            diff = next((a, b) for a, b in zip(mine + [None] * len(theirs), theirs + [None] * len(mine)) if a != b)
            return f"tensor tables differ ({len(mine)} vs {len(theirs)} tensors); first: ours {diff[0]} gguf-py {diff[1]}"
        for t in ours["tensors"]:
            if t["type"] != self.gguf.GGMLQuantizationType(t["type_id"]).name or t["shape"] != t["ne"][::-1]:
                return f"tensor {t['name']}: type {t['type']} / shape {t['shape']} inconsistent"
        counts = {}
        for name, tid, _, _, nbytes in theirs:
            c = counts.setdefault(self.gguf.GGMLQuantizationType(tid).name, [0, 0])
            c[0] += 1
            c[1] += nbytes
        summary = {s["type"]: [s["tensors"], s["bytes"]] for s in ours["types"]}
        if summary != counts:
            return f"type summary {summary} != gguf-py's {counts}"
        field = r.get_field("general.file_type")
        ftype = int(field.parts[field.data[0]][0])
        want_name = self.gguf.LlamaFileType(ftype).name
        if ours["file_type"]["id"] != ftype or ours["file_type"]["name"] != want_name:
            return f"file_type {ours['file_type']} != gguf-py's {ftype} {want_name}"
        if len(counts) < 3:
            return f"a {dtype} recipe file should mix types, got {sorted(counts)}"
        return None


def hf_mxfp4(gguf):
    """HF's MXFP4 (gpt-oss *_blocks / *_scales, decoded as reference_gptoss.py reads
    transformers' layout) repacked into ggml blocks as llama.cpp's converter does (low
    nibbles elements 0..15, high 16..31, the E8M0 byte first): gguf-py decodes the same
    numbers, so HF and GGUF experts are one set of weights."""
    import reference_gptoss  # noqa: E402 - this folder's gpt-oss reference
    rng = np.random.default_rng(5)
    blocks = rng.integers(0, 256, size=(3, 7, 16), dtype=np.uint8)
    scales = rng.integers(100, 150, size=(3, 7), dtype=np.uint8)
    scales[0, 0], scales[0, 1] = 0, 160  # the smallest exponent (f32 subnormals) and a large one
    want = reference_gptoss.dequant_mxfp4(blocks, scales)  # [3, 7 * 32]
    elems = np.empty(blocks.shape[:-1] + (32,), dtype=np.uint8)
    elems[..., 0::2], elems[..., 1::2] = blocks & 0x0F, blocks >> 4
    ggml = np.concatenate([scales[..., None], elems[..., :16] | (elems[..., 16:] << 4)], axis=-1)
    got = gguf.quants.dequantize(ggml.reshape(3, 7 * 17), gguf.GGMLQuantizationType.MXFP4)
    if got.shape != want.shape or not np.array_equal(got.astype(np.float64), want):
        return f"gguf-py decodes the repacked blocks differently (max diff {np.nanmax(np.abs(got - want)):.3g})"
    return None


def find_gguf_py():
    candidates = [os.environ.get("TESSERA_GGUF_PY", ""), os.path.join(REPO, ".deps", "llama.cpp", "src", "gguf-py"),
                  os.path.expanduser("~/.cache/tessera/llama.cpp/src/gguf-py")]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "gguf", "quants.py")):
            return c
    return None


TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    where = find_gguf_py()
    if where is None:
        print("SKIP: gguf-py not found ($TESSERA_GGUF_PY, .deps/llama.cpp/src/gguf-py: scripts/bootstrap)")
        return 77
    sys.path.insert(0, where)
    import gguf  # noqa: E402 - llama.cpp's package, found above
    print(f"gguf-py from {where}")
    passed = failed = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        o = Oracle(args.tessera, gguf, tmp)
        # One check per line, so a failure names its type.
        checks = [(f"dequantize {t}", lambda t=t: o.dequantize(t)) for t in TYPES]
        checks += [(f"quantize {t}", lambda t=t: o.quantize(t)) for t in QUANTIZABLE]
        checks += [(f"linear {t}", lambda t=t: o.linear(t)) for t in TYPES]
        wide = ["--set", "hidden_size=256", "--set", "intermediate_size=512", "--set", "head_dim=64"]
        checks += [("gguf-info q4_k_m mix (rows of 256: Q4_K, Q6_K)", lambda: o.gguf_info("q4_k_m", wide)),
                   ("gguf-info iq4_xs mix (rows of 64: fallbacks)", lambda: o.gguf_info("iq4_xs", ["--mix"]))]
        checks += [("hf mxfp4 (gpt-oss blocks/scales) repacked = gguf-py mxfp4", lambda: hf_mxfp4(gguf))]
        for name, fn in checks:
            msg = fn()
            if msg is None:
                passed += 1
                print(f"PASS {name}")
            elif msg.startswith("SKIP"):
                skipped += 1
                print(f"SKIP {name}: {msg[5:].strip()}")
            else:
                failed += 1
                print(f"FAIL {name}: {msg}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 77 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
