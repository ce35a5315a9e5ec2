#!/usr/bin/python3
"""Chaos soak: the pd+kv topology under tessera-bench load for N minutes while faults are injected.

    /usr/bin/python3 bench/chaos/chaos_soak.py --tessera build/tessera [--minutes 30] [--seed 1] \
        [--out chaos.json] [--out-md chaos.md]

1. Reference: a unified `tessera serve` (deploy/local's flags) computes, alone, the greedy token ids
   of the checked prompts (bench/chaos/checker.py), then stops.
2. Topology (bench/chaos/cluster.py): a kv-aware router, 2 prefill and 2 decode instances and a
   redis-server shared KV tier, router->instance and instance->Redis links through relays that can
   be cut.
3. Load for --minutes: tessera-bench (shared-prefix prompts, Poisson --rate, at most --concurrency
   in flight) through the router, and --checkers clients sending the checked prompts back to back,
   each answer compared with the reference.
4. Faults (bench/chaos/schedule.py, from --seed; printed before the load starts): every 20-60 s
   (--fault-gap) a kill -9 (restarted with the same command), SIGSTOP/SIGCONT or partition of a
   prefill, a decode, Redis, the router or a link. After each, the time until the topology has
   recovered: the target ready, the router's poll sees every instance healthy, and a probe through
   the router equals its reference.
5. End: every instance's /metrics back to idle (KV usage 0, no pinned exports, nothing running or
   waiting) within --idle-timeout (longer than the prefills' --kv-pin-timeout, 60 s), VmRSS drift of
   every process, then SIGTERM in deploy/local's order.

Prints a table on stderr and one JSON object on stdout (and --out); --out-md gets the Markdown
paragraph for bench/RESULTS.md. Exits 1 when a checked output differs from the reference, an
instance is not idle at the end, a process is dead at the end, a fault never recovered, nothing
completed, or tessera-bench left no result. Stdlib only; the same --seed gives the same fault schedule (--schedule-only prints it).
"""
import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench", "soak"))
import checker  # noqa: E402
import report  # noqa: E402
import schedule as chaos_schedule  # noqa: E402
from cluster import Cluster, topology  # noqa: E402
from soak import emit_json, rss_summary  # noqa: E402

# Evidence that the load exercised the pd+kv paths (counters since each process's last start):
# metric -> the label it is split by (None: summed).
ACTIVITY = {"instance": {"tessera:kv_transfer_blocks_total": "source", "tessera:kv_transfer_failures_total": None,
                         "tessera:kv_offload_stored_blocks_total": None, "tessera:kv_offload_hits_total": None,
                         "tessera:kv_offload_errors_total": "kind", "tessera:prefix_cache_hits_total": None},
            "router": {"tessera:router_prompt_hit_tokens_total": None, "tessera:router_migrations_total": None,
                       "tessera:router_prefill_skipped_total": "reason",
                       "tessera:router_kv_peer_fetches_total": None}}
IDLE_GAUGES = ("tessera:num_requests_running", "tessera:num_requests_waiting", "tessera:kv_cache_usage_perc",
               "tessera:kv_exported_requests")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def engine_args(args):
    out = ["--model", args.model, "--threads", str(args.threads), "--kv-cache-mb", str(args.kv_cache_mb),
           "--max-model-len", str(args.max_model_len)]
    return out + args.serve_arg


def compute_reference(args, prompts, work):
    """The checked prompts' token ids from a unified instance with the topology's engine flags."""
    state = os.path.join(work, "reference")
    os.makedirs(state)
    p = topology.serve_process(args.tessera, "reference", state, engine_args(args), grpc=False)
    try:
        deadline = time.time() + topology.READY_TIMEOUT_S
        while True:
            if not topology.alive(p["pid"]):
                raise RuntimeError("the reference instance exited:\n" + open(p["log"]).read()[-2000:])
            try:
                if topology.ready(p):
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("the reference instance was not ready in time")
            time.sleep(0.1)
        return checker.reference(int(p["http"].rsplit(":", 1)[1]), prompts, args.max_tokens)
    finally:
        topology.stop([p])


