#!/usr/bin/python3
"""Prefill/decode disaggregation end to end (stdlib only): `tessera serve --role`.

    /usr/bin/python3 tests/e2e/test_disaggregation.py --tessera build/tessera [--keep]

Real processes on 127.0.0.1: a unified instance (the reference), two prefill
and two decode instances (KV bytes over UCX tcp), a router in front of them, a
decode whose transfers fail (--kv-transfer-fault drop), and decodes serving a
model with other weights and one with another layout.

Exactness: greedy tokens through router -> prefill -> decode are those of the
unified instance, for prompts of many blocks, streamed and not, chat and
completions, n > 1, and a decode that already holds part of the prompt in its
prefix cache (it pulls only the rest). Bad input: another model or layout, an
unknown handle, a forged block id are refused (the decode then computes the
prompt itself: same output). Faults: a prefill killed (-9) while it holds the
request (the router retries on the other prefill, then lets decode
recompute); a transfer that fails mid-way (recompute); a decode killed (-9)
mid-stream (the router resumes the choice on the other decode: one unbroken
stream, every token once); a router killed (-9) with requests in every leg
(decode: SSE, plain and gRPC; prefill: both prefills frozen holding a call):
its clients see the drop at once, each instance sees its upstream close and
aborts those requests (the decodes' abort counter, not a timer, says so), all
end idle (a prefill that finished first is freed by --kv-pin-timeout), and a
new router on the same instances answers bitwise as before. Survivors end with
no KV blocks in use. A router fed by --instances-file follows the file as it
changes.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, get_metrics, grpc_calls, request, stream_events, wait_until  # noqa: E402

BLOCK = 16
LONG = [(i * 7919) % 150000 + 100 for i in range(150)]  # 9 full blocks + a partial one
LONG2 = [(i * 104729) % 150000 + 100 for i in range(100)]
COMMON = dict(temperature=0, max_tokens=12, return_token_ids=True)


def synth(tessera, out, *extra):
    r = subprocess.run([tessera, "--log-level", "warn", "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32",
                        "--out", out, *extra], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    return out


def ports(srv):
    with open(srv.port_file) as f:
        return json.load(f)


def post(port, path, body, timeout=60):
    status, _, parsed = request(port, "POST", path, body, timeout=timeout)
    return status, parsed


def completion_ids(port, prompt, **extra):
    status, body = post(port, "/v1/completions", dict(COMMON, prompt=prompt, **extra))
    assert status == 200, (status, body)
    return [(c["token_ids"], c["text"], c["finish_reason"]) for c in sorted(body["choices"], key=lambda c: c["index"])]


def streamed(port, path, body):
    status, _, events, done = stream_events(port, path, dict(body, stream=True), timeout=120)
    assert status == 200 and done, (status, events[:2])
    out = {}
    for e in events:
        for c in e["choices"]:
            o = out.setdefault(c["index"], {"ids": [], "text": "", "finish": None})
            o["ids"] += c.get("token_ids") or []
            o["text"] += c.get("text") or (c.get("delta") or {}).get("content") or ""
            o["finish"] = c.get("finish_reason") or o["finish"]
    return [(o["ids"], o["text"], o["finish"]) for _, o in sorted(out.items())]


def metric(port, name):
    return get_metrics(port).get(name, 0.0)


def prefill_export(port, prompt):
    """The vLLM handshake by hand: prefill with do_remote_decode; returns its kv_transfer_params."""
    status, body = post(port, "/v1/completions", dict(COMMON, prompt=prompt, max_tokens=1,
                                                      kv_transfer_params={"do_remote_decode": True}))
    assert status == 200, (status, body)
    kv = body.get("kv_transfer_params")
    assert kv and kv["do_remote_prefill"] is True and kv["remote_block_ids"], body
    assert len(kv["remote_block_ids"]) == len(prompt) // BLOCK, kv
    return kv


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-pd-")
    res = Results()
    start = time.time()
    servers = []
    try:
        model = synth(tessera, os.path.join(workdir, "m"))
        other = synth(tessera, os.path.join(workdir, "other"), "--seed", "1")
        deeper = synth(tessera, os.path.join(workdir, "deeper"), "--set", "num_hidden_layers=3")
        base = ["--threads", "1", "--kv-cache-mb", "16", "--max-model-len", "2048", "--served-model-name", "m",
                "--reasoning-parser", "qwen3"]
        kv = ["--kv-ucx-tls", "tcp,self"]

        def start_srv(name, role, extra=(), m=model, grpc=False):
            s = Server(tessera, ["--model", m, "--role", role, *base, *(kv if role != "unified" else []), *extra],
                       workdir, name, grpc=grpc)
            servers.append(s)
            return s
        uni = start_srv("unified", "unified", grpc=True)
        p1 = start_srv("prefill1", "prefill", ["--kv-pin-timeout", "5"])
        p2 = start_srv("prefill2", "prefill", ["--kv-pin-timeout", "5"])
        d1 = start_srv("decode1", "decode", grpc=True)
        d2 = start_srv("decode2", "decode", grpc=True)
        d3 = start_srv("decode3", "decode", grpc=True)  # joins the survivor of the HTTP kill for the gRPC one
        dfault = start_srv("decode-fault", "decode", ["--kv-transfer-fault", "drop"])
        dother = start_srv("decode-other", "decode", m=other)
        ddeep = start_srv("decode-deeper", "decode", m=deeper)
        for s in servers:
            if not res.run(f"{s.name} ready", lambda s=s: s.wait_ready(timeout=180)):
                return res.summary(start)
        P1, P2, D1, D2 = (s.port for s in (p1, p2, d1, d2))
        router = Server(tessera, ["--role", "router", "--prefill-instances", f"127.0.0.1:{P1},127.0.0.1:{P2}",
                                  "--decode-instances", f"127.0.0.1:{D1},127.0.0.1:{D2}", "--prefill-threshold",
                                  "32", "--router-poll-interval", "0.2"], workdir, "router", grpc=True)
        servers.append(router)
        if not res.run("router ready", lambda: router.wait_ready(timeout=30)):
            return res.summary(start)
        R, U = router.port, uni.port
        ref = {}

        def reference():
            ref["long"] = completion_ids(U, LONG)
            ref["long2"] = completion_ids(U, LONG2)
            ref["mixed"] = completion_ids(U, LONG[:64] + LONG2)
            ref["short"] = completion_ids(U, LONG[:10])
            ref["n2"] = completion_ids(U, LONG, n=2, temperature=0.8, seed=5, max_tokens=10)
            ref["long_stream"] = completion_ids(U, LONG2, max_tokens=400, ignore_eos=True)
        if not res.run("reference outputs from the unified instance", reference):
            return res.summary(start)

        def pulled():
            return metric(D1, "tessera:kv_transfer_blocks_total") + metric(D2, "tessera:kv_transfer_blocks_total")

        def exact_completions():
            before = pulled()
            assert completion_ids(R, LONG) == ref["long"]
            assert pulled() >= before + len(LONG) // BLOCK - 0, "the decode pulled no blocks"
            skipped = get_metrics(R).get("tessera:router_prefill_skipped_total", 0)
            assert completion_ids(R, LONG[:10]) == ref["short"]  # short: straight to decode
            m = get_metrics(R)
            assert m["tessera:router_prefill_skipped_total"] == skipped + 1
            assert m["tessera:router_prefill_seconds_count"] >= 1 and m["tessera:router_time_to_first_token_seconds_count"] >= 2, m
            d = get_metrics(D1 if metric(D1, "tessera:kv_transfer_seconds_count") else D2)
            assert d["tessera:kv_transfer_seconds_count"] >= 1 and d["tessera:kv_transfer_bytes_total"] > 0, d
        res.run("router: greedy completions == unified (9 blocks pulled; short prompt skips prefill)",
                exact_completions)
        res.run("router: streamed completion == unified",
                lambda: _eq(streamed(R, "/v1/completions", dict(COMMON, prompt=LONG2)), ref["long2"]))
        res.run("router: n=2 seeded sampling == unified",
                lambda: _eq(completion_ids(R, LONG, n=2, temperature=0.8, seed=5, max_tokens=10), ref["n2"]))

        def chat_same():
            msgs = [{"role": "user", "content": "Tell me about caches. " * 12}]
            st, want = post(U, "/v1/chat/completions", dict(messages=msgs, temperature=0, max_tokens=10))
            assert st == 200, want
            st, got = post(R, "/v1/chat/completions", dict(messages=msgs, temperature=0, max_tokens=10))
            assert st == 200, got
            assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"], (got, want)
            # cached_tokens: what each one's prefix cache held (the decode counts the pulled blocks)
            for u in (got["usage"], want["usage"]):
                u.pop("prompt_tokens_details", None)
            assert got["usage"] == want["usage"], (got["usage"], want["usage"])
            s = streamed(R, "/v1/chat/completions", dict(messages=msgs, temperature=0, max_tokens=10))
            assert s[0][1] == want["choices"][0]["message"]["content"], (s, want)
        res.run("router: chat (plain and streamed) == unified", chat_same)

        def parity():
            """Every field a unified instance takes, through the router: the same answer (ids and timestamps aside)."""
            msgs = [{"role": "user", "content": "Plan a trip to the caches. " * 10}]
            tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                     "required": ["city"]}}}]
            cases = [
                ("/v1/completions", dict(prompt=LONG, max_tokens=6, temperature=0, logprobs=3)),
                ("/v1/completions", dict(prompt=LONG[:40], max_tokens=4, temperature=0, logprobs=2, echo=True)),
                ("/v1/completions", dict(prompt=LONG2, max_tokens=4, temperature=0, prompt_logprobs=1)),
                ("/v1/completions", dict(prompt=["The cache", "A block of"], max_tokens=5, temperature=0, n=2,
                                         seed=3)),
                ("/v1/completions", dict(prompt=LONG, max_tokens=6, temperature=0, cache_salt="tenant-a")),
                ("/v1/completions", dict(prompt=LONG, max_tokens=5, temperature=0, cache_salt=5)),
                ("/v1/completions", dict(prompt=LONG, max_tokens=5, temperature=0, suffix="x")),
                ("/v1/chat/completions", dict(messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                              top_logprobs=2, n=2)),
                ("/v1/chat/completions", dict(messages=msgs, max_tokens=8, temperature=0, tools=tools)),
                ("/v1/chat/completions", dict(messages=msgs, max_tokens=8, temperature=0, tools=tools,
                                              tool_choice="none")),
                ("/v1/chat/completions", dict(messages=msgs, max_tokens=10, temperature=0,
                                              response_format={"type": "json_object"})),
                ("/v1/chat/completions", dict(messages=msgs, max_tokens=6, temperature=0,
                                              structured_outputs={"choice": ["cache hit", "cache miss"]})),
            ]
            for path, body in cases:
                for stream in (False, True):
                    b = dict(body, stream=stream, model="m")
                    if stream:
                        b["stream_options"] = {"include_usage": True}
                    want, got = _answer(U, path, b), _answer(R, path, b)
                    _same(got, want, f"{path} {json.dumps(b)[:200]}")
            # The salted prompt's KV moved too: the prefill hashed it with the same salt as the decode.
            before = pulled()
            salted = dict(prompt=LONG, max_tokens=4, temperature=0, cache_salt="tenant-b")
            _same(_answer(R, "/v1/completions", salted), _answer(U, "/v1/completions", salted), "salted")
            assert pulled() >= before + len(LONG) // BLOCK, "a salted prompt's blocks were not pulled"
        res.run("router parity: logprobs, echo, prompt_logprobs, several prompts, cache_salt, tools, "
                "response_format, structured outputs, n, errors == unified (plain and streamed)", parity)

        def grpc_router():
            """The router's gRPC API against the unified instance's: same answers, through prefill -> decode."""
            ug, rg = f"127.0.0.1:{ports(uni)['grpc']}", f"127.0.0.1:{ports(router)['grpc']}"
            chat = {"messages": [{"role": "user", "content": "Tell me about caches. " * 12}]}
            reqs = [
                ("Generate", {"token_ids": {"ids": LONG}, "params": {"temperature": 0, "max_tokens": 8}}),
                ("GenerateStream", {"token_ids": {"ids": LONG2}, "params": {"temperature": 0, "max_tokens": 8,
                                                                            "top_logprobs": 2}}),
                ("GenerateStream", {"chat": chat, "params": {"temperature": 0, "max_tokens": 8}}),
                ("GenerateStream", {"text": {"text": "Caches " * 40}, "params": {"temperature": 0.8, "seed": 7,
                                                                                "n": 2, "max_tokens": 6}}),
                ("Generate", {"token_ids": {"ids": LONG}, "params": {"temperature": -1}}),
                ("Tokenize", {"text": {"text": "Hello world"}}),
            ]
            before = pulled()
            calls = [{"target": t, "method": m, "request": r} for m, r in reqs for t in (ug, rg)]
            calls += [{"target": rg, "method": "Health", "request": {"service": "tessera.v1.Tessera"}},
                      {"target": rg, "method": "ListModels", "request": {}},
                      {"target": ug, "method": "ListModels", "request": {}}]
            out = grpc_calls(workdir, calls)
            for i, (m, r) in enumerate(reqs):
                want, got = out[2 * i], out[2 * i + 1]
                _same(_fold_grpc(got), _fold_grpc(want), f"gRPC {m} {json.dumps(r)[:120]}")
            health = {k: v for k, v in out[-3].items() if k != "trailers"}
            assert health == {"code": 0, "details": "", "response": {"status": "SERVING"}}, out[-3]
            got_m, want_m = out[-2]["response"]["models"][0], out[-1]["response"]["models"][0]
            assert (got_m["id"], got_m["vocab_size"]) == (want_m["id"], want_m["vocab_size"]), (got_m, want_m)
            assert pulled() >= before + 2 * (len(LONG2) // BLOCK), "gRPC decodes pulled no blocks"
            assert "grpc:GenerateStream" in request(R, "GET", "/metrics")[1]["_body"]
        res.run("router gRPC (Generate, GenerateStream: token ids, chat, logprobs, n=2; errors, Tokenize, "
                "ListModels, health) == unified gRPC; KV pulled", grpc_router)

        def instances_file():
            path = os.path.join(workdir, "instances.json")

            def write(decodes):
                with open(path + ".tmp", "w") as f:
                    json.dump({"prefill": [], "decode": [f"127.0.0.1:{p}" for p in decodes]}, f)
                os.replace(path + ".tmp", path)
            write([D1])
            r2 = Server(tessera, ["--role", "router", "--instances-file", path, "--router-poll-interval", "0.1"],
                        workdir, "router-file")
            servers.append(r2)
            r2.wait_ready(timeout=30)
            for target, other in ((D1, D2), (D2, D1)):
                if target == D2:
                    write([D2])
                    time.sleep(0.6)  # a few polls: the file is re-read when it changes
                g0, o0 = metric(target, "tessera:generation_tokens_total"), metric(other, "tessera:generation_tokens_total")
                assert completion_ids(r2.port, LONG[:10]) == ref["short"]
                assert metric(target, "tessera:generation_tokens_total") > g0, f"not served by {target}"
                assert metric(other, "tessera:generation_tokens_total") == o0
            r2.stop()
        res.run("router --instances-file: the decode pool follows the file as it changes", instances_file)

        def partial_prefix_hit():
            # D1 computes LONG2 itself; then LONG[:64] + LONG2 shares nothing... so warm LONG[:64] first.
            assert completion_ids(D1, LONG[:64] + [5]) is not None  # 4 full blocks now cached on D1
            kvp = prefill_export(P1, LONG[:64] + LONG2)
            m0 = get_metrics(D1)
            got = completion_ids(D1, LONG[:64] + LONG2, kv_transfer_params=kvp)
            assert got == ref["mixed"], (got, ref["mixed"])
            m1 = get_metrics(D1)
            pulled_now = m1["tessera:kv_transfer_blocks_total"] - m0["tessera:kv_transfer_blocks_total"]
            assert m1["tessera:kv_transfer_bytes_total"] > m0.get("tessera:kv_transfer_bytes_total", 0)
            # 164 tokens: 10 full blocks; 4 found locally, 6 pulled.
            assert pulled_now == 10, pulled_now  # pulled + reused
            body = request(D1, "GET", "/metrics")[1]["_body"]
            reused = [ln for ln in body.splitlines() if ln.startswith("tessera:kv_transfer_blocks_total")
                      and 'source="reused"' in ln]
            assert reused and float(reused[0].split()[-1]) >= 4, reused
        res.run("decode with 4 of 10 blocks in its prefix cache pulls the other 6; output == unified",
                partial_prefix_hit)

        def all_cached_released():
            # The decode holds every block already: it pulls nothing, but still acknowledges, so the
            # prefill unpins now (without the ack: at the 5 s pin timeout, with a warning naming it).
            assert completion_ids(D1, LONG) == ref["long"]
            kvp = prefill_export(P1, LONG)
            t0 = metric(D1, "tessera:kv_transfer_seconds_count")
            assert completion_ids(D1, LONG, kv_transfer_params=kvp) == ref["long"]
            assert metric(D1, "tessera:kv_transfer_seconds_count") == t0, "pulled blocks it already held"
            wait_until(lambda: metric(P1, "tessera:kv_exported_requests") == 0, 15, "prefill1: export ended")
            handle = kvp["remote_request_id"]
            assert f"'{handle}' was not pulled" not in p1.log_tail(400), f"{handle} freed by the pin timeout"
        res.run("decode holding every block pulls none and acknowledges: the prefill unpins at once",
                all_cached_released)

        fresh_count = [0]

        def fresh():
            """A 150-token prompt no decode has cached (its first token differs)."""
            fresh_count[0] += 1
            return [60000 + fresh_count[0]] + LONG[1:]

        def refused(decode, kvp, words, prompt):
            f0 = metric(decode.port, "tessera:kv_transfer_failures_total")
            got = completion_ids(decode.port, prompt, kv_transfer_params=kvp)
            assert got == completion_ids(U, prompt), "recompute after a refused pull must give the same output"
            assert metric(decode.port, "tessera:kv_transfer_failures_total") == f0 + 1
            tail = decode.log_tail(40)
            for w in words:
                assert w in tail, f"{w!r} not in the decode log:\n{tail}"

        def unknown_handle():
            prompt = fresh()
            kvp = prefill_export(P1, prompt)
            refused(d2, dict(kvp, remote_request_id="no-such-handle"), ["unknown transfer handle"], prompt)
        res.run("unknown transfer handle: refused, decode recomputes (same output)", unknown_handle)

        def forged_block():
            prompt = fresh()
            kvp = prefill_export(P1, prompt)
            refused(d2, dict(kvp, remote_block_ids=[10 ** 8] + kvp["remote_block_ids"][1:]),
                    ["outside the KV pool"], prompt)
            prompt = fresh()
            kvp = prefill_export(P1, prompt)  # a real block id, of another request
            other_kvp = prefill_export(P1, LONG2)
            refused(d2, dict(kvp, remote_block_ids=other_kvp["remote_block_ids"][:1] + kvp["remote_block_ids"][1:]),
                    ["is not part of transfer"], prompt)
        res.run("forged block id (out of range, or not the handle's): refused, nothing written", forged_block)

        def other_model():
            kvp = prefill_export(P1, LONG)
            st, body = post(dother.port, "/v1/completions", dict(COMMON, prompt=LONG, kv_transfer_params=kvp))
            assert st == 200, body
            assert "different models" in dother.log_tail(40), dother.log_tail(40)
        res.run("decode serving other weights: refused at handshake (different models)", other_model)

        def other_layout():
            kvp = prefill_export(P1, LONG)
            st, body = post(ddeep.port, "/v1/completions", dict(COMMON, prompt=LONG, kv_transfer_params=kvp))
            assert st == 200, body
            tail = ddeep.log_tail(40)
            assert "KV layouts differ" in tail and "num_layers 2 at the exporting instance vs 3" in tail, tail
        res.run("decode with another layout (3 layers): refused at handshake naming the field", other_layout)

        def bad_params():
            for kvp, field in (({"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": "x",
                                 "remote_request_id": "a", "remote_block_ids": [1]}, "kv_transfer_params.remote_port"),
                               ({"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": P1,
                                 "remote_request_id": "a", "remote_block_ids": [-1]},
                                "kv_transfer_params.remote_block_ids"),
                               ("yes", "kv_transfer_params")):
                st, body = post(D1, "/v1/completions", dict(COMMON, prompt=LONG, kv_transfer_params=kvp))
                assert st == 400 and body["error"]["param"] == field, (st, body)
            st, body = post(U, "/v1/completions", dict(COMMON, prompt=LONG, kv_transfer_params={"do_remote_decode": True}))
            assert st == 400 and "--role prefill" in body["error"]["message"], body
        res.run("malformed kv_transfer_params -> 400 naming the field; unified instance refuses them", bad_params)

        def transfer_fault():
            prompt = fresh()
            kvp = prefill_export(P2, prompt)
            refused(dfault, kvp, ["connection dropped"], prompt)
        res.run("transfer that fails mid-way: decode recomputes, same output", transfer_fault)

        def prefills_idle():
            for s in (p1, p2):
                wait_until(lambda s=s: metric(s.port, "tessera:kv_exported_requests") == 0 and
                           metric(s.port, "tessera:kv_cache_usage_perc") == 0, 15, f"{s.name}: nothing pinned")
        res.run("prefills: pinned blocks freed (acknowledged, or after the 5 s pin timeout)", prefills_idle)

        def router_killed():
            """A second router over the same instances, killed -9 with requests in every leg: decode (SSE,
            plain, gRPC) and prefill (both prefills frozen while holding a call). Its clients see the
            connection drop at once; each instance sees its upstream close and aborts those requests."""
            rk = Server(tessera, ["--role", "router", "--prefill-instances", f"127.0.0.1:{P1},127.0.0.1:{P2}",
                                  "--decode-instances", f"127.0.0.1:{D1},127.0.0.1:{D2}", "--prefill-threshold",
                                  "32", "--router-poll-interval", "0.2"], workdir, "router-killed", grpc=True)
            servers.append(rk)
            rk.wait_ready(timeout=30)
            decodes, prefills = (d1, d2), (p1, p2)

            def total(group, name):
                return sum(metric(s.port, name) for s in group)

            def aborted(group):
                return sum(v for s in group for k, v in _labeled(s.port, "tessera:request_success_total").items()
                           if 'finished_reason="abort"' in k)
            a0 = aborted(decodes)
            # max_tokens far beyond what a decode makes before the kill: these end only by abort.
            long = dict(COMMON, prompt=LONG2, max_tokens=1850, ignore_eos=True)  # LONG + 1850 < 2048
            outcome, threads = {}, []

            def client(name, port, body, stream):
                try:
                    if stream:
                        outcome[name] = stream_events(port, "/v1/completions", dict(body, stream=True), timeout=60)
                    else:
                        outcome[name] = post(port, "/v1/completions", body, timeout=60)
                except Exception as e:  # noqa: BLE001 -- the connection drops with the router
                    outcome[name] = e

            def spawn(name, body, stream):
                t = threading.Thread(target=client, args=(name, rk.port, body, stream), daemon=True)
                t.start()
                threads.append(t)
            spawn("sse", long, True)
            spawn("sse2", dict(long, prompt=LONG), True)
            spawn("plain", long, False)
            spawn("plain2", dict(long, prompt=LONG), False)
            path = os.path.join(workdir, "grpc_router_kill.json")
            with open(path, "w") as f:
                json.dump([{"target": f"127.0.0.1:{ports(rk)['grpc']}", "method": "GenerateStream",
                            "request": {"token_ids": {"ids": LONG2},
                                        "params": {"temperature": 0, "max_tokens": 1850, "ignore_eos": True}}}], f)
            here = os.path.dirname(os.path.abspath(__file__))
            node = subprocess.Popen(["node", os.path.join(here, "grpc_call.mjs"), path], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, cwd=os.path.dirname(os.path.dirname(here)))
            in_decode = 5
            wait_until(lambda: total(decodes, "tessera:num_requests_running") +
                       total(decodes, "tessera:num_requests_waiting") >= in_decode, 30,
                       f"{in_decode} requests on the decodes")
            # Prefill leg: both prefills frozen, so these calls are in flight there when the router dies.
            for p in prefills:
                p.proc.send_signal(signal.SIGSTOP)
            try:
                r0 = metric(rk.port, "tessera:router_requests_total")
                spawn("prefill-sse", dict(COMMON, prompt=fresh()), True)
                spawn("prefill-plain", dict(COMMON, prompt=fresh()), False)
                wait_until(lambda: total(decodes, "tessera:num_requests_running") +
                           total(decodes, "tessera:num_requests_waiting") >= in_decode and
                           metric(rk.port, "tessera:router_requests_total") >= r0 + 2, 10, "2 more router requests")
                time.sleep(0.5)  # tokenized on a decode, then sent to a (frozen) prefill
                rk.proc.send_signal(signal.SIGKILL)
                rk.proc.wait(10)
            finally:
                for p in prefills:
                    p.proc.send_signal(signal.SIGCONT)
            # (c) nothing hangs: every client sees its connection drop, none gets an answer.
            for t in threads:
                t.join(15)
            assert not any(t.is_alive() for t in threads), f"clients still waiting 15 s after the kill: {outcome}"
            for name, o in outcome.items():  # a stream may have begun; nothing may end as if complete
                assert isinstance(o, Exception) or (len(o) == 4 and o[0] == 200 and not o[3]), \
                    f"{name}: an answer from a router killed before it could finish: {str(o)[:300]}"
            g = json.loads(node.communicate(timeout=15)[0].decode().splitlines()[-1])
            assert g["code"] == 14, f"gRPC stream: want UNAVAILABLE (14), got {json.dumps(g)[:300]}"
            # (a) the decodes aborted the 5 requests (they would run on for 1850 tokens otherwise) and
            # every instance is idle again; a prefill may have finished its request and pinned the
            # blocks before noticing: freed by the 5 s pin timeout at worst.
            wait_until(lambda: aborted(decodes) >= a0 + in_decode, 15,
                       f"the decodes aborted the {in_decode} requests of the dead router")
            for s in decodes + prefills:
                wait_until(lambda s=s: metric(s.port, "tessera:num_requests_running") == 0 and
                           metric(s.port, "tessera:num_requests_waiting") == 0 and
                           metric(s.port, "tessera:kv_cache_usage_perc") == 0 and
                           metric(s.port, "tessera:kv_exported_requests") == 0, 15,
                           f"{s.name}: idle (no request, no KV in use, nothing pinned)")
            # The frozen prefills got the requests after the router had gone.
            logs = p1.log_tail(400) + p2.log_tail(400)
            assert "disconnected" in logs or "was not pulled within" in logs, logs[-2000:]
            # (b) a new router on the same instances: the same greedy tokens as before.
            rn = Server(tessera, ["--role", "router", "--prefill-instances", f"127.0.0.1:{P1},127.0.0.1:{P2}",
                                  "--decode-instances", f"127.0.0.1:{D1},127.0.0.1:{D2}", "--prefill-threshold",
                                  "32", "--router-poll-interval", "0.2"], workdir, "router-new")
            servers.append(rn)
            rn.wait_ready(timeout=30)
            assert completion_ids(rn.port, LONG) == ref["long"]
            _eq(streamed(rn.port, "/v1/completions", dict(COMMON, prompt=LONG2)), ref["long2"])
            rn.stop()
            # The first router marked the frozen prefills down; the tests below need it to use them again.
            wait_until(lambda: all(v == 1 for k, v in _labeled(R, "tessera:router_instance_healthy").items()
                                   if 'role="prefill"' in k), 15, "the first router sees both prefills again")
        res.run("router killed -9 under load (decode SSE/plain/gRPC, prefill legs): clients see the drop, "
                "instances abort and end idle, a new router answers the same", router_killed)

        def prefill_frozen():
            # The prefill that would get the call is frozen (SIGSTOP: no byte, no close). The router's
            # health polls take it out of rotation within about a second and the call in flight is
            # abandoned then (not at the leg's 120 s idle timeout): retried on the other prefill.
            first, second = sorted((p1, p2), key=lambda s: f"127.0.0.1:{s.port}")
            first.proc.send_signal(signal.SIGSTOP)
            try:
                out = {}
                t0 = time.monotonic()
                t = threading.Thread(target=lambda: out.setdefault("r", completion_ids(R, LONG2)))
                t.start()
                t.join(20)
                took = time.monotonic() - t0
                assert out.get("r") == ref["long2"], (out, took)
            finally:
                first.proc.send_signal(signal.SIGCONT)
            healthy = lambda: _labeled(R, "tessera:router_instance_healthy").get(
                f'tessera:router_instance_healthy{{instance="127.0.0.1:{first.port}",role="prefill"}}') == 1.0
            wait_until(healthy, 20, "the thawed prefill back in rotation")
        res.run("prefill frozen holding the request: abandoned when the health polls drop it, retried on the "
                "other prefill (== unified, well before the leg's idle timeout)", prefill_frozen)

        def prefill_killed():
            # Loads are equal, so the router picks the prefill whose address sorts first. It is
            # frozen while the router's call is in flight, then killed: the router retries on the other.
            first, second = sorted((p1, p2), key=lambda s: f"127.0.0.1:{s.port}")
            first.proc.send_signal(signal.SIGSTOP)
            out = {}
            t = threading.Thread(target=lambda: out.setdefault("r", completion_ids(R, LONG2)))
            calls = lambda: sum(v for k, v in _labeled(R, "tessera:router_decisions_total").items() if "prefill" in k)
            c0 = calls()
            t.start()
            time.sleep(1.0)
            first.proc.send_signal(signal.SIGKILL)
            t.join(60)
            assert out.get("r") == ref["long2"], out
            dec = _labeled(R, "tessera:router_decisions_total")
            assert any(f"127.0.0.1:{first.port}" in k and 'outcome="failed"' in k for k in dec), dec
            assert calls() >= c0 + 1
            # With no prefill left the decode computes the prompt itself.
            second.proc.send_signal(signal.SIGKILL)
            second.proc.wait()
            assert completion_ids(R, LONG) == ref["long"]
        res.run("prefill killed -9 holding the request: retried on the other prefill; none left: decode recomputes",
                prefill_killed)

        def decode_killed():
            body = dict(COMMON, prompt=LONG2, max_tokens=400, ignore_eos=True, stream=True)
            conn = http.client.HTTPConnection("127.0.0.1", R, timeout=120)
            conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            ids, text, finish, killed = [], "", None, None
            for line in resp:
                line = line.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                assert "error" not in ev, ev
                for c in ev["choices"]:
                    ids += c.get("token_ids") or []
                    text += c.get("text") or ""
                    finish = c.get("finish_reason") or finish
                if killed is None and len(ids) >= 20:
                    for d in (d1, d2):
                        if metric(d.port, "tessera:num_requests_running") > 0:
                            killed = d
                            d.proc.send_signal(signal.SIGKILL)
                            break
            conn.close()
            assert killed is not None, "no decode was running the request"
            want_ids, want_text, want_finish = ref["long_stream"][0]
            assert ids == want_ids, f"{len(ids)} ids vs {len(want_ids)}; first diff at " \
                f"{next((i for i, (a, b) in enumerate(zip(ids, want_ids)) if a != b), min(len(ids), len(want_ids)))}"
            assert finish == want_finish == "length"
            assert text == want_text, "streamed text differs from the unified output"
            assert get_metrics(R)["tessera:router_migrations_total"] >= 1
            state["survivor"] = d2 if killed is d1 else d1
        state = {}
        res.run("decode killed -9 mid-stream: the router resumes on the other decode, every token once",
                decode_killed)

        def grpc_decode_killed():
            survivor = state["survivor"]
            r3 = Server(tessera, ["--role", "router", "--decode-instances",
                                  f"127.0.0.1:{survivor.port},127.0.0.1:{d3.port}", "--router-poll-interval", "0.2"],
                        workdir, "router-grpc", grpc=True)
            servers.append(r3)
            r3.wait_ready(timeout=30)
            path = os.path.join(workdir, "grpc_kill.json")
            with open(path, "w") as f:
                json.dump([{"target": f"127.0.0.1:{ports(r3)['grpc']}", "method": "GenerateStream",
                            "request": {"token_ids": {"ids": LONG2},
                                        "params": {"temperature": 0, "max_tokens": 400, "ignore_eos": True}}}], f)
            here = os.path.dirname(os.path.abspath(__file__))
            node = subprocess.Popen(["node", os.path.join(here, "grpc_call.mjs"), path], stdout=subprocess.PIPE,
                                    cwd=os.path.dirname(os.path.dirname(here)))
            killed = None
            deadline = time.time() + 60
            while killed is None and time.time() < deadline and node.poll() is None:
                for d in (survivor, d3):
                    if metric(d.port, "tessera:num_requests_running") > 0:
                        time.sleep(0.1)  # some tokens out first
                        d.proc.send_signal(signal.SIGKILL)
                        killed = d
                        break
                time.sleep(0.02)
            out = json.loads(node.communicate(timeout=120)[0].decode().splitlines()[-1])
            assert killed is not None, f"no decode was running the gRPC request: {json.dumps(out)[:300]}"
            code, _, folded, usage = _fold_grpc(out)
            assert code == 0, out.get("details")
            want_ids, want_text, _ = ref["long_stream"][0]
            got = folded[0]
            assert got["token_ids"] == want_ids, f"{len(got['token_ids'])} ids vs {len(want_ids)}"
            assert got["text"] == want_text and got["finish_reason"] == "length"
            assert usage == {"prompt_tokens": len(LONG2), "completion_tokens": 400}, usage
            assert get_metrics(r3.port)["tessera:router_migrations_total"] >= 1
            state["survivor"] = d3 if killed is survivor else survivor
            r3.stop()
        res.run("gRPC: decode killed -9 mid-stream: the router continues on another decode, every token once",
                grpc_decode_killed)

        def no_leaks():
            for s in [state.get("survivor"), dfault, dother, ddeep]:
                if s is None:
                    continue
                wait_until(lambda s=s: metric(s.port, "tessera:kv_cache_usage_perc") == 0, 10,
                           f"{s.name}: KV usage back to 0")
                assert metric(s.port, "tessera:kv_exported_requests") == 0
        res.run("survivors: KV usage back to idle, nothing left pinned", no_leaks)

        res.run("router: SIGTERM -> exit 0", lambda: _eq(router.terminate_and_wait(), 0))
    finally:
        for s in servers:
            s.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("kept", workdir)
    return res.summary(start)


def _labeled(port, name):
    body = request(port, "GET", "/metrics")[1]["_body"]
    out = {}
    for line in body.splitlines():
        if line.startswith(name + "{"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def _answer(port, path, body):
    """(status, normalized answer): a plain body as is; a stream folded per choice (text, deltas, logprobs,
    token ids, finish) plus its usage chunk; ids and timestamps dropped."""
    if not body.get("stream"):
        status, _, parsed = request(port, "POST", path, body, timeout=60)
        parsed.pop("_body", None)
        for k in ("id", "created"):
            parsed.pop(k, None)
        if isinstance(parsed.get("usage"), dict):
            parsed["usage"].pop("prompt_tokens_details", None)  # what each one's prefix cache held
        for c in parsed.get("choices", []):
            for call in (c.get("message") or {}).get("tool_calls") or []:
                call.pop("id", None)
        return status, parsed
    status, _, events, done = stream_events(port, path, body, timeout=60)
    if status != 200:
        return status, events
    folded, usage = {}, None
    for e in events:
        assert e.get("object") in ("text_completion", "chat.completion.chunk"), e
        if e.get("usage") is not None and not e["choices"]:
            usage = {k: v for k, v in e["usage"].items() if k != "prompt_tokens_details"}
        for c in e["choices"]:
            f = folded.setdefault(c["index"], {"text": "", "delta": {}, "lp": [], "ids": [], "finish": None,
                                              "prompt_logprobs": None})
            f["text"] += c.get("text") or ""
            for k, v in (c.get("delta") or {}).items():
                if k == "tool_calls":
                    for call in v:
                        call.pop("id", None)
                    f["delta"].setdefault(k, []).extend(v)
                elif isinstance(v, str):
                    f["delta"][k] = f["delta"].get(k, "") + v
            lp = c.get("logprobs")
            if isinstance(lp, dict) and "content" in lp:
                f["lp"] += lp["content"]
            elif isinstance(lp, dict):
                f["lp"] += list(zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]))
            f["ids"] += c.get("token_ids") or []
            f["finish"] = c.get("finish_reason") or f["finish"]
            if c.get("prompt_logprobs") is not None:
                f["prompt_logprobs"] = c["prompt_logprobs"]
    return status, {"done": done, "choices": folded, "usage": usage}


def _fold_grpc(result):
    """A gRPC result with its request id and cache-dependent counts dropped; a stream folded per choice."""
    def usage(u):
        return {k: v for k, v in (u or {}).items() if k != "cached_tokens"}
    if "messages" not in result:
        r = json.loads(json.dumps(result.get("response")))
        if isinstance(r, dict):
            r.pop("request_id", None)
            if "usage" in r:
                r["usage"] = usage(r["usage"])
        return result["code"], result["details"], r
    folded, last = {}, None
    for m in result["messages"]:
        for c in m["choices"]:
            f = folded.setdefault(c["index"], {"text": "", "token_ids": [], "logprobs": [], "finish_reason": ""})
            f["text"] += c["text"]
            f["token_ids"] += c["token_ids"]
            f["logprobs"] += c["logprobs"]
            f["finish_reason"] = c["finish_reason"] or f["finish_reason"]
        last = m
    assert last is None or last["finished"], last
    return result["code"], result["details"], folded, usage(last and last["usage"])


def _same(got, want, what, path=""):
    """Equal JSON, floats within 1e-3 (a pulled prefix and a computed one may round apart)."""
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, (int, float)) and isinstance(want, (int, float)) and abs(got - want) <= 1e-3, \
            f"{what}: {path}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), \
            f"{what}: {path}: keys {sorted(got) if isinstance(got, dict) else got} != {sorted(want)}"
        for k in want:
            _same(got[k], want[k], what, f"{path}.{k}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{what}: {path}: {got} != {want}"
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, what, f"{path}[{i}]")
    else:
        assert got == want, f"{what}: {path}: {got!r} != {want!r}"


def _eq(a, b):
    assert a == b, (a, b)


if __name__ == "__main__":
    sys.exit(main())
