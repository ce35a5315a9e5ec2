#!/usr/bin/python3
"""KV-aware routing and peer fetch end to end (stdlib only).

    /usr/bin/python3 tests/e2e/test_kv_router.py --tessera build/tessera [--keep]

Real processes on 127.0.0.1: two unified instances publishing KV events
(--kv-events-config, ports picked by ZeroMQ) with KV transfer for peer fetch
(--kv-peer-fetch, UCX over tcp), and a router with --routing-logic kv-aware
that learns their event endpoints from GET /server_info (no per-instance
router flags).

  * a repeated prefix goes to the instance holding it, counted as hit tokens;
  * cache_salt: another tenant's request for the same prompt is never a hit
    (router index and the instance's prefix cache), the same tenant's is;
  * peer fetch: with the holder busy, the other instance is chosen and pulls
    the prefix from it over the KV transport; greedy tokens are bitwise those
    the holder computed itself;
  * router restarted: the index is rebuilt (replay) to what it was;
  * the router's gRPC front and a prefill pool route by the index too;
  * a prefix evicted on the instance it was routed to stops counting as
    held there once its requests have ended;
  * an instance killed (-9): dropped from the index within 3 s, requests still
    succeed;
  * an instance without KV events joins (--instances-file): decisions fall back
    to load only.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, get_metrics, grpc_calls, request, synth_model  # noqa: E402

BLOCK = 16
X = [(i * 7919) % 150000 + 100 for i in range(4 * BLOCK)]  # a 4-block shared prefix
EVENTS = ('{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*", '
          '"replay_endpoint": "tcp://127.0.0.1:*"}')
DROP_BOUND_S = 3.0  # --router-poll-interval 0.1 + a failed poll (connect timeout 0.5 s) + 1 s unhealthy + a tick


def post(port, body, timeout=60):
    status, _, parsed = request(port, "POST", "/v1/completions", body, timeout=timeout)
    assert status == 200, (status, parsed)
    return parsed


def ids(port, prompt, **extra):
    return post(port, dict(prompt=prompt, max_tokens=6, temperature=0, return_token_ids=True, **extra))[
        "choices"][0]["token_ids"]


def router_samples(port):
    """{(name, frozenset(labels)): value} of the router's /metrics."""
    status, headers, _ = request(port, "GET", "/metrics")
    assert status == 200
    out = {}
    for line in headers["_body"].splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)$', line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def decisions(port):
    """{instance: decisions} over every policy, and {policy: decisions}."""
    per_inst, per_policy = {}, {}
    for (name, labels), v in router_samples(port).items():
        if name == "tessera:router_routing_decisions_total":
            d = dict(labels)
            per_inst[d["instance"]] = per_inst.get(d["instance"], 0) + v
            per_policy[d["policy"]] = per_policy.get(d["policy"], 0) + v
    return per_inst, per_policy


def index_blocks(port):
    return {dict(labels)["instance"]: v for (name, labels), v in router_samples(port).items()
            if name == "tessera:router_kv_index_blocks"}


def pool_hits(port, role):
    return router_samples(port).get(("tessera:router_prompt_hit_tokens_total", frozenset({("role", role)})), 0)


def scalar(port, name):
    return get_metrics(port).get(name, 0.0)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out ({timeout}s) waiting for {what}")


