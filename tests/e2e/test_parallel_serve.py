#!/usr/bin/env python3
"""End-to-end test of tensor and expert parallelism behind `tessera serve`.

Greedy completions of tiny synthetic models, against the same server on one rank:
  - MoE (Mixtral): expert parallelism with data-parallel attention
    (--data-parallel-size 2 --enable-expert-parallel), ranks as threads and as
    two Gloo processes (--nnodes 2), the latter with EPLB (--num-redundant-experts
    2 --enable-eplb, a rebalance every 3 steps, so experts move between the
    processes mid-generation): same text (its logits are bitwise those of one
    rank); the router is skewed (synth --router-skew) so that balancing moves
    experts; tensor-parallel attention with experts on ranks (-tp 2
    --enable-expert-parallel): same greedy text;
  - dense (Llama): -tp 2 as threads: same greedy text;
  - /metrics has per-rank step and collective seconds, the expert load by
    computing rank (summing to the group's expert load) and EPLB rebalances.
Faults (Gloo processes):
  - a worker that never joins: /ready is 503 meanwhile, then the leader exits
    with an error naming the missing rank within the timeout;
  - a worker SIGKILLed mid-request: the request fails with a 5xx (no hang),
    /ready turns 503 and names the dead rank.

Run: python3 tests/e2e/test_parallel_serve.py --tessera build/tessera
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import PROMPT, Results, Server, complete, free_port, get_metrics, request  # noqa: E402

PROMPTS = [PROMPT, [791, 6864, 315, 9822, 374], [16, 17, 18, 19, 20, 21, 22, 23]]


def synth(tessera, out, arch, extra=()):
    cmd = [tessera, "synth", "--arch", arch, "--size", "tiny", "--dtype", "bf16", "--out", out] + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def greedy(port, max_tokens=12):
    out = []
    for p in PROMPTS:
        status, _, body = complete(port, model="m", prompt=p, max_tokens=max_tokens, temperature=0, ignore_eos=True)
        assert status == 200, f"status {status}: {body}"
        out.append(body["choices"][0]["text"])
    return out


def run_server(res, tessera, workdir, name, model, extra):
    """Starts a server, returns its greedy texts (None on failure)."""
    srv = Server(tessera, ["--model", model, "--served-model-name", "m", "--threads", "1", "--num-kv-blocks", "256",
                           "--max-num-seqs", "8"] + extra, workdir, name)
    res.server = srv
    texts = {}
    try:
        if res.run(f"{name}: ready", srv.wait_ready):
            res.run(f"{name}: greedy completions", lambda: texts.setdefault("t", greedy(srv.port)))
    finally:
        srv.stop()
    return texts.get("t")


class Worker:
    """A `tessera serve --node-rank N` process (no API)."""

    def __init__(self, tessera, workdir, name, args):
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([tessera, "serve"] + args, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def gloo_args(model, leader_port, node_rank, extra):
    return ["--model", model, "--served-model-name", "m", "--threads", "1", "--num-kv-blocks", "256",
            "--max-num-seqs", "8", "--nnodes", "2", "--node-rank", str(node_rank),
            "--leader-addr", f"127.0.0.1:{leader_port}"] + extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    start = time.time()
    res = Results()
    workdir = tempfile.mkdtemp(prefix="tessera_parallel_e2e_")
    try:
        moe = synth(tessera, os.path.join(workdir, "mixtral"), "mixtral", ["--router-skew", "3"])
        dense = synth(tessera, os.path.join(workdir, "llama"), "llama")

        base_moe = run_server(res, tessera, workdir, "moe-1", moe, [])
        base_dense = run_server(res, tessera, workdir, "dense-1", dense, [])
        for name, model, base, extra in [
            ("moe-ep2-threads", moe, base_moe, ["--data-parallel-size", "2", "--enable-expert-parallel"]),
            ("moe-tp2-ep-threads", moe, base_moe, ["-tp", "2", "--enable-expert-parallel"]),
            ("dense-tp2-threads", dense, base_dense, ["-tp", "2"]),
        ]:
            got = run_server(res, tessera, workdir, name, model, extra)
            res.run(f"{name}: greedy text equals one rank's",
                    lambda got=got, base=base: (_ for _ in ()).throw(AssertionError(f"{got} != {base}"))
                    if got is None or got != base else None)

        # Gloo processes: rank 0 serves, rank 1 computes.
        ep = ["--data-parallel-size", "2", "--enable-expert-parallel", "--parallel-timeout", "5",
              "--num-redundant-experts", "2", "--enable-eplb", "--eplb-config",
              '{"window_size": 4, "step_interval": 3}']
        port = free_port()
        worker = Worker(tessera, workdir, "gloo-worker", gloo_args(moe, port, 1, ep))
        leader = Server(tessera, gloo_args(moe, port, 0, ep), workdir, "gloo-leader")
        res.server = leader
        try:
            if res.run("gloo: ready", leader.wait_ready):
                texts = {}
                res.run("gloo ep2 + eplb: greedy text equals one rank's",
                        lambda: (texts.setdefault("t", greedy(leader.port)),
                                 None if texts["t"] == base_moe else
                                 (_ for _ in ()).throw(AssertionError(f"{texts['t']} != {base_moe}"))))

                def metrics():
                    status, headers, _ = request(leader.port, "GET", "/metrics")
                    assert status == 200
                    body = headers["_body"]
                    for rank in ("0", "1"):
                        for name in ("tessera:parallel_step_seconds_total", "tessera:parallel_collective_seconds_total"):
                            line = [l for l in body.splitlines() if l.startswith(name) and f'rank="{rank}"' in l]
                            assert line and float(line[0].split()[-1]) > 0, f"{name} rank {rank}: {line}"

                    def total(name, rank=None):
                        return sum(float(l.split()[-1]) for l in body.splitlines()
                                   if l.startswith(name + "{") and (rank is None or f'rank="{rank}"' in l))
                    routed = total("tessera:moe_expert_tokens_total")
                    by_rank = [total("tessera:moe_expert_rank_tokens_total", r) for r in ("0", "1")]
                    assert routed > 0 and min(by_rank) > 0 and sum(by_rank) == routed, (routed, by_rank)
                    assert total("tessera:eplb_rebalances_total") >= 3, "EPLB should have rebalanced"
                res.run("gloo: per-rank step, collective, expert load and EPLB metrics", metrics)

                # Kill the worker while a long request runs.
                outcome = {}

                def long_request():
                    t0 = time.time()
                    try:
                        outcome["r"] = complete(leader.port, model="m", prompt=PROMPT, max_tokens=3000,
                                                temperature=0, ignore_eos=True)
                    except Exception as e:  # noqa: BLE001
                        outcome["r"] = e
                    outcome["s"] = time.time() - t0

                th = threading.Thread(target=long_request)
                th.start()
                time.sleep(0.7)
                killed_while_running = th.is_alive()
                worker.proc.send_signal(signal.SIGKILL)
                th.join(timeout=30)

                def fault():
                    assert killed_while_running, "the request finished before the worker was killed"
                    assert not th.is_alive(), "request still hanging 30 s after the worker died"
                    r = outcome["r"]
                    assert not isinstance(r, Exception), f"request raised {r}"
                    status, _, body = r
                    assert 500 <= status < 600, f"status {status}, want 5xx: {str(body)[:300]}"
                    assert "rank 1" in str(body) or "parallel group" in str(body), body
                    status, _, body = request(leader.port, "GET", "/ready")
                    assert status == 503 and body.get("status") == "failed", (status, body)
                    status, _, body = complete(leader.port, model="m", prompt=PROMPT, max_tokens=2)
                    assert 500 <= status < 600, f"new request after the failure: {status}"
                res.run("gloo: worker killed mid-request -> 5xx, /ready 503, no hang", fault)
        finally:
            leader.stop()
            worker.stop()

        # Dense -tp 2 as two Gloo processes: a worker killed while the server is idle (found by the
        # heartbeat, not by a request), and the leader (rank 0, host of the rendezvous store) killed
        # mid-request (the worker exits naming it).
        tp = ["-tp", "2", "--parallel-timeout", "5"]
        port_a, port_b = free_port(), free_port()
        worker_a = Worker(tessera, workdir, "tp-worker-a", gloo_args(dense, port_a, 1, tp))
        leader_a = Server(tessera, gloo_args(dense, port_a, 0, tp), workdir, "tp-leader-a")
        worker_b = Worker(tessera, workdir, "tp-worker-b", gloo_args(dense, port_b, 1, tp))
        leader_b = Server(tessera, gloo_args(dense, port_b, 0, tp), workdir, "tp-leader-b")
        try:
            def tp_ready():
                leader_a.wait_ready()
                leader_b.wait_ready()
            if res.run("gloo -tp 2: two groups ready", tp_ready):
                res.run("gloo -tp 2: greedy text equals one rank's",
                        lambda: (lambda got: None if got == base_dense else
                                 (_ for _ in ()).throw(AssertionError(f"{got} != {base_dense}")))(greedy(leader_a.port)))

                def worker_killed_idle():
                    worker_a.proc.send_signal(signal.SIGKILL)
                    worker_a.proc.wait()
                    deadline = time.time() + 20  # the heartbeat runs every timeout/4 = 1.25 s
                    while True:
                        status, _, body = request(leader_a.port, "GET", "/ready")
                        if status == 503 and body.get("status") == "failed":
                            break
                        assert status == 200 and time.time() < deadline, \
                            f"/ready {status} {body} (still not failed 20 s after the worker died)"
                        time.sleep(0.1)
                    assert "rank 1" in body.get("error", ""), body
                    status, _, body = complete(leader_a.port, model="m", prompt=PROMPT, max_tokens=2)
                    assert status == 503 and "rank 1" in str(body), (status, body)
                    assert leader_a.terminate_and_wait(timeout=20) == 0
                res.run("gloo -tp 2: a worker killed -9 while idle -> /ready 503 naming rank 1, requests 503, "
                        "SIGTERM still exits", worker_killed_idle)

                def leader_killed():
                    outcome = {}

                    def long_request():
                        try:
                            outcome["r"] = complete(leader_b.port, model="m", prompt=PROMPT, max_tokens=3000,
                                                    temperature=0, ignore_eos=True)
                        except Exception as e:  # noqa: BLE001 -- the leader dies under it
                            outcome["r"] = e
                    th = threading.Thread(target=long_request, daemon=True)
                    th.start()
                    deadline = time.time() + 20
                    while get_metrics(leader_b.port).get("tessera:num_requests_running", 0) < 1:
                        assert time.time() < deadline and th.is_alive(), f"the request never ran: {outcome}"
                        time.sleep(0.05)
                    leader_b.proc.send_signal(signal.SIGKILL)
                    leader_b.proc.wait()
                    try:
                        code = worker_b.proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        raise AssertionError("the worker still runs 20 s after the leader died")
                    th.join(10)
                    assert isinstance(outcome.get("r"), Exception), f"an answer from a killed leader? {outcome}"
                    assert code != 0, "the worker exited 0 after losing its leader"
                    with open(worker_b.log_path, "rb") as f:
                        log = f.read().decode(errors="replace")
                    assert "the leader (rank 0) is unreachable" in log, log[-2000:]
                res.run("gloo -tp 2: the leader killed -9 mid-request -> the worker exits with an error naming "
                        "rank 0, no hang", leader_killed)
        finally:
            for s in (leader_a, leader_b, worker_a, worker_b):
                s.stop()

        # A worker that never joins.
        port = free_port()
        lonely = Server(tessera, gloo_args(dense, port, 0, ["-tp", "2", "--parallel-timeout", "2"]), workdir,
                        "gloo-lonely")
        res.server = lonely
        try:
            def never_joins():
                lonely.wait_bound()
                status, _, body = request(lonely.port, "GET", "/ready")
                assert status == 503, (status, body)
                code = lonely.proc.wait(timeout=20)
                assert code != 0, "exited 0"
                log = lonely.log_tail(40)
                assert "never joined" in log and "rank(s) 1" in log, log
            res.run("gloo: a worker that never joins -> 503 meanwhile, then a startup error", never_joins)
        finally:
            lonely.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
