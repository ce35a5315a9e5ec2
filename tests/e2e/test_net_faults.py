#!/usr/bin/python3
"""Real network faults between a prefill and a decode instance (stdlib only).

    /usr/bin/python3 tests/e2e/test_net_faults.py --tessera build/tessera [--keep]

The prefill runs in one network namespace, the decode (with the test and the
unified reference) in another, joined by a veth pair; KV bytes go over UCX tcp
(docs/architecture.md, "Disaggregation"). The test drives vLLM's handshake itself
(prefill with do_remote_decode, then the decode with its kv_transfer_params), so
each fault strikes during the decode's pull, once the prefill's interface has sent
part of its bytes. No fault is injected from inside Tessera: the link itself fails.

  (a) the link goes down mid-transfer (a partition), then comes back;
  (b) the link is throttled to a crawl (tc tbf);
  (c) the prefill is frozen (SIGSTOP) during a large GET, resumed later;
  (d) the prefill is killed (-9) during one;
  (e) and the other way round: a decode is killed (-9) while it reads.

Every request completes within its HTTP timeout, its greedy tokens bitwise equal
to the unified reference (a failed pull means recompute on the decode, section
"No hangs"); after each fault a clean transfer works again; and nothing is left
behind: the decode's and prefill's KV blocks back to idle, no export pinned (a
dead decode's at the prefill's pin timeout).

Skips (exit 77, ctest SKIP) where network namespaces cannot be made (not root,
no iproute2).
"""
import os
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_util import VethLink, unavailable  # noqa: E402
from serve_util import (Results, Server, cleanup, e2e_args, get_metrics, request, synth_model,  # noqa: E402
                        wait_until)

BLOCK = 16
PROMPT_LEN = 500  # 31 full blocks of 16 KB each (tiny qwen3: 2 layers x K,V x 2 heads x 32 x f32)
PULL_TIMEOUT_S = 2
PIN_TIMEOUT_S = 3
STRETCH = "2mbit"  # a ~2 s transfer: room to strike mid-way
CRAWL = "16kbit"   # ~40 s for one pull: only the pull timeout ends it
HTTP_TIMEOUT = 30  # every request must end within this, faults included


INTERNAL_KEY = "netfaults-" + "7a3c" * 8
INTERNAL = {"Authorization": f"Bearer {INTERNAL_KEY}"}


