"""The chaos soak's topology: deploy/local's pd and kv topologies together, with every link that a
fault may cut running through a relay (bench/chaos/relay.py).

  router (kv-aware) ──relay──▶ prefill1, prefill2   (--role prefill, KV over UCX tcp,self)
                    ──relay──▶ decode1, decode2     (--role decode)
  each instance     ──relay──▶ redis-server         (--kv-offload-remote-url: the shared KV tier)
  each instance publishes KV events (ZeroMQ), which the router reads directly (not relayed)

Built from deploy/local/topology.py's pieces (serve_process, router_process, spawn, stop): the
manifests' serve.toml, loopback only, free ports. The router knows an instance by its relay's
address (`localhost:RELAY_PORT`, as topology.py names instances), so cutting that relay
partitions the router from the instance while the instance still runs; the decode pulls KV
from the prefill and both publish KV events on their own ports, which no relay covers. A
process that is killed is restarted with the same command (same ports). Every method is called
from one thread (the soak's fault thread) except the read-only probes (ready, rss_mb, metrics),
which any thread may call.
"""
import argparse
import json
import os
import signal
import sys
import time
import urllib.error

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "deploy", "local"))
import topology  # noqa: E402
from relay import Relay  # noqa: E402
from soak import parse_metrics, vm_rss_mb  # noqa: E402

ROLES = ("prefill", "decode")


def port_of(url):
    return int(url.rsplit(":", 1)[1])


