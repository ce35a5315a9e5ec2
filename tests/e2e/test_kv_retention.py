#!/usr/bin/python3
"""End-to-end test of prompt retention (docs/architecture.md, "Retention") against a real `tessera serve`.

    /usr/bin/python3 tests/e2e/test_kv_retention.py --tessera build/tessera [--keep]

On a tiny synthetic qwen3 with two API keys:
  * budgets: a retained prefix within the per-key budget is served; one more
    from the same key is a 429 naming prompt_cache_retention, one larger than
    any budget a 400 naming it; Anthropic's cache_control over budget is a 429
    in Anthropic's error shape naming the block; both are counted in
    tessera:kv_retention_rejections_total;
  * holding: with a small pool and a small host tier, a prefix retained with
    prompt_cache_retention "24h" survives a flood of unrelated prompts that
    evicts everything unretained from both: it comes back as a host-tier hit
    (cached_tokens, tessera:kv_offload_hits_total{tier="host"}), with the same
    greedy tokens as computed without retention; one retained "in_memory"
    under --retention-ttl-scale (testing only) expires first and is computed again.
Prints one line per check and ends with `N passed, M failed`.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, cleanup, complete, e2e_args, error_check, request  # noqa: E402
from serve_util import synth_model, wait_until  # noqa: E402

BLOCK = 16
KEYS = ("key-one", "key-two")


def auth(key):
    return {"Authorization": "Bearer " + key}


def prompt_of(first, blocks):
    """Token ids: `blocks` full blocks and 2 more, distinct per `first`."""
    return list(range(first, first + blocks * BLOCK + 2))


def run(port, key, prompt, retention=None, max_tokens=6):
    """(status, body) of a greedy completion; `retention`: prompt_cache_retention."""
    body = dict(prompt=prompt, max_tokens=max_tokens, temperature=0, ignore_eos=True)
    if retention:
        body["prompt_cache_retention"] = retention
    status, _, out = complete(port, headers=auth(key), **body)
    return status, out


def ok(port, key, prompt, retention=None, max_tokens=6):
    """(text, cached prompt tokens) of a completion that must succeed."""
    status, out = run(port, key, prompt, retention, max_tokens)
    assert status == 200, (status, out)
    details = (out.get("usage") or {}).get("prompt_tokens_details") or {}
    return out["choices"][0]["text"], details.get("cached_tokens", 0)


def scrape(port):
    status, headers, _ = request(port, "GET", "/metrics")
    assert status == 200
    return headers["_body"]


def metric(port, name, text=None, **labels):
    """The sum of `name`'s samples whose labels include `labels` (from `text`, or a scrape of `port`)."""
    total = 0.0
    for line in (text if text is not None else scrape(port)).splitlines():
        if not line.startswith(name + "{"):
            continue
        text = line[len(name) + 1:line.index("}")]
        have = dict((kv.split("=", 1)[0], kv.split("=", 1)[1].strip('"')) for kv in text.split(",") if "=" in kv)
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    args = e2e_args(__doc__)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-retain-")
    res = Results()
    start = time.time()
    servers = []
    try:
        model = synth_model(args.tessera, workdir)
        keys = []
        for k in KEYS:
            keys += ["--api-key", k]
        base = ["--model", model, "--max-model-len", "256", "--threads", "1"] + keys

        # Budgets: 64 tokens (4 blocks) per key, 96 in all; a host tier to measure a block's bytes.
        a = Server(args.tessera, base + ["--num-kv-blocks", "32", "--kv-offload-host-gb", "0.05",
                                         "--retention-per-key-tokens", "64", "--retention-max-tokens", "96"],
                   workdir, "serve-budgets")
        servers.append(a)
        res.server = a
        a.wait_ready()
        state = {}

        def budgets():
            state["plain"], _ = ok(a.port, KEYS[0], prompt_of(5000, 3))  # no retention: the reference output
            ok(a.port, KEYS[0], prompt_of(1000, 3), "24h")  # 48 tokens of key one's 64
            status, out = run(a.port, KEYS[0], prompt_of(1200, 3), "24h")
            err = error_check(status, out, 429, param="prompt_cache_retention")
            assert "--retention-per-key-tokens" in err["message"], err
            status, out = run(a.port, KEYS[1], prompt_of(1400, 5), "in_memory")  # 80 > 64: never
            err = error_check(status, out, 400, param="prompt_cache_retention")
            assert "per-key" in err["message"], err
            ok(a.port, KEYS[0], prompt_of(1000, 3), "24h")  # the same prefix again: counted once
            ok(a.port, KEYS[1], prompt_of(1600, 3), "24h")  # 96 of 96 in all
            _, _, models = request(a.port, "GET", "/v1/models", headers=auth(KEYS[1]))
            status, _, body = request(a.port, "POST", "/v1/messages", {
                "model": models["data"][0]["id"], "max_tokens": 2,
                "system": [{"type": "text", "text": "You are terse. " * 4, "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": "hi"}]}, headers={"x-api-key": KEYS[1]})
            assert status == 429, (status, body)
            assert body.get("type") == "error" and body["error"]["type"] == "rate_limit_error", body
            assert "system[0].cache_control" in body["error"]["message"], body
            ok(a.port, KEYS[0], prompt_of(5000, 3))  # a step after the refusals refreshes the engine's metrics
            wait_until(lambda: metric(a.port, "tessera:kv_retention_rejections_total", reason="budget_full") == 2 and
                       metric(a.port, "tessera:kv_retention_rejections_total", reason="too_large") == 1 and
                       metric(a.port, "tessera:kv_retained_blocks", tier="pool") == 6 and
                       metric(a.port, "tessera:kv_offload_stored_blocks_total", tier="host") > 0,
                       timeout=5, what="the retention metrics")
            text = scrape(a.port)  # blocks and bytes from one scrape
            stored = metric(a.port, "tessera:kv_offload_stored_blocks_total", text, tier="host")
            state["block_bytes"] = metric(a.port, "tessera:kv_offload_stored_bytes_total", text, tier="host") / stored
        res.run("retention budgets: 429 / 400 naming the field, per key and in all, Anthropic's shape too", budgets)
        a.stop()
        servers.remove(a)
        if "block_bytes" not in state:
            return res.summary(start)

        # Holding: a pool of 14 blocks, a host tier of 8 blocks' records; TTLs scaled by 1/500
        # ("in_memory" holds 0.6 s, "24h" about 3 minutes).
        host_gb = 8.5 * (state["block_bytes"] + 256) / 1e9
        b = Server(args.tessera, base + ["--num-kv-blocks", "14", "--kv-offload-host-gb", f"{host_gb:.9f}",
                                         "--retention-ttl-scale", "0.002"], workdir, "serve-hold")
        servers.append(b)
        res.server = b
        b.wait_ready()
        kept, brief = prompt_of(5000, 3), prompt_of(7000, 3)

        def survives_flood():
            text, cached = ok(b.port, KEYS[0], kept, "24h")
            assert cached == 0 and text == state["plain"], (cached, text, state["plain"])
            ok(b.port, KEYS[0], brief, "in_memory")
            time.sleep(0.8)  # the in_memory hold ends; the 24h one does not
            hits = metric(b.port, "tessera:kv_offload_hits_total", tier="host")
            for i in range(3):  # each needs all 14 blocks: the retained ones must go to the host tier
                ok(b.port, KEYS[1], prompt_of(10000 + 1000 * i, 13), max_tokens=4)
            wait_until(lambda: metric(b.port, "tessera:kv_retained_blocks", tier="host") >= 3, timeout=5,
                       what="3 blocks pinned in the host tier")
            text, cached = ok(b.port, KEYS[0], kept)
            assert cached == 3 * BLOCK, cached
            assert text == state["plain"], (text, state["plain"])  # greedy tokens as computed
            assert metric(b.port, "tessera:kv_offload_hits_total", tier="host") - hits >= 3
            _, cached = ok(b.port, KEYS[0], brief)
            assert cached == 0, cached  # its hold expired: evicted like any block
        res.run("a retained prefix survives a flood as a host hit (same tokens); an expired one does not",
                survives_flood)
    finally:
        cleanup(servers, workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
