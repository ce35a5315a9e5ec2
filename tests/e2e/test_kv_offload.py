#!/usr/bin/python3
"""End-to-end test of the KV tiers (--kv-offload-*) against a real `tessera serve`.

    /usr/bin/python3 tests/e2e/test_kv_offload.py --tessera build/tessera [--keep]

Starts a real redis-server on a free loopback port and `tessera serve` on a
tiny synthetic qwen3 with all three tiers (host, disk, Redis), then checks:
  * bad --kv-offload-* values are refused by --check-config naming the flag,
    and the settings work as keys of a --config TOML file;
  * a prompt's full blocks are written to every tier (metrics);
  * after a restart of the instance (empty KV pool, same disk dir) the same
    prompt is served from the disk tier: same greedy tokens, its 3 full blocks
    reported as cached tokens, disk hits counted;
  * the Redis tier shared with a second instance on another disk dir serves
    the prompt there too (same tokens);
  * a record planted in Redis (right key, valid checksums, altered KV, no
    valid MAC) is refused by instances sharing --kv-offload-secret-file: the
    output equals the recompute, nothing is loaded, the refusal is counted in
    tessera:kv_offload_rejected_records_total;
  * --cache-isolation api-key: two API keys never hit each other's prefixes
    (cached_tokens 0, from the device pool and the host tier alike), the same
    key does; --cache-isolation salt refuses a request without cache_salt;
  * redis-server killed: requests still succeed (computed), errors counted.
Prints one line per check and ends with `N passed, M failed`.
"""
import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, complete, free_port, request, synth_model  # noqa: E402
from serve_util import parse_metrics  # noqa: E402

BLOCK = 16


class Redis:
    def __init__(self, workdir):
        self.port = free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", workdir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 5
        while time.time() < deadline:
            if subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def resp(port, db, *args):
    """One Redis command on database `db` over RESP (binary-safe, unlike redis-cli); the decoded reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        out = b""
        for cmd in (("SELECT", db), args):
            out += b"*%d\r\n" % len(cmd)
            for a in cmd:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        f = s.makefile("rb")

        def read():
            line = f.readline()[:-2]
            kind, rest = line[:1], line[1:]
            if kind in (b"+", b"-", b":"):
                return rest
            if kind == b"$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2]
            if kind == b"*":
                return [read() for _ in range(int(rest))]
            raise AssertionError(line)
        assert read() == b"OK"  # SELECT
        return read()


def fnv1a64(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def tamper(record):
    """The record with its KV replaced (every value 100.0) and both checksums
    recomputed, as anyone who can write to Redis can do; the MAC is zeroed
    (engine/kv_tiers/kv_block_record.h has the layout)."""
    assert record[:8] == b"TSKVBLK\0", record[:8]
    key_len, payload_len = struct.unpack_from("<IQ", record, 12)
    header, key = bytearray(record[:72]), record[72:72 + key_len]
    payload = struct.pack("<f", 100.0) * (payload_len // 4)
    struct.pack_into("<Q", header, 24, fnv1a64(payload))
    struct.pack_into("<Q", header, 32, fnv1a64(key, fnv1a64(bytes(header[:32]))))
    header[40:72] = bytes(32)
    return bytes(header) + key + payload


def metrics(port):
    """{(name, tier, kind): value} of the kv_offload metrics, plus plain names."""
    status, headers, _ = request(port, "GET", "/metrics")
    assert status == 200
    out = dict(parse_metrics(headers["_body"]))
    for line in headers["_body"].splitlines():
        if line.startswith("tessera:kv_offload") and "{" in line:
            name, rest = line.split("{", 1)
            labels = dict(kv.split("=", 1) for kv in rest.split("}")[0].split(","))
            tier = labels.get("tier", "").strip('"')
            kind = labels.get("kind", labels.get("op", "")).strip('"')
            out[(name, tier, kind)] = out.get((name, tier, kind), 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def run_prompt_details(port, prompt):
    """A completion of `prompt`: (text, usage.prompt_tokens_details), the cache waterfall's sums checked."""
    status, _, body = complete(port, prompt=prompt, max_tokens=6, temperature=0, ignore_eos=True)
    assert status == 200, (status, body)
    details = body["usage"]["prompt_tokens_details"]
    cached, computed = details["cached_tokens_details"], details["computed_tokens_details"]
    assert sorted(cached) == ["disk", "host", "peer", "pool", "redis"], details
    assert sorted(computed) == ["evicted", "no_prefix", "not_written", "routed_elsewhere", "tail"], details
    assert sum(cached.values()) == details["cached_tokens"], details
    assert sum(cached.values()) + sum(computed.values()) == body["usage"]["prompt_tokens"] == len(prompt), details
    return body["choices"][0]["text"], details


