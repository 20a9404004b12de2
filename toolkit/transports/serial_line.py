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

import base64
import errno
import glob
import os
import queue
import re
import secrets
import shlex
import threading
import time
import zlib
from importlib import resources
from typing import Any
from urllib.parse import unquote

from edgekit_agent import serial_endpoint as proto

from ..errors import BackendUnavailable, TransportError
from .base import AddressError, CommandResult, Flag, Forwarder, ProgressFn, Transport

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


def _is_pty(path):
    try:
        return os.major(os.stat(path).st_rdev) in range(136, 144)
    except OSError:
        return False


def _ports_here():
    found = sorted(glob.glob("/dev/ttyUSB*") + glob.glob("/dev/ttyACM*") + glob.glob("/dev/serial/by-id/*"))
    return ", ".join(found) if found else "none"


class _HostMux(proto.Mux):
    def __init__(self):
        super().__init__()
        self.channels = {0: queue.Queue()}

    def handle(self, op: Any, chan: int, body: bytes) -> None:
        q = self.channels.get(chan)
        if q is not None:
            q.put((op, body))


class SerialTransport(Transport):
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

    def __init__(self, target, baud=115200, python=None, timeout=10.0):
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
        self.link = None
        self.mux = _HostMux()
        self.endpoint = None
        self.endpoint_path = None  # where the endpoint is kept on the device
        self._fresh_dir = None  # a mktemp -d directory (no writable $HOME), removed when the endpoint exits
        self.last_put = None
        self._forwards = []
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

    def _error(self, step, detail):
        return TransportError(f"serial {self.port}: {step} failed: {detail}")

    def _lost(self, step):
        return self._error(step, self.link.dead if self.link is not None and self.link.dead else "the link is down")

    # -- opening and bootstrap ---------------------------------------------------
    def _open(self):
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

    def _read_console(self, step):
        try:
            data = self.ser.read(max(1, self.ser.in_waiting))
        except (self._serial.SerialException, OSError) as e:
            raise self._error(step, f"the port vanished ({e})") from None
        self._seen += data
        del self._seen[:-4000]
        return data

    def _write_console(self, data, step):
        try:
            self.ser.write(data)
        except (self._serial.SerialException, OSError) as e:
            raise self._error(step, f"the port vanished ({e})") from None

    def _settle(self, seconds, step):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._console += self._read_console(step)

    def _check_login(self, step):
        tail = bytes(self._console[-200:]).rstrip(b"\x00")
        if LOGIN.search(tail):
            raise self._error(
                step,
                "the console shows a login prompt, not a shell. Log in on it once with a terminal "
                f"program (e.g. picocom -b {self.baud} {self.port}), leave the shell logged in and "
                "quit the program (or enable autologin on the serial getty), then run this again",
            )

    def _no_answer(self, step, waited):
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

    def _shell(self, command, step, timeout=None):
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

    def _bootstrap(self, python):
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

    # -- the link ---------------------------------------------------------------
    def _link_read(self):
        return self.ser.read(max(1, self.ser.in_waiting))

    def _link_write(self, data):
        self.ser.write(data)

    def _on_dead(self, reason):
        self.mux.drop_all_streams()

    def _new_channel(self):
        with self._chan_lock:
            while True:
                self._chan = self._chan % 65535 + 1
                if self._chan not in self.mux.channels and self._chan not in self.mux.streams:
                    self.mux.channels[self._chan] = queue.Queue()
                    return self._chan

    def _free_channel(self, chan):
        self.mux.channels.pop(chan, None)

    def _send(self, op, chan, body, step, chunks=False):
        if self.link is None or self.link.dead:
            raise self._lost(step)
        try:
            (self.mux.send_chunks if chunks else self.mux.send)(op, chan, body)
        except proto.LinkDead:
            raise self._lost(step) from None

    def _wait(self, chan, step, timeout):
        q = self.mux.channels[chan]
        deadline = time.monotonic() + timeout
        while True:
            try:
                return q.get(timeout=0.2)
            except queue.Empty:
                pass
            if self.link.dead:
                try:
                    return q.get(timeout=0.3)
                except queue.Empty:
                    raise self._lost(step) from None
            if time.monotonic() > deadline:
                raise self._error(step, f"the device did not answer within {timeout:.0f} s (at {self.baud} baud)")

    @staticmethod
    def _json(body):
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

    def _poll(self, chan):
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

    def _tunnel(self, client, remote_port):
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

    def _abort(self):
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