class Faults:
    """Runs the schedule on its own thread and measures each fault's recovery."""

    def __init__(self, cluster, sched, t0, duration, probe, stop):
        self.cluster, self.sched, self.t0, self.duration = cluster, sched, t0, duration
        self.probe, self.stop = probe, stop
        self.done = []  # the schedule's entries as run: start_s, end_s, recovery_s

    def run(self):
        for i, f in enumerate(self.sched):
            if self.stop.wait(max(0.0, self.t0 + f["at_s"] - time.time())):
                return
            rec = dict(f, start_s=round(time.time() - self.t0, 2))
            self.done.append(rec)
            self.apply(f)
            if self.stop.wait(f["hold_s"]) and f["kind"] == "kill9":
                return  # interrupted: the topology is being stopped, nothing to restart
            self.undo(f)  # even when stopping: never leave a process stopped or a link cut
            rec["end_s"] = round(time.time() - self.t0, 2)
            until = self.t0 + (self.sched[i + 1]["at_s"] if i + 1 < len(self.sched) else self.duration)
            rec["recovery_window_s"] = round(until - time.time(), 1)
            rec["recovery_s"] = self.recover(f, until)
            log(f"[{rec['start_s'] / 60:5.1f} min] fault {f['i']}: {f['kind']} {f['target']} for {f['hold_s']} s; "
                + (f"recovered {rec['recovery_s']} s after" if rec["recovery_s"] is not None else
                   f"NOT RECOVERED within {rec['recovery_window_s']} s (the next fault or the end)"))

    def apply(self, f):
        c = self.cluster
        {"kill9": c.kill9, "sigstop": c.sigstop, "partition": c.cut}[f["kind"]](f["target"])

    def undo(self, f):
        c = self.cluster
        {"kill9": c.restart, "sigstop": c.sigcont, "partition": c.heal}[f["kind"]](f["target"])

    def recover(self, f, until):
        """Seconds from the fault's end until the target is ready, the router sees every instance
        healthy and a probe equals its reference; None if that never happened before `until`."""
        t_end = time.time()
        while time.time() < until and not self.stop.is_set():
            target_ok = f["kind"] == "partition" or self.cluster.ready(f["target"])
            if target_ok and self.cluster.router_sees_all() and self.probe():
                return round(time.time() - t_end, 2)
            time.sleep(0.25)
        return None


def sample_rss(cluster, stop, t0, every, out):
    """out: {name: [(pid, [(t_s, mb)])]}, one entry per incarnation of the process."""
    while not stop.is_set():
        for name in cluster.procs:
            mb = cluster.rss_mb(name)
            if mb is None:
                continue
            inc = out.setdefault(name, [])
            if not inc or inc[-1][0] != cluster.pid(name):
                inc.append((cluster.pid(name), []))
            inc[-1][1].append((round(time.time() - t0, 1), round(mb, 1)))
        stop.wait(every)


RSS_WARMUP_S = 30.0  # a restarted process's first samples are its start-up, not drift


def rss_report(samples, cluster):
    out = {}
    for name, incs in samples.items():
        last = incs[-1][1]
        if len(incs) > 1:
            settled = [x for x in last if x[0] >= last[0][0] + RSS_WARMUP_S]
            last = settled if len(settled) >= 3 else last
        s = rss_summary(last)
        s.pop("samples", None)
        s.update(restarts=cluster.restarts.get(name, 0), since_s=incs[-1][1][0][0] if incs[-1][1] else None,
                 first_incarnation_start_mb=incs[0][1][0][1] if incs[0][1] else None)
        out[name] = s
    return out


def wait_idle(cluster, timeout):
    """Every instance's idle gauges at 0; {name: {"ok", gauges..., "seconds"}}."""
    t0 = time.time()
    out = {}
    while True:
        for n in cluster.instances:
            try:
                m = cluster.metrics(n)
                out[n] = {g.split(":")[1]: m.get(g) for g in IDLE_GAUGES}
                out[n]["ok"] = all(m.get(g) == 0 for g in IDLE_GAUGES)
            except OSError as e:
                out[n] = {"ok": False, "error": str(e)}
        if all(v["ok"] for v in out.values()) or time.time() - t0 > timeout:
            break
        time.sleep(0.5)
    for v in out.values():
        v["seconds_to_idle"] = round(time.time() - t0, 1)
    return out


