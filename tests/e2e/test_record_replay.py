"""Record and replay end to end: `tessera serve --record DIR`, then `tessera replay DIR`.

A tiny-model server with an API key records a 200-request session sent by 16
concurrent clients: chat (greedy, streamed, with logprobs, with a json_schema
response format), completions (seeded n=2, unseeded: a drawn seed), Anthropic
messages and Responses. The records are 0600, the recorded serve.toml leaves the
key out, and `tessera replay DIR` reproduces every output. A record whose token
was changed is reported different, naming it and the token; another model is
refused; a small --record-max-mb rotates files and deletes the oldest, and what
is kept still replays, gRPC calls (unary and streamed) included.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (Results, Server, cleanup, e2e_args, grpc_calls, request, stream_events,  # noqa: E402
                        synth_model)

KEY = "sk-record-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def one_request(port, model, i):
    """Request i of the session: one of eight kinds; returns the HTTP status."""
    kind = i % 8
    text = f"request {i}: say something about the number {i * 7 % 13}"
    base = {"model": model, "max_tokens": 6}
    if kind == 0:
        body = dict(base, messages=[{"role": "user", "content": text}], temperature=0)
        return request(port, "POST", "/v1/chat/completions", body, headers=AUTH)[0]
    if kind == 1:
        body = dict(base, prompt=text, temperature=0.8, seed=1000 + i, n=2)
        return request(port, "POST", "/v1/completions", body, headers=AUTH)[0]
    if kind == 2:
        body = dict(base, prompt=text, temperature=1.0)  # no seed: the server draws and records one
        return request(port, "POST", "/v1/completions", body, headers=AUTH)[0]
    if kind == 3:
        body = dict(base, messages=[{"role": "user", "content": text}], temperature=0.7, seed=i, stream=True)
        status, _, events, done = stream_events(port, "/v1/chat/completions", body, headers=AUTH)
        return status if done else 0
    if kind == 4:
        body = dict(base, messages=[{"role": "user", "content": text}], temperature=0, logprobs=True,
                    top_logprobs=2)
        return request(port, "POST", "/v1/chat/completions", body, headers=AUTH)[0]
    if kind == 5:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        body = dict(base, max_tokens=12, messages=[{"role": "user", "content": text}], temperature=0,
                    response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
        return request(port, "POST", "/v1/chat/completions", body, headers=AUTH)[0]
    if kind == 6:
        body = {"model": model, "max_tokens": 6, "messages": [{"role": "user", "content": text}],
                "temperature": 0.5}
        return request(port, "POST", "/v1/messages", body, headers={"x-api-key": KEY})[0]
    body = {"model": model, "input": text, "max_output_tokens": 6, "temperature": 0, "store": False}
    return request(port, "POST", "/v1/responses", body, headers=AUTH)[0]


def record_lines(d):
    out = []
    for name in sorted(os.listdir(d)):
        if name.startswith("requests-"):
            with open(os.path.join(d, name)) as f:
                out += [(name, line) for line in f.read().splitlines() if line]
    return out


def replay(tessera, d, *extra, workdir):
    report = os.path.join(workdir, "report.json")
    if os.path.exists(report):
        os.unlink(report)
    env = dict(os.environ, TESSERA_HOME=os.path.join(workdir, "tessera-home"))
    p = subprocess.run([tessera, "--log-level", "warn", "replay", d, "--report", report, *extra],
                       capture_output=True, text=True, timeout=300, env=env)
    rep = json.load(open(report)) if os.path.exists(report) else None
    return p, rep


def main():
    args = e2e_args(__doc__)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-record-")
    res = Results()
    start = time.time()
    servers = []
    st = {}
    try:
        model = synth_model(args.tessera, workdir)
        other = os.path.join(workdir, "other-model")
        subprocess.run([args.tessera, "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32", "--seed", "2",
                        "--out", other], check=True, capture_output=True, timeout=120)
        rec = os.path.join(workdir, "rec")
        srv = Server(args.tessera, ["--model", model, "--api-key", KEY, "--record", rec, "--max-num-seqs", "16"],
                     workdir, "rec")
        servers.append(srv)
        res.server = srv
        if not res.run("server with --record ready", srv.wait_ready):
            return 1
        model_id = os.path.basename(model)

        def session():
            with ThreadPoolExecutor(16) as pool:
                statuses = list(pool.map(lambda i: one_request(srv.port, model_id, i), range(200)))
            assert statuses == [200] * 200, [(i, s) for i, s in enumerate(statuses) if s != 200][:5]
            assert srv.terminate_and_wait() == 0, srv.log_tail()
        res.run("200 requests from 16 clients, then SIGTERM", session)

        def recorded():
            lines = record_lines(rec)
            assert len(lines) == 200, len(lines)
            endpoints = {}
            for _, line in lines:
                r = json.loads(line)
                endpoints[r["endpoint"]] = endpoints.get(r["endpoint"], 0) + 1
                assert len(r["requests"]) == len(r["receipt"]["generations"]), r
            assert endpoints == {"/v1/chat/completions": 100, "/v1/completions": 50, "/v1/messages": 25,
                                 "/v1/responses": 25}, endpoints
            for name in os.listdir(rec):
                mode = os.stat(os.path.join(rec, name)).st_mode & 0o777
                assert name == "serve.toml" or mode == 0o600, (name, oct(mode))
            toml = open(os.path.join(rec, "serve.toml")).read()
            assert KEY not in toml and "api-key" not in toml and "max-num-seqs" in toml, toml
            st["lines"] = lines
        res.run("every response recorded (0600), serve.toml without the key", recorded)

        def replays_equal():
            p, rep = replay(args.tessera, rec, workdir=workdir)
            assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
            assert rep["records"] == 200 and rep["equal"] == 200 and rep["different"] == 0 and \
                rep["skipped"] == 0 and rep["flags_differ"] == 0, rep
        res.run("tessera replay: all 200 outputs equal", replays_equal)

        def tampered():
            d = os.path.join(workdir, "tampered")
            os.makedirs(d)
            shutil.copy(os.path.join(rec, "serve.toml"), d)
            lines = [line for _, line in st["lines"][:6]]
            # A greedy chat record: its third output token changed.
            idx = next(i for i, line in enumerate(lines) if json.loads(line)["endpoint"] == "/v1/chat/completions")
            r = json.loads(lines[idx])
            ids = r["receipt"]["generations"][0]["choices"][0]["token_ids"]
            ids[2] = (ids[2] + 1) % 100
            lines[idx] = json.dumps(r)
            with open(os.path.join(d, "requests-000001.jsonl"), "w") as f:
                f.write("\n".join(lines) + "\n")
            p, rep = replay(args.tessera, d, workdir=workdir)
            assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
            assert rep["different"] == 1 and rep["equal"] == 5, rep
            diff = rep["differences"][0]
            assert diff["record"] == f"requests-000001.jsonl:{idx + 1}" and diff["first_differing_token"] == 2 and diff["differs"] == "token", diff
        res.run("a changed token: different, naming the record and the token", tampered)

        def other_model():
            p, rep = replay(args.tessera, rec, "--model", other, workdir=workdir)
            assert p.returncode == 2 and "another model" in p.stderr, (p.returncode, p.stderr[-2000:])
        res.run("another model: refused", other_model)

        rot = os.path.join(workdir, "rot")
        npm = os.environ.get("TESSERA_NPM_DIR", os.path.join(os.getcwd(), ".deps/npm"))
        have_grpc = shutil.which("node") and os.path.isdir(os.path.join(npm, "node_modules/@grpc/grpc-js"))
        small = Server(args.tessera, ["--model", model, "--record", rot, "--record-max-mb", "0.03"], workdir, "rot",
                       grpc=bool(have_grpc))
        servers.append(small)
        res.server = small

        def rotation():
            small.wait_ready()
            for i in range(40):
                body = {"model": model_id, "prompt": f"rotate {i}", "max_tokens": 4, "temperature": 0}
                assert request(small.port, "POST", "/v1/completions", body)[0] == 200
            if have_grpc:  # the last records: gRPC calls, seeded and with a drawn seed
                with open(small.port_file) as f:
                    target = f"127.0.0.1:{json.load(f)['grpc']}"
                calls = [{"target": target, "method": m,
                          "request": {"token_ids": {"ids": [1, 2, 3]}, "params": dict(p, max_tokens=5)}}
                         for m, p in (("Generate", {"temperature": 0.8, "seed": 5}),
                                      ("GenerateStream", {"temperature": 0.9}))]
                assert all(o["code"] == 0 for o in grpc_calls(workdir, calls))
            assert small.terminate_and_wait() == 0
            if have_grpc:
                ends = [json.loads(line)["endpoint"] for _, line in record_lines(rot)[-2:]]
                assert ends == ["/tessera.v1.Tessera/Generate", "/tessera.v1.Tessera/GenerateStream"], ends
            files = sorted(n for n in os.listdir(rot) if n.startswith("requests-"))
            total = sum(os.path.getsize(os.path.join(rot, n)) for n in files)
            assert len(files) >= 2 and files[0] != "requests-000001.jsonl", files
            assert total <= int(0.03 * 1024 * 1024), total
            kept = len(record_lines(rot))
            assert 0 < kept < 40, kept
            p, rep = replay(args.tessera, rot, workdir=workdir)
            assert p.returncode == 0 and rep["equal"] == kept, (p.stderr[-2000:], rep)
        res.run("--record-max-mb rotates, deletes the oldest; the rest replays (with gRPC calls)", rotation)
        if not have_grpc:
            res.skip("gRPC calls recorded and replayed", "node or @grpc/grpc-js (TESSERA_NPM_DIR) missing")
    finally:
        cleanup(servers, workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
