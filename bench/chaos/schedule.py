"""The chaos soak's fault schedule: a pure function of the seed, so a run can be replayed.

Each fault is one of
  kill9      SIGKILL a process, restart it (same command, same ports) after `hold_s`
  sigstop    SIGSTOP a process, SIGCONT it after `hold_s`
  partition  cut a link (bench/chaos/relay.py) for `hold_s`, then heal it
on a target picked at random: the action first, then the kind of process (prefill, decode,
redis, router) or of link (router>prefill, router>decode, instance>redis), then one of them.
A fault starts a random gap (default 20-60 s) after the previous one ended (the first one
after a gap from the start of the load), and the last one ends at least `TAIL_S` before the
load does, so the end-of-run checks see a recovered topology.
"""
import random

ACTIONS = ("kill9", "sigstop", "partition")
PROCESS_KINDS = ("prefill", "decode", "redis", "router")
LINK_KINDS = ("router>prefill", "router>decode", "instance>redis")
HOLD_S = {"kill9": (0.5, 3.0), "sigstop": (3.0, 15.0), "partition": (3.0, 15.0)}
TAIL_S = 20.0


def processes_of(kind, pool):
    """The processes of one kind in a topology of `pool` prefill and `pool` decode instances."""
    if kind in ("redis", "router"):
        return [kind]
    return [f"{kind}{i}" for i in range(1, pool + 1)]


def links_of(kind, pool):
    """Links are named client>server: the relay sits in front of the server, for that client only."""
    if kind == "instance>redis":
        return [f"{role}{i}>redis" for role in ("prefill", "decode") for i in range(1, pool + 1)]
    role = kind.split(">")[1]
    return [f"router>{role}{i}" for i in range(1, pool + 1)]


def make_schedule(seed, duration_s, gap=(20.0, 60.0), pool=2):
    """[{"i", "at_s", "kind", "target", "target_kind", "hold_s"}], at_s from the start of the load."""
    rng = random.Random(seed)
    out = []
    t = 0.0
    while True:
        at = t + rng.uniform(*gap)
        action = rng.choice(ACTIONS)
        if action == "partition":
            target_kind = rng.choice(LINK_KINDS)
            target = rng.choice(links_of(target_kind, pool))
        else:
            target_kind = rng.choice(PROCESS_KINDS)
            target = rng.choice(processes_of(target_kind, pool))
        hold = round(rng.uniform(*HOLD_S[action]), 1)
        at = round(at, 1)
        if at + hold + TAIL_S > duration_s:
            return out
        out.append({"i": len(out), "at_s": at, "kind": action, "target": target, "target_kind": target_kind,
                    "hold_s": hold})
        t = at + hold


def format_schedule(schedule):
    lines = [f"{'#':>3}  {'at (s)':>8}  {'fault':<10} {'target':<16} {'hold (s)':>8}"]
    lines += [f"{f['i']:>3}  {f['at_s']:>8.1f}  {f['kind']:<10} {f['target']:<16} {f['hold_s']:>8.1f}"
              for f in schedule]
    return "\n".join(lines)
