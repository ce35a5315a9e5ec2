#!/usr/bin/python3
"""End-to-end test of `tessera serve`, driven over real HTTP with the stdlib.

    /usr/bin/python3 tests/e2e/test_serve.py --tessera build/tessera [--keep]

Synthesises a tiny random-weight qwen3 checkpoint with `tessera synth`, starts
`tessera serve` on a free port and checks the routes, greedy generation (against
`tessera logits` argmax, an independent code path, and the text against a Python
byte-level BPE decode of the checkpoint's tokenizer.json), the error shapes and
graceful shutdown. A second server checks --served-model-name and the KV/length
limits, a third the built-in default model. Prints one line per check and ends
with `N passed, M failed`; exits non-zero when anything failed.
"""
import argparse
import array
import ast
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

READY_TIMEOUT = 30   # seconds for a server to load and warm up
EXIT_TIMEOUT = 15    # seconds for a server to exit after SIGTERM
HTTP_TIMEOUT = 30    # seconds per HTTP request
PROMPT = [9707, 11, 1879, 0, 576, 374]


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, name, fn):
        """Runs fn(); an AssertionError or any exception fails the check."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report every failure as a check line
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            return False
        self.passed += 1
        print(f"PASS {name}", flush=True)
        return True


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, raw=None, headers=None, conn=None):
    """One HTTP request; returns (status, lower-cased headers, parsed JSON or None)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = None
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed
    finally:
        if own:
            conn.close()


def complete(port, **body):
    return request(port, "POST", "/v1/completions", body)


class Server:
    """A `tessera serve` process logging to a file; always stop() it."""

    def __init__(self, tessera, args, workdir, name, env=None):
        self.port = free_port()
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        cmd = [tessera, "serve", "--host", "127.0.0.1", "--port", str(self.port)] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.saw_loading = False

    def wait_ready(self):
        deadline = time.time() + READY_TIMEOUT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                status, _, body = request(self.port, "GET", "/ready")
                if status == 200 and body == {"status": "ready"}:
                    return
                if status == 503 and body == {"status": "loading"}:
                    self.saw_loading = True
            except OSError:
                pass  # not listening yet
            time.sleep(0.05)
        raise AssertionError(f"not ready within {READY_TIMEOUT}s; log:\n{self.log_tail()}")

    def log_tail(self, n=30):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])

    def terminate_and_wait(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=EXIT_TIMEOUT)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# --- independent oracles -------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's byte -> printable unicode table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def python_decode(tokenizer_json, ids):
    with open(tokenizer_json, encoding="utf-8") as f:
        tok = json.load(f)
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    by_id = {i: s for s, i in tok["model"]["vocab"].items()}
    added = {t["id"]: t for t in tok.get("added_tokens", [])}
    out = b""
    for i in ids:
        if i in added:
            if not added[i]["special"]:
                out += added[i]["content"].encode("utf-8")
        elif i in by_id:
            out += bytes(byte_of[c] for c in by_id[i])
    return out.decode("utf-8", errors="replace")


def read_npy_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", "not an .npy file"
    hlen = int.from_bytes(data[8:10], "little")
    header = ast.literal_eval(data[10:10 + hlen].decode("latin1"))
    assert header["descr"] == "<f4" and sys.byteorder == "little", header
    values = array.array("f")
    values.frombytes(data[10 + hlen:])
    return header["shape"], values


def logits_argmax(tessera, model, tokens, positions, workdir):
    """Greedy next token after each position, via `tessera logits` (one prefill)."""
    batch = os.path.join(workdir, "batch.json")
    out = os.path.join(workdir, "logits.npy")
    with open(batch, "w") as f:
        json.dump({"sequences": [{"tokens": tokens, "logits_at": positions}]}, f)
    subprocess.run([tessera, "logits", "--model", model, "--batch", batch, "--out", out],
                   check=True, capture_output=True, timeout=120)
    (rows, vocab), values = read_npy_f32(out)
    assert rows == len(positions), (rows, len(positions))
    result = []
    for r in range(rows):
        row = values[r * vocab:(r + 1) * vocab]
        result.append(row.index(max(row)))  # first maximum, like the server
    return result


# --- checks --------------------------------------------------------------------

def error_check(status, body, want_status, param=None, code=None):
    assert status == want_status, f"status {status}, want {want_status}; body {body}"
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"not an OpenAI error: {body}"
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, f"error keys {sorted(err)}"
    assert isinstance(err["message"], str) and err["message"], err
    if param is not None:
        assert err["param"] == param, f"param {err['param']!r}, want {param!r}"
    if code is not None:
        assert err["code"] == code, f"code {err['code']!r}, want {code!r}"
    return err