class Cluster:
    def __init__(self, tessera, state, engine_args, pool=2, router_args=()):
        """engine_args: the instances' model and engine flags (the reference instance's too)."""
        self.state = state
        self.pool = pool
        os.makedirs(state, exist_ok=True)
        self.procs = {}    # name -> topology.py's process dict (pid, cmd, log, http/grpc/redis)
        self.relays = {}   # "client>server" -> Relay
        self.restarts = {}
        # The deployment credential on every role and the tier's record secret, as the manifests
        # wire them (docs/architecture.md, "Threat model", "Tamper-proof shared KV").
        key_file = topology.internal_key_file(state)
        redis_port = topology.free_port()
        self._add(topology.spawn("redis", state, ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                                  "--save", "", "--appendonly", "no", "--dir", state],
                                 redis=f"127.0.0.1:{redis_port}"))
        self.instances = [f"{role}{i}" for role in ROLES for i in range(1, pool + 1)]
        for name in self.instances:
            link = self._relay(f"{name}>redis", redis_port)
            events = {"enable_kv_cache_events": True, "publisher": "zmq",
                      "endpoint": f"tcp://*:{topology.free_port()}",
                      "replay_endpoint": f"tcp://*:{topology.free_port()}"}
            self._add(topology.serve_process(
                tessera, name, state,
                ["--role", name.rstrip("0123456789"), "--kv-transfer-port", str(topology.free_port()),
                 "--kv-ucx-tls", "tcp,self", "--kv-offload-remote-url", f"redis://127.0.0.1:{link.port}",
                 "--kv-events-config", json.dumps(events), "--kv-offload-secret-file", key_file] + list(engine_args),
                key_file=key_file))
        front = {}
        for name in self.instances:
            relay = self._relay(f"router>{name}", port_of(self.procs[name]["http"]))
            front[name] = {"http": f"http://127.0.0.1:{relay.port}"}
        pools = {role: [front[n] for n in self.instances if n.startswith(role)] for role in ROLES}
        self._add(topology.router_process(argparse.Namespace(tessera=tessera, key_file=key_file), state, decode=pools["decode"],
                                          prefill=pools["prefill"],
                                          extra=["--routing-logic", "kv-aware"] + list(router_args)))
        # The router's name for each instance (its instance="host:port" label): the relay's address.
        self.router_names = {n: "127.0.0.1:" + front[n]["http"].rsplit(":", 1)[1] for n in self.instances}

    def _add(self, p):
        self.procs[p["name"]] = p
        self.restarts.setdefault(p["name"], 0)

    def _relay(self, link, target_port):
        self.relays[link] = Relay(target_port, name=link)
        return self.relays[link]

    # --- probes (any thread) ---

    def http_port(self, name):
        return port_of(self.procs[name]["http"])

    def ready(self, name):
        p = self.procs[name]
        if not topology.alive(p["pid"]):
            return False
        try:
            return topology.ready(p)
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def router_sees_all(self):
        """The router's last poll found every instance healthy (through its relay)."""
        try:
            status, body = topology.get(self.procs["router"]["http"] + "/metrics", timeout=5)
        except (OSError, urllib.error.URLError, ValueError):
            return False
        if status != 200:
            return False
        healthy = {}
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("tessera:router_instance_healthy{"):
                for n, addr in self.router_names.items():
                    if f'instance="{addr}"' in line:
                        healthy[n] = line.rsplit(" ", 1)[1] in ("1", "1.0")
        return len(healthy) == len(self.router_names) and all(healthy.values())

    def metrics_text(self, name):
        """The process's /metrics (Prometheus text); OSError when it does not answer 200."""
        try:
            status, body = topology.get(self.procs[name]["http"] + "/metrics", timeout=10)
        except ValueError as e:
            raise OSError(str(e)) from None
        if status != 200:
            raise OSError(f"{name} /metrics: HTTP {status}")
        return body.decode("utf-8", "replace")

    def metrics(self, name):
        """{metric: value summed over its labels}."""
        return parse_metrics(self.metrics_text(name))

    def pid(self, name):
        return self.procs[name]["pid"]

    def rss_mb(self, name):
        return vm_rss_mb(self.pid(name))

    def wait_ready(self, names=None, timeout=topology.READY_TIMEOUT_S):
        names = list(names or self.procs)
        deadline = time.time() + timeout
        while time.time() < deadline:
            dead = [n for n in names if not topology.alive(self.pid(n))]
            if dead:
                raise RuntimeError(f"{dead} exited during start-up; log tail:\n{self.log_tail(dead[0])}")
            if all(self.ready(n) for n in names):
                return
            time.sleep(0.1)
        raise RuntimeError(f"not ready within {timeout}s: {[n for n in names if not self.ready(n)]}")

    def log_tail(self, name, n=3000):
        with open(self.procs[name]["log"], "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")

    # --- faults (the fault thread) ---

    def kill9(self, name):
        pid = self.pid(name)
        os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)  # our child: reap it, so that alive() and the port see it gone
        except ChildProcessError:
            pass

    def restart(self, name):
        """The same command again: same ports, same log file (appended)."""
        p = self.procs[name]
        fresh = topology.spawn(name, self.state, p["cmd"], **{k: p[k] for k in ("http", "grpc", "redis") if k in p})
        self.procs[name] = fresh
        self.restarts[name] += 1

    def sigstop(self, name):
        os.kill(self.pid(name), signal.SIGSTOP)

    def sigcont(self, name):
        os.kill(self.pid(name), signal.SIGCONT)

    def cut(self, link):
        self.relays[link].cut()

    def heal(self, link):
        self.relays[link].heal()

    def undo_all(self):
        """After an interruption: every link healed, every process running (SIGCONT is harmless)."""
        for r in self.relays.values():
            r.heal()
        for p in self.procs.values():
            if topology.alive(p["pid"]):
                try:
                    os.kill(p["pid"], signal.SIGCONT)
                except OSError:
                    pass

    def alive(self, name):
        return topology.alive(self.pid(name))

    def stop(self):
        """SIGTERM in topology.py's order (router, servers, redis); the names it had to SIGKILL."""
        self.undo_all()
        left = topology.stop(list(self.procs.values()))
        for r in self.relays.values():
            r.close()
        return [p["name"] for p in left]

