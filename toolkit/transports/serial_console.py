"""The serial transport's first phase: a shell on a UART console is brought to run the framed endpoint.

Gets the console's attention, finds the device's Python, types the endpoint over in checked ``printf``
chunks (zlib + base64, sha256-verified, kept in a private directory) and starts it with the tty raw;
:class:`ConsoleBootstrap` is mixed into :class:`edgekit.transports.serial_line.SerialTransport`, which
owns the port, the link and the Transport methods.
"""

import base64
import errno
import glob
import re
import secrets
import shlex
import time
import zlib
from importlib import resources
from typing import TYPE_CHECKING, Any

from edgekit_agent import serial_endpoint as proto

from ..errors import TransportError

# The endpoint's directory on the device: private to the device user, never a shared name in /tmp.
REMOTE_DIR = (
    '(d="${HOME:+$HOME/.cache/edgekit/serial}"; if [ -n "$d" ] && (umask 077; mkdir -p "$d") 2>/dev/null '
    '&& chmod 700 "$d" 2>/dev/null && [ -w "$d" ]; then echo "EK_""DIR=K|$d|"; '
    'else d=$(mktemp -d 2>/dev/null) && echo "EK_""DIR=T|$d|"; fi)'
)
CHUNK = 512  # base64 characters per typed command (busybox ash edits lines up to 1024)
LOGIN = re.compile(rb"(?i)(login|password)[^\n]{0,20}:\s*$")
CHECK = 'import hashlib,sys;a=sys.argv;sys.exit(0 if hashlib.sha256(open(a[1],"rb").read()).hexdigest()==a[2] else 1)'
DECODE = (
    "import base64,hashlib,os,sys,zlib;a=sys.argv;"
    'd=zlib.decompress(base64.b64decode(open(a[1],"rb").read()));ok=hashlib.sha256(d).hexdigest()==a[3];'
    'ok and open(a[2]+".tmp","wb").write(d);ok and os.replace(a[2]+".tmp",a[2]);'
    "os.remove(a[1]);sys.exit(0 if ok else 3)"
)
# Runs the endpoint from the bytes it hashed (no window between the check and the run).
LOADER = (
    'import hashlib,sys;a=sys.argv;d=open(a[1],"rb").read();'
    'hashlib.sha256(d).hexdigest()==a[2] or sys.exit("EK_BAD_ENDPOINT: "+a[1]+" does not have the expected sha256");'
    'sys.argv=[a[1]]+a[3:];exec(compile(d,a[1],"exec"),{"__name__":"__main__","__file__":a[1]})'
)
VERSION = 'import sys;print("EK_"+"PY=%d.%d|%s|" % (sys.version_info[0],sys.version_info[1],sys.executable))'


def endpoint_source() -> bytes:
    return resources.files("edgekit_agent").joinpath("serial_endpoint.py").read_bytes()


def _ports_here() -> str:
    found = sorted(glob.glob("/dev/ttyUSB*") + glob.glob("/dev/ttyACM*") + glob.glob("/dev/serial/by-id/*"))
    return ", ".join(found) if found else "none"