class Cluster:
    def __init__(self, link, uni, prefill, decode):
        self.link, self.uni, self.p, self.d = link, uni, prefill, decode
        self.n = 0

    def fresh(self):
        """A prompt of PROMPT_LEN tokens neither instance has cached (its first token differs)."""
        self.n += 1
        return [50000 + self.n] + [(i * 7919) % 150000 + 100 for i in range(1, PROMPT_LEN)]

    def metric(self, srv, name):
        return get_metrics(srv.port, host=srv.host).get(name, 0.0)

    def complete(self, srv, prompt, timeout=HTTP_TIMEOUT, **extra):
        body = dict(dict(prompt=prompt, temperature=0, max_tokens=8, return_token_ids=True), **extra)
        status, _, parsed = request(srv.port, "POST", "/v1/completions", body, timeout=timeout, host=srv.host,
                                    headers=None if srv is self.uni else INTERNAL)
        assert status == 200, (status, parsed)
        return parsed

    def reference(self, prompt):
        return self.complete(self.uni, prompt)["choices"][0]["token_ids"]

    def export(self, prompt):
        """The prefill half of the vLLM handshake, by hand: its kv_transfer_params (blocks now pinned)."""
        body = self.complete(self.p, prompt, max_tokens=1, kv_transfer_params={"do_remote_decode": True})
        kv = body.get("kv_transfer_params")
        assert kv and len(kv["remote_block_ids"]) == len(prompt) // BLOCK, body
        return kv

    def decode(self, prompt, kvp):
        """The decode half: (token ids, response id)."""
        body = self.complete(self.d, prompt, kv_transfer_params=kvp)
        return body["choices"][0]["token_ids"], body["id"]

    def counters(self):
        return (self.metric(self.d, "tessera:kv_transfer_failures_total"),
                self.metric(self.d, "tessera:kv_transfer_seconds_count"))

    def clean_transfer(self):
        """A pull over a healthy link: every block moves, no failure, output == unified."""
        prompt = self.fresh()
        want = self.reference(prompt)
        f0, t0 = self.counters()
        assert self.decode(prompt, self.export(prompt))[0] == want
        f1, t1 = self.counters()
        assert (f1, t1) == (f0, t0 + 1), f"a clean pull: failures {f0}->{f1}, pulls {t0}->{t1}"

    def faulted_pull(self, rate, latency="200ms", fault=None, heal=None, after_bytes=64 * 1024):
        """Exports a fresh prompt, throttles the prefill's egress to `rate`, starts the decode's pull
        and, once the prefill has sent `after_bytes` of it, strikes `fault` (none: the throttle is the
        fault). The request must complete with the reference tokens through one failed pull (the decode
        recomputes). `heal` undoes the fault. Returns the decode's log line saying why the pull failed."""
        prompt = self.fresh()
        want = self.reference(prompt)
        kvp = self.export(prompt)
        f0, t0 = self.counters()
        self.link.throttle("a", rate, latency)
        out = {}

        def run():
            try:
                out["ids"], out["id"] = self.decode(prompt, kvp)
            except Exception as e:  # noqa: BLE001 -- reported below
                out["error"] = e
        sent0 = self.link.tx_bytes("a")
        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            if fault is not None:
                wait_until(lambda: self.link.tx_bytes("a") >= sent0 + after_bytes or not t.is_alive(), 10,
                           f"{after_bytes} bytes of KV on the link")
                assert t.is_alive(), f"the pull ended before the fault: {out}"
                fault()
            t.join(HTTP_TIMEOUT)
            assert not t.is_alive(), f"the decode request still runs {HTTP_TIMEOUT}s after the fault"
        finally:
            if heal is not None:
                heal()
            self.link.unthrottle("a")
        assert "error" not in out, out["error"]
        assert out["ids"] == want, (out["ids"], want)
        f1, t1 = self.counters()
        assert (f1, t1) == (f0 + 1, t0), f"want one failed pull: failures {f0}->{f1}, pulls {t0}->{t1}"
        why = [ln for ln in self.d.log_tail(200).splitlines() if out["id"] in ln and "computing its prompt" in ln]
        assert why, f"no failed pull logged for {out['id']}"
        return why[-1]

    def reader_killed(self, reader):
        """`reader` (a second decode) is killed (-9) while it pulls a fresh prompt's blocks: the prefill
        must notice nothing it cannot survive, free the pinned blocks at its pin timeout (nobody will
        acknowledge them) and serve the next pull."""
        prompt = self.fresh()
        kvp = self.export(prompt)
        self.link.throttle("a", STRETCH)
        sent0 = self.link.tx_bytes("a")
        out = {}

        def run():
            try:
                self.complete(reader, prompt, kv_transfer_params=kvp)
            except Exception as e:  # noqa: BLE001 -- the connection dies with the decode
                out["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            wait_until(lambda: self.link.tx_bytes("a") >= sent0 + 64 * 1024 or not t.is_alive(), 10,
                       "64 KB of KV on the link")
            assert t.is_alive(), "the pull ended before the kill"
            reader.proc.send_signal(signal.SIGKILL)
            reader.proc.wait(10)
            t.join(HTTP_TIMEOUT)
        finally:
            self.link.unthrottle("a")
        assert "error" in out, "a decode killed mid-pull answered"
        self.idle(self.p, PIN_TIMEOUT_S + 5)
        handle = kvp["remote_request_id"]
        assert f"'{handle}' was not pulled within" in self.p.log_tail(50), f"{handle} was freed otherwise"
        self.clean_transfer()

    def idle(self, srv, timeout):
        """Back to idle: no request, no KV block in use, nothing pinned for a peer."""
        names = ("tessera:num_requests_running", "tessera:num_requests_waiting", "tessera:kv_cache_usage_perc",
                 "tessera:kv_exported_requests")
        last = {}

        def now_idle():
            m = get_metrics(srv.port, host=srv.host)
            last.update({n: m.get(n, 0.0) for n in names})
            return all(v == 0 for v in last.values())
        try:
            wait_until(now_idle, timeout, f"{srv.name} idle")
        except AssertionError as e:
            raise AssertionError(f"{e}: {last}") from None


