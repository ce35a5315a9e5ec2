#!/usr/bin/python3
"""End-to-end test of KV events and cache_salt against a real `tessera serve`.

    /usr/bin/python3 tests/e2e/test_kv_events.py --tessera build/tessera [--keep]

Starts `tessera serve` on a tiny synthetic qwen3 with a small KV pool and
--kv-events-config (ZeroMQ PUB + replay ROUTER on 127.0.0.1 ports picked
here), and checks the events with an independent subscriber (Debian's
python3-zmq and python3-msgpack, decoding vLLM's format by hand):
  * seq 0 is AllBlocksCleared (a fresh instance holds nothing);
  * a prompt's full blocks arrive as BlockStored with the prompt's token ids,
    block size 16 and a parent/child hash chain (first parent nil), each hash
    the 32 bytes vLLM computes for them (sha256 of the pickled (parent, tokens,
    extra_keys), NONE_HASH as with PYTHONHASHSEED=0: computed here with
    Python's pickle and hashlib, as vLLM does), salted ones included;
  * a second prompt sharing two blocks stores only its third, whose parent is
    the first prompt's second block hash;
  * filling the pool evicts: BlockRemoved of hashes stored before;
  * the live PUB stream carries the same payloads as the replay buffer;
  * cache_salt: same prompt + same salt hits the prefix cache
    (usage.prompt_tokens_details.cached_tokens), another salt or none does not,
    and salted blocks have other hashes; an empty salt is a 400.
Prints one line per check and ends with `N passed, M failed`.
"""
import argparse
import hashlib
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, complete, free_port, get_metrics, request, synth_model  # noqa: E402

BLOCK = 16
TOPIC = b"kv"


class Subscriber:
    """SUB socket on a thread, collecting (seq, payload) frames. It binds: with
    a non-wildcard endpoint the publisher connects (vLLM's bind/connect rule)."""

    def __init__(self, ctx, endpoint):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, TOPIC)
        self.sock.setsockopt(zmq.RCVTIMEO, 100)
        self.sock.bind(endpoint)
        self.frames = {}
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                topic, seq, payload = self.sock.recv_multipart()
            except zmq.Again:
                continue
            assert topic == TOPIC
            self.frames[int.from_bytes(seq, "big", signed=True)] = payload

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close(0)


