#!/usr/bin/python3
"""The `tessera-router` binary end to end (stdlib only): it is `tessera serve --role router`.

    /usr/bin/python3 tests/e2e/test_router_binary.py --tessera build/tessera [--keep]

tessera-router is looked up next to --tessera. Real processes on 127.0.0.1: a
unified instance (tiny synthetic qwen3, gRPC on) and tessera-router in front
of it as its decode pool (the prefill/decode paths themselves are
test_disaggregation.py's, through `tessera serve --role router`).

  * its help shows every flag it shares with `tessera serve` exactly as serve's does;
  * refusals before binding are serve's: an unknown --routing-logic and a router
    without decode instances exit 1 with the same message;
  * with keys on both (the client's --api-key on the router, the instance's
    --api-key given to the router as --internal-api-key-file), greedy
    completions and chat through it (HTTP and gRPC) are those of the instance
    itself: the router authenticates with its own key, never the client's;
    the instance's /server_info needs the key;
  * /metrics, /ready and /health answer as the router's; SIGTERM drains and exits 0.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (Results, Server, cleanup, e2e_args, get_metrics, grpc_calls, request,  # noqa: E402
                        stream_events, synth_model)

PROMPT = [9707, 11, 1879, 0, 576, 374]
ROUTER_FLAGS = ["--host", "--port", "--grpc-port", "--port-file", "--api-key", "--drain-timeout", "--max-body-bytes",
                "--idle-timeout", "--prefill-instances", "--decode-instances", "--instances-file",
                "--prefill-threshold", "--router-poll-interval", "--router-dns-interval", "--max-migrations",
                "--routing-logic", "--kv-peer-fetch-min-tokens", "--max-pending-requests", "--router-workers",
                "--cache-isolation"]
# Both take it; `tessera serve --help` words it for every role, tessera-router for the router alone.
ROUTER_ONLY_FLAGS = {"--internal-api-key-file"}
CLIENT_KEY = "sk-client-of-the-router"
INTERNAL_KEY = "sk-internal-deployment-key"
AS_CLIENT = {"Authorization": f"Bearer {CLIENT_KEY}"}
AS_ROUTER = {"Authorization": f"Bearer {INTERNAL_KEY}"}


def help_entries(text):
    """{flag: its help entry (the flag's line and its continuation lines)}."""
    entries, flag = {}, None
    for line in text.splitlines():
        m = re.match(r"^  (--[a-z0-9-]+)", line)
        if m:
            flag = m.group(1)
            entries[flag] = [line]
        elif flag and line.startswith("    "):
            entries[flag].append(line)
        else:
            flag = None
    return {k: "\n".join(v) for k, v in entries.items()}


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, timeout=60, env=env)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def last_error(text):
    """The message of the last error log line (without its timestamp and level)."""
    lines = [line.split(" error ", 1)[1] for line in text.splitlines() if " error " in line]
    return lines[-1] if lines else text


def main():
    args = e2e_args(__doc__)
    tessera = args.tessera
    router_bin = os.path.join(os.path.dirname(tessera), "tessera-router")
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-router-bin-")
    res = Results()
    start = time.time()
    servers = []
    try:
        if not res.run("tessera-router is built next to tessera",
                       lambda: (os.access(router_bin, os.X_OK) or (_ for _ in ()).throw(
                           AssertionError(f"{router_bin} missing")))):
            return res.summary(start)

        def same_help():
            _, serve_help = run([tessera, "serve", "--help"])
            rc, router_help = run([router_bin, "--help"])
            assert rc == 0, router_help
            serve, router = help_entries(serve_help), help_entries(router_help)
            for flag in ROUTER_FLAGS:
                assert flag in router, f"tessera-router --help lacks {flag}"
                assert router[flag] == serve.get(flag), f"{flag}:\n{router[flag]}\nvs serve's\n{serve.get(flag)}"
            extra = set(router) - set(ROUTER_FLAGS) - ROUTER_ONLY_FLAGS - {"--help", "--version", "--log-level"}
            assert not extra, f"flags serve does not have: {sorted(extra)}"
        res.run("help: every shared flag worded as `tessera serve --help` words it", same_help)

        def same_refusals():
            for extra in (["--routing-logic", "nearest", "--decode-instances", "127.0.0.1:1"], []):
                rc1, serve_out = run([tessera, "serve", "--role", "router", "--port", "0", "--grpc-port", "-1", *extra])
                rc2, router_out = run([router_bin, "--port", "0", "--grpc-port", "-1", *extra])
                assert rc1 == rc2 == 1, (rc1, rc2, serve_out[-500:], router_out[-500:])
                assert last_error(router_out) == last_error(serve_out), (router_out[-500:], serve_out[-500:])
        res.run("refusals: unknown --routing-logic, no decode instances (exit 1, serve's message)", same_refusals)

        model = synth_model(tessera, workdir)
        base = ["--model", model, "--threads", "1", "--kv-cache-mb", "16", "--max-model-len", "1024",
                "--served-model-name", "m", "--api-key", INTERNAL_KEY]
        uni = Server(tessera, base, workdir, "unified", grpc=True)
        servers.append(uni)
        if not res.run("instance ready", lambda: uni.wait_ready(timeout=120)):
            return res.summary(start)
        # Server runs `<binary> serve ARGS`: a shim drops "serve" for tessera-router.
        shim = os.path.join(workdir, "tessera-router-shim")
        with open(shim, "w") as f:
            f.write(f'#!/bin/sh\nshift\nexec "{router_bin}" "$@"\n')
        os.chmod(shim, 0o755)
        addr = f"127.0.0.1:{uni.port}"
        key_file = os.path.join(workdir, "internal.key")
        with open(key_file, "w") as f:
            f.write(INTERNAL_KEY + "\n")
        router = Server(shim, ["--decode-instances", addr, "--router-poll-interval", "0.1", "--api-key", CLIENT_KEY,
                               "--internal-api-key-file", key_file, "--routing-logic", "kv-aware"], workdir,
                        "router", grpc=True)
        servers.append(router)
        if not res.run("tessera-router ready (its decode instance healthy)", lambda: router.wait_ready(timeout=30)):
            return res.summary(start)

        def same_completion():
            body = {"model": "m", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
            st, _, want = request(uni.port, "POST", "/v1/completions", body, headers=AS_ROUTER)
            assert st == 200, want
            st, _, got = request(router.port, "POST", "/v1/completions", body, headers=AS_CLIENT)
            assert st == 200, got
            assert got["choices"][0]["text"] == want["choices"][0]["text"], (got, want)
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}
            st, _, want = request(uni.port, "POST", "/v1/chat/completions", chat, headers=AS_ROUTER)
            assert st == 200, want
            st, _, got = request(router.port, "POST", "/v1/chat/completions", chat, headers=AS_CLIENT)
            assert st == 200, got
            assert got["choices"][0]["message"] == want["choices"][0]["message"], (got, want)
        res.run("HTTP, keys on both: greedy completion and chat == the instance's", same_completion)

        def keys():
            body = {"model": "m", "prompt": PROMPT, "max_tokens": 2}
            # /server_info names the instance's endpoints: behind the key.
            assert request(uni.port, "GET", "/server_info")[0] == 401
            assert request(uni.port, "GET", "/server_info", headers=AS_ROUTER)[0] == 200
            # Each key is for its own hop: the client's is not the instance's and the other way round.
            assert request(router.port, "POST", "/v1/completions", body)[0] == 401
            assert request(router.port, "POST", "/v1/completions", body, headers=AS_ROUTER)[0] == 401
            assert request(uni.port, "POST", "/v1/completions", body, headers=AS_CLIENT)[0] == 401
            st, _, events, done = stream_events(router.port, "/v1/completions", dict(body, stream=True),
                                                headers=AS_CLIENT)
            assert st == 200 and done and events, (st, events)
            assert request(router.port, "GET", "/v1/models", headers=AS_CLIENT)[0] == 200
            # The router reads /server_info with its own key (kv-aware learns the block size there).
            deadline = time.time() + 10
            while f"kv-aware: {addr}: block size" not in router.log_tail(200):
                assert time.time() < deadline, "the router never read the instance's /server_info"
                time.sleep(0.1)
        res.run("keys: 401 for a missing or other hop's key; streams and /v1/models through the router; "
                "/server_info needs the key and the router reads it", keys)

        def same_grpc():
            with open(router.port_file) as f:
                rport = json.load(f)["grpc"]
            with open(uni.port_file) as f:
                uport = json.load(f)["grpc"]
            req = {"token_ids": {"ids": PROMPT}, "params": {"max_tokens": 6, "temperature": 0, "ignore_eos": True}}
            want, got, keyless = grpc_calls(workdir, [
                {"target": f"127.0.0.1:{uport}", "method": "Generate", "request": req,
                 "metadata": {"authorization": AS_ROUTER["Authorization"]}},
                {"target": f"127.0.0.1:{rport}", "method": "Generate", "request": req,
                 "metadata": {"authorization": AS_CLIENT["Authorization"]}},
                {"target": f"127.0.0.1:{rport}", "method": "Generate", "request": req}])
            assert want["code"] == 0 and got["code"] == 0, (want, got)
            assert keyless["code"] == 16, keyless  # UNAUTHENTICATED
            assert got["response"]["choices"][0]["token_ids"] == want["response"]["choices"][0]["token_ids"], (got,
                                                                                                               want)
        res.run("gRPC, keys on both: greedy Generate == the instance's", same_grpc)

        def probes():
            assert request(router.port, "GET", "/health")[0] == 200
            assert request(router.port, "GET", "/ready")[0] == 200
            m = get_metrics(router.port)
            assert any(k.startswith("tessera:router_") for k in m), sorted(m)[:20]
        res.run("/health, /ready and the router's /metrics", probes)

        def held_requests_bounded():
            # A second router holding at most one request: the instance is frozen so the first
            # request stays held (blocked on its /tokenize call); meanwhile both fronts refuse.
            tight = Server(shim, ["--decode-instances", addr, "--internal-api-key-file", key_file,
                                  "--max-pending-requests", "1"], workdir, "router-tight", grpc=True)
            servers.append(tight)
            tight.wait_ready(timeout=30)
            with open(tight.port_file) as f:
                tport = json.load(f)["grpc"]
            body = {"model": "m", "prompt": "held", "max_tokens": 2}
            first = {}
            os.kill(uni.pid, signal.SIGSTOP)
            try:
                t = threading.Thread(target=lambda: first.update(r=request(tight.port, "POST", "/v1/completions", body,
                                                                            timeout=60)))
                t.start()
                deadline = time.time() + 10
                while get_metrics(tight.port).get("tessera:router_num_requests_running", 0) < 1:
                    assert time.time() < deadline, "the first request never started"
                    time.sleep(0.02)
                st, headers, err = request(tight.port, "POST", "/v1/completions", body)
                assert st == 429 and headers.get("retry-after") == "1", (st, headers, err)
                assert "--max-pending-requests" in err["error"]["message"], err
                req = {"token_ids": {"ids": PROMPT}, "params": {"max_tokens": 2}}
                (g,) = grpc_calls(workdir, [{"target": f"127.0.0.1:{tport}", "method": "Generate", "request": req}])
                assert g["code"] == 8, g  # RESOURCE_EXHAUSTED
                assert get_metrics(tight.port)["tessera:router_requests_rejected_total"] == 2
            finally:
                os.kill(uni.pid, signal.SIGCONT)
            t.join(60)
            # Not lost: answered once the instance is back (503 if the router's poll marked it down meanwhile).
            assert first.get("r") and first["r"][0] in (200, 503), first
        res.run("--max-pending-requests 1: a second request gets 429 + Retry-After over HTTP and RESOURCE_EXHAUSTED "
                "over gRPC while the first is held; the first is answered", held_requests_bounded)
        res.run("SIGTERM -> drains and exits 0", lambda: (router.terminate_and_wait() == 0 or (_ for _ in ()).throw(
            AssertionError(f"exit {router.proc.returncode}"))))
    finally:
        cleanup(servers, workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
