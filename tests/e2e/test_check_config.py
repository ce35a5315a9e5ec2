#!/usr/bin/env python3
"""`tessera serve --check-config`: validates flags, the --config file and the
model's metadata without binding or loading, and exits 0 (valid) or 1 (invalid,
the error names the flag or key). The Kubernetes manifests' tests rely on it.

Usage: tests/e2e/test_check_config.py --tessera build/tessera
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, free_port, synth_model  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(tessera, args, env=None):
    p = subprocess.run([tessera, "serve", "--check-config"] + args, capture_output=True, timeout=60,
                       env=env or dict(os.environ, TESSERA_API_KEY=""))
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def expect(tessera, args, rc, *needles, stream="stderr", scope=None):
    def check():
        full = (["--check-config=" + scope] if scope else []) + args
        code, out, err = run(tessera, full) if not scope else _run_scoped(tessera, full)
        text = out if stream == "stdout" else err
        assert code == rc, f"exit {code}, want {rc}; stdout {out[-800:]!r} stderr {err[-800:]!r}"
        for n in needles:
            assert n in text, f"{n!r} not in {stream}: {text[-800:]!r}"
    return check


def _run_scoped(tessera, args):
    p = subprocess.run([tessera, "serve"] + args, capture_output=True, timeout=60,
                       env=dict(os.environ, TESSERA_API_KEY=""))
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    t = os.path.abspath(args.tessera)
    start = time.time()
    res = Results()
    work = tempfile.mkdtemp(prefix="tessera-check-config-")
    try:
        model = synth_model(t, work)
        gguf = os.path.join(work, "m.gguf")
        subprocess.run([t, "synth", "--arch", "qwen3", "--size", "tiny", "--format", "gguf", "--dtype", "q8_0",
                        "--out", gguf], check=True, capture_output=True, timeout=120)
        good_toml = write(os.path.join(work, "good.toml"), 'host = "0.0.0.0"\nport = 8000\nmax-num-seqs = 8\n')

        # Valid settings: exit 0 and a report on stdout.
        res.run("repo config file", expect(t, ["--config", os.path.join(REPO, "configs/serve.toml")], 0,
                                           "OK", "flags and config values are valid", stream="stdout"))
        res.run("HF model metadata", expect(t, ["--model", model, "--config", good_toml], 0,
                                            f"--model {model}", "qwen3", "--host 0.0.0.0 resolves",
                                            stream="stdout"))
        res.run("GGUF model metadata", expect(t, ["--model", gguf], 0, "GGUF", stream="stdout"))
        res.run("ngram speculative config", expect(
            t, ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'], 0, "OK",
            stream="stdout"))
        res.run("chat output parsers", expect(t, ["--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
                                                  "--enable-auto-tool-choice"], 0, "OK", stream="stdout"))
        res.run("unknown tool-call parser", expect(t, ["--tool-call-parser", "bogus"], 1, "--tool-call-parser"))
        res.run("kv-aware router", expect(t, ["--role", "router", "--decode-instances", "127.0.0.1:8001",
                                              "--routing-logic", "kv-aware"], 0, "OK", stream="stdout"))
        res.run("unknown routing logic", expect(t, ["--role", "router", "--routing-logic", "random"], 1,
                                                "--routing-logic"))
        res.run("routing logic without the router role", expect(t, ["--routing-logic", "round-robin"], 1,
                                                                "--routing-logic needs --role router"))
        res.run("kv peer fetch on a router", expect(t, ["--role", "router", "--kv-peer-fetch"], 1,
                                                    "--kv-peer-fetch"))
        res.run("flags scope skips the model", expect(t, ["--model", "/nonexistent/model"], 0, "OK",
                                                      stream="stdout", scope="flags"))

        # Invalid: exit 1 and an error naming the flag or key.
        res.run("missing model", expect(t, ["--model", "/nonexistent/model"], 1, "--model /nonexistent/model"))
        os.makedirs(os.path.join(work, "empty"))
        res.run("model dir without config.json", expect(t, ["--model", os.path.join(work, "empty")], 1,
                                                        "config.json"))
        broken = os.path.join(work, "broken")
        shutil.copytree(model, broken)
        os.unlink(os.path.join(broken, "tokenizer.json"))
        res.run("model dir without tokenizer.json", expect(t, ["--model", broken], 1, "tokenizer.json"))
        res.run("port out of range", expect(t, ["--port", "70000"], 1, "--port"))
        res.run("port out of range, flags scope", expect(t, ["--port", "70000"], 1, "--port", scope="flags"))
        res.run("unknown flag", expect(t, ["--max-num-seqz", "3"], 1, "--max-num-seqz"))
        res.run("bad device", expect(t, ["--device", "tpu"], 1, "--device"))
        res.run("same HTTP and gRPC port", expect(t, ["--port", "9000", "--grpc-port", "9000"], 1,
                                                  "--port and --grpc-port"))
        res.run("empty api key", expect(t, ["--api-key", ""], 1, "--api-key"))
        res.run("bad speculative config", expect(t, ["--speculative-config", '{"method": "magic"}'], 1,
                                                 "--speculative-config"))
        res.run("draft model missing", expect(
            t, ["--speculative-config",
                '{"method": "draft_model", "model": "/nonexistent/draft", "num_speculative_tokens": 2}'], 1,
            "/nonexistent/draft"))
        res.run("unresolvable host", expect(t, ["--host", "no-such-host.invalid"], 1, "--host"))
        res.run("port file in a missing directory", expect(t, ["--port-file", "/nonexistent/dir/p.json"], 1,
                                                           "--port-file"))
        res.run("unknown config key", expect(
            t, ["--config", write(os.path.join(work, "typo.toml"), "max-num-seqz = 3\n")], 1, "max-num-seqz"))
        res.run("bad config value", expect(
            t, ["--config", write(os.path.join(work, "range.toml"), "max-num-seqs = 0\n")], 1, "max-num-seqs"))
        res.run("check-config is not a config key", expect(
            t, ["--config", write(os.path.join(work, "nest.toml"), 'check-config = "flags"\n')], 1,
            "check-config"))
        res.run("bad scope", expect(t, [], 1, "--check-config", scope="everything"))

        # A dry run binds nothing: the port stays free for a real server.
        def binds_nothing():
            port = free_port()
            code, out, err = run(t, ["--port", str(port), "--grpc-port", "-1"])
            assert code == 0, err
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        res.run("binds nothing", binds_nothing)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