def by_label(text, name, label):
    """Prometheus text -> the samples of `name` summed (label None) or as {label value: sum}."""
    pat = re.compile(r"^" + re.escape(name) + r"(\{[^}]*\})?\s+(\S+)")
    out = {} if label else 0.0
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        if not label:
            out += float(m.group(2))
            continue
        lv = re.search(label + r'="([^"]*)"', m.group(1) or "")
        key = lv.group(1) if lv else ""
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def activity(cluster):
    out = {}
    for n in cluster.instances + ["router"]:
        try:
            text = cluster.metrics_text(n)
        except OSError as e:
            out[n] = {"error": str(e)}
            continue
        out[n] = {c.split(":")[1]: by_label(text, c, label)
                  for c, label in ACTIVITY["router" if n == "router" else "instance"].items()}
    return out


def start_bench(args, router_port, duration, work):
    path = os.path.join(work, "bench.json")
    n = max(10, math.ceil(args.rate * duration * 2))
    cmd = [args.bench, "--base-url", f"http://127.0.0.1:{router_port}", "--endpoint", "/v1/completions",
           "--dataset", "shared-prefix", "--prefix-len", str(args.bench_prefix_len), "--input-len", "32",
           "--output-len", "16", "--num-prefix-groups", "4", "--num-prompts", str(n), "--request-rate",
           str(args.rate), "--max-concurrency", str(args.concurrency), "--max-duration", str(int(duration)),
           "--timeout", str(int(args.io_timeout)), "--seed", str(args.seed), "--temperature", "0",
           "--result-json", path, "--no-progress"]
    out = open(os.path.join(work, "bench.log"), "wb")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), path, cmd


def bench_outcome(path, proc):
    """tessera-bench's records -> counts and [(send_time_s, why, lookahead_s)] of the failed ones."""
    try:
        with open(path) as f:
            run = json.load(f)["runs"][0]
    except (OSError, ValueError, KeyError, IndexError) as e:
        with open(os.path.join(os.path.dirname(path), "bench.log"), "rb") as f:
            tail = f.read()[-600:].decode("utf-8", "replace")
        return ({"sent": 0, "completed": 0, "failed": 0, "cancelled_at_end": 0,
                 "error": f"no result ({type(e).__name__}: {e}); exit status {proc.returncode}; log: {tail}"}, [])
    recs = run.get("requests", [])
    sent = [r for r in recs if r.get("sent")]
    cut = [r for r in sent if not r["ok"] and r.get("cancelled")]
    failed = [r for r in sent if not r["ok"] and not r.get("cancelled")]
    return ({"sent": len(sent), "completed": sum(r["ok"] for r in sent), "failed": len(failed),
             "cancelled_at_end": len(cut)},
            # how long a failed request took is not kept: a fault up to AROUND_S after it may be its cause
            [(r["send_time_s"], r.get("error", "?"), report.AROUND_S) for r in failed])


def git_commit():
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "?"
    except OSError:
        return "?"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "bench", "tessera-bench"))
    ap.add_argument("--model", default="", help="checkpoint (default: `tessera synth --arch qwen3 --size tiny`)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1, help="the fault schedule and the clients' choices")
    ap.add_argument("--fault-gap", type=float, nargs=2, default=[20.0, 60.0], metavar=("MIN", "MAX"),
                    help="seconds from one fault's end to the next one's start")
    ap.add_argument("--rate", type=float, default=2.0, help="tessera-bench requests per second (Poisson)")
    ap.add_argument("--concurrency", type=int, default=8, help="tessera-bench requests in flight at most")
    ap.add_argument("--bench-prefix-len", type=int, default=160, help="tessera-bench's shared prefix (words)")
    ap.add_argument("--checkers", type=int, default=3, help="clients sending checked greedy requests")
    ap.add_argument("--checker-pause", type=float, default=0.2, help="seconds between a checker's requests")
    ap.add_argument("--max-tokens", type=int, default=24, help="tokens per checked request")
    ap.add_argument("--io-timeout", type=float, default=120.0, help="seconds a request may wait for a byte")
    ap.add_argument("--threads", type=int, default=1, help="engine threads per instance")
    ap.add_argument("--kv-cache-mb", type=int, default=64)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--serve-arg", action="append", default=[], help="more `tessera serve` flags for every "
                    "instance (repeatable)")
    ap.add_argument("--router-arg", action="append", default=[], help="more flags for the router (repeatable)")
    ap.add_argument("--idle-timeout", type=float, default=120.0, help="seconds the instances get to be idle "
                    "after the load (> --kv-pin-timeout)")
    ap.add_argument("--rss-every", type=float, default=5.0)
    ap.add_argument("--out", default="", help="the JSON report")
    ap.add_argument("--out-md", default="", help="the Markdown paragraph for bench/RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (every process's log)")
    ap.add_argument("--schedule-only", action="store_true", help="print the fault schedule and exit")
    args = ap.parse_args()
    args.tessera, args.bench = os.path.abspath(args.tessera), os.path.abspath(args.bench)
    return args


