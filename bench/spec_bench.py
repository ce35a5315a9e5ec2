#!/usr/bin/python3
"""Speculative-decoding figures for bench/RESULTS.md, in one command.

    /usr/bin/python3 bench/spec_bench.py --build build --model TARGET [--draft DRAFT] \
        [--gguf T.gguf --gguf-draft D.gguf --llama-server ~/.cache/tessera/llama.cpp/build/bin/llama-server] \
        [--threads 2] [--sections a,b,c,d] [--k 4] [--out DIR] [--quick]

(a) cost model: tessera-spec-bench, one verification step (1 + k tokens per
    sequence, k = 2,4,8) relative to a plain decode step at batch 1, 4, 16;
(b) always-right proposers, single stream: decode tokens/s of `tessera serve`
    with no speculation, n-gram (k) on a prompt the model repeats (the model's
    own greedy continuation appended, so its loop is in the prompt), and a
    draft model equal to the target; acceptance from /metrics;
(c) acceptance and speed-up on tessera-bench datasets (random, shared-prefix,
    and --sharegpt FILE if given) at concurrency 1 and 4: off vs n-gram vs draft
    model (--draft, else the target itself);
(d) side by side with llama-server's speculative decoding (--model-draft) on
    the same GGUF pair, same minute, concurrency 1 and 4 (needs --llama-server,
    --gguf, --gguf-draft; llama.cpp is built by bench/build_llama_cpp.sh).
Prints markdown tables; raw JSON, logs and tessera-bench results stay in --out.
Run on a quiet machine: every figure is a ratio within one run. --quick shrinks
every section to seconds (checking the script on tiny models).
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, path, body=None, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Proc:
    """A server process on a loopback port, logging to a file; stop() always."""

    def __init__(self, cmd, out, name, port, ready_path):
        self.name, self.port, self.ready_path = name, port, ready_path
        self.log_path = os.path.join(out, name + ".log")
        self.logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=900):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}; see {self.log_path}")
            try:
                st, _ = call(self.port, "GET", self.ready_path, timeout=5)
                if st == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} not ready after {timeout}s; see {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def tessera_server(args, name, model, spec=None, extra=()):
    port = free_port()
    cmd = [os.path.join(args.build, "tessera"), "--log-level", "warn", "serve", "--model", model,
           "--threads", str(args.threads), "--host", "127.0.0.1", "--port", str(port), "--grpc-port", "-1",
           *extra]
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    return Proc(cmd, args.out, name, port, "/ready").wait_ready()


def spec_counts(port):
    st, body = call(port, "GET", "/metrics")
    out = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    if st != 200:
        return out
    for line in body.decode().splitlines():
        if line.startswith("#"):
            continue
        for key, name in (("drafts", "spec_decode_num_drafts_total"), ("draft_tokens", "spec_decode_num_draft_tokens_total"),
                          ("accepted", "spec_decode_num_accepted_tokens_total")):
            if (":" + name + "{") in line or (":" + name + " ") in line:
                out[key] += float(line.rsplit(" ", 1)[1])
    return out


def acceptance(before, after):
    d = {k: after[k] - before[k] for k in before}
    if d["drafts"] <= 0:
        return None, None
    return d["accepted"] / max(1.0, d["draft_tokens"]), 1.0 + d["accepted"] / d["drafts"]


def stream_decode_rate(port, prompt, max_tokens):
    """One streamed greedy completion; decode tokens/s between the first and the last chunk."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first = last = None
    tokens = 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        ev = json.loads(line[5:])
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        if ev.get("choices") and ev["choices"][0].get("text"):
            now = time.perf_counter()
            first = first or now
            last = now
    conn.close()
    if not first or last <= first or tokens < 2:
        return None, tokens
    return (tokens - 1) / (last - first), tokens


