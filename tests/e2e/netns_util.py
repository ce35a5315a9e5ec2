"""Real network faults for the e2e tests: two network namespaces joined by a veth pair.

Not a test itself (ctest registers test_*.py only). Needs root (CAP_SYS_ADMIN and
CAP_NET_ADMIN), `ip` and `tc`; `unavailable()` says why not, so a test can skip
visibly. The kernel needs no netem: a partition is a link taken down (packets
vanish, no reset), a crawl is a `tbf` qdisc on one side's egress.

    link = VethLink("tf")
    try:
        link.create()                # namespaces tf<pid>a / tf<pid>b, 10.231.0.1 / .2
        link.enter("b")              # this process (and every child) now lives in side b
        srv = Server(..., host=link.addr("a"), netns=link.ns("a"))
        link.down("a"); link.up("a")
        link.throttle("a", "16kbit"); link.unthrottle("a")
        link.tx_bytes("a")           # bytes side a has sent over the link
    finally:
        link.close()                 # deletes both namespaces (the veth goes with them)

enter() moves sockets only: start a process that enumerates interfaces (UCX reads
/sys/class/net) through `ip netns exec`, which remounts /sys for the namespace.

Threading: enter() switches the calling thread's network namespace; call it first
thing, while the process has one thread, so that every thread and child started
later inherits it. Namespace and interface names carry the pid: concurrent tests
never share one.
"""
import ctypes
import json
import os
import shutil
import subprocess
import time

_CLONE_NEWNET = 0x40000000
SUBNET = "10.231.0"


def _run(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode()


def unavailable():
    """None when namespaces, veth pairs and tbf can be made here; otherwise why not."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (iproute2) on PATH"
    probe = VethLink("tp")
    try:
        probe.create()
        probe.throttle("a", "1mbit")
    except (RuntimeError, OSError) as e:
        return f"cannot build a veth link in network namespaces: {e}"
    finally:
        probe.close()
    return None


class VethLink:
    """Namespaces `<prefix><pid>a` and `...b` joined by one veth pair (side a: SUBNET.1, b: SUBNET.2)."""

    def __init__(self, prefix):
        tag = f"{prefix}{os.getpid()}"
        self._ns = {"a": tag + "a", "b": tag + "b"}
        self._dev = {"a": tag + "a", "b": tag + "b"}  # interface names: 15 characters at most
        self._addr = {"a": SUBNET + ".1", "b": SUBNET + ".2"}
        self._made = []

    def ns(self, side):
        return self._ns[side]

    def addr(self, side):
        return self._addr[side]

    def create(self):
        for side in "ab":
            _run("ip", "netns", "add", self._ns[side])
            self._made.append(self._ns[side])
            _run("ip", "-n", self._ns[side], "link", "set", "lo", "up")
        _run("ip", "link", "add", self._dev["a"], "netns", self._ns["a"], "type", "veth",
             "peer", "name", self._dev["b"], "netns", self._ns["b"])
        for side in "ab":
            _run("ip", "-n", self._ns[side], "addr", "add", self._addr[side] + "/24", "dev", self._dev[side])
        _run("ip", "-n", self._ns["a"], "link", "set", self._dev["a"], "up")
        self.up("b")  # waits for carrier on both ends
        return self

    def enter(self, side):
        """Moves the calling thread (and what it starts from now on) into `side`'s namespace."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self._ns[side]}", os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into {self._ns[side]}: {os.strerror(err)}")
        finally:
            os.close(fd)

    def down(self, side):
        """A partition: `side`'s end of the link goes down; packets both ways vanish (no reset)."""
        _run("ip", "-n", self._ns[side], "link", "set", self._dev[side], "down")

    def up(self, side):
        """Heals a partition: returns once both ends have carrier again, with the neighbour entries that
        failed while the link was down forgotten (a FAILED entry answers EHOSTUNREACH until re-probed)."""
        _run("ip", "-n", self._ns[side], "link", "set", self._dev[side], "up")
        deadline = time.time() + 10
        while True:
            states = [json.loads(subprocess.run(["ip", "-n", self._ns[s], "-j", "link", "show", "dev", self._dev[s]],
                                                check=True, capture_output=True, text=True).stdout)[0]
                      for s in ("a", "b")]
            if all(st.get("operstate") == "UP" and "NO-CARRIER" not in st.get("flags", []) for st in states):
                break
            if time.time() > deadline:
                raise AssertionError(f"veth {self._dev['a']}/{self._dev['b']} not back up: {states}")
            time.sleep(0.02)
        for s in ("a", "b"):
            _run("ip", "-n", self._ns[s], "neigh", "flush", "dev", self._dev[s])

    def throttle(self, side, rate, latency="200ms"):
        """`side`'s egress at `rate` (tc's units, e.g. 16kbit); up to `latency` of packets queue, the rest drop."""
        _run("ip", "netns", "exec", self._ns[side], "tc", "qdisc", "replace", "dev", self._dev[side], "root",
             "tbf", "rate", rate, "burst", "1600", "latency", latency)

    def unthrottle(self, side):
        _run("ip", "netns", "exec", self._ns[side], "tc", "qdisc", "del", "dev", self._dev[side], "root")

    def cap_send_buffers(self, side, max_bytes):
        """Caps TCP send buffers in `side`'s namespace (net.ipv4.tcp_wmem is per namespace) so that a
        large reply stays mostly in the sending process, not in its kernel: a frozen or killed sender
        then really stops the bytes (the kernel would otherwise deliver what it already holds)."""
        _run("ip", "netns", "exec", self._ns[side], "sh", "-c",
             f"echo '4096 {min(16384, max_bytes)} {max_bytes}' > /proc/sys/net/ipv4/tcp_wmem")

    def tx_bytes(self, side):
        """Bytes `side` has sent over the link (its interface's counter)."""
        out = json.loads(_run("ip", "-n", self._ns[side], "-s", "-j", "link", "show", "dev", self._dev[side]))
        return int(out[0]["stats64"]["tx"]["bytes"])

    def close(self):
        """Deletes the namespaces this link made (the veth pair goes with them). Idempotent."""
        while self._made:
            subprocess.run(["ip", "netns", "del", self._made.pop()], capture_output=True, timeout=30)
