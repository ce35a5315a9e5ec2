"""Receipts end to end: every response's receipt verifies by re-execution on another instance.

Three `tessera serve` processes: A1 and A2 serve the same tiny model with the same
--receipt-key, B serves another model with another key. A1's receipts (header,
body, final stream chunk) verify on A2 as equal; a tampered output is "different"
naming the first differing token; a tampered request is "different"; a tampered
signed receipt, or one signed by a key the verifier does not hold, is a signature
error; a receipt of another model is refused. Seeded and unseeded (drawn seed)
sampling verify too, and `tessera verify` / `tessera receipt-keygen` work.
"""
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (Results, Server, chat, cleanup, complete, e2e_args, error_check, grpc_calls,  # noqa: E402
                        request, stream_events, synth_model)


def decode_header(value):
    return json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))


def compact(receipt):
    """The header's form of a receipt: the same without token ids."""
    c = copy.deepcopy(receipt)
    for g in c["generations"]:
        for ch in g["choices"]:
            ch.pop("token_ids", None)
    return c


def verify(port, receipt, req):
    return request(port, "POST", "/v1/receipts/verify", {"receipt": receipt, "request": req})


def unsigned(receipt):
    r = copy.deepcopy(receipt)
    r.pop("signature", None)
    return r


def main():
    args = e2e_args(__doc__)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-receipts-")
    res = Results()
    start = time.time()
    servers = []
    try:
        model_a = synth_model(args.tessera, workdir, "model-a")
        model_b = os.path.join(workdir, "model-b")
        subprocess.run([args.tessera, "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32", "--seed", "2",
                        "--out", model_b], check=True, capture_output=True, timeout=120)
        keys = {}
        for name in ("k1", "k2"):
            path = os.path.join(workdir, name)
            p = subprocess.run([args.tessera, "receipt-keygen", path], capture_output=True, text=True, timeout=30)
            assert p.returncode == 0 and "public key" in p.stdout, p
            assert oct(os.stat(path).st_mode & 0o777) == "0o600", oct(os.stat(path).st_mode)
            keys[name] = path
        a1 = Server(args.tessera, ["--model", model_a, "--receipt-key", keys["k1"]], workdir, "a1", grpc=True)
        servers.append(a1)
        res.server = a1
        if not res.run("A1 ready", a1.wait_ready):
            return 1
        a2 = Server(args.tessera, ["--model", model_a, "--receipt-key", keys["k1"]], workdir, "a2")
        b = Server(args.tessera, ["--model", model_b, "--receipt-key", keys["k2"]], workdir, "b")
        servers += [a2, b]
        if not (res.run("A2 ready", a2.wait_ready) and res.run("B ready", b.wait_ready)):
            return 1
        st = {}
        model_id = os.path.basename(model_a)
        chat_req = {"model": model_id, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8,
                    "temperature": 0, "ignore_eos": True}

        def weights_digest_cached():
            with open(a2.log_path, errors="replace") as f:
                log = f.read()
            assert "weights digest" in log and "(cached" in log, log[-2000:]
            assert os.path.exists(os.path.join(model_a, ".tessera-weights.sha256.json"))
        res.run("the second load of a model reads its weights digest from the cache beside it",
                weights_digest_cached)

        def chat_receipt():
            status, headers, body = chat(a1.port, **chat_req, return_receipt=True)
            assert status == 200, (status, body)
            assert "tessera-receipt" in headers, headers
            header = decode_header(headers["tessera-receipt"])
            assert header == compact(body["receipt"]), (header, body["receipt"])  # no ids: a bounded size
            r = body["receipt"]
            assert r["version"] == 1 and r["signature"]["alg"] == "ed25519", r
            g = r["generations"][0]
            assert len(g["choices"][0]["token_ids"]) == 8 and g["seed_drawn"] is True, g
            st["receipt"], st["header"] = r, headers["tessera-receipt"]
            status, headers, plain = chat(a1.port, **chat_req)
            assert status == 200 and "receipt" not in plain and "tessera-receipt" in headers, plain
            assert decode_header(headers["tessera-receipt"])["generations"][0]["choices"] == \
                compact(r)["generations"][0]["choices"]
        if not res.run("chat: tessera-receipt header on every response, body receipt when asked", chat_receipt):
            return 1

        def verifies_on_second_instance():
            for receipt in (st["receipt"], st["header"]):  # the object, or the header's base64url
                status, _, out = verify(a2.port, receipt, chat_req)
                assert status == 200 and out["result"] == "equal", (status, out)
                assert out["signature"] == "valid" and out["engine_matches"] and out["flags_match"], out
        res.run("a chat receipt verifies on a second instance of the same model (equal, signature valid)",
                verifies_on_second_instance)

        def tampered_output():
            r = unsigned(st["receipt"])
            ids = r["generations"][0]["choices"][0]["token_ids"]
            ids[3] = (ids[3] + 1) % 1000
            status, _, out = verify(a2.port, r, chat_req)
            assert status == 200 and out["result"] == "different", (status, out)
            assert out["first_differing_token"] == 3 and out["receipt_token"] == ids[3], out
            del r["generations"][0]["choices"][0]["token_ids"][5:]
            status, _, out = verify(a2.port, r, chat_req)
            assert out["result"] == "different" and out["first_differing_token"] == 3, out
            c = unsigned(decode_header(st["header"]))  # the compact form: digests only
            c["generations"][0]["choices"][0]["output"] = "0" * 64
            status, _, out = verify(a2.port, c, chat_req)
            assert out["result"] == "different" and out["differs"] == "output_digest", out
        res.run("tampered output -> different, naming the first differing token", tampered_output)

        def tampered_request():
            req = dict(chat_req, messages=[{"role": "user", "content": "Hello therE"}])
            status, _, out = verify(a2.port, st["receipt"], req)
            assert status == 200 and out["result"] == "different" and out["differs"] == "request", out
            status, _, out = verify(a2.port, st["receipt"], dict(chat_req, max_tokens=7))
            assert out["result"] == "different" and out["differs"] == "request", out
        res.run("tampered request -> different (the request digest)", tampered_request)

        def tampered_signed():
            r = copy.deepcopy(st["receipt"])
            r["generations"][0]["choices"][0]["output"] = "0" * 64
            status, _, out = verify(a2.port, r, chat_req)
            error_check(status, out, 400, code="invalid_receipt_signature")
            assert "does not verify" in out["error"]["message"], out
        res.run("tampered signed receipt -> signature error", tampered_signed)

        def wrong_key():
            status, _, out = verify(b.port, st["receipt"], chat_req)
            error_check(status, out, 400, code="invalid_receipt_signature")
            assert "not by this server's key" in out["error"]["message"], out
        res.run("receipt signed with a key the verifier does not hold -> signature error", wrong_key)

        def other_model():
            status, _, out = verify(b.port, unsigned(st["receipt"]), dict(chat_req, model="model-b"))
            error_check(status, out, 400, code="receipt_model_mismatch")
            assert "weights digest" in out["error"]["message"], out
        res.run("receipt of another model -> refused", other_model)

        def streaming():
            status, _, events, done = stream_events(a1.port, "/v1/chat/completions", dict(chat_req, stream=True))
            assert status == 200 and done, (status, events)
            assert "receipt" in events[-1] and events[-1]["choices"][0]["finish_reason"] == "length", events[-1]
            assert all("receipt" not in e for e in events[:-1])
            r = events[-1]["receipt"]
            assert r["generations"][0]["choices"][0]["token_ids"] == \
                st["receipt"]["generations"][0]["choices"][0]["token_ids"], r
            status, _, out = verify(a2.port, r, chat_req)
            assert status == 200 and out["result"] == "equal", out
            status, _, events, done = stream_events(
                a1.port, "/v1/chat/completions", dict(chat_req, stream=True, stream_options={"include_usage": True}))
            assert "usage" in events[-1] and "receipt" in events[-1], events[-1]
        res.run("streaming: the final chunk carries the receipt, and it verifies", streaming)

        def sampled():
            for extra in ({"seed": 7}, {}):  # seeded, and a seed the engine drew
                req = {"model": model_id, "prompt": [[1, 2, 3, 4], [5, 6]], "max_tokens": 8, "temperature": 0.9,
                       "top_k": 20, "n": 2, "ignore_eos": True, "logprobs": 1, **extra}
                status, headers, body = complete(a1.port, **req)
                assert status == 200, body
                r = decode_header(headers["tessera-receipt"])
                assert len(r["generations"]) == 2 and len(r["generations"][0]["choices"]) == 2, r
                assert r["generations"][0]["seed_drawn"] == (not extra), r
                assert r["generations"][0]["choices"][0]["logprobs"] is not None, r
                status, _, out = verify(a2.port, r, req)
                assert status == 200 and out["result"] == "equal", (extra, out)
        res.run("seeded and unseeded sampling (n=2, two prompts, logprobs): receipts verify", sampled)

        def cli_verify():
            rpath, qpath = os.path.join(workdir, "r.txt"), os.path.join(workdir, "q.json")
            with open(rpath, "w") as f:
                f.write(st["header"] + "\n")
            with open(qpath, "w") as f:
                json.dump(chat_req, f)
            url = f"http://127.0.0.1:{a2.port}"
            p = subprocess.run([args.tessera, "verify", rpath, qpath, "--url", url], capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0 and json.loads(p.stdout)["result"] == "equal", p
            bad = unsigned(st["receipt"])
            bad["generations"][0]["choices"][0]["token_ids"][1] += 1
            with open(rpath, "w") as f:
                json.dump(bad, f)
            p = subprocess.run([args.tessera, "verify", rpath, qpath, "--url", url], capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 1 and json.loads(p.stdout)["first_differing_token"] == 1, p
        res.run("tessera verify RECEIPT REQUEST --url: exit 0 equal, 1 different", cli_verify)

        npm = os.environ.get("TESSERA_NPM_DIR", os.path.join(os.getcwd(), ".deps/npm"))
        if not shutil.which("node") or not os.path.isdir(os.path.join(npm, "node_modules/@grpc/grpc-js")):
            res.skip("gRPC: the tessera-receipt trailer verifies", "node or @grpc/grpc-js (TESSERA_NPM_DIR) missing")
        else:
            def grpc_trailer():
                with open(a1.port_file) as f:
                    target = f"127.0.0.1:{json.load(f)['grpc']}"
                params = {"max_tokens": 6, "temperature": 0.8, "seed": 5, "ignore_eos": True}
                req = {"token_ids": {"ids": [1, 2, 3]}, "params": params}
                out = grpc_calls(workdir, [{"target": target, "method": m, "request": req}
                                           for m in ("Generate", "GenerateStream")])
                for o in out:
                    assert o["code"] == 0 and "tessera-receipt" in o["trailers"], o
                    r = decode_header(o["trailers"]["tessera-receipt"])
                    body = {"model": model_id, "prompt": [1, 2, 3], **params}
                    status, _, ans = verify(a2.port, r, body)
                    assert status == 200 and ans["result"] == "equal", ans
            res.run("gRPC: the tessera-receipt trailer (unary and stream) verifies", grpc_trailer)
    finally:
        cleanup(servers, workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