def interrupted(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")  # SIGTERM (quiet_run.sh's timeout): stop the topology


def main():
    signal.signal(signal.SIGTERM, interrupted)
    args = parse_args()
    duration = args.minutes * 60.0
    sched = chaos_schedule.make_schedule(args.seed, duration, tuple(args.fault_gap))
    log(f"fault schedule (seed {args.seed}, {args.minutes} min):\n{chaos_schedule.format_schedule(sched)}")
    if args.schedule_only:
        print(json.dumps(sched, indent=1))
        return 0
    for exe in (args.tessera, args.bench):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"chaos_soak: {exe} is not built")
    if not shutil.which("redis-server"):
        raise SystemExit("chaos_soak: needs redis-server (apt-get install redis-server)")
    work = tempfile.mkdtemp(prefix="tessera-chaos-")
    desc = args.model or "tiny synthetic qwen3 (tessera synth --arch qwen3 --size tiny --dtype f32)"
    if not args.model:
        args.model = os.path.join(work, "tiny-qwen3")
        subprocess.run([args.tessera, "synth", "--arch", "qwen3", "--size", "tiny", "--dtype", "f32", "--out",
                        args.model], check=True, capture_output=True, timeout=300)
    args.model = os.path.abspath(args.model)
    r = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "config": {"command": sys.argv, "commit": git_commit(), "model": args.model, "model_desc": desc,
                    "minutes": args.minutes, "seed": args.seed, "fault_gap_s": args.fault_gap, "rate": args.rate,
                    "concurrency": args.concurrency, "checkers": args.checkers, "max_tokens": args.max_tokens,
                    "engine_args": engine_args(args), "router_args": args.router_arg},
         "schedule": sched, "faults": []}
    prompts = [(k, checker.with_sampling(b, args.max_tokens)) for k, b in checker.prompt_set()]
    cluster, stop, ok, threads, bench, faults = None, threading.Event(), False, [], None, None
    try:
        refs = compute_reference(args, prompts, work)
        cluster = Cluster(args.tessera, os.path.join(work, "topology"), engine_args(args),
                          router_args=args.router_arg)
        cluster.wait_ready()
        deadline = time.time() + 30
        while not cluster.router_sees_all():
            if time.time() > deadline:
                raise RuntimeError("the router never saw every instance healthy")
            time.sleep(0.1)
        router = cluster.http_port("router")
        r["config"]["processes"] = {n: p["cmd"] for n, p in cluster.procs.items()}
        log(f"topology up in {work}; load for {args.minutes} min")

        t0 = time.time()
        end = t0 + duration
        checked, probes = checker.Tally(), checker.Tally()
        probe_n = [0]

        def probe():
            probe_n[0] += 1
            return checker.check_one(router, prompts, refs, 0, False, f"chaos-probe-{probe_n[0]}", 15.0, probes, t0)

        faults = Faults(cluster, sched, t0, duration, probe, stop)
        rss = {}
        bench, bench_json, bench_cmd = start_bench(args, router, duration, work)
        r["config"]["bench_command"] = bench_cmd
        threads += [threading.Thread(target=faults.run, daemon=True),
                   threading.Thread(target=sample_rss, args=(cluster, stop, t0, args.rss_every, rss), daemon=True)]
        clients = [threading.Thread(target=checker.client, args=(router, prompts, refs, args.seed * 1000 + i, end,
                                                                 args.io_timeout, checked, t0, args.checker_pause),
                                    daemon=True) for i in range(args.checkers)]
        for t in threads + clients:
            t.start()
        last = time.time()
        while time.time() < end:
            time.sleep(1.0)
            if time.time() - last >= 60:
                last = time.time()
                log(f"[{(time.time() - t0) / 60:5.1f} min] checked: sent {checked.sent} completed "
                    f"{checked.completed} failed {len(checked.failures)} mismatched {checked.mismatched}; "
                    f"faults {len(faults.done)}")
        for t in clients:
            t.join(args.io_timeout + 30)
        threads[0].join(60)
        try:
            bench.wait(args.io_timeout + 60)
        except subprocess.TimeoutExpired:
            bench.kill()
        r["faults"] = faults.done
        r["idle_at_end"] = wait_idle(cluster, args.idle_timeout)
        r["all_alive_at_end"] = all(cluster.alive(n) for n in cluster.procs)
        r["activity"] = activity(cluster)
        stop.set()
        threads[1].join(10)
        r["rss"] = rss_report(rss, cluster)
        bench_counts, bench_failures = bench_outcome(bench_json, bench)
        # Probes are the soak's own recovery checks: failing until recovered is their job, so their
        # failures are not the clients'; a probe that completes is checked like any other request.
        failures = report.group_failures(bench_failures + checked.failures, faults.done)
        failures["examples"] = report.failure_examples(checked.failures, faults.done)
        part = lambda t: {"sent": t.sent, "completed": t.completed, "failed": len(t.failures),  # noqa: E731
                          "mismatched": t.mismatched}
        q = {"bench": bench_counts, "checked": part(checked)}
        q.update(sent=bench_counts["sent"] + checked.sent, completed=bench_counts["completed"] + checked.completed,
                 failed=bench_counts["failed"] + len(checked.failures), probes=part(probes),
                 mismatched=checked.mismatched + probes.mismatched,
                 failures=failures, mismatch_examples=checked.mismatch_examples + probes.mismatch_examples,
                 checked_latency_p50_s=checker_p(checked.latencies, 0.5),
                 checked_latency_p99_s=checker_p(checked.latencies, 0.99))
        r["requests"] = q
        r["recovery"] = report.recovery_by_kind(faults.done)
        r["duration_s"] = round(time.time() - t0, 1)
        ok = (q["mismatched"] == 0 and all(v["ok"] for v in r["idle_at_end"].values()) and r["all_alive_at_end"]
              and all(f.get("recovery_s") is not None for f in faults.done) and q["completed"] > 0
              and "error" not in bench_counts)
        r["markdown"] = report.markdown(r)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - report it, then stop everything
        r["error"] = f"{type(e).__name__}: {e}"
    finally:
        stop.set()
        if bench and bench.poll() is None:
            bench.kill()
            bench.wait()
        for t in threads:
            t.join(30)  # the fault thread ends its fault first (never a restart racing the stop)
        if faults:
            r["faults"] = faults.done
        if cluster:
            r["killed_at_stop"] = cluster.stop()
            r.setdefault("restarts", cluster.restarts)
            if not ok:
                r["log_tails"] = {n: cluster.log_tail(n, 1500) for n in cluster.procs}
        r["ok"] = ok
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_table(r)
    if args.out_md and "markdown" in r:
        with open(args.out_md, "w") as f:
            f.write(r["markdown"])
    emit_json(r, args.out)
    return 0 if ok else 1