def main():
    args = e2e_args(__doc__)
    why = unavailable()
    if why:
        print(f"SKIP: {why}", flush=True)
        return 77
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-netfaults-")
    res = Results()
    start = time.time()
    servers = []
    # ctest's timeout sends SIGTERM: unwind through `finally`, so servers stop and namespaces go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    link = VethLink("tf")
    try:
        link.create()
        link.cap_send_buffers("a", 64 * 1024)  # a frozen or killed prefill stops its KV bytes (496 KB a pull)
        # This process joins the decode's side: the decode, the unified reference and every client
        # request live there; the prefill is reachable only over the veth.
        link.enter("b")
        model = synth_model(args.tessera, workdir, "m")
        base = ["--model", model, "--threads", "1", "--kv-cache-mb", "16", "--max-model-len", "2048",
                "--served-model-name", "m"]
        # Instances on a non-loopback --host take part in PD only with the deployment credential
        # (docs/architecture.md, "Threat model"); every call to them carries it.
        keyfile = os.path.join(workdir, "internal.key")
        with open(keyfile, "w") as f:
            f.write(INTERNAL_KEY + "\n")
        kv = ["--kv-ucx-tls", "tcp", "--internal-api-key-file", keyfile]
        uni = Server(args.tessera, base, workdir, "unified")
        p = Server(args.tessera, base + kv + ["--role", "prefill", "--kv-pin-timeout", str(PIN_TIMEOUT_S)],
                   workdir, "prefill", host=link.addr("a"), netns=link.ns("a"))
        d = Server(args.tessera, base + kv + ["--role", "decode", "--kv-pull-timeout", str(PULL_TIMEOUT_S)],
                   workdir, "decode", host=link.addr("b"), netns=link.ns("b"))
        d2 = Server(args.tessera, base + kv + ["--role", "decode"], workdir, "decode2", host=link.addr("b"),
                    netns=link.ns("b"))
        servers += [uni, p, d, d2]
        for s in servers:
            if not res.run(f"{s.name} ready", lambda s=s: s.wait_ready(timeout=60)):
                return res.summary(start)
        c = Cluster(link, uni, p, d)

        res.server = d
        res.run("a pull over the veth (UCX tcp): every block moves, output == unified", c.clean_transfer)

        def crawl():
            why = c.faulted_pull(CRAWL, latency="5s")  # the handshake gets through; the blocks crawl
            assert "ucx: transfer timed out" in why, why  # the pull's deadline ended the reads
            c.clean_transfer()
        res.run("(b) link throttled to a crawl (tbf): the reads end at the pull timeout, the decode recomputes "
                "(== unified); unthrottled, a pull works again", crawl)

        def partition():
            why = c.faulted_pull(STRETCH, fault=lambda: link.down("a"), heal=lambda: link.up("a"))
            assert "ucx: transfer timed out" in why, why
            c.clean_transfer()
        res.run("(a) link down mid-transfer: the decode recomputes (== unified); link back up, a pull works again",
                partition)

        def freeze():
            why = c.faulted_pull(STRETCH, fault=lambda: p.proc.send_signal(signal.SIGSTOP),
                                 heal=lambda: p.proc.send_signal(signal.SIGCONT))
            assert "ucx: transfer timed out" in why, why
            c.clean_transfer()
        res.run("(c) prefill frozen (SIGSTOP) mid-GET: the decode recomputes (== unified); resumed, a pull works "
                "again", freeze)

        res.run("prefill and decode idle: no KV block in use, no export pinned (the prefill's unacknowledged "
                "exports end at its pin timeout)", lambda: (c.idle(p, PIN_TIMEOUT_S + 5), c.idle(d, 5)))

        res.run("(e) a decode killed (-9) mid-GET: the prefill frees the pinned blocks at its pin timeout and "
                "serves the next pull", lambda: c.reader_killed(d2))

        def kill():
            why = c.faulted_pull(STRETCH, fault=lambda: (p.proc.send_signal(signal.SIGKILL), p.proc.wait(10)))
            # UCX notices the closed connection: no waiting for the pull timeout.
            assert "ucx: transfer:" in why and "timed out" not in why, why
        res.run("(d) prefill killed (-9) mid-GET: the dead peer ends the reads, the decode recomputes (== unified)",
                kill)

        res.run("decode idle after the kill: no KV block in use", lambda: c.idle(d, 5))
    finally:
        cleanup(servers, workdir, args.keep)
        link.close()
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
