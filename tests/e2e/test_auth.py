#!/usr/bin/python3
"""Authentication across the topology end to end: `--internal-api-key-file` on every role.

    /usr/bin/python3 tests/e2e/test_auth.py --tessera build/tessera [--keep]

One topology on 127.0.0.1 (docs/architecture.md, "Threat model"), every role
with the same internal key file: a prefill, a decode (gRPC on; it also takes
a client --api-key, as an instance serving clients directly would), a unified
instance publishing KV events (gRPC on), and a kv-aware router (gRPC on,
client --api-key) subscribed to those events. Checks:
  * every listening TCP socket of every process (read from /proc/PID/fd and
    /proc/PID/net/tcp{,6}: HTTP, gRPC, the KV control plane, UCX, the event
    sockets) is bound to 127.0.0.1, the configured --host;
  * calls without a credential are refused by every role (401); an instance
    with only the internal key serves it and no one else;
  * the KV control plane refuses a ReleaseTransfer without the token
    (UNAUTHENTICATED, the export stays) and with the token releases it;
  * the vLLM handshake driven with the internal key works (signed
    kv_transfer_params, output equal to the unified instance's); a client
    sending kv_transfer_params straight to the decode (HTTP or gRPC, with a
    valid client key) is refused naming the field, and forged or unsigned
    params with the internal key are refused naming remote_signature; in
    neither case does the decode connect to the address named (a listening
    socket here sees no connection);
  * the event sockets: a plain ZeroMQ SUB and a plain replay DEALER get
    nothing; a CURVE SUB with the deployment's derived keys gets the events,
    and so does the router (its index fills).
Prints one line per check and ends with `N passed, M failed`.
"""
import hashlib
import hmac
import json
import os
import socket
import sys
import tempfile
import time

import zmq
from zmq.utils import z85

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (Results, Server, cleanup, e2e_args, free_port, get_metrics, grpc_calls,  # noqa: E402
                        request, synth_model)

KEY = "internal-" + "5f1e" * 8
CLIENT_KEY = "client-key-0123456789"
INTERNAL = {"Authorization": f"Bearer {KEY}"}
CLIENT = {"Authorization": f"Bearer {CLIENT_KEY}"}
PROMPT = [(i * 7919) % 150000 + 100 for i in range(70)]  # 4 full blocks + a partial one
COMMON = dict(temperature=0, max_tokens=6, return_token_ids=True)


def listening_sockets(pid):
    """(address, port) of every listening TCP socket the process holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, v6 in (("tcp", False), ("tcp6", True)):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                addr_hex, port_hex = local.split(":")
                raw = bytes.fromhex(addr_hex)
                if v6:
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    addr = socket.inet_ntop(socket.AF_INET6, words)
                else:
                    addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
                if addr.startswith("::ffff:"):  # an IPv4 address on an IPv6 socket
                    addr = addr[len("::ffff:"):]
                out.append((addr, int(port_hex, 16)))
    return out


def curve_keys(key):
    """The deployment's CURVE keys as server/kv_events/kv_event_auth.cc derives them (HMAC-SHA256)."""
    def derive(purpose):
        secret = z85.encode(hmac.new(key.encode(), b"tessera/" + purpose.encode(), hashlib.sha256).digest())
        return zmq.curve_public(secret), secret
    return derive("kv-events-curve-server"), derive("kv-events-curve-client")


def port_file(srv):
    with open(srv.port_file) as f:
        return json.load(f)