def replay(ctx, endpoint, start=0):
    """vLLM's replay protocol: [empty, start seq] -> [empty, seq, payload]... [empty, -1, empty]."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVTIMEO, 3000)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    out = {}
    for _ in range(100000):
        _, seq, payload = sock.recv_multipart()
        seq = int.from_bytes(seq, "big", signed=True)
        if seq == -1:
            break
        out[seq] = payload
    sock.close(0)
    return out


def decode(payload):
    """An EventBatch by hand: [ts, [event...], dp_rank]; each event a tagged array."""
    batch = msgpack.unpackb(payload, raw=False)
    assert isinstance(batch, list) and len(batch) in (2, 3), batch
    assert isinstance(batch[0], float)
    events = []
    for ev in batch[1]:
        tag = ev[0]
        if tag == "BlockStored":
            hashes, parent, tokens, block_size, lora_id, medium = ev[1:7]
            assert all(isinstance(h, bytes) and len(h) == 32 for h in hashes), hashes
            assert parent is None or (isinstance(parent, bytes) and len(parent) == 32)
            events.append(("stored", hashes, parent, tokens, block_size, lora_id, medium))
        elif tag == "BlockRemoved":
            events.append(("removed", ev[1], ev[2]))
        elif tag == "AllBlocksCleared":
            assert len(ev) == 1
            events.append(("cleared",))
        else:
            raise AssertionError(f"unknown event {tag}")
    return events


def all_events(ctx, replay_ep):
    frames = replay(ctx, replay_ep)
    seqs = sorted(frames)
    assert seqs == list(range(len(seqs))), f"replay not contiguous from 0: {seqs[:10]}"
    return frames, [e for s in seqs for e in decode(frames[s])]


def run_prompt(port, tokens, salt=None):
    body = {"prompt": tokens, "max_tokens": 1, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    status, _, resp = complete(port, **body)
    assert status == 200, (status, resp)
    return resp["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def prefix_hits(port):
    return get_metrics(port).get("tessera:prefix_cache_hits_total", 0.0)


def vllm_sha256(obj):
    """vLLM's --prefix-caching-hash-algo sha256 (vllm/utils/hashing.py)."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def vllm_chain(tokens, salt=None):
    """vLLM's hash_block_tokens over the full blocks, NONE_HASH = sha256("0") (PYTHONHASHSEED=0)."""
    parent, out = vllm_sha256("0"), []
    for i in range(len(tokens) // BLOCK):
        extra = (salt,) if salt and i == 0 else None
        parent = vllm_sha256((parent, tuple(tokens[i * BLOCK:(i + 1) * BLOCK]), extra))
        out.append(parent)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-kvev-")
    res = Results()
    start = time.time()
    ctx = zmq.Context()
    srv = sub = None
    try:
        model = synth_model(tessera, workdir)
        pub_ep = f"tcp://127.0.0.1:{free_port()}"
        replay_ep = f"tcp://127.0.0.1:{free_port()}"
        cfg = ('{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "%s", "replay_endpoint": "%s", '
               '"topic": "kv"}' % (pub_ep, replay_ep))
        sub = Subscriber(ctx, pub_ep)
        # 24 blocks of 16 tokens; a prompt of 3 full blocks + 2 tokens holds 4.
        srv = Server(tessera, ["--model", model, "--num-kv-blocks", "24", "--max-model-len", "128",
                               "--threads", "1", "--kv-events-config", cfg], workdir, "serve-kvev")
        res.server = srv
        srv.wait_ready()

        a = list(range(1000, 1050))                # 3 full blocks + 2
        b = a[:32] + list(range(2000, 2018))       # shares A's first 2 blocks
        state = {}

        def first_batch_is_all_blocks_cleared():
            frames = replay(ctx, replay_ep)
            assert 0 in frames, sorted(frames)
            assert decode(frames[0]) == [("cleared",)], decode(frames[0])
        res.run("seq 0 is AllBlocksCleared (replay from 0)", first_batch_is_all_blocks_cleared)

        def stored_chain():
            assert run_prompt(srv.port, a) == 0
            deadline = time.time() + 5
            stored = []
            while time.time() < deadline:
                _, events = all_events(ctx, replay_ep)
                stored = [e for e in events if e[0] == "stored"]
                if sum(len(e[1]) for e in stored) >= 3:
                    break
                time.sleep(0.05)
            hashes, tokens = [], []
            for e in stored:
                _, hs, p, toks, bs, lora, medium = e
                assert bs == BLOCK and lora is None and medium == "CPU", e
                assert p == (hashes[-1] if hashes else None), "parent must be the previous block's hash"
                hashes += hs
                tokens += toks
            assert len(hashes) == 3 and len(set(hashes)) == 3, hashes
            assert tokens == a[:48], tokens
            assert hashes == vllm_chain(a), "hashes must be vLLM's sha256 block hashes"
            status, _, info = request(srv.port, "GET", "/server_info")
            assert status == 200 and info["prefix_caching_hash_algo"] == "sha256", info
            state["a"] = hashes
        res.run("prompt A: BlockStored x3 with A's tokens and a parent/child chain", stored_chain)

        def shared_prefix_stores_only_the_new_block():
            cached = run_prompt(srv.port, b)
            assert cached == 32, f"cached_tokens {cached}, want 32"
            deadline = time.time() + 5
            while time.time() < deadline:
                _, events = all_events(ctx, replay_ep)
                stored = [e for e in events if e[0] == "stored"]
                new = [h for e in stored for h in e[1] if h not in state["a"]]
                if new:
                    break
                time.sleep(0.05)
            last = stored[-1]
            assert len(new) == 1, new
            assert last[2] == state["a"][1], "B's third block must chain onto A's second"
            assert last[3] == b[32:48]
            state["b"] = new[0]
        res.run("prompt B sharing 2 blocks: one BlockStored, parent = A's 2nd hash", shared_prefix_stores_only_the_new_block)

        def eviction_removes():
            for i in range(8):  # 8 x 4 blocks > 24: the oldest cached blocks are reused
                run_prompt(srv.port, list(range(3000 + 100 * i, 3050 + 100 * i)))
            deadline = time.time() + 5
            removed = []
            while time.time() < deadline:
                _, events = all_events(ctx, replay_ep)
                removed = [h for e in events if e[0] == "removed" for h in e[1]]
                if state["a"][0] in removed:
                    break
                time.sleep(0.05)
            stored = {h for e in events if e[0] == "stored" for h in e[1]}
            assert removed, "no BlockRemoved"
            assert set(removed) <= stored, "removed a hash never stored"
            assert state["a"][0] in removed, "A's blocks should be evicted first (least recently used)"
        res.run("filling the pool: BlockRemoved of earlier stored hashes", eviction_removes)

        def live_stream_matches_replay():
            frames, _ = all_events(ctx, replay_ep)
            time.sleep(0.1)
            live = dict(sub.frames)
            assert len(live) >= 3, f"live SUB got {len(live)} batches"
            for seq, payload in live.items():
                assert frames.get(seq) == payload, f"seq {seq} differs between PUB and replay"
        res.run("live PUB frames (topic, seq, payload) == replay buffer", live_stream_matches_replay)

        def cache_salt_isolates():
            c = list(range(5000, 5040))  # 2 full blocks + 8
            hits0 = prefix_hits(srv.port)
            assert run_prompt(srv.port, c, "tenant-a") == 0
            assert run_prompt(srv.port, c, "tenant-a") == 32, "same salt must hit"
            assert run_prompt(srv.port, c, "tenant-b") == 0, "another salt must not hit"
            assert run_prompt(srv.port, c) == 0, "no salt must not hit a salted prefix"
            assert run_prompt(srv.port, c) == 32, "unsalted repeats hit"
            deadline = time.time() + 5  # the exporter samples the engine's counters: allow it to catch up
            while (delta := prefix_hits(srv.port) - hits0) < 64 and time.time() < deadline:
                time.sleep(0.05)
            assert delta == 64, f"prefix-cache hit metric grew by {delta}, want two hits of 32 tokens"
            # The salt changes the chain: the three 2-block chains stored for c differ. Events are
            # published off the engine thread, so the last one may trail the response: poll.
            deadline = time.time() + 5
            while True:
                _, events = all_events(ctx, replay_ep)
                firsts = [e[1][0] for e in events if e[0] == "stored" and e[3][:BLOCK] == c[:BLOCK] and e[2] is None]
                if len(set(firsts)) >= 3 or time.time() > deadline:
                    break
                time.sleep(0.05)
            assert len(set(firsts)) == 3, firsts
            assert vllm_chain(c, "tenant-a")[0] in firsts and vllm_chain(c)[0] in firsts, "salted hash is vLLM's"
        res.run("cache_salt: same salt hits, other salt / none do not", cache_salt_isolates)

        def bad_salt():
            for salt in ("", 5, "x" * 2000):
                status, _, resp = complete(srv.port, prompt=[1, 2, 3], max_tokens=1, cache_salt=salt)
                assert status == 400 and resp["error"]["param"] == "cache_salt", (salt, status, resp)
        res.run("cache_salt '' / non-string / too long -> 400 naming it", bad_salt)
    finally:
        if sub:
            sub.close()
        if srv:
            srv.stop()
        ctx.term()
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
