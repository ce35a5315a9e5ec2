"""A TCP relay that can be cut like a network link: the chaos soak's partitions.

Relay(target_port) listens on 127.0.0.1 (a free port, `.port`) and forwards every connection
to 127.0.0.1:target_port. cut() makes it behave as a link taken down with
`ip link set ... down`: no byte moves in either direction, nothing is closed or reset (no
RST, no FIN), and a connection opened meanwhile is accepted (the kernel completes the
handshake of a listening socket anyway) but reaches the target only after heal(). heal()
resumes forwarding; data held while cut is delivered in order, as TCP retransmission
delivers it after a real partition heals. Whether a peer gives up meanwhile is its own
timeouts' business, which is what the soak measures.

Threads: one acceptor, and two pump threads per connection (one per direction), all daemon
threads owned by the Relay; close() stops them and closes every socket. A pump blocked in
recv() while cut holds at most one buffer (64 KiB) it has not forwarded; the rest stays in
the kernel's socket buffers, so a cut applies backpressure exactly as a dead link does.
Stdlib only.
"""
import socket
import threading

BUF = 65536


class Relay:
    def __init__(self, target_port, name="", target_host="127.0.0.1"):
        self.name = name
        self.target = (target_host, target_port)
        self._open = threading.Event()  # set: forwarding; clear: cut
        self._open.set()
        self._closed = False
        self._lock = threading.Lock()
        self._socks = set()
        self.connections = 0  # accepted so far (for reports and tests)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name=f"relay-{name}", daemon=True).start()

    @property
    def is_cut(self):
        return not self._open.is_set()

    def cut(self):
        self._open.clear()

    def heal(self):
        self._open.set()

    def close(self):
        self._closed = True
        self._open.set()  # wake pumps waiting for a heal, so that they see _closed
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            socks, self._socks = list(self._socks), set()
        for s in socks:
            try:
                s.close()
            except OSError:
                pass

    def _track(self, s):
        with self._lock:
            if self._closed:
                s.close()
                return False
            self._socks.add(s)
            return True

    def _forget(self, *socks):
        with self._lock:
            for s in socks:
                self._socks.discard(s)
                try:
                    s.close()
                except OSError:
                    pass

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._track(client):
                return
            self.connections += 1
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client):
        self._open.wait()  # opened during a cut: reaches the target after the heal
        if self._closed:
            self._forget(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            self._forget(client)  # the target is down: the client sees its connection close
            return
        if not self._track(upstream):
            self._forget(client)
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=self._pump, args=(upstream, client), daemon=True)
        back.start()
        self._pump(client, upstream)
        back.join()
        self._forget(client, upstream)

    def _pump(self, src, dst):
        """src -> dst until src ends (the half-close is passed on) or either side fails (then
        both are closed, which ends the other direction's pump too)."""
        try:
            while True:
                self._open.wait()
                data = src.recv(BUF)
                self._open.wait()  # read before the cut: held, not delivered, until the heal
                if self._closed:
                    break
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass
        self._forget(src, dst)