def main_server_checks(res, tessera, model, workdir):
    srv = Server(tessera, ["--model", model], workdir, "serve-main")
    try:
        if not res.run("main server becomes ready", srv.wait_ready):
            return
        model_id = os.path.basename(model)
        port = srv.port
        state = {}

        def health():
            status, _, body = request(port, "GET", "/health")
            assert (status, body) == (200, {}), (status, body)
        res.run("GET /health -> 200 {}", health)

        def models():
            status, _, body = request(port, "GET", "/v1/models")
            assert status == 200, status
            assert body["object"] == "list" and len(body["data"]) == 1, body
            m = body["data"][0]
            assert m["id"] == model_id and m["object"] == "model" and m["owned_by"] == "tessera", m
            assert isinstance(m["created"], int) and m["created"] > 0, m
            assert m["max_model_len"] == 32768, m
            state["max_model_len"] = m["max_model_len"]
        res.run("GET /v1/models shape", models)

        def completion():
            status, headers, body = complete(port, model=model_id, prompt=PROMPT, max_tokens=8)
            assert status == 200, (status, body)
            assert body["object"] == "text_completion" and body["id"].startswith("cmpl-"), body
            assert body["model"] == model_id and isinstance(body["created"], int), body
            assert len(body["choices"]) == 1, body
            c = body["choices"][0]
            assert c["index"] == 0 and c["logprobs"] is None and isinstance(c["text"], str), c
            assert len(c["token_ids"]) == 8, c
            assert c["finish_reason"] == "length", c
            assert body["usage"] == {"prompt_tokens": len(PROMPT), "completion_tokens": 8,
                                     "total_tokens": len(PROMPT) + 8}, body["usage"]
            assert headers.get("x-request-id"), "no generated x-request-id"
            state["tokens"] = c["token_ids"]
            state["text"] = c["text"]
        if not res.run("completion: 8 tokens, usage, finish_reason length", completion):
            return

        def determinism():
            for prompt in (PROMPT, [PROMPT]):
                status, _, body = complete(port, prompt=prompt, max_tokens=8, temperature=0)
                assert status == 200, (status, body)
                assert body["choices"][0]["token_ids"] == state["tokens"], (body, state["tokens"])
        res.run("greedy determinism (flat and nested prompt, model omitted)", determinism)

        def concurrent():
            results = [None] * 4

            def go(i):
                results[i] = complete(port, prompt=PROMPT, max_tokens=8)
            threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(HTTP_TIMEOUT)
            for r in results:
                assert r is not None and r[0] == 200, r
                assert r[2]["choices"][0]["token_ids"] == state["tokens"], r
        res.run("4 concurrent requests: same greedy tokens", concurrent)

        def oracle():
            gen = state["tokens"]
            seq = PROMPT + gen[:-1]
            positions = list(range(len(PROMPT) - 1, len(seq)))
            want = logits_argmax(tessera, model, seq, positions, workdir)
            assert want == gen, f"tessera logits argmax {want} != served {gen}"
        res.run("generated tokens == `tessera logits` argmax at every step", oracle)

        def text():
            want = python_decode(os.path.join(model, "tokenizer.json"), state["tokens"])
            assert state["text"] == want, f"{state['text']!r} != python decode {want!r}"
        res.run("text == Python byte-level BPE decode of token_ids", text)

        def keep_alive():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
            try:
                for _ in range(3):
                    status, headers, _ = request(port, "GET", "/health", conn=conn)
                    assert status == 200 and headers.get("connection", "").lower() != "close", headers
            finally:
                conn.close()
        res.run("keep-alive: 3 requests on one connection", keep_alive)

        def request_id():
            status, headers, _ = request(port, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 1},
                                         headers={"X-Request-Id": "test-req-42"})
            assert status == 200 and headers.get("x-request-id") == "test-req-42", (status, headers)
            status, headers, _ = request(port, "GET", "/nope", headers={"x-request-id": "e-7"})
            assert status == 404 and headers.get("x-request-id") == "e-7", (status, headers)
        res.run("x-request-id echoed (success and error)", request_id)

        too_long = state["max_model_len"] - len(PROMPT) + 1
        cases = [
            ("string prompt", {"prompt": "hello"}, 400, "prompt", None),
            ("list of strings prompt", {"prompt": ["hello"]}, 400, "prompt", None),
            ("empty prompt", {"prompt": []}, 400, "prompt", None),
            ("missing prompt", {"max_tokens": 4}, 400, "prompt", None),
            ("two prompts", {"prompt": [[1, 2], [3]]}, 400, "prompt", None),
            ("token id out of vocab", {"prompt": [1, 151936]}, 400, "prompt", None),
            ("negative token id", {"prompt": [1, -1]}, 400, "prompt", None),
            ("max_tokens 0", {"prompt": PROMPT, "max_tokens": 0}, 400, "max_tokens", None),
            ("max_tokens string", {"prompt": PROMPT, "max_tokens": "5"}, 400, "max_tokens", None),
            ("max_tokens float", {"prompt": PROMPT, "max_tokens": 2.5}, 400, "max_tokens", None),
            ("temperature 0.7", {"prompt": PROMPT, "temperature": 0.7}, 400, "temperature", None),
            ("n 2", {"prompt": PROMPT, "n": 2}, 400, "n", None),
            ("stop not supported yet", {"prompt": PROMPT, "stop": ["x"]}, 400, "stop", None),
            ("logprobs not supported yet", {"prompt": PROMPT, "logprobs": 2}, 400, "logprobs", None),
            ("penalty not supported yet", {"prompt": PROMPT, "presence_penalty": 0.5}, 400, "presence_penalty", None),
            ("top_p not supported yet", {"prompt": PROMPT, "top_p": 0.9}, 400, "top_p", None),
            ("stream true", {"prompt": PROMPT, "stream": True}, 400, "stream", None),
            ("unknown model", {"prompt": PROMPT, "model": "gpt-4"}, 404, "model", "model_not_found"),
            ("context too long", {"prompt": PROMPT, "max_tokens": too_long}, 400, None, "context_length_exceeded"),
            ("prompt fills context", {"prompt": [1] * state["max_model_len"]}, 400, "prompt",
             "context_length_exceeded"),
        ]
        for name, body, want, param, code in cases:
            def case(body=body, want=want, param=param, code=code):
                status, _, resp = complete(port, **body)
                error_check(status, resp, want, param, code)
            res.run(f"error: {name} -> {want}", case)

        def string_prompt_message():
            _, _, resp = complete(port, prompt="hello")
            assert "tokenizer" in resp["error"]["message"] and "token ids" in resp["error"]["message"], resp
        res.run("error: string prompt message explains token ids", string_prompt_message)

        def unknown_fields():
            status, _, body = complete(port, prompt=PROMPT, max_tokens=2, user="x", frequency_penalty=0, top_p=1.0,
                                       stop=[], echo=False)
            assert status == 200 and len(body["choices"][0]["token_ids"]) == 2, (status, body)
        res.run("unknown fields and default-valued sampling fields are accepted", unknown_fields)

        def routes():
            status, _, body = request(port, "GET", "/v1/nope")
            error_check(status, body, 404)
            status, headers, body = request(port, "GET", "/v1/completions")
            error_check(status, body, 405)
            assert "POST" in headers.get("allow", ""), headers
        res.run("error: unknown route 404, wrong method 405", routes)

        def malformed():
            status, _, body = request(port, "POST", "/v1/completions", raw=b'{"prompt": [1, 2')
            error_check(status, body, 400)
            status, _, body = request(port, "POST", "/v1/completions", raw=b'[1, 2]')
            error_check(status, body, 400)
        res.run("error: malformed JSON / non-object -> 400", malformed)

        def oversize():
            raw = b'{"prompt": [' + b"1, " * 400000 + b'1]}'  # ~1.2 MiB
            status, _, body = request(port, "POST", "/v1/completions", raw=raw)
            error_check(status, body, 413)
        res.run("error: oversize body -> 413", oversize)

        def big_headers():
            status, _, body = request(port, "GET", "/health", headers={"X-Filler": "a" * 40000})
            error_check(status, body, 431)
        res.run("error: oversize headers -> 431", big_headers)

        def still_serving():
            status, _, body = complete(port, prompt=PROMPT, max_tokens=8)
            assert status == 200 and body["choices"][0]["token_ids"] == state["tokens"], (status, body)
        res.run("still serving correctly after the errors", still_serving)

        def graceful_shutdown():
            # A long request in flight when SIGTERM arrives must still complete.
            out = {}

            def go():
                out["r"] = complete(port, prompt=PROMPT, max_tokens=300)
            t = threading.Thread(target=go)
            t.start()
            time.sleep(0.3)
            rc = srv.terminate_and_wait()
            t.join(HTTP_TIMEOUT)
            assert rc == 0, f"exit code {rc}; log:\n{srv.log_tail()}"
            status, _, body = out.get("r", (None, None, None))
            assert status == 200 and len(body["choices"][0]["token_ids"]) == 300, (status, body)
        res.run("SIGTERM: in-flight request finishes, exit 0", graceful_shutdown)
    finally:
        srv.stop()


