#!/usr/bin/python3
"""Quantized weight formats and the int8 Linear kernel against an independent NumPy oracle.

    /usr/bin/python3 tests/reference/test_quant_reference.py --tessera build/tessera

The GGML block layouts (Q8_0, Q4_0, Q4_K) are implemented here from their published
description (llama.cpp's ggml-common.h / GGUF docs), not from Tessera's C++.  Random
blocks are built byte by byte with NumPy (random f16 scales, random int8 / nibble
bytes, random 12-byte Q4_K scale fields), written to files, and `tessera kernel`
dequantizes them and runs Linear on them:

* dequantize: every value equals NumPy's f32 evaluation exactly;
* linear: within float rounding of NumPy's float64 sum over the block dots with the
  activation quantization Tessera documents (per block of 32, or 256 for Q4_K:
  d = amax/127 in f32, q = round-half-even(x/d)) emulated in NumPy, and within the
  rigorous activation-quantization bound of x @ W_deq.T.

Prints one line per case and `N passed, M failed`; exits non-zero on any failure.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_checks  # noqa: E402

CMD_TIMEOUT = 120

# --- GGML block formats, from the format description.
#   block_q8_0 { ggml_half d; int8_t qs[32]; }            x = d * qs[i]
#   block_q4_0 { ggml_half d; uint8_t qs[16]; }           x[i] = d * ((qs[i] & 15) - 8),
#                                                         x[i+16] = d * ((qs[i] >> 4) - 8)
#   block_q4_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; }
#     8 sub-blocks of 32 with 6-bit scale/min (get_scale_min_k4); for chunk c of 64
#     values: y[l] = d*sc[2c]*(qs[32c+l] & 15) - dmin*m[2c],
#             y[32+l] = d*sc[2c+1]*(qs[32c+l] >> 4) - dmin*m[2c+1]
Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])
Q4_0 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
Q4_K = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", (12,)), ("qs", "u1", (128,))])
FORMATS = {"q8_0": (Q8_0, 32), "q4_0": (Q4_0, 32), "q4_k": (Q4_K, 256)}
assert Q8_0.itemsize == 34 and Q4_0.itemsize == 18 and Q4_K.itemsize == 144


def random_f16(rng, shape, lo_exp=-8, hi_exp=2, signed=True):
    mag = 2.0 ** rng.uniform(lo_exp, hi_exp, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape) if signed else 1.0
    return (mag * sign).astype(np.float16)


def random_blocks(rng, fmt, n_rows, k):
    dt, be = FORMATS[fmt]
    b = np.zeros((n_rows, k // be), dtype=dt)
    if fmt == "q8_0":
        b["d"] = random_f16(rng, b.shape)
        b["qs"] = rng.integers(-128, 128, size=b["qs"].shape)  # -128 included on purpose
    elif fmt == "q4_0":
        b["d"] = random_f16(rng, b.shape)
        b["qs"] = rng.integers(0, 256, size=b["qs"].shape)
    else:
        b["d"] = random_f16(rng, b.shape, -12, -4, signed=False)
        b["dmin"] = random_f16(rng, b.shape, -12, -4, signed=False)
        b["scales"] = rng.integers(0, 256, size=b["scales"].shape)
        b["qs"] = rng.integers(0, 256, size=b["qs"].shape)
    return b


def q4k_scale_min(scales, j):
    """get_scale_min_k4: 6-bit scale and min of sub-block j from the 12 packed bytes."""
    s = scales.astype(np.int64)
    if j < 4:
        return s[..., j] & 63, s[..., j + 4] & 63
    sc = (s[..., j + 4] & 0xF) | ((s[..., j - 4] >> 6) << 4)
    m = (s[..., j + 4] >> 4) | ((s[..., j] >> 6) << 4)
    return sc, m


def dequantize(fmt, b):
    """f32 values [rows, k], evaluated in f32 in the format's order."""
    f32 = np.float32
    rows = b.shape[0]
    if fmt == "q8_0":
        v = b["d"].astype(f32)[..., None] * b["qs"].astype(f32)
        return v.reshape(rows, -1)
    if fmt == "q4_0":
        q = b["qs"].astype(np.int64)
        nib = np.concatenate([q & 15, q >> 4], axis=-1) - 8
        return (b["d"].astype(f32)[..., None] * nib.astype(f32)).reshape(rows, -1)
    d = b["d"].astype(f32)
    dmin = b["dmin"].astype(f32)
    out = np.zeros(b.shape + (256,), dtype=f32)
    for c in range(4):
        q = b["qs"][..., 32 * c:32 * c + 32].astype(np.int64)
        for h, nib in ((0, q & 15), (1, q >> 4)):
            sc, m = q4k_scale_min(b["scales"], 2 * c + h)
            step = d * sc.astype(f32)  # f32 products, then step * q - offset
            off = dmin * m.astype(f32)
            out[..., 64 * c + 32 * h:64 * c + 32 * h + 32] = step[..., None] * nib.astype(f32) - off[..., None]
    return out.reshape(rows, -1)


