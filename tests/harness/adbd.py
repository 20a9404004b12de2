"""A device-side ADB daemon for tests: the ADB wire protocol over TCP, on Linux.

There is no adbd for Linux, so the ADB tests attach this one to a real adb server
(``adb connect 127.0.0.1:PORT``). It implements what edgekit and the adb command-line
client use, after AOSP ``packages/modules/adb`` (protocol.txt, SYNC.TXT, SERVICES.TXT,
shell_protocol.h, file_sync_protocol.h):

* CNXN answered at once with a ``device::`` banner (no AUTH), OPEN / OKAY / WRTE /
  CLSE with local and remote stream ids; every WRTE waits for the peer's OKAY (flow
  control) and every WRTE received is acknowledged when the service consumed it;
  a CLSE is answered with CLSE;
* ``shell:CMD`` and ``exec:CMD`` (output as is, no exit code), ``shell,v2,...:CMD``
  (shell protocol v2: stdin/close-stdin in, stdout/stderr/exit packets out), each
  run as ``/bin/sh -c CMD`` in a child process;
* ``sync:`` with STAT, STA2, LST2, LIST, LIS2, SEND (parents created), RECV, QUIT;
* ``tcp:PORT`` to 127.0.0.1:PORT.

The device's filesystem is this machine's. Standard library only; one thread per
stream. Run: ``python adbd.py [--port 0] [--model NAME]``; it prints
``listening on PORT`` and serves until killed.
"""

import argparse
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading


def _cmd(name):
    return struct.unpack("<I", name)[0]


CNXN, OPEN, OKAY, WRTE, CLSE, AUTH = (_cmd(c) for c in (b"CNXN", b"OPEN", b"OKAY", b"WRTE", b"CLSE", b"AUTH"))
VERSION = 0x01000001  # A_VERSION_SKIP_CHECKSUM
MAX_PAYLOAD = 256 * 1024
FEATURES = "shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir"
SYNC_DATA_MAX = 64 * 1024


class Closed(Exception):
    """The stream was closed (by either side)."""


class Stream:
    def __init__(self, conn, local_id, remote_id):
        self.conn, self.local_id, self.remote_id = conn, local_id, remote_id
        self.inbox = queue.Queue()
        self.buf = bytearray()
        self.acked = threading.Event()
        self.write_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.closed = False
        self.sent_close = False

    def accept(self):
        self.conn.send(OKAY, self.local_id, self.remote_id)

    # -- host -> device ---------------------------------------------------------
    def recv(self):
        """The next WRTE payload (acknowledged now that it is consumed), b"" once closed."""
        data = self.inbox.get()
        if data is None:
            self.inbox.put(None)
            return b""
        self.conn.send(OKAY, self.local_id, self.remote_id)
        return data

    def read_exact(self, n):
        while len(self.buf) < n:
            data = self.recv()
            if not data:
                raise Closed()
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    # -- device -> host ---------------------------------------------------------
    def write(self, data):
        view = memoryview(data)
        for i in range(0, len(view), self.conn.max_payload):
            if self.closed:
                raise Closed()
            self.acked.clear()
            self.conn.send(WRTE, self.local_id, self.remote_id, bytes(view[i : i + self.conn.max_payload]))
            self.acked.wait()
            if self.closed:
                raise Closed()

    def close(self):
        """Close from this side (the peer answers, or not: either is fine)."""
        with self.state_lock:
            self.closed = True
            send = not self.sent_close
            self.sent_close = True
        self.conn.streams.pop(self.local_id, None)
        self.inbox.put(None)
        self.acked.set()
        if send:
            self.conn.send(CLSE, self.local_id, self.remote_id)

    def closed_by_peer(self):
        self.close()  # answering CLSE with CLSE: without it adb push waits forever


