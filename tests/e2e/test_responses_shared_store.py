#!/usr/bin/python3
"""End-to-end test of /v1/responses kept in Redis (--responses-store-url) by two instances and a router.

    /usr/bin/python3 tests/e2e/test_responses_shared_store.py --tessera build/tessera [--keep]

Starts a real redis-server on a free loopback port, two `tessera serve`
instances on a tiny synthetic qwen3 with the same --responses-store-url and
API keys, and a router over both (the client's keys on the router, the
internal key between them). Checks:
  * bad --responses-store-* values are refused by --check-config naming the flag;
  * /server_info says responses_store "redis";
  * a response created on instance A is continued on B (same tokens as the
    continuation on A), read (GET, input_items) and deleted on B;
  * through the router a response created directly on A is continued, read and
    deleted (the router names the client's tenant to the instance);
  * another API key's request for the id is a 404 on B and through the router;
  * the router asks one instance for an unknown id (a cancel still asks each);
  * Redis stopped: a continuation answers 503 naming the store (directly and
    through the router), a create still answers 200 and the skipped write is
    counted in tessera:responses_store_errors_total.
Skips (exit 77) without redis-server. Prints one line per check.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, cleanup, e2e_args, request, synth_model, wait_until  # noqa: E402
from serve_util import get_metrics, skip_test  # noqa: E402
from test_kv_offload import Redis  # noqa: E402

KEY_ONE, KEY_TWO, INTERNAL = "sk-client-one", "sk-client-two", "sk-internal-responses-store"


def auth(key):
    return {"Authorization": f"Bearer {key}"}


def create(port, key, **body):
    body = {"max_output_tokens": 4, "temperature": 0, **body}
    return request(port, "POST", "/v1/responses", body, headers=auth(key))


def text(response):
    """The output text of a Response object (what the SDK's output_text joins)."""
    return "".join(part["text"] for item in response["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")


def main():
    args = e2e_args(__doc__)
    if shutil.which("redis-server") is None:
        return skip_test("redis-server is not installed (scripts/bootstrap)")
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-rstore-")
    res = Results()
    start = time.time()
    servers, redis = [], None
    try:
        def bad_flags_refused():
            for extra, flag in ((["--responses-store-url", "http://127.0.0.1:1"], "--responses-store-url"),
                                (["--responses-store-ttl-s", "60"], "--responses-store-ttl-s"),
                                (["--role", "router", "--decode-instances", "127.0.0.1:1",
                                  "--responses-store-url", "redis://127.0.0.1:1"], "--responses-store-url")):
                p = subprocess.run([args.tessera, "serve", "--check-config", "flags"] + extra, capture_output=True,
                                   timeout=30)
                out = (p.stdout + p.stderr).decode(errors="replace")
                assert p.returncode != 0 and flag in out, (extra, p.returncode, out[-500:])
        res.run("bad --responses-store-* values refused naming the flag", bad_flags_refused)

        redis = Redis(workdir)
        model = synth_model(args.tessera, workdir)
        key_file = os.path.join(workdir, "internal.key")
        with open(key_file, "w") as f:
            f.write(INTERNAL + "\n")
        common = ["--model", model, "--kv-cache-mb", "32", "--api-key", KEY_ONE, "--api-key", KEY_TWO,
                  "--api-key", INTERNAL, "--internal-api-key-file", key_file,
                  "--responses-store-url", f"redis://127.0.0.1:{redis.port}/3", "--responses-store-ttl-s", "600"]
        a, b = Server(args.tessera, common, workdir, "a"), Server(args.tessera, common, workdir, "b")
        servers += [a, b]
        a.wait_ready()
        b.wait_ready()
        res.server = b
        router = Server(args.tessera, ["--role", "router", "--decode-instances", f"127.0.0.1:{a.port},127.0.0.1:{b.port}",
                                       "--api-key", KEY_ONE, "--api-key", KEY_TWO, "--internal-api-key-file", key_file,
                                       "--router-poll-interval", "0.1"], workdir, "router")
        servers.append(router)
        router.wait_ready()
        state = {}

        def server_info():
            status, _, body = request(a.port, "GET", "/server_info", headers=auth(KEY_ONE))
            assert status == 200 and body["responses_store"] == "redis", (status, body)
        res.run("/server_info: responses_store redis", server_info)

        def continue_on_b():
            status, _, first = create(a.port, KEY_ONE, input="Tell me about tessellations.")
            assert status == 200, (status, first)
            state["id"] = first["id"]
            turn = {"input": "And then?", "previous_response_id": first["id"], "store": False}
            sa, _, on_a = create(a.port, KEY_ONE, **turn)
            sb, _, on_b = create(b.port, KEY_ONE, **turn)
            assert sa == sb == 200, (sa, on_a, sb, on_b)
            assert on_b["usage"]["input_tokens"] > first["usage"]["input_tokens"], (first["usage"], on_b["usage"])
            assert text(on_a) == text(on_b) and text(on_a), (on_a, on_b)
            assert on_a["usage"]["input_tokens"] == on_b["usage"]["input_tokens"], (on_a["usage"], on_b["usage"])
            status, _, got = request(b.port, "GET", f"/v1/responses/{first['id']}", headers=auth(KEY_ONE))
            assert status == 200 and got == first, (status, got, first)
            status, _, items = request(b.port, "GET", f"/v1/responses/{first['id']}/input_items",
                                       headers=auth(KEY_ONE))
            assert status == 200 and len(items["data"]) == 1, (status, items)
        res.run("created on A: continued, read and listed on B (same tokens as on A)", continue_on_b)

        def other_key_is_404():
            rid = state["id"]
            for port in (b.port, router.port):
                status, _, body = request(port, "GET", f"/v1/responses/{rid}", headers=auth(KEY_TWO))
                assert status == 404, (port, status, body)
                status, _, body = create(port, KEY_TWO, input="x", previous_response_id=rid)
                assert status == 404 and body["error"]["param"] == "previous_response_id", (port, status, body)
                status, _, body = request(port, "DELETE", f"/v1/responses/{rid}", headers=auth(KEY_TWO))
                assert status == 404, (port, status, body)
        res.run("another API key: 404 on B and through the router", other_key_is_404)

        def router_does_not_probe():
            def calls(path):
                n = 0
                for srv in (a, b):
                    with open(srv.log_path, "rb") as f:
                        n += f.read().decode(errors="replace").count(path + " 404")
                return n
            status, _, _ = request(router.port, "GET", "/v1/responses/resp_nosuchone1", headers=auth(KEY_ONE))
            assert status == 404, status
            status, _, _ = request(router.port, "POST", "/v1/responses/resp_nosuchone2/cancel", {},
                                   headers=auth(KEY_ONE))
            assert status == 404, status
            wait_until(lambda: calls("POST /v1/responses/resp_nosuchone2/cancel") == 2, 5, "cancel tried on both")
            assert calls("GET /v1/responses/resp_nosuchone1") == 1, "a shared store's 404 is the answer"
        res.run("router: one instance answers a by-id 404 (cancel still tries each)", router_does_not_probe)

        def through_router():
            rid = state["id"]
            status, _, body = create(router.port, KEY_ONE, input="And then?", previous_response_id=rid)
            assert status == 200 and body["usage"]["input_tokens"] > 10, (status, body)
            status, _, got = request(router.port, "GET", f"/v1/responses/{rid}", headers=auth(KEY_ONE))
            assert status == 200 and got["id"] == rid, (status, got)
            status, _, body = request(router.port, "DELETE", f"/v1/responses/{rid}", headers=auth(KEY_ONE))
            assert status == 200 and body["deleted"] is True, (status, body)
            for port in (a.port, b.port):
                status, _, body = request(port, "GET", f"/v1/responses/{rid}", headers=auth(KEY_ONE))
                assert status == 404, (port, status, body)
        res.run("through the router: a response made on A continued, read, deleted everywhere", through_router)

        def redis_down():
            status, _, first = create(b.port, KEY_ONE, input="Before the outage.")
            assert status == 200, (status, first)
            wait_until(lambda: request(a.port, "GET", f"/v1/responses/{first['id']}", headers=auth(KEY_ONE))[0] == 200,
                       5, "the response readable on A")
            redis.stop()
            for port in (b.port, router.port):
                status, _, body = create(port, KEY_ONE, input="more", previous_response_id=first["id"])
                assert status == 503, (port, status, body)
                assert body["error"]["code"] == "responses_store_unavailable", body
                assert body["error"]["param"] == "previous_response_id", body
            before = get_metrics(a.port).get("tessera:responses_store_errors_total", 0)
            status, _, made = create(a.port, KEY_ONE, input="During the outage.")
            assert status == 200 and text(made), (status, made)
            wait_until(lambda: get_metrics(a.port).get("tessera:responses_store_errors_total", 0) > before, 5,
                       "the skipped write counted")
        res.run("redis stopped: continuation 503 naming the store, create 200 with the write counted", redis_down)
    finally:
        if redis:
            redis.stop()
        cleanup(servers, workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
