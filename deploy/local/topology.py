#!/usr/bin/env python3
"""Runs a deploy/k8s topology as local processes, from the same config files the manifests
mount (deploy/k8s/base/serve.toml), for development and the e2e tests. Stdlib only.

  deploy/local/topology.py [--state DIR] up unified [--tessera build/tessera] [--model DIR] [-- SERVE_FLAGS...]
  deploy/local/topology.py [--state DIR] status
  deploy/local/topology.py [--state DIR] down         # SIGTERM: each server drains, then exits

`up` starts the processes in the background (logs and state.json in --state, default
.local-topology/), waits until every /ready answers 200 and prints the endpoints as JSON.
Only loopback: every process gets --host 127.0.0.1 and free ports, overriding serve.toml (flags
win over the file, as in the manifests' args).

Topologies:
  unified        one `tessera serve` (the base/cpu/gpu overlays' Deployment)
  disaggregated  1 prefill + 1 decode + router: not yet (needs `serve --role`, see README)
  redis          2 instances + router + Redis KV tier: not yet (needs the router and Redis tier)
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVE_TOML = os.path.join(REPO, "deploy", "k8s", "base", "serve.toml")
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


def serve_process(tessera, name, state, extra):
    """One `tessera serve` with the manifests' config file, on loopback ports of its own."""
    http, grpc = free_port(), free_port()
    cmd = [tessera, "serve", "--config", SERVE_TOML, "--host", "127.0.0.1", "--port", str(http),
           "--grpc-port", str(grpc)] + extra
    log = open(os.path.join(state, f"{name}.log"), "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return {"name": name, "pid": proc.pid, "http": f"http://127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}",
            "cmd": cmd, "log": log.name}


def topology_unified(args, state):
    extra = []
    if args.model:
        extra += ["--model", os.path.abspath(args.model)]
    extra += args.serve_args
    return [serve_process(args.tessera, "unified", state, extra)]


def topology_not_yet(what):
    def start(args, state):
        raise SystemExit(f"topology.py: the {what} topology is not available yet: {TOPOLOGIES_NOT_YET[what]}")
    return start


TOPOLOGIES_NOT_YET = {
    "disaggregated": "it needs `tessera serve --role prefill|decode|router` (the disaggregation work); "
                     "the slot is here: start prefill and decode servers with serve.toml plus their role flags, "
                     "then the router pointed at them, as deploy/k8s/overlays/disaggregated will",
    "redis": "it needs the router and the Redis/Valkey KV tier; the slot is here: redis-server on a free "
             "loopback port, two instances with the tier's flags, and a router",
}
TOPOLOGIES = {"unified": topology_unified,
              "disaggregated": topology_not_yet("disaggregated"),
              "redis": topology_not_yet("redis")}


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
    for p in procs:
        if alive(p["pid"]):
            os.kill(p["pid"], signal.SIGTERM)
    deadline = time.time() + STOP_TIMEOUT_S
    while time.time() < deadline and any(alive(p["pid"]) for p in procs):
        time.sleep(0.1)
    left = [p for p in procs if alive(p["pid"])]
    for p in left:
        os.kill(p["pid"], signal.SIGKILL)
    return left


def cmd_up(args):
    state = os.path.abspath(args.state)
    os.makedirs(state, exist_ok=True)
    old = load_state(state)
    if old and any(alive(p["pid"]) for p in old["processes"]):
        raise SystemExit(f"topology.py: {state} already runs a topology; `down` it first")
    procs = TOPOLOGIES[args.topology](args, state)
    with open(os.path.join(state, "state.json"), "w") as f:
        json.dump({"topology": args.topology, "processes": procs}, f, indent=1)
    deadline = time.time() + READY_TIMEOUT_S
    pending = list(procs)
    while pending and time.time() < deadline:
        for p in list(pending):
            if not alive(p["pid"]):
                stop(procs)
                with open(p["log"], "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise SystemExit(f"topology.py: {p['name']} exited during start-up; log:\n{tail}")
            try:
                if get(p["http"] + "/ready")[0] == 200:
                    pending.remove(p)
            except OSError:
                pass
        time.sleep(0.1)
    if pending:
        stop(procs)
        raise SystemExit(f"topology.py: not ready within {READY_TIMEOUT_S}s: {[p['name'] for p in pending]}")
    print(json.dumps({"topology": args.topology,
                      "endpoints": {p["name"]: {"http": p["http"], "grpc": p["grpc"], "pid": p["pid"]}
                                    for p in procs}}))


def cmd_status(args):
    st = load_state(os.path.abspath(args.state))
    if not st:
        print(json.dumps({"topology": None}))
        return
    out = {}
    for p in st["processes"]:
        ready = None
        if alive(p["pid"]):
            try:
                ready = get(p["http"] + "/ready")[0] == 200
            except OSError:
                ready = False
        out[p["name"]] = {"pid": p["pid"], "alive": alive(p["pid"]), "ready": ready, "http": p["http"]}
    print(json.dumps({"topology": st["topology"], "processes": out}))


def cmd_down(args):
    state = os.path.abspath(args.state)
    st = load_state(state)
    if not st:
        return
    left = stop(st["processes"])
    os.unlink(os.path.join(state, "state.json"))
    if left:
        raise SystemExit(f"topology.py: killed after {STOP_TIMEOUT_S}s: {[p['name'] for p in left]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", default=os.path.join(REPO, ".local-topology"), help="logs and state.json")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("topology", choices=sorted(TOPOLOGIES))
    up.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    up.add_argument("--model", help="checkpoint (the manifests mount it at /models/model)")
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