class Connection:
    def __init__(self, daemon, sock):
        self.daemon, self.sock = daemon, sock
        self.send_lock = threading.Lock()
        self.streams = {}
        self.next_id = 1
        self.max_payload = 4096
        self.checksum = True

    def send(self, cmd, arg0, arg1, data=b""):
        check = sum(data) & 0xFFFFFFFF if self.checksum else 0
        header = struct.pack("<6I", cmd, arg0, arg1, len(data), check, cmd ^ 0xFFFFFFFF)
        try:
            with self.send_lock:
                self.sock.sendall(header + data)
        except OSError:
            pass  # the reader notices the dead connection and closes every stream

    def _recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError()
            out += chunk
        return bytes(out)

    def serve(self):
        try:
            while True:
                cmd, arg0, arg1, length, _check, magic = struct.unpack("<6I", self._recv_exact(24))
                if magic != cmd ^ 0xFFFFFFFF:
                    return
                data = self._recv_exact(length) if length else b""
                self.dispatch(cmd, arg0, arg1, data)
        except (OSError, EOFError):
            pass
        finally:
            for s in list(self.streams.values()):
                s.closed = s.sent_close = True
                s.inbox.put(None)
                s.acked.set()
            self.streams.clear()
            self.sock.close()

    def dispatch(self, cmd, arg0, arg1, data):
        if cmd == CNXN:
            self.max_payload = max(4096, min(arg1, MAX_PAYLOAD))
            self.checksum = arg0 < VERSION
            self.send(CNXN, VERSION, MAX_PAYLOAD, self.daemon.banner())
        elif cmd == OPEN:
            local_id, self.next_id = self.next_id, self.next_id + 1
            stream = Stream(self, local_id, arg0)
            self.streams[local_id] = stream
            service = data.rstrip(b"\0").decode("utf-8", "replace")
            threading.Thread(
                target=self.daemon.run_service, args=(stream, service), daemon=True, name="adbd-" + service[:20]
            ).start()
        elif cmd == OKAY:
            stream = self.streams.get(arg1)
            if stream:
                stream.acked.set()
        elif cmd == WRTE:
            stream = self.streams.get(arg1)
            if stream:
                stream.inbox.put(data)
        elif cmd == CLSE:
            stream = self.streams.get(arg1)
            if stream:
                stream.closed_by_peer()
        # AUTH and anything else: ignored (this daemon never asks for authentication)


