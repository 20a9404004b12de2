"""Serial transport: a board reachable only over a UART console (a logged-in shell on the line).

``connect("serial", "/dev/ttyUSB0", baud=115200)`` opens the port (pyserial), gets the
console's attention (Ctrl-C, newline, a marker echoed by the shell), finds the device's
Python, types a bootstrap that writes ``edgekit_agent/serial_endpoint.py`` to the device
(zlib + base64 in ``printf`` chunks, checked by sha256, kept for the next session in
``~/.cache/edgekit/serial``, a mode-0700 directory; a fresh ``mktemp -d`` one, removed afterwards,
where $HOME is not writable) and runs it with the tty raw (Python reads the file once, checks its
sha256 and runs those same bytes). From then on the line carries the endpoint's
framed protocol (CRC32, acknowledgements, resends): commands, resumable file uploads
and TCP streams to the device's loopback, multiplexed by channel. ``close()`` says BYE;
the endpoint restores the console.
"""

import os
import queue
import socket
import threading
import time
from typing import Any
from urllib.parse import unquote

from edgekit_agent import serial_endpoint as proto

from ..errors import BackendUnavailable, TransportError
from .base import AddressError, CommandResult, Flag, Forwarder, ProgressFn, Transport
from .serial_console import (  # noqa: F401  (the bootstrap's pieces, as this module has always offered them)
    CHECK,
    CHUNK,
    DECODE,
    LOADER,
    LOGIN,
    REMOTE_DIR,
    VERSION,
    ConsoleBootstrap,
    endpoint_source,
)


def _is_pty(path: str) -> bool:
    try:
        return os.major(os.stat(path).st_rdev) in range(136, 144)
    except OSError:
        return False


class _HostMux(proto.Mux):
    def __init__(self) -> None:
        super().__init__()
        self.channels: dict[int, queue.Queue[tuple[int, bytes]]] = {0: queue.Queue()}

    def handle(self, op: Any, chan: int, body: bytes) -> None:
        q = self.channels.get(chan)
        if q is not None:
            q.put((op, body))


