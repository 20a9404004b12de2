"""ADB transport: an Android device through the adb server (``adbutils``).

The adb server is the one the ``adb`` command uses: ``ADB_SERVER_SOCKET`` (``tcp:HOST:PORT``),
else ``ANDROID_ADB_SERVER_ADDRESS``/``ANDROID_ADB_SERVER_HOST`` and ``ANDROID_ADB_SERVER_PORT``,
else 127.0.0.1:5037; a local server that is not running is started (``$ADB``, ``adb`` on
PATH, ``$ANDROID_HOME/platform-tools/adb``, or the adb that ships with adbutils).

Commands run through shell protocol v2 (exit code and stderr apart) where the device
has it, else through the v1 shell with an exit-code marker. Files go through the sync
service to ``remote.part``, then ``mv`` to their name. The agent's port is reached
with ``adb forward tcp:0 tcp:PORT`` (the server picks the host port), removed on close.
"""

import os
import secrets
import shlex
import shutil
import socket
import struct
import subprocess
import time
from typing import Any, Callable
from urllib.parse import unquote

from ..errors import BackendUnavailable, TransportError
from .base import AddressError, CommandResult, Flag, ProgressFn, Transport

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 5037
_SYNC_CHUNK = 64 * 1024  # the sync protocol's largest DATA block


def server_address() -> tuple[str, int]:
    """``(host, port)`` of the adb server, from the environment the adb command reads."""
    spec = os.environ.get("ADB_SERVER_SOCKET")
    if spec:
        kind, _, rest = spec.partition(":")
        host, _, port = rest.rpartition(":")
        if kind != "tcp" or not port.isdigit():
            raise TransportError(
                f"ADB_SERVER_SOCKET={spec!r}: edgekit reaches the adb server over TCP only; "
                "use tcp:HOST:PORT or tcp:PORT"
            )
        return host or DEFAULT_HOST, int(port)
    host = os.environ.get("ANDROID_ADB_SERVER_ADDRESS") or os.environ.get("ANDROID_ADB_SERVER_HOST") or DEFAULT_HOST
    port = os.environ.get("ANDROID_ADB_SERVER_PORT") or str(DEFAULT_PORT)
    if not port.isdigit():
        raise TransportError(f"ANDROID_ADB_SERVER_PORT={port!r} is not a port number")
    return host, int(port)