def section_a(args):
    bench = os.path.join(args.build, "bench", "tessera-spec-bench")
    cmd = [bench, "--model", args.model, "--threads", str(args.threads)]
    cmd += ["--batches", "1,4", "--k", "2", "--context", "32", "--repeats", "2"] if args.quick else \
        ["--batches", "1,4,16", "--k", "2,4,8", "--context", "256", "--repeats", "9"]
    log("(a) " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    with open(os.path.join(args.out, "a_cost.jsonl"), "w") as f:
        f.write(r.stdout)
    table = r.stdout[r.stdout.index("| batch"):]
    return "### (a) verification step vs plain decode step\n\n" + table


def loop_prompt(args, n_out):
    """A random prompt plus the model's own greedy continuation (its loop, if it falls in one)."""
    prompt = list(range(1000, 1016))
    r = subprocess.run([os.path.join(args.build, "tessera"), "--log-level", "warn", "generate", "--model", args.model,
                        "--threads", str(args.threads), "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens",
                        str(n_out), "--temperature", "0", "--ignore-eos", "--no-progress"],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return prompt + json.loads(r.stdout.splitlines()[0])["choices"][0]["token_ids"]


def section_b(args):
    n = 16 if args.quick else 128
    prompt = loop_prompt(args, 32 if args.quick else 256)
    rows = ["| proposer | k | decode tok/s | speed-up | acceptance rate | mean acceptance length |", "|---|---|---|---|---|---|"]
    configs = [("none", None), ("ngram (prompt the model repeats)",
                                {"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_min": 2,
                                 "prompt_lookup_max": 4}),
               ("draft model = target", {"method": "draft_model", "model": args.model,
                                         "num_speculative_tokens": args.k})]
    base = None
    for name, spec in configs:
        srv = tessera_server(args, "b_" + name.split()[0], args.model, spec)
        try:
            stream_decode_rate(srv.port, prompt, 4)  # warm-up
            before = spec_counts(srv.port)
            rate, _ = stream_decode_rate(srv.port, prompt, n)
            rate_acc, length = acceptance(before, spec_counts(srv.port))
        finally:
            srv.stop()
        base = base or rate
        rows.append(f"| {name} | {spec['num_speculative_tokens'] if spec else '-'} | {rate:.2f} | {rate / base:.2f}x | "
                    f"{'-' if rate_acc is None else f'{rate_acc:.1%}'} | {'-' if length is None else f'{length:.2f}'} |")
    return "### (b) always-right proposers, single stream\n\n" + "\n".join(rows) + "\n"


def run_tessera_bench(args, port, name, dataset_args, concurrency, extra=()):
    res = os.path.join(args.out, f"{name}.json")
    cmd = [os.path.join(args.build, "bench", "tessera-bench"), "--base-url", f"http://127.0.0.1:{port}",
           "--endpoint", "/v1/completions", *dataset_args, "--max-concurrency", str(concurrency),
           "--num-prompts", str(max(2, concurrency * (1 if args.quick else 4))), "--result-json", res, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    run = json.load(open(res))["runs"][0]
    return run["output_throughput"], run.get("spec_decode")


def section_c(args):
    out_len = "16" if args.quick else "128"
    in_len = "16" if args.quick else "256"
    datasets = [("random", ["--dataset", "random", "--input-len", in_len, "--output-len", out_len]),
                ("shared-prefix", ["--dataset", "shared-prefix", "--prefix-len", in_len, "--input-len", "32",
                                   "--output-len", out_len])]
    if args.sharegpt:
        datasets.append(("sharegpt", ["--dataset", "sharegpt", "--dataset-path", args.sharegpt,
                                      "--sharegpt-output-len", out_len]))
    datasets = [d for d in datasets if d[0] in args.datasets.split(",") or d[0] == "sharegpt"]
    draft = args.draft or args.model
    configs = [("off", None), ("ngram", {"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_min": 2,
                                         "prompt_lookup_max": 4}),
               ("draft", {"method": "draft_model", "model": draft, "num_speculative_tokens": args.k})]
    if args.fixed_k:  # the per-sequence k policy off: every step drafts k
        configs += [(name + " fixed k", dict(spec, min_draft_acceptance=0)) for name, spec in configs if spec]
    rows = ["| dataset | concurrency | proposer | output tok/s | speed-up | acceptance rate | acceptance length |",
            "|---|---|---|---|---|---|---|"]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    results = {}
    for cname, spec in configs:
        srv = tessera_server(args, "c_" + cname.replace(" ", "_"), args.model, spec)
        try:
            for dname, dargs in datasets:
                for c in concurrencies:
                    results[(dname, c, cname)] = run_tessera_bench(args, srv.port, f"c_{cname.replace(' ', '_')}_{dname}_{c}",
                                                               dargs, c)
        finally:
            srv.stop()
    for dname, _ in datasets:
        for c in concurrencies:
            base = results[(dname, c, "off")][0]
            for cname, _ in configs:
                tps, sd = results[(dname, c, cname)]
                rate = f"{sd['acceptance_rate']:.1%}" if sd else "-"
                length = f"{sd['acceptance_length']:.2f}" if sd else "-"
                rows.append(f"| {dname} | {c} | {cname} | {tps:.2f} | {tps / base:.2f}x | {rate} | {length} |")
    return (f"### (c) tessera-bench datasets (k = {args.k}, draft {'= target' if not args.draft else args.draft})\n\n" +
            "\n".join(rows) + "\n")


def section_d(args):
    if not (args.llama_server and args.gguf and args.gguf_draft):
        return "### (d) llama-server side by side\n\nskipped: needs --llama-server, --gguf and --gguf-draft\n"
    out_len = "16" if args.quick else "128"
    dargs = ["--dataset", "random", "--input-len", "16" if args.quick else "128", "--output-len", out_len]
    rows = ["| server | speculation | concurrency | output tok/s |", "|---|---|---|---|"]
    for c in (1, 4):
        for label, kind in (("tessera", "off"), ("llama-server", "off"), ("tessera", "draft"), ("llama-server", "draft")):
            if label == "tessera":
                spec = {"method": "draft_model", "model": args.gguf_draft, "num_speculative_tokens": args.k} \
                    if kind == "draft" else None
                srv = tessera_server(args, f"d_tessera_{kind}_{c}", args.gguf, spec, ["--max-num-seqs", str(max(4, c))])
            else:
                port = free_port()
                cmd = [args.llama_server, "-m", args.gguf, "-t", str(args.threads), "--host", "127.0.0.1",
                       "--port", str(port), "-np", str(c), "-c", str(4096 * c)]
                if kind == "draft":
                    cmd += ["-md", args.gguf_draft, "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0"]
                srv = Proc(cmd, args.out, f"d_llama_{kind}_{c}", port, "/health").wait_ready()
            try:
                tps, _ = run_tessera_bench(args, srv.port, f"d_{label}_{kind}_{c}", dargs, c)
            finally:
                srv.stop()
            rows.append(f"| {label} | {'draft model, k = ' + str(args.k) if kind == 'draft' else 'off'} | {c} | {tps:.2f} |")
    return "### (d) llama-server side by side (same GGUF pair)\n\n" + "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True, help="target: HF directory or .gguf")
    ap.add_argument("--draft", default="", help="draft model for (c) (default: the target itself)")
    ap.add_argument("--gguf", default="", help="(d) target GGUF")
    ap.add_argument("--gguf-draft", default="", help="(d) draft GGUF (same vocabulary)")
    ap.add_argument("--llama-server", default="", help="(d) llama-server binary")
    ap.add_argument("--sharegpt", default="", help="(c) ShareGPT JSON file")
    ap.add_argument("--datasets", default="random,shared-prefix", help="(c) which tessera-bench datasets")
    ap.add_argument("--concurrency", default="1,4", help="(c) concurrencies")
    ap.add_argument("--fixed-k", action="store_true",
                    help="(c) also run each proposer with min_draft_acceptance 0 (k fixed), same minute")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--sections", default="a,b,c,d")
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check the script, not the machine")
    args = ap.parse_args()
    args.out = args.out or tempfile.mkdtemp(prefix="tessera-spec-bench-")
    os.makedirs(args.out, exist_ok=True)
    args.build = os.path.abspath(args.build)
    sections = {"a": section_a, "b": section_b, "c": section_c, "d": section_d}
    load = os.getloadavg()[0]
    print(f"## Speculative decoding ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, model {args.model}, "
          f"{args.threads} threads, load average {load:.2f} at start)\n")
    rc = 0
    for s in args.sections.split(","):
        try:
            print(sections[s](args), flush=True)
        except Exception as e:  # noqa: BLE001 - report the section and go on
            print(f"### ({s}) failed: {e}\n", flush=True)
            rc = 1
    log(f"raw results in {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