def checker_p(values, q):
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))], 3)


def print_table(r):
    q = r.get("requests", {})
    rows = [("duration (s)", r.get("duration_s")), ("faults run", len(r.get("faults", []))),
            ("requests sent", q.get("sent")), ("completed", q.get("completed")), ("failed", q.get("failed")),
            ("MISMATCHED (must be 0)", q.get("mismatched")),
            ("instances idle at end", all(v["ok"] for v in r.get("idle_at_end", {"-": {"ok": False}}).values())),
            ("all processes alive at end", r.get("all_alive_at_end")), ("OK", r.get("ok"))]
    for w, n in list(q.get("failures", {}).get("by_reason", {}).items())[:8]:
        rows.append((f"  failed: {w[:60]}", n))
    for k, d in r.get("recovery", {}).items():
        rows.append((f"recovery {k}", f"{d['recovered']}/{d['count']}, p50 {d['p50_s']} s, max {d['max_s']} s"))
    if "error" in q.get("bench", {}):
        rows.append(("tessera-bench", q["bench"]["error"][:300]))
    if "error" in r:
        rows.append(("error", r["error"][:300]))
    w = max(len(k) for k, _ in rows)
    log("\n".join(f"{k:<{w}}  {v}" for k, v in rows))


if __name__ == "__main__":
    sys.exit(main())