def routed(rport, fn):
    """Runs fn() (one request through the router); returns (instance it went to, hit tokens counted)."""
    before, hit0 = decisions(rport)[0], scalar(rport, "tessera:router_prompt_hit_tokens_total")
    out = fn()
    after, hit1 = decisions(rport)[0], scalar(rport, "tessera:router_prompt_hit_tokens_total")
    moved = [i for i in after if after[i] != before.get(i, 0)]
    assert len(moved) == 1, (before, after)
    return moved[0], hit1 - hit0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-kvr-")
    res = Results()
    start = time.time()
    servers = []
    try:
        model = synth_model(tessera, workdir)
        inst_args = ["--model", model, "--threads", "1", "--num-kv-blocks", "96", "--max-model-len", "1024",
                     "--max-num-seqs", "2", "--kv-events-config", EVENTS, "--kv-peer-fetch", "--kv-ucx-tls", "tcp,self"]
        a = Server(tessera, inst_args, workdir, "inst-a", grpc=True)
        b = Server(tessera, inst_args, workdir, "inst-b", grpc=True)
        servers += [a, b]
        a.wait_ready()
        b.wait_ready()
        addr = {f"127.0.0.1:{s.port}": s for s in (a, b)}
        pool = os.path.join(workdir, "pool.json")
        with open(pool, "w") as f:
            json.dump({"decode": sorted(addr)}, f)
        router_args = ["--role", "router", "--instances-file", pool, "--routing-logic", "kv-aware",
                       "--router-poll-interval", "0.1", "--kv-peer-fetch-min-tokens", "32"]
        r = Server(tessera, router_args, workdir, "router")
        servers.append(r)
        res.server = r
        r.wait_ready()

        def subscribed():
            s = router_samples(r.port)
            stale = {dict(l)["instance"]: v for (n, l), v in s.items() if n == "tessera:router_kv_instance_stale"}
            return set(stale) == set(addr) and not any(stale.values())
        res.run("router learns both event endpoints from /server_info", lambda: wait_for(subscribed, 10, "subscribe"))

        state = {}

        def repeated_prefix_goes_to_holder():
            # The holder is the instance load-only routing would not pick (it takes the first address on ties).
            holder = max(addr)
            ids(addr[holder].port, X + [1, 2, 3])
            wait_for(lambda: index_blocks(r.port).get(holder, 0) >= 4, 5, "the holder's BlockStored events")
            for k in range(4):
                inst, hit, _ = routed(r.port, lambda: ids(r.port, X + [10 + k, 20 + k, 30 + k]))
                assert inst == holder and hit == 4 * BLOCK, (k, inst, holder, hit)
            state["holder"] = holder
            state["other"] = next(i for i in addr if i != holder)
        res.run("a repeated prefix goes to the instance holding it (64 hit tokens each)", repeated_prefix_goes_to_holder)

        def salts_isolate():
            holder = state["holder"]
            plain = ids(r.port, X + [7, 7])
            inst, hit, salted = routed(r.port, lambda: ids(r.port, X + [7, 7], cache_salt="tenant-b"))
            assert hit == 0, f"tenant-b routed as a hit on the unsalted prefix ({hit} tokens)"
            assert salted == plain, (salted, plain)  # the salt changes caching only
            wait_for(lambda: index_blocks(r.port).get(inst, 0) >= 8 or (inst != holder and
                     index_blocks(r.port).get(inst, 0) >= 4), 5, "tenant-b's salted blocks in the index")
            inst2, hit, _ = routed(r.port, lambda: ids(r.port, X + [8], cache_salt="tenant-b"))
            assert inst2 == inst and hit == 4 * BLOCK, (inst2, inst, hit)
            port = addr[inst].port
            q0 = scalar(port, "tessera:prefix_cache_hits_total")
            inst3, hit, _ = routed(r.port, lambda: ids(r.port, X + [8], cache_salt="tenant-c"))
            assert hit == 0, hit
            if inst3 == inst:
                assert scalar(port, "tessera:prefix_cache_hits_total") == q0, "tenant-c hit tenant-b's blocks"
        res.run("cache_salt: other tenants never hit a salted prefix, the same tenant does", salts_isolate)

        def peer_fetch_is_exact():
            holder, other = state["holder"], state["other"]
            hp, op = addr[holder].port, addr[other].port
            z = X + [9, 9, 9, 9]
            reference = ids(hp, z)  # computed (prefix-cache hit) on the holder itself
            # Keep the holder busy: with --max-num-seqs 2, four streams leave two waiting (512 tokens of
            # load). They are long and cut short (connection closed: the instance aborts them) at the end.
            busy = []
            for _ in range(4):
                c = http.client.HTTPConnection("127.0.0.1", hp, timeout=30)
                c.request("POST", "/v1/completions", body=json.dumps(dict(
                    prompt=[5] * 8, max_tokens=300, ignore_eos=True, stream=True)),
                    headers={"Content-Type": "application/json"})
                busy.append(c)
            try:
                wait_for(lambda: scalar(hp, "tessera:num_requests_waiting") >= 2, 5, "the holder busy")
                time.sleep(0.3)  # two router polls see it
                pulled0 = scalar(op, "tessera:kv_transfer_blocks_total")
                exported0 = router_samples(r.port).get(
                    ("tessera:router_kv_peer_fetches_total", frozenset({("outcome", "exported")})), 0)
                elsewhere = ("tessera:router_prompt_tokens_routed_elsewhere_total", frozenset({("role", "decode")}))
                elsewhere0 = router_samples(r.port).get(elsewhere, 0)
                inst, hit, got = routed(r.port, lambda: ids(r.port, z))
                assert inst == other, f"went to {inst}, not the idle {other}"
                # The cache waterfall: the holder's prefix was pulled, not left behind.
                assert router_samples(r.port)[elsewhere] == elsewhere0, router_samples(r.port)
                assert got == reference, (got, reference)
                exported = router_samples(r.port)[
                    ("tessera:router_kv_peer_fetches_total", frozenset({("outcome", "exported")}))]
                assert exported == exported0 + 1, (exported, exported0)
                pulled = scalar(op, "tessera:kv_transfer_blocks_total") - pulled0
                assert pulled == 4, f"{pulled} blocks pulled or reused, want the 4 prefix blocks"
            finally:
                for c in busy:
                    c.close()
        res.run("peer fetch: the idle instance pulls the prefix from the busy holder; same greedy tokens",
                peer_fetch_is_exact)

        def router_restart_rebuilds_index():
            wait_for(lambda: all(v > 0 for v in index_blocks(r.port).values()), 5, "both instances indexed")
            time.sleep(0.3)  # let events settle
            before = index_blocks(r.port)
            r.stop()
            r2 = Server(tessera, router_args, workdir, "router2", grpc=True)
            servers.append(r2)
            res.server = r2
            r2.wait_ready()
            state["router"] = r2
            wait_for(lambda: index_blocks(r2.port) == before, 5, f"index {before} rebuilt")
            _, hit, _ = routed(r2.port, lambda: ids(r2.port, X + [11]))
            assert hit == 4 * BLOCK, hit
        res.run("router restarted: the index is rebuilt from the instances' replay", router_restart_rebuilds_index)

        def grpc_and_prefill_pool_are_kv_aware():
            # The router's gRPC front and its prefill pool choose by --routing-logic too: a prompt with
            # the held prefix goes to an instance holding it there as well (hit tokens counted per pool;
            # both instances hold X by now: the peer fetch copied it).
            r2, holder = state["router"], state["holder"]
            with open(r2.port_file) as f:
                rg = f"127.0.0.1:{json.load(f)['grpc']}"
            for k in range(2):
                call = {"target": rg, "method": "Generate", "request": {
                    "token_ids": {"ids": X + [70 + k]}, "params": {"temperature": 0, "max_tokens": 4}}}
                _, hit, out = routed(r2.port, lambda: grpc_calls(workdir, [call])[0])
                assert out["code"] == 0, out
                assert hit == 4 * BLOCK, hit
            pd_args = ["--role", "router", "--prefill-instances", ",".join(sorted(addr)), "--decode-instances",
                       ",".join(sorted(addr)), "--routing-logic", "kv-aware", "--prefill-threshold", "16",
                       "--router-poll-interval", "0.1"]
            r3 = Server(tessera, pd_args, workdir, "router-pd")
            servers.append(r3)
            r3.wait_ready()
            wait_for(lambda: all(v > 0 for v in index_blocks(r3.port).values()) and len(index_blocks(r3.port)) == 2,
                     5, "the pd router's index")
            want = ids(addr[holder].port, X + [80, 81])
            got = ids(r3.port, X + [80, 81])
            assert got == want, (got, want)
            prefill = {dict(l)["instance"]: v for (n, l), v in router_samples(r3.port).items()
                       if n == "tessera:router_routing_decisions_total" and dict(l).get("role") == "prefill"}
            assert sum(prefill.values()) == 1, prefill
            assert pool_hits(r3.port, "prefill") == 4 * BLOCK, pool_hits(r3.port, "prefill")
            r3.stop()
        res.run("gRPC front and prefill pool: a held prefix goes to its holder there too",
                grpc_and_prefill_pool_are_kv_aware)

        def evicted_prefix_not_believed_held():
            # A new prefix routed through the router, then evicted on that instance by other prompts
            # sent to it directly: within seconds of the first request, the router must not count it as
            # held there any more (an in-flight belief refreshed by dispatches, not ended by completion,
            # once kept every routed prefix "held" for 10 s after its last use, and a full pool thrashed).
            r2 = state["router"]
            y = [(i * 104729) % 150000 + 50 for i in range(4 * BLOCK)]
            t, hit, _ = routed(r2.port, lambda: ids(r2.port, y + [1]))
            assert hit == 0, hit
            inst, hit, _ = routed(r2.port, lambda: ids(r2.port, y + [2]))
            assert inst == t and hit == 4 * BLOCK, (inst, t, hit)
            last_done = time.time()
            for k in range(2):  # 2 x 60 blocks through a pool of 96: every older free block is evicted
                post(addr[t].port, dict(prompt=[(i * 31 + k * 977) % 150000 + 7 for i in range(60 * BLOCK - 8)],
                                        max_tokens=1))
            def settled():  # the evictions' events have reached the index
                n = index_blocks(r2.port).get(t, 0)
                time.sleep(0.2)
                return n == index_blocks(r2.port).get(t, 0) and n <= 96
            wait_for(settled, 5, "the evictions in the index")
            time.sleep(max(0.0, last_done + 1.5 - time.time()))  # past the router's 1 s grace after a Done
            _, hit, _ = routed(r2.port, lambda: ids(r2.port, y + [3]))
            assert hit == 0, f"{hit} hit tokens counted for a prefix evicted everywhere"
        res.run("a prefix evicted on its instance is no longer counted as held there", evicted_prefix_not_believed_held)

        def killed_instance_dropped():
            r2 = state["router"]
            victim, survivor = state["other"], state["holder"]
            addr[victim].proc.send_signal(signal.SIGKILL)
            addr[victim].proc.wait()
            t0 = time.time()
            wait_for(lambda: victim not in index_blocks(r2.port), DROP_BOUND_S, "the killed instance dropped")
            took = time.time() - t0
            for k in range(3):
                inst, _, _ = routed(r2.port, lambda: ids(r2.port, X + [40 + k]))
                assert inst == survivor, inst
            print(f"  (dropped after {took:.2f}s)")
        res.run(f"instance killed: dropped from the index within {DROP_BOUND_S}s, requests still succeed",
                killed_instance_dropped)

        def eventless_instance_means_load_only():
            r2 = state["router"]
            c = Server(tessera, ["--model", model, "--threads", "1", "--num-kv-blocks", "96"], workdir, "inst-c")
            servers.append(c)
            c.wait_ready()
            with open(pool + ".tmp", "w") as f:
                json.dump({"decode": [state["holder"], f"127.0.0.1:{c.port}"]}, f)
            os.replace(pool + ".tmp", pool)
            cname = f"127.0.0.1:{c.port}"
            wait_for(lambda: router_samples(r2.port).get(
                ("tessera:router_kv_instance_stale", frozenset({("instance", cname)}))) == 1, 5,
                "the new instance known to the router, without events")
            before = decisions(r2.port)[1].get("load-fallback", 0)
            ids(r2.port, X + [51])
            assert decisions(r2.port)[1].get("load-fallback", 0) == before + 1, decisions(r2.port)[1]
        res.run("an instance without KV events: decisions fall back to load only", eventless_instance_means_load_only)
    finally:
        for s in servers:
            s.stop()
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
