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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

from ..errors import TransportError

ProgressFn = Callable[[str, int, int], None]  # (file name, bytes done, bytes in all)


@dataclass
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class AddressError(TransportError, ValueError):
    """A device address (``ssh://...``, ``--ssh HOST``) that cannot be parsed; says what form to use."""


@dataclass(frozen=True)
class Flag:
    """A command-line option a transport adds (``--ssh-key``), declared as data; the CLI builds its parser from these.

    ``key`` is the keyword :meth:`Transport.open` receives. ``alone``: when given without the transport's own
    flag, the option is refused with this reason (e.g. ``sets the line speed of --serial PORT``). ``in_fleet``:
    why it cannot be combined with ``--fleet`` (where each inventory entry carries it). ``inventory``: the
    field of a fleet inventory entry that carries it (a path on the host, relative to the inventory file)."""

    flag: str
    key: str
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] = str
    alone: str | None = None
    in_fleet: str = "put it in the inventory's [[device]] entries (or its [defaults])"
    inventory: str | None = None


class Address(NamedTuple):
    """Where a device is: a transport kind, its own target form, and the options its URL carried."""

    kind: str
    target: str | None
    options: dict[str, Any]


def no_query(url: str, query: dict[str, str], form: str) -> None:
    if query:
        raise AddressError(f"{url!r}: {form} takes no options ({', '.join(sorted(query))})")


class Forwarder:
    """A listener on the host's loopback for :meth:`Transport.forward`.

    Each accepted connection is handed to ``open_channel(client, addr)`` in a thread of its
    own; it connects ``client`` to the device's port (an SSH channel, a stream over a serial
    line) and owns the socket from then on. ``close()`` stops listening at once: the port
    refuses connections and the accepting thread has ended when it returns (connections
    already handed over end with their transport).
    """

    def __init__(
        self, remote_port: int, open_channel: Callable[[socket.socket, Any], None], name: str = "forward"
    ) -> None:
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

    def _accept(self) -> None:
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
    def alive(self) -> bool:
        return not self.closed and self.thread.is_alive()

    def close(self) -> None:
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


_T = TypeVar("_T", bound="Transport")


class Transport(abc.ABC):
    """One way to reach a device. A kind declares, besides the four methods below, what the deploy core and the
    CLI need to know about it (all class attributes, readable without connecting):

    - ``name``: the kind and URL scheme (``ssh`` -> ``ssh://``); ``url_form``: the URL shape for messages;
    - ``selector``: the CLI flag that picks it (``--ssh``), and ``flags``: the options it adds (``--ssh-key``);
    - ``is_host``: the device is this machine (the agent runs with this Python, in the host's cache);
    - ``wants_python``: :meth:`open` needs the device's Python (the serial line endpoint runs with it);
    - :meth:`parse_address`: what follows ``scheme://`` (and what its flag takes) -> ``(target, options)``;
    - :meth:`availability`: whether it works here, for ``edgekit doctor``.
    """

    name: ClassVar[str] = ""
    url_form: ClassVar[str] = ""
    selector: ClassVar[Flag | None] = None
    #: the selector flag's value is optional (``--adb`` alone: the only attached device)
    selector_optional: ClassVar[bool] = False
    flags: ClassVar[tuple[Flag, ...]] = ()
    is_host: ClassVar[bool] = False
    wants_python: ClassVar[bool] = False
    #: the :meth:`open` keyword that bounds getting the connection (a fleet entry's ``connect_timeout``), or None
    connect_timeout: ClassVar[str | None] = None
    #: why a kind without ``connect_timeout`` has none (said when an inventory entry gives one)
    no_connect_timeout: ClassVar[str] = "it has no connection to time out"

    #: how the device is named in messages, e.g. "ssh pi@10.0.0.5:22" or "local"
    description = ""

    @classmethod
    def open(cls, target: str | None, **options: Any) -> "Transport":
        """Connect to ``target`` (the kind's own address form); raise TransportError if unreachable."""
        return cls(target, **options)  # type: ignore[call-arg]  # each kind's own constructor

    @classmethod
    def parse_address(cls, address: str, query: dict[str, str], url: str) -> tuple[str | None, dict[str, Any]]:
        """``(target, options)`` from what follows ``scheme://`` (``address``, without the ``?query``)."""
        no_query(url, query, f"{cls.name}://")
        return address or None, {}

    @classmethod
    def availability(cls) -> dict[str, Any]:
        """``{"ok": bool, "detail": str}`` for ``edgekit doctor``; connects to nothing."""
        return {"ok": True, "detail": "built in"}

    @abc.abstractmethod
    def run(self, argv: list[str], timeout: float = 120) -> CommandResult:
        """Run ``argv`` (a list) on the device; return a CommandResult."""

    @abc.abstractmethod
    def put_file(self, local: Any, remote: str, progress: ProgressFn | None = None) -> None:
        """Copy a host file to a device path (written to ``remote`` + '.part', then renamed)."""

    @abc.abstractmethod
    def forward(self, remote_port: int) -> int:
        """Make the device's 127.0.0.1:``remote_port`` reachable; return the host-side port."""

    def close(self) -> None:  # noqa: B027 (optional: a transport with nothing to release keeps this)
        """Release the connection; further calls raise TransportError."""

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
