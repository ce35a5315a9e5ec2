#!/usr/bin/env python3
"""Runs a deploy/k8s topology as local processes, from the same config files the manifests
mount (deploy/k8s/config/serve.toml), for development and the e2e tests. Stdlib only.

  deploy/local/topology.py [--state DIR] up TOPOLOGY [--tessera build/tessera] [--model DIR] [-- SERVE_FLAGS...]
  deploy/local/topology.py [--state DIR] status
  deploy/local/topology.py [--state DIR] down   # SIGTERM: router, then servers (they drain), then redis

`up` starts the processes in the background (logs and state.json in --state, default
.local-topology/), waits until every /ready answers 200 (redis: PING) and prints the endpoints
as JSON; the endpoint named "entry" is where clients go. Only loopback: every process gets
--host 127.0.0.1 and free ports, overriding serve.toml (flags win over the file, as in the
manifests' args). SERVE_FLAGS after `--` go to every engine server (not to the router).

Topologies:
  unified   one `tessera serve` (the base/cpu/gpu overlays' Deployment)
  pd        1 prefill + 1 decode + router (overlays/disaggregated): the role flags of its
            manifests, KV over UCX tcp, and the router given `localhost:PORT` names, which it
            resolves to every address as it does the pools' headless Services
  kv        2 instances + router + redis-server: the instances share a Redis KV tier
            (--kv-offload-remote-url) and publish KV events (--kv-events-config), the router
            routes on them (--routing-logic kv-aware)
In the topologies with a router (pd, kv) every role (router included) gets `--internal-api-key-file`
with a key generated into --state (mode 0600), as the manifests mount the Secret tessera-internal-key (docs/architecture.md,
"Threat model"); `up --no-internal-key` leaves it out (loopback topologies run without it too).
Use it from Python: start(topology, state, tessera, model, serve_args) and stop(procs).
"""
import argparse
import json
import secrets
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVE_TOML = os.path.join(REPO, "deploy", "k8s", "config", "serve.toml")
READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60  # > serve.toml drain-timeout (30) + the server's abort grace


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def spawn(name, state, cmd, **endpoints):
    log = open(os.path.join(state, f"{name}.log"), "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return dict({"name": name, "pid": proc.pid, "cmd": cmd, "log": log.name}, **endpoints)


def internal_key_file(state):
    """The deployment credential for every role: a fresh key in `state`, readable by this user only
    (the manifests' Secret tessera-internal-key)."""
    path = os.path.join(state, "internal.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def serve_process(tessera, name, state, extra, grpc=True, key_file=None):
    """One `tessera serve` with the manifests' config file, on loopback ports of its own."""
    http = free_port()
    grpc_port = free_port() if grpc else -1
    cmd = [tessera, "serve", "--config", SERVE_TOML, "--host", "127.0.0.1", "--port", str(http),
           "--grpc-port", str(grpc_port)] + (["--internal-api-key-file", key_file] if key_file else []) + extra
    return spawn(name, state, cmd, http=f"http://127.0.0.1:{http}",
                 grpc=f"127.0.0.1:{grpc_port}" if grpc else None)


def engine_args(args):
    return (["--model", os.path.abspath(args.model)] if args.model else []) + list(args.serve_args)


def topology_unified(args, state):
    return [serve_process(args.tessera, "unified", state, engine_args(args), key_file=args.key_file)]


def router_process(args, state, decode, prefill=(), extra=()):
    """The router (no model, no gRPC) given `localhost:PORT` names, as the manifests give it the
    pools' headless Service names: it resolves each to every address."""
    def names(procs):
        return ",".join("localhost:" + p["http"].rsplit(":", 1)[1] for p in procs)
    cmd = ["--role", "router", "--decode-instances", names(decode), "--router-poll-interval", "0.2",
           "--router-dns-interval", "1"]
    if prefill:
        cmd += ["--prefill-instances", names(prefill)]
    return serve_process(args.tessera, "router", state, cmd + list(extra), grpc=False, key_file=args.key_file)


def topology_pd(args, state):
    """overlays/disaggregated as processes: its pools' role flags (--kv-ucx-tls tcp,self: tcp as
    between pods, self for the instance's own endpoint)."""
    procs = []
    for role in ("prefill", "decode"):
        procs.append(serve_process(args.tessera, role, state, ["--role", role, "--kv-transfer-port", str(free_port()),
                                                               "--kv-ucx-tls", "tcp,self"] + engine_args(args),
                                   key_file=args.key_file))
    return procs + [router_process(args, state, decode=[procs[1]], prefill=[procs[0]], extra=args.router_args)]


def topology_kv(args, state):
    redis_port = free_port()
    redis = spawn("redis", state, ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", state], redis=f"127.0.0.1:{redis_port}")
    procs = [redis]
    for i in (1, 2):
        # A wildcard host: the publisher binds (vLLM's rule), so the router can subscribe (it learns the
        # endpoints from the instance's /server_info).
        events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{free_port()}",
                  "replay_endpoint": f"tcp://*:{free_port()}"}
        procs.append(serve_process(args.tessera, f"instance{i}", state,
                                   ["--kv-offload-remote-url", f"redis://127.0.0.1:{redis_port}",
                                    "--kv-events-config", json.dumps(events)] + engine_args(args),
                                   key_file=args.key_file))
    return procs + [router_process(args, state, decode=procs[1:], extra=["--routing-logic", "kv-aware"] +
                                   list(args.router_args))]


TOPOLOGIES = {"unified": topology_unified, "pd": topology_pd, "kv": topology_kv}
ENTRY = {"unified": "unified", "pd": "router", "kv": "router"}


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def load_state(state):
    path = os.path.join(state, "state.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def stop(procs):
    """SIGTERM in stages, each waited for: the router (it drains its clients' requests), then
    the engine servers (they drain theirs), then redis. SIGKILL for what outlives
    STOP_TIMEOUT_S. Returns the processes killed."""
    def stage(p):
        return 0 if p["name"] == "router" else 2 if p.get("redis") else 1
    left = []
    for n in range(3):
        group = [p for p in procs if stage(p) == n]
        for p in group:
            if alive(p["pid"]):
                os.kill(p["pid"], signal.SIGTERM)
        deadline = time.time() + STOP_TIMEOUT_S
        while time.time() < deadline and any(alive(p["pid"]) for p in group):
            time.sleep(0.05)
        for p in group:
            if alive(p["pid"]):
                os.kill(p["pid"], signal.SIGKILL)
                left.append(p)
    return left


class TopologyError(Exception):
    pass


def ready(p):
    """/ready answers 200 (servers) or PING answers PONG (redis)."""
    if p.get("redis"):
        host, port = p["redis"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=2) as c:
            c.sendall(b"PING\r\n")
            return c.recv(64).startswith(b"+PONG")
    return get(p["http"] + "/ready")[0] == 200


def start(topology, state, tessera, model=None, serve_args=(), router_args=(), internal_key=True):
    """Starts `topology` with logs and state.json in `state`; returns {"topology", "endpoints",
    "processes"} once every process is ready. Raises TopologyError (after stopping what it
    started) when one exits or is not ready in time."""
    state = os.path.abspath(state)
    os.makedirs(state, exist_ok=True)
    old = load_state(state)
    if old and any(alive(p["pid"]) for p in old["processes"]):
        raise TopologyError(f"topology.py: {state} already runs a topology; `down` it first")
    args = argparse.Namespace(tessera=tessera, model=model, serve_args=list(serve_args),
                              router_args=list(router_args),
                              # unified has no router: its clients call the instance itself
                              key_file=internal_key_file(state) if internal_key and topology != "unified" else None)
    procs = TOPOLOGIES[topology](args, state)
    with open(os.path.join(state, "state.json"), "w") as f:
        json.dump({"topology": topology, "processes": procs}, f, indent=1)
    deadline = time.time() + READY_TIMEOUT_S
    pending = list(procs)
    while pending and time.time() < deadline:
        for p in list(pending):
            if not alive(p["pid"]):
                down(state)
                with open(p["log"], "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise TopologyError(f"topology.py: {p['name']} exited during start-up; log:\n{tail}")
            try:
                if ready(p):
                    pending.remove(p)
            except OSError:
                pass
        time.sleep(0.1)
    if pending:
        down(state)
        raise TopologyError(f"topology.py: not ready within {READY_TIMEOUT_S}s: {[p['name'] for p in pending]}")
    endpoints = {p["name"]: {k: p[k] for k in ("http", "grpc", "redis", "pid") if p.get(k) is not None}
                 for p in procs}
    return {"topology": topology, "entry": ENTRY[topology], "endpoints": endpoints, "processes": procs}


def down(state):
    """Stops what state.json lists (SIGTERM, SIGKILL after STOP_TIMEOUT_S); returns the names killed."""
    st = load_state(state)
    if not st:
        return []
    left = stop(st["processes"])
    os.unlink(os.path.join(state, "state.json"))
    return [p["name"] for p in left]


def cmd_up(args):
    try:
        up = start(args.topology, args.state, args.tessera, args.model, args.serve_args, shlex.split(args.router_args),
                   internal_key=args.internal_key)
    except TopologyError as e:
        raise SystemExit(str(e))
    print(json.dumps({k: up[k] for k in ("topology", "entry", "endpoints")}))


def cmd_status(args):
    st = load_state(os.path.abspath(args.state))
    if not st:
        print(json.dumps({"topology": None}))
        return
    out = {}
    for p in st["processes"]:
        is_ready = None
        if alive(p["pid"]):
            try:
                is_ready = ready(p)
            except OSError:
                is_ready = False
        out[p["name"]] = {"pid": p["pid"], "alive": alive(p["pid"]), "ready": is_ready,
                          "address": p.get("http") or p.get("redis")}
    print(json.dumps({"topology": st["topology"], "processes": out}))


def cmd_down(args):
    left = down(os.path.abspath(args.state))
    if left:
        raise SystemExit(f"topology.py: killed after {STOP_TIMEOUT_S}s: {left}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", default=os.path.join(REPO, ".local-topology"), help="logs and state.json")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("topology", choices=sorted(TOPOLOGIES))
    up.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    up.add_argument("--model", help="checkpoint (the manifests mount it at /models/model)")
    up.add_argument("--router-args", default="", help="more flags for the router (pd, kv), one string")
    up.add_argument("--no-internal-key", dest="internal_key", action="store_false",
                    help="no --internal-api-key-file (by default every role gets one, a key generated into --state)")
    sub.add_parser("status")
    sub.add_parser("down")
    argv = sys.argv[1:]
    # After `--`: more `tessera serve` flags for every server (up only).
    serve_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.serve_args = serve_args
    {"up": cmd_up, "status": cmd_status, "down": cmd_down}[args.cmd](args)


if __name__ == "__main__":
    main()