class SerialTransport(ConsoleBootstrap, Transport):
    name = "serial"
    url_form = "serial:///dev/ttyUSB0?baud=115200"
    selector = Flag("--serial", "", "a board on a serial line, e.g. /dev/ttyUSB0", metavar="PORT")
    flags = (
        Flag(
            "--baud",
            "baud",
            "--serial line speed (default 115200)",
            type=int,
            alone="sets the line speed of --serial PORT",
            in_fleet="give each serial device its rate in the inventory's url (serial:///dev/ttyUSB0?baud=115200)",
        ),
    )
    wants_python = True  # the line endpoint runs with the same interpreter as the agent
    connect_timeout = "timeout"

    @classmethod
    def parse_address(cls, address: str, query: dict[str, str], url: str) -> tuple[str | None, dict[str, Any]]:
        if address and not address.startswith("/"):
            raise AddressError(
                f"{url!r}: the port must be a path such as /dev/ttyUSB0 "
                "(in a URL: serial:///dev/ttyUSB0, three slashes)"
            )
        if not address or address == "/":
            raise AddressError(f"{url!r} names no serial port; use serial:///dev/ttyUSB0?baud=115200")
        options = {}
        for k, v in query.items():
            if k != "baud":
                raise AddressError(f"{url!r}: unknown option {k!r} (serial:// takes ?baud=N)")
            if not v.isdigit() or int(v) <= 0:
                raise AddressError(f"{url!r}: baud must be a positive integer, not {v!r}")
            options["baud"] = int(v)
        return unquote(address), options

    @classmethod
    def availability(cls) -> dict[str, Any]:
        try:
            import serial
        except ImportError:
            return {"ok": False, "detail": "pyserial is not installed: pip install 'edgekit[serial]'"}
        return {
            "ok": True,
            "detail": f"pyserial {serial.__version__}; the device needs a logged-in shell on the console "
            "and Python 3.7+",
        }

    def __init__(self, target: str, baud: int | str = 115200, python: str | None = None, timeout: float = 10.0) -> None:
        if not target:
            raise TransportError("the serial transport needs a port: --serial /dev/ttyUSB0")
        try:
            import serial
        except ImportError:
            raise BackendUnavailable("the serial transport needs pyserial: pip install 'edgekit[serial]'") from None
        self._serial = serial
        self.port = str(target)
        try:
            self.baud = int(baud)
        except (TypeError, ValueError):
            raise TransportError(f"bad --baud {baud!r}: give the line speed in bit/s, e.g. 115200") from None
        self.timeout = float(timeout)
        self.pty = _is_pty(self.port)
        self.link: proto.Link | None = None
        self.mux = _HostMux()
        self.endpoint: dict[str, Any] | None = None
        self.endpoint_path: str | None = None  # where the endpoint is kept on the device
        self._fresh_dir: str | None = None  # a mktemp -d directory (no writable $HOME), removed when the endpoint exits
        self.last_put: dict[str, Any] | None = None
        self._forwards: list[Forwarder] = []
        self._chan = 0
        self._chan_lock = threading.Lock()
        self._closed = False
        self._console = bytearray()
        self._seen = bytearray()
        self._rtt = 10.0  # the fastest shell round trip seen while bootstrapping
        self.ser = self._open()
        try:
            self._bootstrap(python)
        except BaseException:
            self._abort()
            raise

    # -- naming ----------------------------------------------------------------
    @property
    def description(self) -> str:  # type: ignore[override]
        d = f"serial {self.port} at {self.baud} baud"
        if self.pty:
            d += " (a pty: the baud rate does not limit it)"
        rate = self.link.rate() if self.link else None
        if rate:
            d += f", {rate / 1000:.1f} kB/s measured"
        if self.link is not None and self.link.dead and not self._closed:
            d += f" [{self.link.dead}]"
        return d

    def _error(self, step: str, detail: str) -> TransportError:
        return TransportError(f"serial {self.port}: {step} failed: {detail}")

    def _lost(self, step: str) -> TransportError:
        return self._error(step, self.link.dead if self.link is not None and self.link.dead else "the link is down")

    # -- the link ---------------------------------------------------------------
    def _link_read(self) -> bytes:
        return self.ser.read(max(1, self.ser.in_waiting))

    def _link_write(self, data: bytes) -> None:
        self.ser.write(data)

    def _on_dead(self, reason: str) -> None:
        self.mux.drop_all_streams()

    def _new_channel(self) -> int:
        with self._chan_lock:
            while True:
                self._chan = self._chan % 65535 + 1
                if self._chan not in self.mux.channels and self._chan not in self.mux.streams:
                    self.mux.channels[self._chan] = queue.Queue()
                    return self._chan

    def _free_channel(self, chan: int) -> None:
        self.mux.channels.pop(chan, None)

    def _send(self, op: int, chan: int, body: Any, step: str, chunks: bool = False) -> None:
        if self.link is None or self.link.dead:
            raise self._lost(step)
        try:
            (self.mux.send_chunks if chunks else self.mux.send)(op, chan, body)
        except proto.LinkDead:
            raise self._lost(step) from None

    def _wait(self, chan: int, step: str, timeout: float) -> tuple[int, bytes]:
        q = self.mux.channels[chan]
        deadline = time.monotonic() + timeout
        while True:
            try:
                return q.get(timeout=0.2)
            except queue.Empty:
                pass
            if self.link.dead:  # type: ignore[union-attr]
                try:
                    return q.get(timeout=0.3)
                except queue.Empty:
                    raise self._lost(step) from None
            if time.monotonic() > deadline:
                raise self._error(step, f"the device did not answer within {timeout:.0f} s (at {self.baud} baud)")

    @staticmethod
    def _json(body: bytes) -> Any:
        import json

        return json.loads(body.decode("utf-8")) if body else {}

    # -- Transport ----------------------------------------------------------------
    def run(self, argv: list[str], timeout: float = 120) -> CommandResult:
        argv = [str(a) for a in argv]
        step = f"running {os.path.basename(argv[0])}"
        chan = self._new_channel()
        out, err = [], []
        try:
            self._send(proto.RUN, chan, {"argv": argv, "timeout": timeout}, step)
            while True:
                op, body = self._wait(chan, step, timeout + 30)
                if op == proto.OUT:
                    out.append(body)
                elif op == proto.ERR:
                    err.append(body)
                elif op == proto.EXIT:
                    result = self._json(body)
                    break
                else:
                    raise self._error(step, self._json(body).get("error", f"unexpected message {op}"))
        finally:
            self._free_channel(chan)
        if result.get("timed_out"):
            raise TransportError(f"serial {self.port}: {argv[0]} did not finish within {timeout} s")
        return CommandResult(
            result["rc"], b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace")
        )

    def put_file(self, local: Any, remote: str, progress: ProgressFn | None = None) -> None:
        remote = str(remote)
        name = os.path.basename(remote)
        step = f"uploading {name}"
        size = os.path.getsize(local)
        digest = proto.file_sha256(local)
        chan = self._new_channel()
        try:
            self._send(
                proto.PUT_OPEN,
                chan,
                {"path": remote, "size": size, "sha256": digest, "mode": os.stat(local).st_mode & 0o777},
                step,
            )
            op, body = self._wait(chan, step, 60)
            state = self._json(body)
            if op != proto.PUT_STATE or "error" in state:
                raise self._error(step, f"the device cannot write {remote}: {state.get('error', op)}")
            have = int(state["have"])
            offset = have if have and proto.file_sha256(local, have) == state["sha256"] else 0
            self.last_put = {"name": name, "size": size, "resumed_from": offset}
            self._send(proto.PUT_START, chan, {"offset": offset}, step)
            done = offset
            if progress:
                progress(name, done, size)
            with open(local, "rb") as f:
                f.seek(offset)
                while True:
                    block = f.read(16 * proto.MAX_BODY)
                    if not block:
                        break
                    self._send(proto.PUT_DATA, chan, block, step, chunks=True)
                    done += len(block)
                    if progress:
                        progress(name, done, size)
                    early = self._poll(chan)
                    if early is not None:
                        raise self._error(step, self._json(early[1]).get("error", "the device gave up"))
            self._send(proto.PUT_END, chan, b"", step)
            op, body = self._wait(chan, step, 120)
            result = self._json(body)
            if op != proto.PUT_DONE or not result.get("ok"):
                raise self._error(step, result.get("error", f"unexpected message {op}"))
        finally:
            self._free_channel(chan)

    def _poll(self, chan: int) -> tuple[int, bytes] | None:
        try:
            return self.mux.channels[chan].get_nowait()
        except queue.Empty:
            return None

    def forward(self, remote_port: int) -> int:
        if self.link is None or self.link.dead:
            raise self._lost(f"forwarding port {remote_port}")
        remote_port = int(remote_port)
        for fw in self._forwards:
            if fw.remote_port == remote_port and fw.alive:
                return fw.port
        fw = Forwarder(remote_port, lambda client, addr: self._tunnel(client, remote_port), name="serial-forward")
        self._forwards.append(fw)
        return fw.port

    def _tunnel(self, client: socket.socket, remote_port: int) -> None:
        """One connection to a forwarded port: a TCP stream over the line to the device's ``remote_port``."""
        chan = self._new_channel()
        step = f"opening a stream to the device's port {remote_port}"
        with self.mux.slock:
            self.mux.streams[chan] = proto._Stream(client)
        try:
            self._send(proto.TCP_OPEN, chan, {"port": remote_port}, step)
            op, body = self._wait(chan, step, 30)
        except TransportError:
            self.mux._drop_stream(chan, reset=True)
            return
        finally:
            self._free_channel(chan)
        if op != proto.TCP_OK:
            self.mux._drop_stream(chan, reset=True)
            return
        self.mux.start_pump(chan)

    def close(self) -> None:
        if self._closed:
            return
        for fw in self._forwards:
            fw.close()
        self._forwards = []
        if self.link is not None and not self.link.dead:
            try:
                self._send(proto.BYE, 0, b"", "closing")
                self._wait(0, "closing", 5)
            except TransportError:
                pass
        self._closed = True
        self._abort()

    def _abort(self) -> None:
        self._closed = True
        if self.link is not None:
            self.link.close()
        self.mux.drop_all_streams()
        self.mux.stop_dispatch()
        try:
            self.ser.close()
        except Exception:  # a vanished port may fail to close; it is gone either way
            pass


TRANSPORT = SerialTransport
