#!/usr/bin/env python3
"""deploy/local/topology.py: the unified topology comes up as processes from
deploy/k8s/base/serve.toml (the file the manifests mount), serves, reports its status, refuses
a second `up`, and `down` drains it (SIGTERM, exit). Topologies that need roles not built yet
fail with a message naming what they need.

Usage: tests/e2e/test_deploy_local.py --tessera build/tessera
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, request, synth_model  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPOLOGY = os.path.join(REPO, "deploy", "local", "topology.py")


def topo(state, *args, timeout=180):
    return subprocess.run([sys.executable, TOPOLOGY, "--state", state] + list(args), capture_output=True,
                          timeout=timeout, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    tessera = os.path.abspath(ap.parse_args().tessera)
    start = time.time()
    res = Results()
    work = tempfile.mkdtemp(prefix="tessera-local-")
    state = os.path.join(work, "state")
    up = {}
    try:
        model = synth_model(tessera, work)

        def unified_up():
            p = topo(state, "up", "unified", "--tessera", tessera, "--model", model, "--", "--kv-cache-mb", "64",
                     "--threads", "1")
            assert p.returncode == 0, p.stderr[-2000:]
            up.update(json.loads(p.stdout))
            assert up["topology"] == "unified" and "unified" in up["endpoints"], up
        if not res.run("up unified", unified_up):
            return res.summary(start)
        ep = up["endpoints"]["unified"]
        port = urllib.parse.urlparse(ep["http"]).port

        def serves_with_manifest_config():
            status, _, body = request(port, "POST", "/v1/completions",
                                      {"model": "tiny-qwen3", "prompt": "Hello", "max_tokens": 3})
            assert status == 200, (status, body)
            with open(os.path.join(state, "state.json")) as f:
                cmd = json.load(f)["processes"][0]["cmd"]
            assert cmd[cmd.index("--config") + 1] == os.path.join(REPO, "deploy/k8s/base/serve.toml"), cmd
            # serve.toml's settings are in force where no flag overrides them (max-pending-requests = 256).
            status, headers, _ = request(port, "GET", "/metrics")
            assert status == 200 and "tessera:num_requests_waiting" in headers["_body"]
        res.run("serves, from deploy/k8s/base/serve.toml", serves_with_manifest_config)

        def status_ready():
            p = topo(state, "status")
            st = json.loads(p.stdout)
            assert st["processes"]["unified"]["ready"] is True and st["processes"]["unified"]["alive"], st
        res.run("status: alive and ready", status_ready)

        def second_up_refused():
            p = topo(state, "up", "unified", "--tessera", tessera, "--model", model)
            assert p.returncode != 0 and "already runs" in p.stderr, (p.returncode, p.stderr)
        res.run("a second up is refused", second_up_refused)

        def down_drains():
            pid = ep["pid"]
            p = topo(state, "down")
            assert p.returncode == 0, p.stderr
            assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", \
                "server still running"
            log = open(os.path.join(state, "unified.log")).read()
            assert "draining" in log and "serve: stopped" in log, log[-1500:]
        res.run("down: SIGTERM drains and the server exits", down_drains)

        def not_yet():
            for t, need in (("disaggregated", "--role"), ("redis", "Redis")):
                p = topo(state, "up", t, "--tessera", tessera)
                assert p.returncode != 0 and "not available yet" in p.stderr and need in p.stderr, (t, p.stderr)
        res.run("disaggregated and redis topologies say what they need", not_yet)
    finally:
        topo(state, "down")
        shutil.rmtree(work, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