def run_prompt(port, prompt):
    text, details = run_prompt_details(port, prompt)
    return text, details["cached_tokens"]


def waterfall_counters(port):
    """tessera:prompt_tokens_{cached,computed}_total by source / reason."""
    out = {}
    for line in request(port, "GET", "/metrics")[1]["_body"].splitlines():
        for name, label in (("tessera:prompt_tokens_cached_total", "source"),
                            ("tessera:prompt_tokens_computed_total", "reason")):
            if line.startswith(name + "{"):
                value = line.split(label + '="', 1)[1].split('"', 1)[0]
                out[(label, value)] = float(line.rsplit(" ", 1)[1])
    return out


def run_as(port, key, prompt):
    """A completion of `prompt` with API key `key`: (text, cached prompt tokens)."""
    status, _, body = complete(port, headers={"Authorization": "Bearer " + key}, prompt=prompt, max_tokens=4,
                               temperature=0, ignore_eos=True)
    assert status == 200, (status, body)
    details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
    return body["choices"][0]["text"], details.get("cached_tokens", 0)


def ready_server(res, tessera, args, workdir, name):
    """A ready `tessera serve` with `args`, the one `res` reports the log of."""
    srv = Server(tessera, args, workdir, name)
    res.server = srv
    try:
        srv.wait_ready()
    except BaseException:
        srv.stop()
        raise
    return srv


