"""A null-modem cable made of two pty pairs, with a shell on the device end.

The host end is a pty slave (``cable.port``, e.g. /dev/pts/7) that pyserial opens like a
/dev/ttyUSB0. The device end is another pty whose slave is the controlling terminal of
an interactive shell started as a session leader (as getty leaves a logged-in console).
A thread copies bytes between the two masters; it can corrupt or drop chunks on the way
(to prove the CRC and resends), pull the plug (the host end vanishes: reads fail with
EIO, the device end keeps running) and plug a new host end in.
"""

import errno
import fcntl
import os
import pty
import random
import select
import signal
import subprocess
import termios
import threading
import time


def _controlling_tty():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Cable:
    def __init__(self, shell=("/bin/sh", "-i"), env=None, cwd=None, device=None, wait_output=True, baud=None):
        """``device``: argv of what runs on the device end instead of a shell (e.g. a login prompt);
        ``wait_output``: wait for its first output (a prompt) before the cable is ready; ``baud``: pass
        bytes no faster than a line at that rate (8N1: 10 bits a byte) would, each way."""
        self.byte_s = 10.0 / baud if baud else 0.0
        self.next_free = {"to_device": 0.0, "to_host": 0.0}
        self.lock = threading.Lock()
        self.to_device = bytearray()
        self.to_host = bytearray()
        self.corrupt = {"to_device": 0, "to_host": 0}
        self.drop = {"to_device": 0, "to_host": 0}
        self.damaged = {"to_device": 0, "to_host": 0}
        self.passed = {"to_device": 0, "to_host": 0}
        self.chunks = {"to_device": 0, "to_host": 0}
        self.every = 1
        self.unplug_after = None  # host->device bytes after which the plug is pulled
        self.rng = random.Random(1)
        self.dev_master, dev_slave = pty.openpty()
        os.set_blocking(self.dev_master, False)
        e = dict(os.environ)
        e.update(env or {})
        self.shell = subprocess.Popen(
            list(device or shell),
            stdin=dev_slave,
            stdout=dev_slave,
            stderr=dev_slave,
            env=e,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_controlling_tty,
        )
        os.close(dev_slave)
        # A console's shell is up before anyone types: wait for its first output (the prompt), so a
        # Ctrl-C cannot reach it before it handles SIGINT.
        deadline = time.monotonic() + 10
        quiet_since = None
        while wait_output and time.monotonic() < deadline:
            select.select([self.dev_master], [], [], 0.05)
            data = self._read(self.dev_master)
            self.to_host += data
            if data or not self.to_host:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 0.3:  # said something, then nothing more: at its prompt
                break
        self.host_master = None
        self.host_slave = None
        self.port = None
        self.plug()
        self.running = True
        self.thread = threading.Thread(target=self._bridge, daemon=True, name="null-modem")
        self.thread.start()

    # -- plug ----------------------------------------------------------------
    def plug(self):
        """A (new) host end; returns its port path."""
        master, slave = pty.openpty()
        os.set_blocking(master, False)
        with self.lock:
            self.host_master, self.host_slave = master, slave
            self.port = os.ttyname(slave)
            self.to_device.clear()
            self.to_host.clear()
        return self.port

    def unplug(self):
        """The host end vanishes, as when a USB-serial adapter is pulled out."""
        with self.lock:
            self._unplug_locked()

    def _unplug_locked(self):
        for fd in (self.host_master, self.host_slave):
            if fd is not None:
                os.close(fd)
        self.host_master = self.host_slave = None
        self.to_host.clear()
        self.to_device.clear()
        self.unplug_after = None

    # -- the bridge ------------------------------------------------------------
    def _damage(self, direction, data):
        self.chunks[direction] += 1
        if self.chunks[direction] % self.every:
            return data
        if self.drop[direction] and len(data) > 8:
            self.drop[direction] -= 1
            self.damaged[direction] += 1
            return b""
        if self.corrupt[direction] and len(data) > 8:
            self.corrupt[direction] -= 1
            self.damaged[direction] += 1
            data = bytearray(data)
            i = self.rng.randrange(len(data))
            data[i] ^= self.rng.randrange(1, 256)
            if data[i] == 3:  # one flipped byte never makes a Ctrl-C; keep it that way
                data[i] = 4
            return bytes(data)
        return data

    def _bridge(self):
        while self.running:
            with self.lock:
                host = self.host_master
                rlist = [self.dev_master] + ([host] if host is not None else [])
                wlist = [self.dev_master] if self.to_device else []
                if host is not None and self.to_host:
                    wlist.append(host)
            try:
                r, w, _ = select.select(rlist, wlist, [], 0.05)
            except (OSError, ValueError):
                continue
            with self.lock:
                if host is not self.host_master:
                    continue
                if self.dev_master in r:
                    data = self._read(self.dev_master)
                    if host is not None and data:
                        self.passed["to_host"] += len(data)
                        self.to_host += self._damage("to_host", data)
                if host is not None and host in r:
                    data = self._read(host)
                    if data:
                        self.passed["to_device"] += len(data)
                        self.to_device += self._damage("to_device", data)
                        if self.unplug_after is not None and self.passed["to_device"] >= self.unplug_after:
                            self._unplug_locked()
                            host = None
                if self.dev_master in w and self.to_device:
                    self._paced_write("to_device", self.dev_master, self.to_device)
                if host is not None and host in w and self.to_host:
                    self._paced_write("to_host", host, self.to_host)

    def _paced_write(self, direction, fd, buf):
        if not self.byte_s:
            self._write(fd, buf)
            return
        now = time.monotonic()
        start = max(now - 0.05, self.next_free[direction])
        allowed = int((now - start) / self.byte_s)
        if allowed > 0:
            n = len(buf)
            self._write(fd, buf, allowed)
            self.next_free[direction] = start + (n - len(buf)) * self.byte_s

    @staticmethod
    def _read(fd):
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            return b""
        except OSError as e:
            if e.errno == errno.EIO:  # nothing has the other side open (for now)
                time.sleep(0.01)
                return b""
            raise

    @staticmethod
    def _write(fd, buf, limit=4096):
        try:
            n = os.write(fd, bytes(buf[: min(limit, 4096)]))
            del buf[:n]
        except BlockingIOError:
            pass
        except OSError:
            buf.clear()

    # -- controls for tests ----------------------------------------------------------
    def damage(self, corrupt_to_device=0, corrupt_to_host=0, drop_to_device=0, drop_to_host=0, every=1):
        """Flip a byte in (or drop) that many chunks each way; only every ``every``-th chunk is touched."""
        with self.lock:
            self.every = every
            self.corrupt = {"to_device": corrupt_to_device, "to_host": corrupt_to_host}
            self.drop = {"to_device": drop_to_device, "to_host": drop_to_host}

    def unplug_after_bytes(self, n):
        """Pull the plug once ``n`` more bytes went from the host to the device."""
        with self.lock:
            self.unplug_after = self.passed["to_device"] + n

    def close(self):
        self.running = False
        self.thread.join(5)
        try:
            os.killpg(self.shell.pid, signal.SIGHUP)
        except OSError:
            pass
        with self.lock:
            self._unplug_locked()
            try:
                os.close(self.dev_master)
            except OSError:
                pass
        try:
            self.shell.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.shell.pid, signal.SIGKILL)
            self.shell.wait(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