class Daemon:
    def __init__(self, model="edgekit_adbd"):
        self.model = model

    def banner(self):
        props = "ro.product.name=edgekit-test;ro.product.model={};ro.product.device=edgekit;".format(self.model)
        return ("device::" + props + "features=" + FEATURES).encode()

    def serve_forever(self, listener):
        while True:
            sock, _ = listener.accept()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=Connection(self, sock).serve, daemon=True).start()

    def run_service(self, stream, service):
        try:
            name, _, arg = service.partition(":")
            opts = name.split(",")
            if opts[0] == "shell":
                if "v2" in opts:
                    self.shell_v2(stream, arg)
                else:
                    self.shell_v1(stream, arg)
            elif opts[0] == "exec":
                self.shell_v1(stream, arg)
            elif service == "sync:":
                stream.accept()
                self.sync(stream)
            elif opts[0] == "tcp":
                self.tcp(stream, arg)
            else:
                self.refuse(stream)
        except Closed:
            pass
        finally:
            stream.close()

    @staticmethod
    def refuse(stream):
        with stream.state_lock:
            stream.closed = stream.sent_close = True
        stream.conn.streams.pop(stream.local_id, None)
        stream.conn.send(CLSE, 0, stream.remote_id)

    # -- shell ------------------------------------------------------------------
    @staticmethod
    def _spawn(command, stderr):
        argv = ["/bin/sh", "-c", command] if command else ["/bin/sh"]
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd="/", start_new_session=True
        )

    @staticmethod
    def _kill(proc):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def shell_v1(self, stream, command):
        proc = self._spawn(command, subprocess.STDOUT)
        stream.accept()

        def feed_stdin():
            try:
                while True:
                    data = stream.recv()
                    if not data:
                        break
                    proc.stdin.write(data)
                    proc.stdin.flush()
            except OSError:
                pass
            if stream.closed:  # the client went away
                self._kill(proc)

        threading.Thread(target=feed_stdin, daemon=True).start()
        try:
            while True:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                stream.write(chunk)
        except Closed:
            self._kill(proc)
        proc.wait()
        proc.stdout.close()

    def shell_v2(self, stream, command):
        proc = self._spawn(command, subprocess.PIPE)
        stream.accept()

        def packet(kind, data):
            with stream.write_lock:
                stream.write(struct.pack("<BI", kind, len(data)) + data)

        def pump(f, kind):
            try:
                while True:
                    chunk = os.read(f.fileno(), 65536)
                    if not chunk:
                        break
                    packet(kind, chunk)
            except Closed:
                self._kill(proc)

        def feed_stdin():
            try:
                while True:
                    kind, length = struct.unpack("<BI", stream.read_exact(5))
                    data = stream.read_exact(length) if length else b""
                    if kind == 0:
                        proc.stdin.write(data)
                        proc.stdin.flush()
                    elif kind == 4:
                        proc.stdin.close()
            except (Closed, OSError, ValueError):
                pass
            if stream.closed:
                self._kill(proc)

        threading.Thread(target=feed_stdin, daemon=True).start()
        pumps = [
            threading.Thread(target=pump, args=(f, k), daemon=True) for f, k in ((proc.stdout, 1), (proc.stderr, 2))
        ]
        for t in pumps:
            t.start()
        for t in pumps:
            t.join()
        code = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        packet(3, bytes([(128 - code if code < 0 else code) & 0xFF]))

    # -- sync -------------------------------------------------------------------
    def sync(self, stream):
        while True:
            ident, length = struct.unpack("<4sI", stream.read_exact(8))
            if ident == b"QUIT":
                return
            path = stream.read_exact(length).decode("utf-8", "surrogateescape")
            handler = {
                b"STAT": self.sync_stat_v1,
                b"STA2": self.sync_stat_v2,
                b"LST2": self.sync_stat_v2,
                b"LIST": self.sync_list,
                b"LIS2": self.sync_list,
                b"SEND": self.sync_send,
                b"RECV": self.sync_recv,
            }.get(ident)
            if handler is None:
                self.sync_fail(stream, "unknown sync command {!r}".format(ident))
                return
            if handler(stream, ident, path) is False:
                return

    @staticmethod
    def sync_fail(stream, message):
        data = message.encode()
        stream.write(b"FAIL" + struct.pack("<I", len(data)) + data)

    @staticmethod
    def _stat2(ident, st, error=0):
        if st is None:
            return struct.pack("<4sIQQIIIIQqqq", ident, error, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return struct.pack(
            "<4sIQQIIIIQqqq",
            ident,
            0,
            st.st_dev,
            st.st_ino,
            st.st_mode,
            st.st_nlink,
            st.st_uid,
            st.st_gid,
            st.st_size,
            int(st.st_atime),
            int(st.st_mtime),
            int(st.st_ctime),
        )

    def sync_stat_v1(self, stream, ident, path):
        try:
            st = os.lstat(path)
            stream.write(struct.pack("<4sIII", b"STAT", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime)))
        except OSError:
            stream.write(struct.pack("<4sIII", b"STAT", 0, 0, 0))

    def sync_stat_v2(self, stream, ident, path):
        try:
            st = os.stat(path) if ident == b"STA2" else os.lstat(path)
            stream.write(self._stat2(ident, st))
        except OSError as e:
            stream.write(self._stat2(ident, None, e.errno or 2))

    def sync_list(self, stream, ident, path):
        try:
            names = [".", ".."] + sorted(os.listdir(path))
        except OSError:
            names = []
        for name in names:
            try:
                st = os.lstat(os.path.join(path, name))
            except OSError:
                continue
            raw = name.encode("utf-8", "surrogateescape")
            if ident == b"LIST":
                head = struct.pack("<4sIIII", b"DENT", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime), len(raw))
            else:
                head = self._stat2(b"DNT2", st) + struct.pack("<I", len(raw))
            stream.write(head + raw)
        done_size = 16 if ident == b"LIST" else 72
        stream.write(b"DONE" + bytes(done_size))

    def sync_send(self, stream, ident, spec):
        path, _, mode = spec.rpartition(",")
        try:
            mode = int(mode) & 0o7777
        except ValueError:
            path, mode = spec, 0o644
        error = None
        f = None
        try:
            os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
            f = open(path, "wb")
        except OSError as e:
            error = "cannot create {}: {}".format(path, e.strerror)
        try:
            while True:
                ident, length = struct.unpack("<4sI", stream.read_exact(8))
                if ident == b"DATA":
                    data = stream.read_exact(length)
                    if f is not None:
                        f.write(data)
                elif ident == b"DONE":
                    break
                else:
                    error = error or "bad sync data id {!r}".format(ident)
                    break
        except Closed:
            if f is not None:
                f.close()
                os.unlink(path)  # like adbd: no half-written file after a lost connection
            raise
        if f is not None:
            f.close()
            if error:
                os.unlink(path)
            else:
                os.chmod(path, mode)
                os.utime(path, (length, length))
        if error:
            self.sync_fail(stream, error)
            return False
        stream.write(b"OKAY" + bytes(4))

    def sync_recv(self, stream, ident, path):
        try:
            f = open(path, "rb")
        except OSError as e:
            self.sync_fail(stream, "{}: {}".format(path, e.strerror))
            return
        with f:
            while True:
                data = f.read(SYNC_DATA_MAX)
                if not data:
                    break
                stream.write(b"DATA" + struct.pack("<I", len(data)) + data)
        stream.write(b"DONE" + bytes(4))

    # -- tcp forwarding -----------------------------------------------------------
    def tcp(self, stream, arg):
        try:
            sock = socket.create_connection(("127.0.0.1", int(arg.rpartition(":")[2])), timeout=10)
            sock.settimeout(None)
        except (OSError, ValueError):
            self.refuse(stream)
            return
        stream.accept()

        def to_socket():
            try:
                while True:
                    data = stream.recv()
                    if not data:
                        break
                    sock.sendall(data)
            except OSError:
                pass
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        threading.Thread(target=to_socket, daemon=True).start()
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                stream.write(data)
        except (OSError, Closed):
            pass
        finally:
            sock.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--model", default="edgekit_adbd", help="ro.product.model in the banner")
    args = ap.parse_args(argv)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(16)
    sys.stdout.write("listening on {}\n".format(listener.getsockname()[1]))
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    Daemon(args.model).serve_forever(listener)


if __name__ == "__main__":
    main()
