"""Shared helpers for the `tessera serve` end-to-end tests (stdlib only).

Used by tests/e2e/test_serve.py and tests/e2e/test_bad_input.py (run with
/usr/bin/python3). Not a test itself: ctest only registers test_*.py.

    res = Results()
    model = synth_model(res, tessera, workdir)
    srv = Server(tessera, ["--model", model], workdir, "main")
    try:
        res.server = srv            # failing checks print this server's log tail
        res.run("ready", srv.wait_ready)
        status, headers, body = request(srv.port, "POST", "/v1/completions", {...})
    finally:
        srv.stop()                  # SIGTERM, then SIGKILL after a timeout
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

READY_TIMEOUT = 60   # seconds for a server to load and warm up
EXIT_TIMEOUT = 15    # seconds for a server to exit after SIGTERM
HTTP_TIMEOUT = 30    # seconds per HTTP request
PROMPT = [9707, 11, 1879, 0, 576, 374]  # token ids of "Hello, world! The is"
# Exit status of a test that could not run (a dependency is missing): ctest reports it
# skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt), never passed.
SKIP = 77


def skip_test(why):
    """Says why the whole test cannot run here; main() returns what this returns."""
    print(f"SKIP: {why}", flush=True)
    return SKIP


class Results:
    """Counts checks; each prints one PASS/FAIL line."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = []  # names of checks that could not run here
        self.server = None  # a Server whose log tail is printed when a check fails
        self._last_tail = None

    def run(self, name, fn):
        """Runs fn(); an AssertionError or any exception fails the check."""
        t0 = time.time()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report every failure as a check line
            self.failed += 1
            msg = str(e)
            if len(msg) > 3000:
                msg = msg[:3000] + "...(truncated)"
            print(f"FAIL {name}: {type(e).__name__}: {msg}", flush=True)
            if self.server is not None:
                if self.server.proc.poll() is not None:
                    print(f"  (server {self.server.name} is dead: exit status {self.server.proc.returncode})",
                          flush=True)
                tail = self.server.log_tail(15)
                if tail != self._last_tail:  # consecutive failures: print a tail once
                    self._last_tail = tail
                    print("  --- server log tail ---\n  " + tail.replace("\n", "\n  "), flush=True)
            return False
        self.passed += 1
        dt = time.time() - t0
        print(f"PASS {name}" + (f" ({dt:.1f}s)" if dt >= 1.0 else ""), flush=True)
        return True

    def skip(self, name, why):
        """A check that cannot run here (a missing dependency): a SKIP line, and the test
        exits SKIP unless another check failed, so ctest shows it skipped, not passed."""
        self.skipped.append(name)
        print(f"SKIP {name}: {why}", flush=True)

    def summary(self, start):
        print(f"({time.time() - start:.1f}s)")
        skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
        print(f"{self.passed} passed, {self.failed} failed{skipped}", flush=True)
        return 1 if self.failed else SKIP if self.skipped else 0


def e2e_args(doc):
    """The arguments every e2e test takes: --tessera (made absolute) and --keep (the work directory)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    args.tessera = os.path.abspath(args.tessera)
    return args


def cleanup(servers, workdir, keep):
    """Stops every server, then removes `workdir` unless `keep` (then says where it is)."""
    for s in servers:
        s.stop()
    if keep:
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def wait_until(fn, timeout=15, what="condition"):
    """Polls fn() every 50 ms until it is true; raises AssertionError naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, raw=None, headers=None, conn=None, timeout=HTTP_TIMEOUT,
            host="127.0.0.1"):
    """One HTTP request; returns (status, lower-cased headers, parsed JSON or None).

    The raw body text is in headers["_body"] (for non-JSON responses)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(host, port, timeout=timeout)
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
        out_headers = {k.lower(): v for k, v in resp.getheaders()}
        out_headers["_body"] = payload.decode("utf-8", "replace")
        return resp.status, out_headers, parsed
    finally:
        if own:
            conn.close()


def complete(port, headers=None, **body):
    return request(port, "POST", "/v1/completions", body, headers=headers)


def chat(port, headers=None, **body):
    return request(port, "POST", "/v1/chat/completions", body, headers=headers)


def stream_events(port, path, body, headers=None, timeout=HTTP_TIMEOUT, host="127.0.0.1"):
    """POSTs a streaming request; returns (status, headers, [parsed data events], saw_done).

    Non-200: the events list holds the parsed error body instead."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
        resp = conn.getresponse()
        out_headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status != 200:
            payload = resp.read()
            try:
                return resp.status, out_headers, [json.loads(payload)], False
            except ValueError:
                return resp.status, out_headers, [payload.decode("utf-8", "replace")], False
        events, done = [], False
        for line in resp:  # http.client de-chunks
            line = line.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            events.append(json.loads(data))
        return resp.status, out_headers, events, done
    finally:
        conn.close()