def dequantize_fused(fmt, b):
    """Q4_K with step * q - offset fused (one rounding), as an FMA-contracting build does."""
    if fmt != "q4_k":
        return dequantize(fmt, b)
    f32 = np.float32
    d = b["d"].astype(f32)
    dmin = b["dmin"].astype(f32)
    out = np.zeros(b.shape + (256,), dtype=f32)
    for c in range(4):
        q = b["qs"][..., 32 * c:32 * c + 32].astype(np.int64)
        for h, nib in ((0, q & 15), (1, q >> 4)):
            sc, m = q4k_scale_min(b["scales"], 2 * c + h)
            step = (d * sc.astype(f32)).astype(np.float64)
            off = (dmin * m.astype(f32)).astype(np.float64)
            out[..., 64 * c + 32 * h:64 * c + 32 * h + 32] = (step[..., None] * nib - off[..., None]).astype(f32)
    return out.reshape(b.shape[0], -1)


def quantize_acts(x, block):
    """The documented activation quantization, in f32: returns (q int, d f32 per block)."""
    m, k = x.shape
    xb = x.reshape(m, k // block, block).astype(np.float32)
    amax = np.abs(xb).max(axis=-1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = np.clip(xb * inv[..., None], np.float32(-127), np.float32(127))
    q = np.rint(v).astype(np.int64)  # half to even
    return q.reshape(m, k), d


def linear_reference(fmt, x, w_deq, bias):
    """float64 y from the quantized activations; also |terms| and the x @ W.T bound."""
    block = 256 if fmt == "q4_k" else 32
    q, d = quantize_acts(x, block)
    xd = (q.reshape(x.shape[0], -1, block) * d[..., None].astype(np.float64)).reshape(x.shape)
    w = w_deq.astype(np.float64)
    y = xd @ w.T + (bias.astype(np.float64) if bias is not None else 0.0)
    mag = np.abs(xd) @ np.abs(w).T
    # |x - xd| <= d/2 per element (rounding to the nearest step; no clamp since |x/d| <= 127).
    half = np.repeat(d.astype(np.float64) / 2, block, axis=1)
    bound = half @ np.abs(w).T
    y_exact = x.astype(np.float64) @ w.T + (bias.astype(np.float64) if bias is not None else 0.0)
    return y, mag, bound, y_exact


def run(tessera, args):
    p = subprocess.run([tessera, "kernel"] + args, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    return p.returncode, p.stderr


CASES = [
    # (fmt, m, k, n, bias, threads)
    ("q8_0", 1, 32, 1, False, 1),
    ("q8_0", 5, 96, 13, True, 1),
    ("q8_0", 70, 288, 40, True, 2),
    ("q4_0", 3, 288, 9, True, 1),
    ("q4_0", 1, 896, 50, False, 2),
    ("q4_0", 33, 160, 17, False, 2),
    ("q4_k", 4, 512, 11, True, 1),
    ("q4_k", 1, 256, 3, False, 1),
    ("q4_k", 65, 768, 26, True, 2),
]


def check_case(tessera, tmp, case, seed):
    fmt, m, k, n, with_bias, threads = case
    rng = np.random.default_rng(seed)
    blocks = random_blocks(rng, fmt, n, k)
    wpath = os.path.join(tmp, "w.bin")
    blocks.tofile(wpath)
    out = os.path.join(tmp, "out.f32")
    base = ["--dtype", fmt, "--k", str(k), "--n", str(n), "--weights", wpath, "--out", out]
    rc, err = run(tessera, ["--op", "dequantize"] + base)
    if rc != 0:
        return f"dequantize failed: {err.strip()}"
    got = np.fromfile(out, dtype=np.float32).reshape(n, k)
    want, fused = dequantize(fmt, blocks), dequantize_fused(fmt, blocks)
    ok = (got.view(np.uint32) == want.view(np.uint32)) | (got.view(np.uint32) == fused.view(np.uint32))
    if not ok.all():
        i = np.argwhere(~ok)[0]
        return f"dequantized value {tuple(i)}: {got[tuple(i)]!r} != {want[tuple(i)]!r}"
    x = rng.uniform(-3, 3, size=(m, k)).astype(np.float32)
    x[0, : min(k, 40)] *= 100.0  # a block with an outlier
    bias = rng.uniform(-1, 1, size=n).astype(np.float32) if with_bias else None
    xpath, bpath = os.path.join(tmp, "x.f32"), os.path.join(tmp, "b.f32")
    x.tofile(xpath)
    extra = ["--m", str(m), "--x", xpath, "--threads", str(threads)]
    if bias is not None:
        bias.tofile(bpath)
        extra += ["--bias", bpath]
    rc, err = run(tessera, ["--op", "linear"] + base + extra)
    if rc != 0:
        return f"linear failed: {err.strip()}"
    y = np.fromfile(out, dtype=np.float32).reshape(m, n).astype(np.float64)
    ref, mag, bound, y_exact = linear_reference(fmt, x, want, bias)
    # f32 chain of k/block fmas plus scale products: well under (2 nb + 8) eps of |terms|.
    nb = k // (256 if fmt == "q4_k" else 32)
    tol = (2 * nb + 8) * 2.0 ** -24 * mag + 1e-6 * (np.abs(bias)[None, :] if bias is not None else 0)
    err_q = np.abs(y - ref)
    if not (err_q <= tol).all():
        i = np.unravel_index(np.argmax(err_q - tol), err_q.shape)
        return f"linear {i}: {y[i]} vs quantized-activation reference {ref[i]} (tol {tol[i]:.3g})"
    err_x = np.abs(y - y_exact)
    lim = bound * 1.001 + tol
    if not (err_x <= lim).all():
        i = np.unravel_index(np.argmax(err_x - lim), err_x.shape)
        return f"linear {i}: {y[i]} vs x @ W.T {y_exact[i]} beyond the quantization bound {lim[i]:.3g}"
    return None


def check_rejects(tessera, tmp):
    """A weights file of the wrong size is refused with an error naming the field."""
    wpath = os.path.join(tmp, "short.bin")
    np.zeros(33, dtype=np.uint8).tofile(wpath)
    rc, err = run(tessera, ["--op", "dequantize", "--dtype", "q8_0", "--k", "32", "--n", "1",
                            "--weights", wpath, "--out", os.path.join(tmp, "o")])
    if rc == 0 or "--weights" not in err:
        return f"short weights file accepted (rc {rc}, stderr {err!r})"
    rc, err = run(tessera, ["--op", "dequantize", "--dtype", "q4_k", "--k", "300", "--n", "1",
                            "--weights", wpath, "--out", os.path.join(tmp, "o")])
    if rc == 0 or "--k" not in err:
        return f"k not a multiple of 256 accepted for q4_k (rc {rc}, stderr {err!r})"
    return None


def make_checks(tessera, tmp):
    checks = [(f"{c[0]} m={c[1]} k={c[2]} n={c[3]} bias={c[4]} threads={c[5]}",
               lambda c=c, s=i: check_case(tessera, tmp, c, 1000 + s)) for i, c in enumerate(CASES)]
    return checks + [("rejects bad input", lambda: check_rejects(tessera, tmp))]

if __name__ == "__main__":
    oracle_checks.main(make_checks)
