"""The transport interface: how the host reaches a device.

A transport runs commands, copies files and makes a device-side TCP port (the agent's
API on the device's loopback) reachable from the host. Deploy logic uses only these
methods, so ADB and serial transports plug in without touching it. A command that
fails is a result (``CommandResult.returncode``), not an exception; losing or not
getting the connection raises :class:`edgekit.errors.TransportError`.
"""

import abc
import select
import socket
import threading
from dataclasses import dataclass


@dataclass
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self):
        return self.returncode == 0


class Forwarder:
    """A listener on the host's loopback for :meth:`Transport.forward`.

    Each accepted connection is handed to ``open_channel(client, addr)`` in a thread of its
    own; it connects ``client`` to the device's port (an SSH channel, a stream over a serial
    line) and owns the socket from then on. ``close()`` stops listening at once: the port
    refuses connections and the accepting thread has ended when it returns (connections
    already handed over end with their transport).
    """

    def __init__(self, remote_port, open_channel, name="forward"):
        self.remote_port = int(remote_port)
        self.open_channel = open_channel
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self._wake_r, self._wake_w = socket.socketpair()  # close() writes here: select() returns on every OS
        self.thread = threading.Thread(target=self._accept, daemon=True, name=f"{name}-{self.port}")
        self.thread.start()

    def _accept(self):
        while not self.closed:
            try:
                ready, _, _ = select.select([self.sock, self._wake_r], [], [])
            except (OSError, ValueError):
                return
            if self.closed or self._wake_r in ready:
                return
            try:
                client, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):  # the connection went away between select and accept
                continue
            except OSError:
                return
            client.setblocking(True)
            threading.Thread(
                target=self.open_channel, args=(client, addr), daemon=True, name=f"{self.thread.name}-conn"
            ).start()

    @property
    def alive(self):
        return not self.closed and self.thread.is_alive()

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self.thread is not threading.current_thread():
            self.thread.join(5)
        for s in (self.sock, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass


class Transport(abc.ABC):
    name = ""

    #: how the device is named in messages, e.g. "ssh pi@10.0.0.5:22" or "local"
    description = ""

    @classmethod
    def open(cls, target, **options):
        """Connect to ``target`` (the kind's own address form); raise TransportError if unreachable."""
        return cls(target, **options)

    @abc.abstractmethod
    def run(self, argv, timeout=120):
        """Run ``argv`` (a list) on the device; return a CommandResult."""

    @abc.abstractmethod
    def put_file(self, local, remote, progress=None):
        """Copy a host file to a device path (written to ``remote`` + '.part', then renamed)."""

    @abc.abstractmethod
    def forward(self, remote_port):
        """Make the device's 127.0.0.1:``remote_port`` reachable; return the host-side port."""

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
