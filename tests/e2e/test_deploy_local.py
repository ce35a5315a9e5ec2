#!/usr/bin/env python3
"""deploy/local/topology.py: the topologies come up as processes from deploy/k8s/config/serve.toml
(the file the manifests mount), serve, report their status and go down cleanly.

  unified  serves, from serve.toml; status; a second `up` is refused; `down` drains (SIGTERM).
  pd       1 prefill + 1 decode + router, with the disaggregated overlay's role flags: a prompt of
           9 blocks through the router is prefilled on the prefill instance, its KV pulled over
           UCX tcp by the decode, and the greedy tokens equal the unified topology's; the router
           called its instances by the addresses it resolved `localhost:PORT` to (as it does a
           headless Service's name); `down` stops all three.
  kv       2 instances + router + redis-server (the distributed-KV flags): the same greedy tokens
           through the KV-aware router, twice; `down` stops all four. Needs redis-server: without
           it the check says SKIP and the test exits 77 (ctest: skipped, not passed).

Usage: tests/e2e/test_deploy_local.py --tessera build/tessera
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, get_metrics, request, synth_model  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPOLOGY = os.path.join(REPO, "deploy", "local", "topology.py")
sys.path.insert(0, os.path.dirname(TOPOLOGY))
import topology  # noqa: E402

BLOCK = 16
LONG = [(i * 7919) % 150000 + 100 for i in range(150)]  # 9 full blocks: above the router's prefill threshold
ENGINE_ARGS = ["--kv-cache-mb", "64", "--threads", "1", "--max-model-len", "1024"]


def topo(state, *args, timeout=180):
    return subprocess.run([sys.executable, TOPOLOGY, "--state", state] + list(args), capture_output=True,
                          timeout=timeout, text=True)


def port_of(url):
    return urllib.parse.urlparse(url).port


def greedy(port, prompt):
    status, _, body = request(port, "POST", "/v1/completions",
                              {"model": "tiny-qwen3", "prompt": prompt, "max_tokens": 8, "temperature": 0,
                               "return_token_ids": True}, timeout=60)
    assert status == 200, (status, body)
    return body["choices"][0]["token_ids"]


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def serve_flags(tessera):
    p = subprocess.run([tessera, "serve", "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"--[a-z0-9-]+", p.stdout))


def wait_router_sees(router, ports, timeout=20):
    """Until the router's last poll found every instance in `ports` healthy (a prefill still starting
    when the router became ready would be skipped, and the decode would compute the prompt)."""
    deadline = time.time() + timeout
    while True:
        _, headers, _ = request(router, "GET", "/metrics")
        lines = [ln for ln in headers["_body"].splitlines() if ln.startswith("tessera:router_instance_healthy")]
        if all(any(f'instance="127.0.0.1:{p}"' in ln and ln.endswith(" 1") for ln in lines) for p in ports):
            return
        assert time.time() < deadline, ("the router never saw every instance healthy", ports, lines)
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    tessera = os.path.abspath(ap.parse_args().tessera)
    start = time.time()
    res = Results()
    work = tempfile.mkdtemp(prefix="tessera-local-")
    state = os.path.join(work, "state")
    up, ref = {}, {}
    try:
        model = synth_model(tessera, work)

        def unified_up():
            p = topo(state, "up", "unified", "--tessera", tessera, "--model", model, "--", *ENGINE_ARGS)
            assert p.returncode == 0, p.stderr[-2000:]
            up.update(json.loads(p.stdout))
            assert up["topology"] == "unified" and up["entry"] == "unified" and "unified" in up["endpoints"], up
        if not res.run("up unified", unified_up):
            return res.summary(start)
        ep = up["endpoints"]["unified"]
        port = port_of(ep["http"])

        def serves_with_manifest_config():
            ref["long"] = greedy(port, LONG)
            with open(os.path.join(state, "state.json")) as f:
                cmd = json.load(f)["processes"][0]["cmd"]
            assert cmd[cmd.index("--config") + 1] == os.path.join(REPO, "deploy/k8s/config/serve.toml"), cmd
            # serve.toml's settings are in force where no flag overrides them (max-pending-requests = 256).
            status, headers, _ = request(port, "GET", "/metrics")
            assert status == 200 and "tessera:num_requests_waiting" in headers["_body"]
        res.run("serves, from deploy/k8s/config/serve.toml", serves_with_manifest_config)

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
            assert gone(pid), "server still running"
            log = open(os.path.join(state, "unified.log")).read()
            assert "draining" in log and "serve: stopped" in log, log[-1500:]
        res.run("down: SIGTERM drains and the server exits", down_drains)

        def pd():
            t0 = time.time()
            p = topo(state, "up", "pd", "--tessera", tessera, "--model", model, "--", *ENGINE_ARGS)
            assert p.returncode == 0, p.stderr[-3000:]
            got = json.loads(p.stdout)
            eps = got["endpoints"]
            assert got["entry"] == "router" and set(eps) == {"prefill", "decode", "router"}, got
            router, decode = port_of(eps["router"]["http"]), port_of(eps["decode"]["http"])
            wait_router_sees(router, [port_of(eps["prefill"]["http"]), decode])
            assert greedy(router, LONG) == ref["long"], "pd through the router != unified"
            d = get_metrics(decode)
            assert d.get("tessera:kv_transfer_blocks_total", 0) >= len(LONG) // BLOCK, d  # pulled, not recomputed
            assert d.get("tessera:kv_transfer_bytes_total", 0) > 0, d
            # The router was given localhost:PORT and calls the address the name resolved to.
            _, headers, _ = request(router, "GET", "/metrics")
            for role in ("prefill", "decode"):
                want = f'instance="127.0.0.1:{port_of(eps[role]["http"])}"'
                assert any(want in ln and ln.endswith(" 1") for ln in headers["_body"].splitlines()
                           if ln.startswith("tessera:router_instance_healthy")), (want, headers["_body"][-1500:])
            with open(os.path.join(state, "state.json")) as f:
                cmds = {q["name"]: q["cmd"] for q in json.load(f)["processes"]}
            for role in ("prefill", "decode"):
                assert cmds[role][cmds[role].index("--config") + 1].endswith("deploy/k8s/config/serve.toml")
                assert cmds[role][cmds[role].index("--role") + 1] == role
            p = topo(state, "down")
            assert p.returncode == 0, p.stderr
            assert all(gone(e["pid"]) for e in eps.values()), "a pd process is still running"
            logs = {n: open(os.path.join(state, f"{n}.log")).read() for n in eps}
            assert "router stopped" in logs["router"], logs["router"][-1000:]
            for role in ("prefill", "decode"):
                assert "draining" in logs[role] and "serve: stopped" in logs[role], logs[role][-1000:]
            print(f"  pd topology up, served, down in {time.time() - t0:.1f}s")
        res.run("pd: prefill -> KV over UCX tcp -> decode through the router == unified; down stops all", pd)

        def kv():
            need = {"--kv-offload-remote-url", "--routing-logic"} - serve_flags(tessera)
            assert not need, f"this tessera lacks {sorted(need)} (the KV tier and KV-aware routing)"
            up_kv = topology.start("kv", state, tessera, model, ENGINE_ARGS)
            eps = up_kv["endpoints"]
            try:
                assert set(eps) == {"redis", "instance1", "instance2", "router"}, eps
                router = port_of(eps["router"]["http"])
                wait_router_sees(router, [port_of(eps[n]["http"]) for n in ("instance1", "instance2")])
                assert greedy(router, LONG) == ref["long"], "kv through the router != unified"
                # The first request's blocks reach Redis (write-through) and the router's index (events).
                deadline = time.time() + 10
                while True:
                    inst = [get_metrics(port_of(eps[n]["http"])) for n in ("instance1", "instance2")]
                    r = get_metrics(router)
                    if (sum(m.get("tessera:kv_offload_stored_blocks_total", 0) for m in inst) >= len(LONG) // BLOCK
                            and r.get("tessera:router_kv_index_blocks", 0) >= len(LONG) // BLOCK):
                        break
                    assert time.time() < deadline, ("blocks never reached Redis and the router's index", inst, r)
                    time.sleep(0.1)
                # The router's load view comes from polls (--router-poll-interval 0.2 in topology.py): one
                # taken while the first request waited would charge its instance 256 tokens of queue, more
                # than the hit, and send the repeat elsewhere. Let several polls see both instances idle.
                time.sleep(1.0)
                assert greedy(router, LONG) == ref["long"], "kv through the router != unified (again)"
                r = get_metrics(router)
                assert r.get("tessera:router_prompt_hit_tokens_total", 0) >= (len(LONG) // BLOCK) * BLOCK, r
            finally:
                left = topology.down(os.path.abspath(state))
            assert not left, f"killed: {left}"
            assert all(gone(e["pid"]) for e in eps.values()), "a kv process is still running"
        kv_name = "kv: 2 instances + Redis + KV-aware router serve == unified; down stops all"
        if shutil.which("redis-server"):
            res.run(kv_name, kv)
        else:
            res.skip(kv_name, "redis-server is not installed (scripts/bootstrap)")
    finally:
        topo(state, "down")
        shutil.rmtree(work, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