def adb_executable() -> str | None:
    """The adb command to start a server with, or None."""
    candidates = [os.environ.get("ADB"), shutil.which("adb")]
    for home in (os.environ.get("ANDROID_HOME"), os.environ.get("ANDROID_SDK_ROOT")):
        if home:
            candidates.append(os.path.join(home, "platform-tools", "adb"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    try:
        from adbutils import adb_path

        return adb_path()
    except Exception:  # adbutils raises AdbError when it has no adb for this platform
        return None


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def availability() -> dict[str, Any]:
    """For ``edgekit doctor``: ``{"ok": bool, "detail": str}``, starting nothing."""
    try:
        import adbutils
    except ImportError:
        return {"ok": False, "detail": "adbutils is not installed: pip install 'edgekit[adb]'"}
    try:
        host, port = server_address()
    except TransportError as e:
        return {"ok": False, "detail": str(e)}
    adb = adb_executable()
    running = _reachable(host, port)
    state = (
        "running"
        if running
        else ("not running (started on first use)" if adb else "not running, and no adb to start it")
    )
    return {
        "ok": running or adb is not None,
        "detail": f"adbutils {adbutils.__version__}; adb server at {host}:{port} {state}; adb: {adb or 'not found'}",
    }


def _client() -> Any:
    """An adbutils client for the adb server, started here if it is local and not running."""
    try:
        import adbutils
    except ImportError:
        raise BackendUnavailable("the ADB transport needs adbutils: pip install 'edgekit[adb]'") from None
    host, port = server_address()
    if not _reachable(host, port):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise TransportError(f"no adb server answers at {host}:{port}; start it there (adb start-server)")
        adb = adb_executable()
        if adb is None:
            raise TransportError(
                f"no adb server runs at {host}:{port} and no adb command was found to start one: "
                "install Android platform-tools (Debian: apt-get install adb) or set $ADB"
            )
        try:
            p = subprocess.run(
                [adb, "-P", str(port), "start-server"],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TransportError(f"could not start the adb server with {adb}: {e}") from None
        if p.returncode != 0 or not _reachable(host, port):
            raise TransportError(
                f"could not start the adb server on port {port} with {adb}: {(p.stderr or p.stdout).strip()[-400:]}"
            )
    return adbutils.AdbClient(host=host, port=port, socket_timeout=30)


def _adb_errors() -> tuple[type[BaseException], ...]:
    from adbutils import AdbError

    return (AdbError, OSError, EOFError)


class ADBTransport(Transport):
    name = "adb"
    url_form = "adb://SERIAL"
    selector = Flag(
        "--adb",
        "",
        "an Android device through the adb server (the only one attached, or SERIAL; deploy: all)",
        metavar="SERIAL",
    )
    selector_optional = True
    no_connect_timeout = "the adb server holds the connection"

    @classmethod
    def parse_address(cls, address: str, query: dict[str, str], url: str) -> tuple[str | None, dict[str, Any]]:
        if query or address.rstrip("/").count("/"):
            raise AddressError(f"{url!r}: adb:// takes only a serial (adb://SERIAL), or nothing for the only device")
        return unquote(address.rstrip("/")) or None, {}

    @classmethod
    def availability(cls) -> dict[str, Any]:
        return availability()

    def __init__(self, target: str | None = None) -> None:
        if target == "all":
            raise TransportError(
                "--adb all deploys to every attached device and works with `edgekit deploy` only; "
                "name one device here (--adb SERIAL, see `adb devices`)"
            )
        self.client = _client()
        self.host, self.port = server_address()
        self.serial = self._pick(target)
        self.description = f"adb {self.serial}"
        self._forwards: list[int] = []
        try:
            self.device = self.client.device(self.serial)
            self.features = set(self.device.get_features().split(","))
        except _adb_errors() as e:
            raise TransportError(f"{self.description}: cannot talk to the device: {e}") from None
        self.shell_v2 = "shell_v2" in self.features

    # -- which device -----------------------------------------------------------
    @classmethod
    def attached(cls) -> list[tuple[str, str]]:
        """``[(serial, state), ...]`` of every device the adb server knows."""
        client = _client()
        try:
            return [(d.serial, d.state) for d in client.list()]
        except _adb_errors() as e:
            host, port = server_address()
            raise TransportError(f"the adb server at {host}:{port} did not answer: {e}") from None

    @classmethod
    def serials(cls) -> list[str]:
        """Serials of every device ready for commands (state "device"); an error if there is none."""
        devices = cls.attached()
        ready = [s for s, state in devices if state == "device"]
        if not ready:
            raise TransportError(cls._none_message(devices))
        return ready

    @staticmethod
    def _none_message(devices: list[tuple[str, str]]) -> str:
        host, port = server_address()
        seen = "; ".join(f"{s} is {state}" for s, state in devices)
        hint = " (accept the debugging prompt on the device)" if any(st == "unauthorized" for _, st in devices) else ""
        return (
            f"no Android device is ready on the adb server at {host}:{port}"
            f"{': ' + seen + hint if seen else ''}. Is USB debugging on? Check `adb devices`"
        )

    def _pick(self, target: str | None) -> str:
        target = target or os.environ.get("ANDROID_SERIAL") or None
        devices = self.attached()
        if target:
            states = dict(devices)
            if target not in states and ":" in target:
                # host:port of a device on the network: connect it, as `adb connect` would
                try:
                    said = self.client.connect(target, timeout=15)
                except _adb_errors() as e:
                    said = str(e)
                states = dict(self.attached())
                if target not in states:
                    raise TransportError(f"cannot connect to the Android device at {target}: {said.strip()}")
            if target not in states:
                have = ", ".join(s for s, _ in devices) or "none"
                raise TransportError(
                    f"no Android device {target!r} on the adb server (attached: {have}). Check `adb devices`"
                )
            if states[target] != "device":
                hint = {
                    "unauthorized": "accept the USB debugging prompt on the device",
                    "offline": "reconnect it, or run `adb reconnect offline`",
                }.get(states[target], "check `adb devices`")
                raise TransportError(f"Android device {target} is {states[target]}: {hint}")
            return target
        ready = [s for s, state in devices if state == "device"]
        if not ready:
            raise TransportError(self._none_message(devices))
        if len(ready) > 1:
            raise TransportError(
                f"{len(ready)} Android devices are attached ({', '.join(ready)}): choose one with "
                "--adb SERIAL, or deploy to all with --adb all"
            )
        return ready[0]

    # -- connections to the adb server ------------------------------------------
    def _open(self, service: str | None = None, host_command: str | None = None, timeout: float = 30.0) -> Any:
        """A connection to the device's ``service`` (or the server's ``host-serial`` command), closed again if
        the server or device refuses it: adbutils' own ``open_transport`` leaves that socket open."""
        c = self.client.make_connection(timeout=timeout)
        try:
            if host_command:
                c.send_command(f"host-serial:{self.serial}:{host_command}")
                c.check_okay()
            else:
                c.send_command(f"host:transport:{self.serial}")
                c.check_okay()
                if service:
                    c.send_command(service)
                    c.check_okay()
        except BaseException:
            c.close()
            raise
        return c

    def _shell_v2(self, cmd: str, timeout: float) -> CommandResult:
        """Shell protocol v2: packets of (id, length, data); 1 stdout, 2 stderr, 3 the exit code."""
        out, err = bytearray(), bytearray()
        with self._open(f"shell,v2:{cmd}", timeout=timeout) as c:
            while True:
                header = c.read_exact(5)
                kind, length = header[0], struct.unpack("<I", header[1:5])[0]
                data = c.read_exact(length) if length else b""
                if kind == 3:
                    code = data[0] if data else 255
                    break
                (out if kind == 1 else err if kind == 2 else bytearray()).extend(data)
        return CommandResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    # -- the Transport interface ------------------------------------------------
    def run(self, argv: list[str], timeout: float = 120) -> CommandResult:
        cmd = " ".join(shlex.quote(str(a)) for a in argv)
        try:
            if self.shell_v2:
                return self._shell_v2(cmd, timeout)
            return self._run_v1(cmd, timeout)
        except _adb_errors() as e:
            from adbutils import AdbTimeout

            if isinstance(e, (AdbTimeout, socket.timeout)):
                raise TransportError(f"{self.description}: {argv[0]} did not finish within {timeout} s") from None
            raise TransportError(
                f"{self.description}: connection lost while running {argv[0]}: {e or type(e).__name__}"
            ) from None

    def _run_v1(self, cmd: str, timeout: float) -> CommandResult:
        """The v1 shell has one output stream and no exit code: print the code after a marker."""
        marker = f"__edgekit_rc_{secrets.token_hex(6)}="
        with self._open(f"shell:{cmd}; echo {marker}$?", timeout=timeout) as c:
            out = c.read_until_close(encoding=None)
        i = out.rfind(marker.encode())
        if i < 0:
            raise TransportError(f"{self.description}: the shell ended before {cmd.split()[0]} finished")
        code = int(out[i + len(marker) :].strip() or 255)
        return CommandResult(code, out[:i].decode("utf-8", "replace"), "")

    def put_file(self, local: Any, remote: str, progress: ProgressFn | None = None) -> None:
        name = os.path.basename(remote)
        part = remote + ".part"
        size = os.path.getsize(local)
        parent = os.path.dirname(remote)
        if parent:
            r = self.run(["mkdir", "-p", parent])
            if not r.ok:
                raise TransportError(f"{self.description}: creating {parent} failed: {(r.stderr or r.stdout).strip()}")
        mode = 0o644 | (os.stat(local).st_mode & 0o111)
        try:
            self._push(local, part, mode, size, lambda done: progress and progress(name, done, size))
        except _adb_errors() as e:
            raise TransportError(
                f"{self.description}: uploading {name} to {part} failed: {e or type(e).__name__}. "
                f"{name} on the device is unchanged; run the command again to retry."
            ) from None
        r = self.run(["mv", "-f", part, remote])
        if not r.ok:
            raise TransportError(
                f"{self.description}: renaming {part} to {name} failed: {(r.stderr or r.stdout).strip()}"
            )

    def _push(self, local: Any, remote: str, mode: int, size: int, on_progress: Callable[[int], Any]) -> None:
        """SEND over the sync service: DATA blocks, DONE with the mtime, then OKAY or FAIL."""
        with self._open("sync:", timeout=120) as c:
            spec = f"{remote},{0o100000 | mode}".encode()
            c.conn.sendall(b"SEND" + struct.pack("<I", len(spec)) + spec)
            done = 0
            with open(local, "rb") as f:
                while True:
                    block = f.read(_SYNC_CHUNK)
                    if not block:
                        break
                    c.conn.sendall(b"DATA" + struct.pack("<I", len(block)) + block)
                    done += len(block)
                    on_progress(done)
            c.conn.sendall(b"DONE" + struct.pack("<I", int(time.time())))
            reply = c.read(8)
            if reply[:4] == b"OKAY":
                c.conn.sendall(b"QUIT" + bytes(4))
                return
            if reply[:4] == b"FAIL" and len(reply) == 8:
                raise EOFError(c.read(struct.unpack("<I", reply[4:])[0]).decode("utf-8", "replace"))
            raise EOFError(f"the connection ended before the device confirmed the upload ({done} of {size} bytes sent)")

    def forward(self, remote_port: int) -> int:
        cmd = f"forward:tcp:0;tcp:{int(remote_port)}"
        try:
            with self._open(host_command=cmd) as c:
                c.check_okay()
                host_port = int(c.read_string_block())
        except (ValueError, *_adb_errors()) as e:  # type: ignore[misc]
            raise TransportError(f"{self.description}: forwarding device port {remote_port} failed: {e}") from None
        self._forwards.append(host_port)
        return host_port

    def close(self) -> None:
        for port in self._forwards:
            try:
                self.device.forward_remove(f"tcp:{port}", raise_non_found=False)
            except _adb_errors():
                pass  # the server or the device is gone, and the forward with it
        self._forwards = []


TRANSPORT = ADBTransport