def wait_for(fn, what, timeout=5):
    deadline = time.time() + timeout
    while not fn():
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    if shutil.which("redis-server") is None:
        print("SKIP: redis-server is not installed (scripts/bootstrap)")
        return 77
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-kvoff-")
    res = Results()
    start = time.time()
    srv = redis = None
    try:
        model = synth_model(tessera, workdir)
        redis = Redis(workdir)
        url = f"redis://127.0.0.1:{redis.port}/1"
        disk = os.path.join(workdir, "kv-disk")

        def flags(disk_dir):
            return ["--model", model, "--num-kv-blocks", "24", "--max-model-len", "128", "--threads", "1",
                    "--kv-offload-host-gb", "0.05", "--kv-offload-disk-dir", disk_dir, "--kv-offload-disk-gb", "0.1",
                    "--kv-offload-remote-url", url]

        def bad_flags_refused():
            for extra, flag in ((["--kv-offload-remote-url", "http://127.0.0.1:1"], "--kv-offload-remote-url"),
                                (["--kv-offload-remote-url", "redis://127.0.0.1"], "--kv-offload-remote-url"),
                                (["--kv-offload-disk-gb", "1"], "--kv-offload-disk-gb"),
                                (["--kv-offload-host-gb", "-1"], "--kv-offload-host-gb")):
                p = subprocess.run([tessera, "serve", "--check-config", "flags"] + extra, capture_output=True,
                                   timeout=30)
                out = (p.stdout + p.stderr).decode(errors="replace")
                assert p.returncode != 0 and flag in out, (extra, p.returncode, out[-500:])
        res.run("bad --kv-offload-* values refused naming the flag", bad_flags_refused)

        def config_file_keys():
            toml = os.path.join(workdir, "serve.toml")
            with open(toml, "w") as f:
                f.write('kv-offload-host-gb = 1.5\nkv-offload-disk-dir = "%s"\nkv-offload-disk-gb = 2\n'
                        'kv-offload-remote-url = "%s"\n' % (disk, url))
            p = subprocess.run([tessera, "serve", "--config", toml, "--check-config", "flags"], capture_output=True,
                               timeout=30)
            assert p.returncode == 0, (p.stdout + p.stderr).decode(errors="replace")[-500:]
        res.run("the --kv-offload-* settings are accepted as --config TOML keys", config_file_keys)

        srv = Server(tessera, flags(disk), workdir, "serve-a")
        res.server = srv
        srv.wait_ready()
        prompt = list(range(3000, 3000 + 3 * BLOCK + 2))  # 3 full blocks + 2
        state = {}

        def stored_in_every_tier():
            state["text"], details = run_prompt_details(srv.port, prompt)
            assert details["cached_tokens"] == 0, details
            # Never seen: 3 full blocks no_prefix, the 2 tokens past them tail.
            assert details["computed_tokens_details"]["no_prefix"] == 3 * BLOCK, details
            assert details["computed_tokens_details"]["tail"] == 2, details
            for tier in ("host", "disk", "redis"):
                wait_for(lambda: metrics(srv.port).get(("tessera:kv_offload_stored_blocks_total", tier, ""), 0) >= 3,
                         f"3 blocks stored in {tier}")
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_seconds_count", "disk", "spill"), 0) >= 3, m
        res.run("a prompt's full blocks are written to host, disk and redis", stored_in_every_tier)
        srv.stop()

        srv = Server(tessera, flags(disk), workdir, "serve-b")
        res.server = srv
        srv.wait_ready()

        def restart_hits_disk():
            text, details = run_prompt_details(srv.port, prompt)
            assert text == state["text"], (text, state["text"])
            assert details["cached_tokens"] == 3 * BLOCK, details
            # The waterfall names the tier (the host tier died with the process).
            assert details["cached_tokens_details"]["disk"] == 3 * BLOCK, details
            c = waterfall_counters(srv.port)
            assert c.get(("source", "disk")) == 3 * BLOCK and c.get(("source", "redis")) == 0, c
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_hits_total", "disk", ""), 0) >= 3, m
            assert m.get("tessera:kv_offload_loaded_tokens_total", 0) >= 3 * BLOCK, m
        res.run("after a restart the prefix loads from disk: same tokens, 48 cached", restart_hits_disk)
        srv.stop()

        srv = Server(tessera, flags(os.path.join(workdir, "other-disk")), workdir, "serve-c")
        res.server = srv
        srv.wait_ready()

        def shared_redis_hits():
            text, details = run_prompt_details(srv.port, prompt)
            assert text == state["text"], (text, state["text"])
            assert details["cached_tokens_details"]["redis"] == 3 * BLOCK, details
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_hits_total", "redis", ""), 0) >= 3, m
        res.run("another instance loads the prefix from the shared redis", shared_redis_hits)
        srv.stop()

        secret = os.path.join(workdir, "kv-secret")
        with open(secret, "w") as f:
            f.write("a deployment secret of 32 bytes\n")
        url2 = f"redis://127.0.0.1:{redis.port}/2"
        redis_only = ["--model", model, "--num-kv-blocks", "24", "--max-model-len", "128", "--threads", "1",
                      "--kv-offload-remote-url", url2, "--kv-offload-secret-file", secret]
        srv = ready_server(res, tessera, redis_only, workdir, "serve-d")
        planted = list(range(7000, 7000 + 3 * BLOCK + 1))

        def authenticated_records_stored():
            state["planted_text"], _ = run_prompt(srv.port, planted)
            wait_for(lambda: metrics(srv.port).get(("tessera:kv_offload_stored_blocks_total", "redis", ""), 0) >= 3,
                     "3 blocks stored in redis")
        res.run("records written with --kv-offload-secret-file", authenticated_records_stored)
        srv.stop()

        srv = ready_server(res, tessera, redis_only, workdir, "serve-e")

        def authenticated_records_load():
            text, cached = run_prompt(srv.port, planted)
            assert (text, cached) == (state["planted_text"], 3 * BLOCK), (text, cached)
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_rejected_records_total", "redis", ""), 0) == 0, m
        res.run("another instance with the same secret loads the authenticated records", authenticated_records_load)
        srv.stop()

        srv = ready_server(res, tessera, redis_only, workdir, "serve-e2")

        def planted_record_refused():
            keys = resp(redis.port, 2, "KEYS", "tessera:kv:*")
            assert len(keys) >= 3, keys
            for k in keys:
                assert resp(redis.port, 2, "SET", k, tamper(resp(redis.port, 2, "GET", k))) == b"OK"
            text, cached = run_prompt(srv.port, planted)
            assert cached == 0, cached
            assert text == state["planted_text"], (text, state["planted_text"])
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_rejected_records_total", "redis", ""), 0) >= 1, m
            assert m.get(("tessera:kv_offload_hits_total", "redis", ""), 0) == 0, m
        res.run("a planted redis record (valid checksums, no valid MAC) is refused: output = recompute, counted",
                planted_record_refused)
        srv.stop()

        keys = ["--api-key", "key-one", "--api-key", "key-two"]
        small = ["--model", model, "--num-kv-blocks", "24", "--max-model-len", "128", "--threads", "1"]
        srv = ready_server(res, tessera, small + ["--kv-offload-host-gb", "0.05", "--cache-isolation", "api-key"] +
                           keys, workdir, "serve-iso")

        def api_keys_are_namespaces():
            shared = list(range(9000, 9000 + 3 * BLOCK + 1))
            t1, c1 = run_as(srv.port, "key-one", shared)
            assert c1 == 0, c1
            wait_for(lambda: metrics(srv.port).get(("tessera:kv_offload_stored_blocks_total", "host", ""), 0) >= 3,
                     "key-one's blocks in the host tier")
            t2, c2 = run_as(srv.port, "key-two", shared)
            assert (t2, c2) == (t1, 0), ("cross-tenant hit", c2)
            t1b, c1b = run_as(srv.port, "key-one", shared)
            assert (t1b, c1b) == (t1, 3 * BLOCK), ("same key must hit", c1b)
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_hits_total", "host", ""), 0) == 0, m  # key-two never loaded key-one's
        res.run("--cache-isolation api-key: no hit across keys (pool, tier), the same key hits",
                api_keys_are_namespaces)
        srv.stop()

        srv = ready_server(res, tessera, small, workdir, "serve-behind-router")
        router = Server(tessera, ["--role", "router", "--decode-instances", f"127.0.0.1:{srv.port}",
                                  "--router-poll-interval", "0.1", "--cache-isolation", "api-key"] + keys,
                        workdir, "router-iso")
        try:
            router.wait_ready()

            def router_keeps_keys_apart():
                shared = list(range(11000, 11000 + 3 * BLOCK + 1))

                def hits():
                    return metrics(srv.port).get("tessera:prefix_cache_hits_total", 0.0)
                h0 = hits()
                texts = [run_as(router.port, k, shared)[0] for k in ("key-one", "key-two", "key-one")]
                assert texts[0] == texts[1] == texts[2], texts
                # Only the third call may hit (48 tokens); key-two hitting key-one's blocks would add 48 more.
                wait_for(lambda: hits() - h0 >= 3 * BLOCK, "the same key's prefix hit")
                time.sleep(0.3)  # the exporter samples the engine's counters
                assert hits() - h0 == 3 * BLOCK, ("prefix-cache hit tokens", hits() - h0)
            res.run("router --cache-isolation api-key: keys never share the instance's prefixes",
                    router_keeps_keys_apart)
        finally:
            router.stop()
        srv.stop()

        def salt_mode_requires_salt():
            s2 = ready_server(res, tessera, small + ["--cache-isolation", "salt"], workdir, "serve-salt")
            try:
                status, _, body = complete(s2.port, prompt=[1, 2, 3], max_tokens=1)
                assert status == 400 and body["error"]["param"] == "cache_salt", (status, body)
                status, _, body = complete(s2.port, prompt=[1, 2, 3], max_tokens=1, cache_salt="tenant-a")
                assert status == 200, (status, body)
            finally:
                s2.stop()
            p = subprocess.run([tessera, "serve", "--check-config", "flags", "--cache-isolation", "api-key"],
                               capture_output=True, timeout=30)
            out = (p.stdout + p.stderr).decode(errors="replace")
            assert p.returncode != 0 and "--cache-isolation" in out, out[-300:]
        res.run("--cache-isolation salt refuses a request without cache_salt; api-key needs --api-key",
                salt_mode_requires_salt)

        srv = Server(tessera, flags(os.path.join(workdir, "other-disk")), workdir, "serve-f")
        res.server = srv
        srv.wait_ready()

        def redis_down_recomputes():
            redis.stop()
            other = list(range(5000, 5000 + 2 * BLOCK + 5))
            for p in (other, other):
                text, _ = run_prompt(srv.port, p)
                assert text, "empty completion"
            wait_for(lambda: metrics(srv.port).get(("tessera:kv_offload_errors_total", "redis", "spill_failed"), 0) +
                     metrics(srv.port).get(("tessera:kv_offload_errors_total", "redis", "unavailable"), 0) >= 1,
                     "redis errors counted")
            status, _, body = request(srv.port, "GET", "/health")
            assert status == 200, (status, body)
        res.run("redis killed: requests succeed, errors counted", redis_down_recomputes)
    finally:
        if srv:
            srv.stop()
        if redis:
            redis.stop()
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
