#!/usr/bin/env python3
"""`--device` and the CUDA flags of `tessera generate|logits|serve`.

Without a usable GPU (no CUDA in the build, or no device/driver) `--device cuda`
must fail fast with a message that says why; with one, generation must work and
agree with the CPU on the first greedy token of a tiny f32 model. Bad values of
--device and --gpu-memory-utilization are rejected. Stdlib only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

results = {"passed": 0, "failed": 0}
NO_GPU_MESSAGES = ("no CUDA device", "built without CUDA")


def check(name, fn):
    try:
        fn()
        results["passed"] += 1
        print(f"PASS {name}")
    except Exception as e:  # noqa: BLE001 - report any failure
        results["failed"] += 1
        print(f"FAIL {name}: {e}")


def tessera(t, args, timeout=300):
    return subprocess.run([t, "--log-level", "warn", *args], capture_output=True, text=True, timeout=timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    t = os.path.abspath(ap.parse_args().tessera)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m")
        p = tessera(t, ["synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32", "--out", model])
        if p.returncode != 0:
            print(f"FAIL synth: {p.stderr[-1000:]}")
            return 1
        gen = ["generate", "--model", model, "--prompt-ids", "1,2,3", "--max-tokens", "2", "--temperature", "0"]
        cpu = tessera(t, gen)
        gpu = tessera(t, gen + ["--device", "cuda", "--gpu-memory-utilization", "0.5"])
        have_gpu = gpu.returncode == 0

        def generate_cuda():
            if have_gpu:
                a, b = json.loads(cpu.stdout.splitlines()[0]), json.loads(gpu.stdout.splitlines()[0])
                assert a["token_ids"][:1] == b["token_ids"][:1], f"cpu {a} vs cuda {b}"
            else:
                assert any(m in gpu.stderr for m in NO_GPU_MESSAGES), f"unclear failure: {gpu.stderr[-500:]}"
                assert "Traceback" not in gpu.stderr and "Segmentation" not in gpu.stderr
        check("generate --device cuda works on a GPU, else fails with a clear message", generate_cuda)

        def logits_cuda():
            batch = os.path.join(tmp, "b.json")
            with open(batch, "w") as f:
                json.dump({"sequences": [{"tokens": [1, 2, 3], "logits_at": [2]}]}, f)
            p = tessera(t, ["logits", "--model", model, "--batch", batch, "--out", os.path.join(tmp, "o.npy"),
                            "--device", "cuda", "--deterministic"])
            if have_gpu:
                assert p.returncode == 0, p.stderr[-500:]
            else:
                assert p.returncode != 0 and any(m in p.stderr for m in NO_GPU_MESSAGES), p.stderr[-500:]
        check("logits --device cuda", logits_cuda)

        def serve_cuda():
            if have_gpu:
                return  # serving on a GPU is covered by the serve tests with --device cuda
            p = tessera(t, ["serve", "--model", model, "--port", "0", "--grpc-port", "-1", "--device", "cuda",
                            "--enforce-eager"], timeout=120)
            assert p.returncode != 0, "serve --device cuda without a GPU must exit non-zero"
            out = p.stderr + p.stdout
            assert any(m in out for m in NO_GPU_MESSAGES), out[-800:]
        check("serve --device cuda without a GPU exits with a clear message", serve_cuda)

        def bad_values():
            p = tessera(t, gen + ["--device", "tpu"])
            assert p.returncode != 0 and "--device" in p.stderr, p.stderr[-300:]
            p = tessera(t, gen + ["--device", "cuda", "--gpu-memory-utilization", "1.5"])
            assert p.returncode != 0 and "--gpu-memory-utilization" in p.stderr, p.stderr[-300:]
        check("bad --device and --gpu-memory-utilization values are rejected", bad_values)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