def limits_server_checks(res, tessera, model, workdir):
    args = ["--model", model, "--served-model-name", "custom", "--max-model-len", "128", "--num-kv-blocks", "4",
            "--threads", "1"]
    srv = Server(tessera, args, workdir, "serve-limits")
    try:
        if not res.run("limits server becomes ready", srv.wait_ready):
            return
        port = srv.port

        def models():
            status, _, body = request(port, "GET", "/v1/models")
            assert status == 200 and body["data"][0]["id"] == "custom", body
            assert body["data"][0]["max_model_len"] == 128, body
        res.run("--served-model-name and --max-model-len in /v1/models", models)

        def kv_capacity():
            status, _, body = complete(port, model="custom", prompt=PROMPT, max_tokens=100)
            err = error_check(status, body, 400)
            assert "--num-kv-blocks" in err["message"], err
        res.run("request larger than the KV cache -> 400 naming --num-kv-blocks", kv_capacity)

        def fits():
            status, _, body = complete(port, model="custom", prompt=PROMPT, max_tokens=58)  # 63 KV tokens = 4 blocks
            assert status == 200, (status, body)
            c = body["choices"][0]
            assert len(c["token_ids"]) == 58 or c["finish_reason"] == "stop", c
        res.run("request that exactly fits the KV cache runs", fits)

        def length_limit():
            status, _, body = complete(port, prompt=[1] * 120, max_tokens=9)
            error_check(status, body, 400, code="context_length_exceeded")
        res.run("prompt + max_tokens > --max-model-len -> context_length_exceeded", length_limit)

        res.run("SIGTERM (idle) -> exit 0", lambda: _assert_eq(srv.terminate_and_wait(), 0))
    finally:
        srv.stop()