class ConsoleBootstrap:
    """Console I/O and the endpoint's bootstrap (the attributes it uses are set by the transport)."""

    _serial: Any  # the pyserial module
    port: str
    baud: int
    timeout: float
    pty: bool
    ser: Any  # the open serial.Serial
    link: proto.Link | None
    mux: proto.Mux
    endpoint: dict[str, Any] | None
    endpoint_path: str | None
    _fresh_dir: str | None
    _console: bytearray
    _seen: bytearray
    _rtt: float

    if TYPE_CHECKING:  # what the transport provides

        def _error(self, step: str, detail: str) -> TransportError: ...
        def _link_read(self) -> bytes: ...
        def _link_write(self, data: bytes) -> None: ...
        def _on_dead(self, reason: str) -> None: ...
        def _wait(self, chan: int, step: str, timeout: float) -> tuple[int, bytes]: ...

    def _open(self) -> Any:
        serial = self._serial
        ser = serial.Serial(baudrate=self.baud, timeout=0.1, write_timeout=30, exclusive=True)
        ser.port = self.port
        try:
            ser.open()
        except serial.SerialException as e:
            code = e.errno
            if code == errno.ENOENT:
                detail = f"no such port. Is the board's USB-serial adapter plugged in? Ports here: {_ports_here()}"
            elif code == errno.EACCES:
                detail = (
                    "permission denied: add yourself to the port's group (sudo usermod -aG dialout $USER, "
                    "then log in again)"
                )
            elif code in (errno.EAGAIN, errno.EWOULDBLOCK) or "exclusively lock" in str(e):
                detail = "the port is in use by another program (screen, minicom, picocom, another edgekit): close it"
            else:
                detail = str(e)
            raise self._error("opening the port", detail) from None
        except ValueError as e:
            raise self._error("opening the port", f"{e} (check --baud)") from None
        return ser

    def _read_console(self, step: str) -> bytes:
        try:
            data = self.ser.read(max(1, self.ser.in_waiting))
        except (self._serial.SerialException, OSError) as e:
            raise self._error(step, f"the port vanished ({e})") from None
        self._seen += data
        del self._seen[:-4000]
        return data

    def _write_console(self, data: bytes, step: str) -> None:
        try:
            self.ser.write(data)
        except (self._serial.SerialException, OSError) as e:
            raise self._error(step, f"the port vanished ({e})") from None

    def _settle(self, seconds: float, step: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._console += self._read_console(step)

    def _check_login(self, step: str) -> None:
        tail = bytes(self._console[-200:]).rstrip(b"\x00")
        if LOGIN.search(tail):
            raise self._error(
                step,
                "the console shows a login prompt, not a shell. Log in on it once with a terminal "
                f"program (e.g. picocom -b {self.baud} {self.port}), leave the shell logged in and "
                "quit the program (or enable autologin on the serial getty), then run this again",
            )

    def _no_answer(self, step: str, waited: float) -> TransportError:
        seen = bytes(self._seen)
        if not seen.strip(b"\x00"):
            hint = (
                f"no answer at all within {waited:.0f} s. Check the cable (TX to RX, RX to TX, GND), that a "
                f"shell runs on that UART, and that {self.baud} baud is its rate (--baud; Rockchip debug UARTs "
                "use 1500000)"
            )
        else:
            printable = sum(32 <= b < 127 or b in (9, 10, 13, 27) for b in seen) / len(seen)
            text = seen[-300:].decode("ascii", "replace")
            if printable < 0.8:
                hint = (
                    f"the console answers with garbled bytes: {self.baud} baud is probably not its rate "
                    "(--baud; common are 115200 and 1500000)"
                )
            else:
                hint = (
                    f"no shell answered within {waited:.0f} s (at {self.baud} baud); "
                    f"the console's last output: {text!r}"
                )
        return self._error(step, hint)

    def _shell(self, command: str, step: str, timeout: float | None = None) -> tuple[int, bytes]:
        """Type one command; return ``(exit status, output)`` when the shell has run it."""
        tag = secrets.token_hex(4)
        self._write_console(f'{command}; echo "EK_""D={tag}:$?."\n'.encode(), step)
        pattern = re.compile(rb"EK_D=" + tag.encode() + rb":(\d+)\.")
        wait = timeout or self.timeout
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self._console += self._read_console(step)
            m = pattern.search(self._console)
            if m:
                self._rtt = min(self._rtt, time.monotonic() - (deadline - wait))
                rc, out = int(m.group(1)), bytes(self._console[: m.start()])
                del self._console[: m.end()]
                return rc, out
            self._check_login(step)
        raise self._no_answer(step, wait)

    def _bootstrap(self, python: str | None) -> None:
        step = "getting the console's attention"
        # Three Ctrl-C: stop whatever runs (an endpoint left over from a lost session gives the console back).
        self._write_console(b"\x03\x03\x03", step)
        self._settle(0.3, step)
        self._write_console(b"\n", step)
        self._settle(0.3, step)
        self._check_login(step)
        self._shell("stty sane 2>/dev/null", step)

        step = "finding Python on the device"
        found = None
        for cand in [python] if python else ["python3", "python"]:
            rc, out = self._shell(f"{shlex.quote(cand)} -c '{VERSION}'", step)
            m = re.search(rb"EK_PY=(\d+)\.(\d+)\|([^|\r\n]*)\|", out)
            if rc == 0 and m:
                found = (int(m.group(1)), int(m.group(2)), m.group(3).decode("utf-8", "replace"))
                break
        if not found:
            raise self._error(
                step,
                f"no {python or 'python3 or python'} on the device's PATH: the serial endpoint "
                "and the agent need Python 3.7+ there",
            )
        if found[:2] < (3, 7):
            raise self._error(step, f"{found[2]} is Python {found[0]}.{found[1]}; edgekit needs 3.7 or newer")
        py = shlex.quote(found[2] or python or "python3")

        source = endpoint_source()
        import hashlib

        digest = hashlib.sha256(source).hexdigest()
        step = "sending the serial endpoint"
        rc, out = self._shell(REMOTE_DIR, step)
        m = re.search(rb"EK_DIR=([KT])\|(/[^|\r\n]*)\|", out)
        if rc != 0 or not m:
            raise self._error(
                step,
                "no private directory for it on the device: $HOME/.cache/edgekit/serial cannot "
                "be created and mktemp -d failed. Set HOME to a writable directory for the console's user",
            )
        remote_dir = m.group(2).decode("utf-8", "replace")
        self._fresh_dir = remote_dir if m.group(1) == b"T" else None
        self.endpoint_path = f"{remote_dir}/edgekit-serial-{digest[:16]}.py"
        remote, b64 = shlex.quote(self.endpoint_path), shlex.quote(self.endpoint_path + ".b64")
        rc, _ = self._shell(f"{py} -c '{CHECK}' {remote} {digest} 2>/dev/null", step)
        if rc != 0:
            packed = base64.b64encode(zlib.compress(source, 9)).decode()
            for _attempt in (1, 2):
                self._shell(f"rm -f {b64}", step)
                for i in range(0, len(packed), CHUNK):
                    rc, _ = self._shell(f"printf %s '{packed[i : i + CHUNK]}' >>{b64}", step)
                    if rc != 0:
                        raise self._error(
                            step,
                            f"writing {self.endpoint_path}.b64 on the device failed (exit {rc}): "
                            "is its file system full?",
                        )
                rc, _ = self._shell(f"{py} -c '{DECODE}' {b64} {remote} {digest}", step)
                if rc == 0:
                    break
            else:
                raise self._error(step, "it arrived corrupted twice: the line is noisy, try a lower --baud")

        step = "starting the serial endpoint"
        # First resend timeout, until acknowledgements measure it: a few shell round trips (the wire time of
        # the bytes queued ahead of a frame is added per frame; a pty has no wire speed).
        byte_time = 0.0 if self.pty else 10.0 / self.baud
        rto = max(proto.MIN_RTO, 4 * self._rtt)
        cleanup = f"; rm -rf {shlex.quote(self._fresh_dir)}" if self._fresh_dir else ""
        self._write_console(
            f"stty raw -echo 2>/dev/null; {py} -c '{LOADER}' {remote} {digest} {rto:.3f} "
            f"{byte_time:.9f}; stty sane 2>/dev/null{cleanup}\n".encode(),
            step,
        )
        self.link = proto.Link(
            self._link_read,
            self._link_write,
            None,
            initial_rto=rto,
            byte_time=byte_time,
            lost_hint=f"; check the cable and that {self.baud} baud is right",
            on_dead=self._on_dead,
        )
        self.mux.attach(self.link)
        self.link.start()
        try:
            op, body = self._wait(0, step, self.timeout + 10)
        except TransportError:
            junk = bytes(self.link.decoder.junk[-400:]).decode("utf-8", "replace")
            if self.link.dead:
                raise
            if "EK_BAD_ENDPOINT" in junk:
                raise self._error(
                    step,
                    f"{self.endpoint_path} changed on the device after it was checked, so it "
                    "was not run. Something else writes there: check the device",
                ) from None
            raise self._error(
                step, f"it did not answer within {self.timeout + 10:.0f} s; the console said: {junk!r}"
            ) from None
        if op != proto.HELLO:
            raise self._error(step, f"unexpected first message {op}")
        import json

        self.endpoint = json.loads(body)
