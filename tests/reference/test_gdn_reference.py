#!/usr/bin/python3
"""Tessera's Gated DeltaNet CPU kernels against an independent NumPy float64 oracle.

    /usr/bin/python3 tests/reference/test_gdn_reference.py --tessera build/tessera

ref_gdn.py evaluates the layer between its projections (conv1d, L2 norms, gates, the delta
rule token by token, gated RMSNorm) in float64 from the equations. `tessera kernel --op gdn`
runs the same inputs through GdnConv, the chunked (GC form) GdnCore and GatedRmsNorm:

* y, o and the final state within 1e-5 of the oracle, relative to each array's largest
  element (grouped and tiled head orders, a strong-decay case, beta near 1);
* the same inputs cut into other calls (1-row decode steps, splits off the chunk grid) and
  run on 3 threads give byte-identical outputs.

Prints one line per case and `N passed, M failed`; exits non-zero on any failure.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gdn  # noqa: E402
import oracle_checks  # noqa: E402

CMD_TIMEOUT = 120
REL = 1e-5

# (name, Hk, Hv, dk, dv, K, tokens, tiled, regime)
CASES = [
    ("grouped", 2, 4, 16, 24, 4, 40, False, "mild"),
    ("tiled", 2, 6, 12, 16, 4, 37, True, "mild"),
    ("strong decay", 1, 2, 32, 32, 4, 35, False, "decay"),
    ("beta near 1", 2, 2, 16, 16, 3, 33, False, "beta1"),
]


def make_inputs(rng, hk, hv, dk, dv, K, T, regime):
    C = 2 * hk * dk + hv * dv
    x = {
        "qkv": rng.uniform(-1.5, 1.5, (T, C)),
        "conv_w": rng.uniform(-0.8, 0.8, (C, K)),
        "a": rng.uniform(-2, 2, (T, hv)),
        "b": rng.uniform(-3, 3, (T, hv)),
        "a_log": rng.uniform(-2, 0.5, hv),
        "dt_bias": rng.uniform(-1, 1, hv),
        "z": rng.uniform(-3, 3, (T, hv * dv)),
        "norm_w": rng.uniform(0.5, 1.5, dv),
    }
    if regime == "decay":
        x["a_log"][:] = 3.0
        x["a"] += 4.0
    elif regime == "beta1":
        x["b"] += 12.0
        x["a"] -= 6.0
    # The kernel sees f32 values: round once, and give the oracle the same numbers.
    return {k: v.astype(np.float32) for k, v in x.items()}


def run_kernel(tessera, tmp, x, dims, T, tiled, calls=None, threads=1):
    path_in, path_out = os.path.join(tmp, "gdn_in.f32"), os.path.join(tmp, "gdn_out.f32")
    order = ["qkv", "conv_w", "a", "b", "a_log", "dt_bias", "z", "norm_w"]
    np.concatenate([x[k].ravel() for k in order]).astype("<f4").tofile(path_in)
    args = [tessera, "kernel", "--op", "gdn", "--gdn-dims", ",".join(map(str, dims)), "--m", str(T),
            "--x", path_in, "--out", path_out, "--threads", str(threads)]
    if tiled:
        args.append("--gdn-tiled")
    if calls:
        args += ["--gdn-calls", ",".join(map(str, calls))]
    p = subprocess.run(args, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"tessera kernel failed ({p.returncode}): {p.stderr.strip()}")
    return np.fromfile(path_out, dtype="<f4")


def rel_err(got, want):
    """Normwise: worst |got - want| relative to the largest |want| of the whole array (a
    per-vector scale would measure the conditioning of small q̂·k̂ dot products, not the kernel)."""
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def check_case(tessera, tmp, case, seed):
    _, hk, hv, dk, dv, K, T, tiled, regime = case
    rng = np.random.default_rng(seed)
    x = make_inputs(rng, hk, hv, dk, dv, K, T, regime)
    f64 = {k: v.astype(np.float64) for k, v in x.items()}
    y, o, _ = ref_gdn.gdn_layer(f64["qkv"], f64["conv_w"], f64["a"], f64["b"], f64["a_log"], f64["dt_bias"],
                                f64["z"], f64["norm_w"], hk, hv, dk, dv, tiled=tiled)
    dims = (hk, hv, dk, dv, K)
    out = run_kernel(tessera, tmp, x, dims, T, tiled)
    n = T * hv * dv
    if out.size != 2 * n + hv * dk * dv:
        return f"output has {out.size} floats, expected {2 * n + hv * dk * dv}"
    got_y = out[:n].reshape(T, hv, dv)
    got_o = out[n:2 * n].reshape(T, hv, dv)
    got_s = out[2 * n:].reshape(hv, dk, dv)
    # The kernel's state is S at the last chunk start (multiples of 16): compare it with the
    # oracle's state after that many tokens.
    chunk_start = T // 16 * 16
    _, _, S_at = ref_gdn.gdn_layer(f64["qkv"][:chunk_start], f64["conv_w"], f64["a"][:chunk_start],
                                   f64["b"][:chunk_start], f64["a_log"], f64["dt_bias"], f64["z"][:chunk_start],
                                   f64["norm_w"], hk, hv, dk, dv, tiled=tiled)
    errs = {"y": rel_err(got_y, y.reshape(T, hv, dv)), "o": rel_err(got_o, o.reshape(T, hv, dv)),
            "S": rel_err(got_s, S_at)}
    bad = {k: e for k, e in errs.items() if not e <= REL}
    if bad:
        return "beyond 1e-5 relative: " + ", ".join(f"{k} {e:.3g}" for k, e in bad.items())
    # Other call splits and threads: byte-identical.
    for calls, threads in [(list(range(1, T + 1)), 1), ([5, 17, 18, T], 3), ([16, T], 2)]:
        other = run_kernel(tessera, tmp, x, dims, T, tiled, calls=calls, threads=threads)
        if other.tobytes() != out.tobytes():
            return f"calls ending at {calls} on {threads} threads differ in bits from one call"
    return None


def check_rejects(tessera, tmp):
    p = subprocess.run([tessera, "kernel", "--op", "gdn", "--gdn-dims", "2,3,8,8,4", "--m", "4", "--x",
                        os.path.join(tmp, "none"), "--out", os.path.join(tmp, "o")],
                       capture_output=True, text=True, timeout=CMD_TIMEOUT)
    if p.returncode == 0 or "linear_num_value_heads" not in p.stderr:
        return f"Hv not a multiple of Hk accepted or not named (rc {p.returncode}): {p.stderr.strip()}"
    return None


def make_checks(tessera, tmp):
    checks = [(c[0], lambda c=c, s=i: check_case(tessera, tmp, c, 2000 + s)) for i, c in enumerate(CASES)]
    return checks + [("rejects bad dims", lambda: check_rejects(tessera, tmp))]

if __name__ == "__main__":
    oracle_checks.main(make_checks)