def main():
    args = e2e_args(__doc__)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-auth-")
    res = Results()
    start = time.time()
    servers = []
    try:
        model = synth_model(args.tessera, workdir)
        keyfile = os.path.join(workdir, "internal.key")
        with open(keyfile, "w") as f:
            f.write(KEY + "\n")
        base = ["--model", model, "--threads", "1", "--kv-cache-mb", "16", "--max-model-len", "512",
                "--served-model-name", "m", "--internal-api-key-file", keyfile]
        kv = ["--kv-ucx-tls", "tcp,self"]
        ev_port, replay_port = free_port(), free_port()
        events = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv",
                             "endpoint": f"tcp://*:{ev_port}", "replay_endpoint": f"tcp://*:{replay_port}"})

        def launch(name, extra, grpc=False):
            s = Server(args.tessera, base + extra, workdir, name, grpc=grpc)
            servers.append(s)
            return s
        prefill = launch("prefill", ["--role", "prefill", *kv, "--kv-pin-timeout", "30"])
        decode = launch("decode", ["--role", "decode", *kv, "--api-key", CLIENT_KEY], grpc=True)
        unified = launch("unified", ["--kv-events-config", events], grpc=True)
        for s in servers:
            if not res.run(f"{s.name} ready", lambda s=s: s.wait_ready(timeout=120)):
                return res.summary(start)
        router = Server(args.tessera, ["--role", "router", "--decode-instances", f"127.0.0.1:{unified.port}",
                                       "--routing-logic", "kv-aware", "--router-poll-interval", "0.2",
                                       "--api-key", CLIENT_KEY, "--internal-api-key-file", keyfile],
                        workdir, "router", grpc=True)
        servers.append(router)
        if not res.run("router ready", lambda: router.wait_ready(timeout=30)):
            return res.summary(start)
        P, D, U, R = prefill.port, decode.port, unified.port, router.port
        # Every role is up: listeners, then the traffic checks.

        def bound_to_host():
            for s in servers:
                socks = listening_sockets(s.pid)
                assert socks, f"{s.name}: no listening socket found"
                wrong = [a for a in socks if a[0] != "127.0.0.1"]
                assert not wrong, f"{s.name} listens beyond --host 127.0.0.1: {wrong} (all: {socks})"
            # UCX's TCP listener is among the instances' sockets: more than HTTP + control plane.
            assert len(listening_sockets(prefill.pid)) >= 3, listening_sockets(prefill.pid)
        res.run("every listening socket of every role is on --host 127.0.0.1 (HTTP, gRPC, KV control "
                "plane, UCX, KV events)", bound_to_host)

        def no_credential():
            body = dict(COMMON, prompt=PROMPT[:8])
            for s in servers:
                for headers in (None, {"Authorization": "Bearer wrong-key-000000"}):
                    st, _, b = request(s.port, "POST", "/v1/completions", body, headers=headers)
                    assert st == 401, (s.name, headers, st, b)
            for s in (prefill, unified):  # the client's key is the router's (and this decode's), not theirs
                st, _, _ = request(s.port, "POST", "/v1/completions", body, headers=CLIENT)
                assert st == 401, (s.name, st)
            for s in (prefill, decode, unified):
                st, _, b = request(s.port, "POST", "/v1/completions", body, headers=INTERNAL)
                assert st == 200, (s.name, st, b)
            grpc = grpc_calls(workdir, [{"target": f"127.0.0.1:{port_file(s)['grpc']}", "method": "ListModels",
                                         "request": {}} for s in (decode, unified, router)])
            assert all(g["code"] == 16 for g in grpc), grpc  # UNAUTHENTICATED
        res.run("calls without a credential: 401 from every role (HTTP), UNAUTHENTICATED (gRPC); the internal "
                "key opens the instances", no_credential)

        def export(prompt):
            st, _, b = request(P, "POST", "/v1/completions", dict(COMMON, prompt=prompt, max_tokens=1,
                               kv_transfer_params={"do_remote_decode": True}), headers=INTERNAL)
            assert st == 200, (st, b)
            kvp = b["kv_transfer_params"]
            assert kvp["remote_block_ids"] and len(kvp.get("remote_signature", "")) == 64, kvp
            return kvp

        def control_plane():
            kvp = export([5] + PROMPT[1:])
            target = f"127.0.0.1:{port_file(prefill)['kv_transfer']}"
            release = {"target": target, "service": "kv", "method": "ReleaseTransfer",
                       "request": {"handle": kvp["remote_request_id"]}}
            token = "Bearer " + hmac.new(hmac.new(KEY.encode(), b"tessera/kv-control-plane", hashlib.sha256)
                                         .digest(), b"token", hashlib.sha256).hexdigest()
            out = grpc_calls(workdir, [release, dict(release, metadata={"authorization": f"Bearer {KEY}"}),
                                       dict(release, metadata={"authorization": token})])
            assert out[0]["code"] == 16 and "internal-api-key-file" in out[0]["details"], out[0]
            assert out[1]["code"] == 16, out[1]  # the API credential is not the control plane's token
            assert out[2]["code"] == 0 and out[2]["response"]["released"] is True, out[2]
        res.run("KV control plane: ReleaseTransfer without the token (or with the API key) -> UNAUTHENTICATED; "
                "with the derived token it releases", control_plane)

        def handshake_exact():
            want = request(U, "POST", "/v1/completions", dict(COMMON, prompt=PROMPT), headers=INTERNAL)[2]
            pulled0 = get_metrics(D).get("tessera:kv_transfer_blocks_total", 0.0)
            kvp = export(PROMPT)
            st, _, got = request(D, "POST", "/v1/completions", dict(COMMON, prompt=PROMPT, kv_transfer_params=kvp),
                                 headers=INTERNAL)
            assert st == 200, (st, got)
            assert got["choices"][0]["token_ids"] == want["choices"][0]["token_ids"], (got, want)
            assert get_metrics(D).get("tessera:kv_transfer_blocks_total", 0.0) > pulled0, "nothing was pulled"
        res.run("signed kv_transfer_params with the internal key: the decode pulls, output equals unified",
                handshake_exact)

        def no_connection_to_named_host():
            trap = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            trap.bind(("127.0.0.1", 0))
            trap.listen(8)
            trap.settimeout(1.5)
            kvp = export([7] + PROMPT[1:])
            aimed = dict(kvp, remote_port=trap.getsockname()[1])
            try:
                cases = [(CLIENT, kvp, "kv_transfer_params"), (CLIENT, aimed, "kv_transfer_params"),
                         (INTERNAL, aimed, "kv_transfer_params.remote_signature"),
                         (INTERNAL, {k: v for k, v in aimed.items() if k != "remote_signature"},
                          "kv_transfer_params.remote_signature")]
                for headers, params, param in cases:
                    st, _, b = request(D, "POST", "/v1/completions",
                                       dict(COMMON, prompt=PROMPT, kv_transfer_params=params), headers=headers)
                    assert st == 400 and param in b["error"]["message"], (headers, st, b)
                    assert (b["error"]["param"] or "kv_transfer_params").startswith("kv_transfer_params"), b
                st, _, b = request(D, "POST", "/v1/chat/completions",
                                   dict(COMMON, messages=[{"role": "user", "content": "hi"}],
                                        kv_transfer_params={"do_remote_decode": True}), headers=CLIENT)
                assert st == 400 and b["error"]["param"] == "kv_transfer_params", (st, b)
                g = grpc_calls(workdir, [{"target": f"127.0.0.1:{port_file(decode)['grpc']}", "method": "Generate",
                                          "metadata": {"authorization": f"Bearer {CLIENT_KEY}"},
                                          "request": {"token_ids": {"ids": PROMPT}, "params": {"max_tokens": 2},
                                                      "kv_transfer_params": json.dumps(aimed)}}])[0]
                assert g["code"] == 3 and "kv_transfer_params" in g["details"], g  # INVALID_ARGUMENT
                try:
                    conn, peer = trap.accept()
                    conn.close()
                    raise AssertionError(f"the decode connected to the address a request named ({peer})")
                except socket.timeout:
                    pass
            finally:
                trap.close()
        res.run("kv_transfer_params from a client (HTTP, chat, gRPC) or unsigned/forged with the internal key: 400 "
                "naming the field, and no connection to the address named", no_connection_to_named_host)

        def event_sockets():
            (server_pub, _), (client_pub, client_sec) = curve_keys(KEY)
            ctx = zmq.Context()
            socks = []
            try:
                def sub(curve):
                    s = ctx.socket(zmq.SUB)
                    s.setsockopt(zmq.LINGER, 0)
                    s.setsockopt(zmq.RCVTIMEO, 100)
                    if curve:
                        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_pub, client_pub, client_sec
                    s.setsockopt(zmq.SUBSCRIBE, b"kv")
                    s.connect(f"tcp://127.0.0.1:{ev_port}")
                    socks.append(s)
                    return s
                plain, good = sub(False), sub(True)
                dealer = ctx.socket(zmq.DEALER)
                dealer.setsockopt(zmq.LINGER, 0)
                dealer.setsockopt(zmq.RCVTIMEO, 1500)
                dealer.connect(f"tcp://127.0.0.1:{replay_port}")
                socks.append(dealer)
                dealer.send_multipart([b"", (0).to_bytes(8, "big")])
                time.sleep(0.5)  # subscriptions reach the publisher
                got = {"plain": 0, "good": 0}
                deadline = time.time() + 10
                n = 0
                while time.time() < deadline and got["good"] == 0:
                    n += 1
                    request(U, "POST", "/v1/completions", dict(COMMON, prompt=[n] + PROMPT[1:], max_tokens=1),
                            headers=INTERNAL)
                    for name, s in (("plain", plain), ("good", good)):
                        try:
                            while True:
                                s.recv_multipart()
                                got[name] += 1
                        except zmq.Again:
                            pass
                assert got["good"] > 0, "the deployment's CURVE subscriber got no events"
                assert got["plain"] == 0, f"a plain SUB got {got['plain']} messages"
                try:
                    dealer.recv_multipart()
                    raise AssertionError("a plain replay request was answered")
                except zmq.Again:
                    pass
            finally:
                for s in socks:
                    s.close(0)
                ctx.term()
        res.run("KV events: a plain SUB and replay DEALER get nothing; a CURVE SUB with the derived keys gets them",
                event_sockets)

        def router_subscribed():
            deadline = time.time() + 10
            while time.time() < deadline:
                m = get_metrics(R)
                if m.get("tessera:router_kv_event_batches_total", 0) > 0 and \
                        m.get("tessera:router_kv_index_blocks", 0) > 0:
                    return
                time.sleep(0.2)
            raise AssertionError(f"the router's index stayed empty: {get_metrics(R)}")
        res.run("the kv-aware router subscribes with CURVE: its prefix index fills", router_subscribed)
    finally:
        cleanup(servers, workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
