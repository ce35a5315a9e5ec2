#!/usr/bin/env python3
"""The chaos soak's machinery (bench/chaos/) and the quiet-machine helper (bench/quiet_run.sh),
without the soak itself (a benchmark run by hand, bench/chaos/README.md). Seconds, no tessera.

  relay      forwards both ways; cut: no byte moves and nothing is reset; a connection opened
             during a cut reaches the target only after the heal; heal delivers what was held,
             in order; the target's close reaches the client
  schedule   the same seed gives the same faults (also through `chaos_soak.py --schedule-only`),
             gaps and holds within their bounds, the last fault ends before the tail, every
             action and target kind occurs
  report     a failure is charged to the fault in progress, else to one that began while the
             request ran, else to none
  quiet_run  freezes a selected process (SIGSTOP) and not the command's own, resumes it after,
             passes the command's exit status on

Usage: tests/e2e/test_chaos_harness.py [--tessera build/tessera]  (the binary is not used)
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHAOS = os.path.join(REPO, "bench", "chaos")
sys.path.insert(0, HERE)
sys.path.insert(0, CHAOS)
sys.path.insert(0, os.path.join(REPO, "bench", "soak"))
from serve_util import Results  # noqa: E402
import report  # noqa: E402
import schedule  # noqa: E402
from relay import Relay  # noqa: E402


class Echo:
    """A target that upper-cases what it reads; counts the connections it accepted."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c):
        with c:
            while True:
                b = c.recv(4096)
                if not b or b == b"bye":
                    return
                c.sendall(b.upper())


def recv_exact(s, n, timeout):
    s.settimeout(timeout)
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise EOFError(f"closed after {out!r}")
        out += b
    return out


def nothing_within(s, seconds):
    """True if no byte and no EOF/RST arrives within `seconds` (the link is silent, not closed)."""
    s.settimeout(seconds)
    try:
        b = s.recv(1)
    except socket.timeout:
        return True
    raise AssertionError(f"got {b!r} (b'' is a close) while the link was cut")


def main():
    start = time.time()
    res = Results()
    echo = Echo()
    relay = Relay(echo.port, name="test")

    def relay_cut_and_heal():
        s = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        s.sendall(b"abc")
        assert recv_exact(s, 3, 5) == b"ABC"
        relay.cut()
        s.sendall(b"def")       # held by the cut
        assert nothing_within(s, 0.4)
        late = socket.create_connection(("127.0.0.1", relay.port), timeout=5)  # accepted, not forwarded
        late.sendall(b"xyz")
        time.sleep(0.3)
        assert echo.accepted == 1, f"a connection reached the target during the cut ({echo.accepted})"
        s.sendall(b"ghi")
        relay.heal()
        assert recv_exact(s, 6, 5) == b"DEFGHI"
        assert recv_exact(late, 3, 5) == b"XYZ"
        assert echo.accepted == 2
        s.sendall(b"bye")      # the target closes: the client sees the end of the stream
        s.settimeout(5)
        assert s.recv(1) == b"", "the target's close did not reach the client"
        s.close()
        late.close()
    res.run("relay: cut holds bytes and new connections without a reset; heal delivers them in order",
            relay_cut_and_heal)

    def schedule_is_seeded():
        a = schedule.make_schedule(5, 1800)
        assert a == schedule.make_schedule(5, 1800), "same seed, other faults"
        assert a != schedule.make_schedule(6, 1800)
        assert 25 <= len(a) <= 60, len(a)
        prev_end = 0.0
        for f in a:
            assert 20.0 <= round(f["at_s"] - prev_end, 1) <= 60.0 + 0.1, f
            lo, hi = schedule.HOLD_S[f["kind"]]
            assert lo <= f["hold_s"] <= hi, f
            prev_end = f["at_s"] + f["hold_s"]
        assert prev_end + schedule.TAIL_S <= 1800
        seen = {(f["kind"], f["target_kind"]) for s in range(1, 6) for f in schedule.make_schedule(s, 1800)}
        want = {(k, t) for k in ("kill9", "sigstop") for t in schedule.PROCESS_KINDS}
        want |= {("partition", t) for t in schedule.LINK_KINDS}
        assert seen == want, want ^ seen
        cli = [sys.executable, os.path.join(CHAOS, "chaos_soak.py"), "--schedule-only", "--seed", "9",
               "--minutes", "10", "--fault-gap", "5", "15"]
        runs = [subprocess.run(cli, capture_output=True, text=True, timeout=60) for _ in range(2)]
        assert all(r.returncode == 0 for r in runs), runs[0].stderr[-1000:]
        assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout) == \
            schedule.make_schedule(9, 600, (5.0, 15.0))
        assert "partition" in runs[0].stderr or "kill9" in runs[0].stderr, "the schedule was not printed"
    res.run("schedule: a function of the seed, within its bounds, every fault kind", schedule_is_seeded)

    def failures_charged_to_faults():
        faults = [{"at_s": 100.0, "hold_s": 10.0, "end_s": 110.0, "kind": "kill9", "target_kind": "router"},
                  {"at_s": 120.0, "hold_s": 5.0, "end_s": 125.0, "kind": "partition", "target_kind": "router>decode"}]
        assert report.fault_around(faults, 105.0, 30.0)["kind"] == "kill9"  # in progress beats a later one
        assert report.fault_around(faults, 130.0, 0.0)["kind"] == "partition"  # the latest in progress or just over
        assert report.fault_around(faults, 90.0, 15.0)["kind"] == "kill9"  # began while the request ran
        assert report.fault_around(faults, 90.0, 5.0) is None
        assert report.fault_around(faults, 200.0, 0.0) is None  # AROUND_S (30 s) after the last one ended
        g = report.group_failures([(105.0, "ConnectionRefusedError: [Errno 111] refused", 0.0),
                                   (300.0, "HTTP 503: busy", 0.0)], faults)
        assert g["by_fault"] == {"kill9 router": {"ConnectionRefusedError: [Errno N] refused": 1},
                                 "no fault near": {"HTTP N: busy": 1}}, g
    res.run("report: failures grouped by why and by the fault around them", failures_charged_to_faults)

    def quiet_run_freezes_and_resumes():
        tag = "quiet-run-test-" + uuid.uuid4().hex[:12]
        victim = subprocess.Popen(["bash", "-c", f"exec -a {tag} sleep 60"])
        try:
            time.sleep(0.2)
            probe = (f"exec -a {tag} sleep 30 & own=$!; sleep 1.5; "
                     f"echo $(ps -o stat= -p {victim.pid}) $(ps -o stat= -p $own); kill $own; exit 7")
            p = subprocess.run([os.path.join(REPO, "bench", "quiet_run.sh"), "--match", f"^{tag} ", "20",
                                "bash", "-c", probe], capture_output=True, text=True, timeout=30)
            assert p.returncode == 7, (p.returncode, p.stderr)
            victim_state, own_state = p.stdout.split()
            assert victim_state.startswith("T"), f"the selected process was not frozen: {victim_state}"
            assert not own_state.startswith("T"), "the command's own process was frozen"
            with open(f"/proc/{victim.pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            assert state != "T", "not resumed after the command ended"
        finally:
            victim.kill()
            victim.wait()
    res.run("quiet_run.sh: freezes what it selects, never the command, resumes it, exit status passed on",
            quiet_run_freezes_and_resumes)

    relay.close()
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
