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
  * redis-server killed: requests still succeed (computed), errors counted.
Prints one line per check and ends with `N passed, M failed`.
"""
import argparse
import os
import shutil
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


def run_prompt(port, prompt):
    status, _, body = complete(port, prompt=prompt, max_tokens=6, temperature=0, ignore_eos=True)
    assert status == 200, (status, body)
    details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
    return body["choices"][0]["text"], details.get("cached_tokens", 0)


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
            state["text"], cached = run_prompt(srv.port, prompt)
            assert cached == 0, cached
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
            text, cached = run_prompt(srv.port, prompt)
            assert text == state["text"], (text, state["text"])
            assert cached == 3 * BLOCK, cached
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_hits_total", "disk", ""), 0) >= 3, m
            assert m.get("tessera:kv_offload_loaded_tokens_total", 0) >= 3 * BLOCK, m
        res.run("after a restart the prefix loads from disk: same tokens, 48 cached", restart_hits_disk)
        srv.stop()

        srv = Server(tessera, flags(os.path.join(workdir, "other-disk")), workdir, "serve-c")
        res.server = srv
        srv.wait_ready()

        def shared_redis_hits():
            text, cached = run_prompt(srv.port, prompt)
            assert text == state["text"], (text, state["text"])
            assert cached == 3 * BLOCK, cached
            m = metrics(srv.port)
            assert m.get(("tessera:kv_offload_hits_total", "redis", ""), 0) >= 3, m
        res.run("another instance loads the prefix from the shared redis", shared_redis_hits)

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
