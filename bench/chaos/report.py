"""The chaos soak's report: failures grouped by why and by the fault around them, recovery per fault
kind, and the Markdown paragraph for bench/RESULTS.md. Pure functions over plain data."""
import statistics

from checker import normalize

AROUND_S = 30.0  # a failure up to this long after a fault ended is counted as that fault's


def fault_around(faults, t, lookahead=AROUND_S):
    """The fault a request that started at t (s since the load began) ran into: the latest one in
    progress at t or that ended less than AROUND_S before it; else the first one that began within
    `lookahead` s after t (what the request took, when known); None if none."""
    active = [f for f in faults if f["at_s"] <= t <= f.get("end_s", f["at_s"] + f["hold_s"]) + AROUND_S]
    if active:
        return active[-1]
    later = [f for f in faults if t < f["at_s"] <= t + lookahead]
    return later[0] if later else None


def group_failures(failures, faults):
    """failures: [(t_s, why, lookahead_s)] -> {"by_reason": {why: n}, "by_fault": {fault kind: {why: n}}}."""
    by_reason, by_fault = {}, {}
    for t, why, lookahead in failures:
        w = normalize(why)
        by_reason[w] = by_reason.get(w, 0) + 1
        f = fault_around(faults, t, lookahead)
        ctx = f"{f['kind']} {f['target_kind']}" if f else "no fault near"
        by_fault.setdefault(ctx, {})
        by_fault[ctx][w] = by_fault[ctx].get(w, 0) + 1
    order = lambda d: dict(sorted(d.items(), key=lambda kv: -kv[1]))  # noqa: E731
    return {"by_reason": order(by_reason), "by_fault": {k: order(v) for k, v in sorted(by_fault.items())}}


def failure_examples(failures, faults, n=20):
    """The first n failures as they happened, each with the fault it was charged to (its index)."""
    out = []
    for t, why, took in sorted(failures)[:n]:
        f = fault_around(faults, t, took)
        out.append({"t_s": t, "took_s": took, "why": why[:200], "fault": None if f is None else f["i"]})
    return out


def recovery_by_kind(faults):
    out = {}
    for f in faults:
        if "end_s" not in f:
            continue  # not reached (the run was interrupted)
        k = f"{f['kind']} {f['target_kind']}"
        d = out.setdefault(k, {"count": 0, "recovered": 0, "times": []})
        d["count"] += 1
        if f.get("recovery_s") is not None:
            d["recovered"] += 1
            d["times"].append(f["recovery_s"])
    for d in out.values():
        ts = d.pop("times")
        d["p50_s"] = round(statistics.median(ts), 2) if ts else None
        d["max_s"] = round(max(ts), 2) if ts else None
    return dict(sorted(out.items()))


def activity_sentence(a):
    """What the load exercised, summed over the instances (counters since each one's last start)."""
    if not a:
        return ""

    def total(key, label=None):
        n = 0.0
        for name, v in a.items():
            x = v.get(key) if name != "router" else None
            n += (x.get(label, 0.0) if isinstance(x, dict) else (x or 0.0)) if x is not None else 0.0
        return int(n)
    router = a.get("router", {})
    skipped = router.get("router_prefill_skipped_total") or {}
    why = ", ".join(f"{int(v)} {k}" for k, v in sorted(skipped.items())) if isinstance(skipped, dict) else skipped
    return (f" Exercised (counters since each process's last start): {total('kv_transfer_blocks_total', 'pulled')} "
            f"KV blocks pulled from prefills ({total('kv_transfer_failures_total')} pulls failed and were "
            f"recomputed), {total('kv_offload_stored_blocks_total')} blocks stored to Redis and "
            f"{total('kv_offload_hits_total')} found there, {int(router.get('router_prompt_hit_tokens_total') or 0)} "
            f"prompt tokens routed to a cached prefix, {int(router.get('router_migrations_total') or 0)} "
            f"migrations, prefills skipped: {why or 0}.")


def markdown(r):
    """One paragraph and a table, with every figure RESULTS.md needs from this run."""
    c = r["config"]
    q = r["requests"]
    kinds = {}
    for f in r["faults"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    reasons = "; ".join(f"{n}× {w}" for w, n in list(q["failures"]["by_reason"].items())[:6]) or "none"
    idle = r["idle_at_end"]
    not_idle = [n for n, v in idle.items() if not v["ok"]]
    drift = ", ".join(f"{n} {v['drift_mb']:+.1f}" + (f" (restarted {v['restarts']}×, the last at {v['since_s']:.0f} s)"
                                                      if v["restarts"] else "")
                      for n, v in r["rss"].items() if v.get("drift_mb") is not None)
    text = (
        f"Chaos soak, {r['date']}, commit {c['commit']}, {c['model_desc']}: router (kv-aware) + 2 prefill + "
        f"2 decode + Redis (bench/chaos/cluster.py), {c['minutes']} min, seed {c['seed']}: "
        f"{len(r['faults'])} faults ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}; schedule in the "
        f"JSON). Clients sent {q['sent']} requests ({q['bench']['sent']} tessera-bench, {q['checked']['sent']} "
        f"checked greedy): {q['completed']} completed, {q['failed']} failed ({reasons}), "
        f"{q['bench']['cancelled_at_end']} cut by the end of the run; besides, {q['probes']['sent']} recovery "
        f"probes. Checked outputs (greedy requests and completed probes) "
        f"differing from the unified reference: **{q['mismatched']}** of "
        f"{q['checked']['completed'] + q['probes']['completed']}. At the end "
        + ("every instance was back to idle (KV usage 0, no pinned exports, nothing running or waiting)"
           if not not_idle else f"NOT idle: {', '.join(not_idle)}")
        + f"; RSS drift (MB): {drift}. Every process alive at the end: {r['all_alive_at_end']}."
        + activity_sentence(r.get("activity", {})))
    rows = ["| fault | count | recovered | recovery p50 (s) | max (s) |", "|---|---|---|---|---|"]
    for k, d in r["recovery"].items():
        rows.append(f"| {k} | {d['count']} | {d['recovered']} | {d['p50_s']} | {d['max_s']} |")
    note = ("Recovery: from the end of the fault (restart, SIGCONT, heal) until the target is ready, the "
            "router's last poll saw every instance healthy and a probe through the router equalled its "
            "reference.")
    return text + "\n\n" + "\n".join(rows) + "\n\n" + note + "\n"