def _assert_eq(a, b):
    assert a == b, f"{a!r} != {b!r}"


def default_model_checks(res, tessera, workdir):
    home = os.path.join(workdir, "home")
    env = dict(os.environ, TESSERA_HOME=home)
    srv = Server(tessera, ["--default-model-size", "tiny", "--max-model-len", "64"], workdir, "serve-default",
                 env=env)
    try:
        if not res.run("default model: synthesised on first run and ready", srv.wait_ready):
            return
        port = srv.port

        def served():
            status, _, body = request(port, "GET", "/v1/models")
            assert status == 200 and body["data"][0]["id"] == "default-qwen3-tiny-bf16", body
            models = os.path.join(home, "models")
            assert os.path.isfile(os.path.join(models, "default-qwen3-tiny-bf16", "config.json"))
            assert os.listdir(models) == ["default-qwen3-tiny-bf16"], os.listdir(models)
            assert "RANDOM weights" in srv.log_tail(200), "no random-weights warning in the log"
            status, _, body = complete(port, prompt=PROMPT, max_tokens=3)
            assert status == 200 and len(body["choices"][0]["token_ids"]) == 3, (status, body)
        res.run("default model: id, files in TESSERA_HOME, warning, completion", served)

        def default_max_tokens_clamped():
            # Without max_tokens the default (16) shrinks to what --max-model-len leaves.
            status, _, body = complete(port, prompt=[1] * 60)
            assert status == 200, (status, body)
            c = body["choices"][0]
            assert len(c["token_ids"]) == 4 and c["finish_reason"] == "length" or c["finish_reason"] == "stop", c
            assert body["usage"]["total_tokens"] <= 64, body["usage"]
        res.run("default max_tokens clamped to the max model length", default_max_tokens_clamped)
        res.run("default model: SIGTERM -> exit 0", lambda: _assert_eq(srv.terminate_and_wait(), 0))
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True, help="path to the tessera binary")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-serve-")
    res = Results()
    start = time.time()
    try:
        model = os.path.join(workdir, "tiny-qwen3")
        synth = subprocess.run([tessera, "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32",
                                "--out", model], capture_output=True, timeout=120)
        if synth.returncode != 0:
            res.failed += 1
            print(f"FAIL synth tiny model: {synth.stderr.decode(errors='replace')[-2000:]}", flush=True)
        else:
            main_server_checks(res, tessera, model, workdir)
            limits_server_checks(res, tessera, model, workdir)
            default_model_checks(res, tessera, workdir)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"({time.time() - start:.1f}s)")
    print(f"{res.passed} passed, {res.failed} failed")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