def error_check(status, body, want_status, param=None, code=None, etype=None):
    """Asserts an OpenAI error body {"error": {message, type, param, code}}."""
    want = want_status if isinstance(want_status, (tuple, list, set)) else (want_status,)
    assert status in want, f"status {status}, want {want_status}; body {str(body)[:500]}"
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"not an OpenAI error: {str(body)[:500]}"
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, f"error keys {sorted(err)}"
    assert isinstance(err["message"], str) and err["message"], err
    if param is not None:
        assert err["param"] == param, f"param {err['param']!r}, want {param!r}; error {err}"
    if code is not None:
        assert err["code"] == code, f"code {err['code']!r}, want {code!r}; error {err}"
    if etype is not None:
        assert err["type"] == etype, f"type {err['type']!r}, want {etype!r}; error {err}"
    return err


_PORT_FILE_SUPPORT = {}


def _supports_port_file(tessera):
    if tessera not in _PORT_FILE_SUPPORT:
        out = subprocess.run([tessera, "serve", "--help"], capture_output=True, timeout=30)
        _PORT_FILE_SUPPORT[tessera] = b"--port-file" in out.stdout + out.stderr
    return _PORT_FILE_SUPPORT[tessera]


class Server:
    """A `tessera serve` process on `host` (127.0.0.1) logging to a file; always stop() it.

    Binds port 0 and learns the port from --port-file (gRPC off unless `grpc`:
    then on a free port, in the port file's "grpc"). `port` is known after
    wait_ready() (or wait_bound()). `netns`: the network namespace to run in
    (`ip netns exec`, which execs: `pid` is the server's own)."""

    def __init__(self, tessera, args, workdir, name, env=None, grpc=False, host="127.0.0.1", netns=None):
        self.init_args = (tessera, args, workdir, name, env)
        self.name = name
        self.host = host
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        self.port_file = None
        self.port = None
        cmd = (["ip", "netns", "exec", netns] if netns else []) + [tessera, "serve", "--host", host]
        if _supports_port_file(tessera):
            self.port_file = os.path.join(workdir, f"{name}.port.json")
            if os.path.exists(self.port_file):
                os.unlink(self.port_file)
            cmd += ["--port", "0", "--grpc-port", "0" if grpc else "-1", "--port-file", self.port_file]
        else:  # older binaries: pick a free port ourselves
            self.port = free_port()
            cmd += ["--port", str(self.port)]
        self.cmd = cmd + args
        if env is None:  # never touch the user's model cache (~/.cache/tessera)
            env = dict(os.environ, TESSERA_HOME=os.path.join(workdir, "tessera-home"))
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.saw_loading = False

    @property
    def pid(self):
        return self.proc.pid

    def wait_bound(self, timeout=READY_TIMEOUT):
        deadline = time.time() + timeout
        while self.port is None:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            if time.time() > deadline:
                raise AssertionError(f"no port file within {timeout}s; log:\n{self.log_tail()}")
            try:
                with open(self.port_file) as f:
                    ports = json.load(f)
                self.port = int(ports["http"])
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.time() + timeout
        self.wait_bound(timeout)
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                status, _, body = request(self.port, "GET", "/ready", timeout=5, host=self.host)
                if status == 200 and body.get("status") == "ready":  # "grpc_port" too when gRPC is on
                    return
                if status == 503 and body == {"status": "loading"}:
                    self.saw_loading = True
            except OSError:
                pass  # not listening yet
            time.sleep(0.05)
        raise AssertionError(f"not ready within {timeout}s; log:\n{self.log_tail()}")

    def log_tail(self, n=30):
        try:
            self.log.flush()
        except ValueError:
            pass  # closed
        with open(self.log_path, "rb") as f:
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])

    def terminate_and_wait(self, timeout=EXIT_TIMEOUT):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within EXIT_TIMEOUT."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                print(f"server {self.name} ignored SIGTERM for {EXIT_TIMEOUT}s; SIGKILL", flush=True)
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()

    def rss_mb(self):
        """Resident set size of the server process in MB (from /proc)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        raise AssertionError("no VmRSS")


def synth_model(tessera, workdir, name="tiny-qwen3"):
    """A tiny random-weight qwen3 checkpoint (real tokenizer and chat template)."""
    model = os.path.join(workdir, name)
    synth = subprocess.run([tessera, "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32",
                            "--out", model], capture_output=True, timeout=120)
    if synth.returncode != 0:
        raise AssertionError("tessera synth failed: " + synth.stderr.decode(errors="replace")[-2000:])
    return model


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def parse_metrics(text):
    """Prometheus text -> {name: value}, summing the samples of a name over labels."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def get_metrics(port, host="127.0.0.1"):
    status, headers, _ = request(port, "GET", "/metrics", host=host)
    assert status == 200, f"/metrics status {status}"
    return parse_metrics(headers["_body"])


def grpc_calls(workdir, calls):
    """Runs gRPC calls through tests/e2e/grpc_call.mjs (the real @grpc/grpc-js client: these tests are
    stdlib-only); one result dict per call, in order (see grpc_call.mjs for the call and result format)."""
    path = os.path.join(workdir, "grpc_calls.json")
    with open(path, "w") as f:
        json.dump(calls, f)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(["node", os.path.join(here, "grpc_call.mjs"), path], capture_output=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(here)))
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    out = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    assert len(out) == len(calls), out
    return out
