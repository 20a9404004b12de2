"""The agent's HTTP server: a threading server with a bound on connections and on how long a request's head
may take (standard library only, Python 3.7+)."""

import socket
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, Dict, Optional


class AgentServer(ThreadingHTTPServer):
    """A threading server with a bound on connections and on how long a request's head may take.

    A connection is *waiting* while its request line and headers have not all arrived (a new
    one, or a kept-alive one between requests). Waiting longer than ``header_timeout`` closes it;
    when ``max_connections`` are open, a new connection closes the longest-waiting one (of those waiting
    longer than a short grace), or, if there is none, is answered 503 with Retry-After at once.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    max_connections = 256
    header_timeout = 10.0
    loopback = True
    open_reads = True
    host = "127.0.0.1"
    service = None  # type: Any  # the AgentService (set by make_server)

    def __init__(self, address: Any, handler: Any) -> None:
        self._conn_lock = threading.Lock()
        # socket -> monotonic time it started waiting, or None while busy
        self._conns: Dict[Any, Optional[float]] = {}
        ThreadingHTTPServer.__init__(self, address, handler)

    def connections(self) -> int:
        with self._conn_lock:
            return len(self._conns)

    def waiting(self, sock: socket.socket, flag: bool) -> None:
        with self._conn_lock:
            if sock in self._conns:
                self._conns[sock] = time.monotonic() if flag else None

    @staticmethod
    def _hang_up(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # its thread sees the end of the stream and finishes
        except OSError:
            pass

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            if len(self._conns) >= self.max_connections:
                # Only a connection that has kept the agent waiting a while is closed for a newcomer: a burst of
                # real clients (whose heads are on their way) gets 503 + Retry-After rather than a dropped line.
                grace = time.monotonic() - min(1.0, self.header_timeout / 4.0)
                waiting = [(t, s) for s, t in self._conns.items() if t is not None and t < grace]
                if not waiting:
                    busy = True
                else:
                    busy = False
                    victim = min(waiting, key=lambda ts: ts[0])[1]
                    del self._conns[victim]
                    self._hang_up(victim)
            else:
                busy = False
            if not busy:
                self._conns[request] = time.monotonic()
        if busy:
            try:
                request.settimeout(1.0)
                body = b'{"error": "the agent is at its connection limit; retry shortly", "status": 503}'
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        ThreadingHTTPServer.process_request(self, request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            ThreadingHTTPServer.process_request_thread(self, request, client_address)
        finally:
            with self._conn_lock:
                self._conns.pop(request, None)

    def service_actions(self) -> None:
        """Called between accepts: close connections whose request head is overdue."""
        now = time.monotonic()
        with self._conn_lock:
            late = [s for s, t in self._conns.items() if t is not None and now - t > self.header_timeout]
            for s in late:
                del self._conns[s]
        for s in late:
            self._hang_up(s)
