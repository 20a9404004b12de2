"""The device end of edgekit's serial transport, and the line protocol both ends speak.

The host types a small bootstrap into a board's serial console that writes this file
and runs it with the device's Python (``python3 serial_endpoint.py [FIRST_RESEND_TIMEOUT_S [BYTE_TIME_S]]``).
It sets the tty raw and from then on speaks a framed protocol on stdin/stdout until the host says BYE,
the link dies, or three Ctrl-C bytes arrive; then it restores the console and exits.
The file is self-contained (Python 3.7, standard library only) so it can be sent alone;
the host imports the same :class:`Link` and :class:`Mux` (``edgekit_agent.serial_endpoint``).

Frames (HDLC-like)::

    0x7E  escaped( kind:u8  seq:u16  payload  crc32:u32 )  0x7E

Escaping replaces 0x7D 0x7E 0x03 0x11 0x13 by 0x7D, byte ^ 0x20, so a raw 0x03 never
occurs inside a frame: three in a row (Ctrl-C) tell the endpoint to give the console
back. Kinds: DATA (sequenced), ACK n and NAK n (n = the next sequence number expected).
DATA frames go out in a window (go-back-N); the receiver acknowledges every frame in
order, answers a gap with NAK, and drops frames that fail the CRC; the sender resends
from the oldest unacknowledged frame on NAK or after an adaptive timeout.

Messages (DATA payloads): ``op:u8 chan:u16 body``; op | MORE marks a fragment of a
longer message. Channel 0 carries HELLO/BYE; the host opens the others for a command
(RUN -> OUT/ERR.../EXIT), a file upload (PUT_OPEN -> PUT_STATE, PUT_START, PUT_DATA...,
PUT_END -> PUT_DONE; a ``.part`` left by an interrupted upload is resumed when its
prefix hash matches) or a TCP stream to the device's loopback (TCP_OPEN -> TCP_OK |
TCP_FAIL, then TCP_DATA... and TCP_FIN both ways; TCP_ACK tells the sender how many bytes were
written out to the socket, and a sender keeps at most STREAM_WINDOW bytes unacknowledged, so a
socket that does not read holds up only its own stream).
"""

import collections
import hashlib
import json
import os
import queue
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from typing import Any, Callable, List, Optional, Tuple

PROTOCOL = 2
FLAG = 0x7E
ESC = 0x7D
ESCAPED = (0x7D, 0x7E, 0x03, 0x11, 0x13)  # 0x7D first: later replacements insert it
INTERRUPT = b"\x03\x03\x03"
F_DATA, F_ACK, F_NAK = 1, 2, 3
SEQ_MOD = 1 << 16
MAX_PAYLOAD = 1024
WINDOW = 16
MIN_RTO = 0.25
MAX_RTO = 8.0
MAX_RETRIES = 7

(
    HELLO,
    BYE,
    BYE_OK,
    RUN,
    OUT,
    ERR,
    EXIT,
    PUT_OPEN,
    PUT_STATE,
    PUT_START,
    PUT_DATA,
    PUT_END,
    PUT_DONE,
    TCP_OPEN,
    TCP_OK,
    TCP_FAIL,
    TCP_DATA,
    TCP_FIN,
    FAIL,
    TCP_ACK,
) = range(1, 21)
MORE = 0x80
STREAM_WINDOW = 256 * 1024  # bytes of a TCP stream that may be sent and not yet written out on the other end
STREAM_ACK_EVERY = 32 * 1024  # a TCP_ACK (u32: bytes written) after this many; must not exceed the window
HEADER = struct.Struct(">BH")
MAX_BODY = MAX_PAYLOAD - HEADER.size


class LinkDead(Exception):
    """The line is gone (the port vanished, the peer stopped answering, or it was closed)."""


def escape(raw: bytes) -> bytes:
    for b in ESCAPED:
        raw = raw.replace(bytes((b,)), bytes((ESC, b ^ 0x20)))
    return raw


def unescape(data: bytes) -> Optional[bytes]:
    parts = data.split(bytes((ESC,)))
    out = [parts[0]]
    for p in parts[1:]:
        if not p:
            return None
        out.append(bytes((p[0] ^ 0x20,)) + p[1:])
    return b"".join(out)


def encode_frame(kind: int, seq: int, payload: bytes = b"") -> bytes:
    body = HEADER.pack(kind, seq) + payload
    return bytes((FLAG,)) + escape(body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)) + bytes((FLAG,))


class Decoder:
    """Bytes in, frames out. Keeps the tail of what was not a frame (console text) for messages."""

    def __init__(self, max_payload=MAX_PAYLOAD):
        self.buf = bytearray()
        self.limit = 2 * (max_payload + 16)
        self.bad = 0
        self.frames = 0
        self.junk = bytearray()
        self.interrupted = False
        self._tail = b""

    def feed(self, data: bytes) -> List[Tuple[int, int, bytes]]:
        probe = self._tail + data
        if INTERRUPT in probe:
            self.interrupted = True
        self._tail = probe[-2:]
        self.buf += data
        frames = []
        while True:
            i = self.buf.find(FLAG)
            if i < 0:
                if len(self.buf) > self.limit:
                    self._junk(self.buf)
                    del self.buf[:]
                break
            chunk = bytes(self.buf[:i])
            del self.buf[: i + 1]
            if not chunk:
                continue
            frame = self._parse(chunk)
            if frame is None:
                self._junk(chunk)
            else:
                frames.append(frame)
        return frames

    def _parse(self, chunk):
        if len(chunk) > self.limit:
            self.bad += 1
            return None
        raw = unescape(chunk)
        if raw is None or len(raw) < HEADER.size + 4:
            self.bad += 1
            return None
        body, crc = raw[:-4], struct.unpack(">I", raw[-4:])[0]
        if zlib.crc32(body) & 0xFFFFFFFF != crc:
            self.bad += 1
            return None
        kind, seq = HEADER.unpack_from(body)
        self.frames += 1
        return kind, seq, body[HEADER.size :]

    def _junk(self, data):
        self.junk += data
        del self.junk[:-2000]


class Link:
    """Reliable, ordered delivery of payloads over a byte stream that may corrupt or drop bytes.

    ``read()`` returns bytes (``b""`` after a short wait with nothing to read) and raises
    on a dead line; ``write(data)`` writes all of ``data``. ``deliver(payload)`` is called
    from the reader thread, in order, and must not block.
    """

    def __init__(
        self,
        read,
        write,
        deliver,
        initial_rto=1.0,
        window=WINDOW,
        max_payload=MAX_PAYLOAD,
        lost_hint="",
        on_dead=None,
        interruptible=False,
        byte_time=0.0,
    ):
        # byte_time: seconds a byte takes on the wire (10 / baud; 0 where unknown or unlimited). A frame's
        # resend timer and its round-trip sample leave out the wire time of the bytes queued up to it.
        self.byte_time = byte_time
        self.interruptible = interruptible
        self._read, self._write = read, write
        self.deliver = deliver
        self.window = window
        self.max_payload = max_payload
        self.lost_hint = lost_hint
        self.on_dead = on_dead
        self.cond = threading.Condition()
        self.wlock = threading.Lock()
        self.next_seq = 0
        self.base = 0
        self.unacked = collections.OrderedDict()  # seq -> [frame, sent_at, resent, payload_len, wire_s]
        self.expected = 0
        self._nak = (None, 0.0)
        self.srtt = None
        self.rttvar = 0.0
        self.rto = initial_rto
        self.retries = 0
        self.dead = None
        self.closed = False
        self.decoder = Decoder(max_payload)
        self.interrupted = False
        self._busy_since = None
        self.stats = {
            "frames_sent": 0,
            "frames_resent": 0,
            "naks_sent": 0,
            "naks_received": 0,
            "bytes_acked": 0,
            "busy_s": 0.0,
        }
        self._thread = None

    # -- reader --------------------------------------------------------------
    def start(self) -> "Link":
        self._thread = threading.Thread(target=self._reader, name="serial-link-reader")
        self._thread.daemon = True
        self._thread.start()
        return self

    def _reader(self):
        while not self.closed:
            try:
                data = self._read()
            except Exception as e:  # the line is gone: OSError, EOFError, pyserial's SerialException
                self.kill("the port vanished (%s)" % (e or type(e).__name__))
                return
            if data:
                for kind, seq, payload in self.decoder.feed(data):
                    self._on_frame(kind, seq, payload)
                if self.interruptible and self.decoder.interrupted:
                    self.interrupted = True
                    self.kill("interrupted by Ctrl-C on the line")
                    return
            self._timers()

    def _on_frame(self, kind, seq, payload):
        if kind == F_DATA:
            deliver = False
            with self.cond:
                if seq == self.expected:
                    self.expected = (seq + 1) % SEQ_MOD
                    deliver = True
                    reply = (F_ACK, self.expected)
                elif 0 < (self.expected - seq) % SEQ_MOD <= SEQ_MOD // 2:
                    reply = (F_ACK, self.expected)  # a duplicate: our ACK was lost
                else:
                    now = time.monotonic()
                    if self._nak[0] == self.expected and now - self._nak[1] < self.rto:
                        reply = None
                    else:
                        self._nak = (self.expected, now)
                        self.stats["naks_sent"] += 1
                        reply = (F_NAK, self.expected)
            if deliver:
                self.deliver(payload)
            if reply:
                self._send_raw(encode_frame(reply[0], reply[1]))
        elif kind in (F_ACK, F_NAK):
            with self.cond:
                self._acked(seq)
                if kind == F_NAK:
                    self.stats["naks_received"] += 1
                    if self.unacked and next(iter(self.unacked)) == seq:
                        self._resend()

    def _acked(self, n):
        dist = (n - self.base) % SEQ_MOD
        if dist == 0 or dist > len(self.unacked):
            return
        now = time.monotonic()
        sample = None
        for _ in range(dist):
            _, (frame, sent, resent, size, wire) = self.unacked.popitem(last=False)
            self.stats["bytes_acked"] += size
            if not resent:
                sample = max(0.001, now - sent - wire)
        self.base = n
        self.retries = 0
        if sample is not None:
            if self.srtt is None:
                self.srtt, self.rttvar = sample, sample / 2
            else:
                self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
                self.srtt = 0.875 * self.srtt + 0.125 * sample
            self.rto = min(MAX_RTO, max(MIN_RTO, self.srtt + 4 * self.rttvar))
        if not self.unacked and self._busy_since is not None:
            self.stats["busy_s"] += now - self._busy_since
            self._busy_since = None
        self.cond.notify_all()

    def _resend(self):
        now = time.monotonic()
        queued = 0
        for entry in self.unacked.values():
            queued += len(entry[0])
            entry[1] = now
            entry[2] = True
            entry[4] = queued * self.byte_time
            self.stats["frames_resent"] += 1
            self._send_raw(entry[0])

    def _timers(self):
        with self.cond:
            if not self.unacked or self.dead:
                return
            oldest = next(iter(self.unacked.values()))
            if time.monotonic() - oldest[1] < self.rto + oldest[4]:
                return
            self.retries += 1
            if self.retries > MAX_RETRIES:
                dead = True
            else:
                dead = False
                self.rto = min(MAX_RTO, self.rto * 2)
                self._resend()
        if dead:
            self.kill(
                "the device stopped answering (no acknowledgement after %d resends%s)" % (MAX_RETRIES, self.lost_hint)
            )

    # -- sending -------------------------------------------------------------
    def _send_raw(self, frame):
        try:
            with self.wlock:
                self._write(frame)
        except Exception as e:  # see _reader
            self.kill("the port vanished (%s)" % (e or type(e).__name__))

    def send(self, payload: bytes, timeout: Optional[float] = None) -> None:
        """Queue one payload (at most ``max_payload`` bytes); blocks while the window is full."""
        if len(payload) > self.max_payload:
            raise ValueError("payload of %d bytes > %d" % (len(payload), self.max_payload))
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while len(self.unacked) >= self.window and not self.dead:
                if deadline is not None and time.monotonic() > deadline:
                    raise LinkDead("the device did not take data for %.0f s" % timeout)  # type: ignore[str-format]
                self.cond.wait(0.5)
            if self.dead:
                raise LinkDead(self.dead)
            seq = self.next_seq
            self.next_seq = (seq + 1) % SEQ_MOD
            frame = encode_frame(F_DATA, seq, payload)
            if self._busy_since is None:
                self._busy_since = time.monotonic()
            queued = len(frame) + sum(len(e[0]) for e in self.unacked.values())
            self.unacked[seq] = [frame, time.monotonic(), False, len(payload), queued * self.byte_time]
            self.stats["frames_sent"] += 1
            self._send_raw(frame)
        if self.dead:
            raise LinkDead(self.dead)

    def drain(self, timeout: float) -> bool:
        """Wait until everything sent was acknowledged; False if the time ran out or the link died."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.unacked and not self.dead and time.monotonic() < deadline:
                self.cond.wait(0.1)
            return not self.unacked

    def kill(self, reason: str) -> None:
        with self.cond:
            if self.dead:
                return
            self.dead = reason
            self.cond.notify_all()
        if self.on_dead:
            self.on_dead(reason)

    def close(self) -> None:
        self.closed = True
        self.kill("the serial session was closed")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def rate(self) -> Optional[float]:
        """Payload bytes per second acknowledged while data was in flight (None before any)."""
        busy = self.stats["busy_s"]
        if self._busy_since is not None:
            busy += time.monotonic() - self._busy_since
        done = self.stats["bytes_acked"]
        return done / busy if busy > 0 and done >= 4096 else None


class _Stream:
    """One TCP stream's socket on this end. What the other end sends waits in ``outbox`` for the stream's
    writer thread, so a socket that does not take data holds up nothing else; the other end keeps at most
    ``STREAM_WINDOW`` bytes unwritten here (``in_flight`` on its side, lowered by TCP_ACK)."""

    def __init__(self, sock):
        self.sock = sock
        self.fin_sent = False
        self.fin_received = False
        self.closed = False
        self.broken = False  # writing to the socket failed: what still arrives is acknowledged and dropped
        self.writing = False
        self.cond = threading.Condition()
        self.outbox = collections.deque()  # bytes for the socket; None: the other end's FIN, after its data
        self.queued = 0
        self.in_flight = 0
        self.writer = None


class Mux:
    """Messages and TCP streams over a :class:`Link`; both ends subclass it and define ``handle``."""

    def __init__(self):
        self.link = None
        self.inbox = queue.Queue()
        self.partial = {}
        self.streams = {}
        self.slock = threading.Lock()

    def attach(self, link: Link) -> None:
        self.link = link
        link.deliver = self.inbox.put
        t = threading.Thread(target=self._dispatch, name="serial-dispatch")
        t.daemon = True
        t.start()

    def send(self, op: int, chan: int, body: Any = b"") -> None:
        """One message of any size (fragmented with MORE and joined again on the other end)."""
        if not isinstance(body, bytes):
            body = json.dumps(body).encode("utf-8")
        for i in range(0, max(len(body), 1), MAX_BODY):
            last = i + MAX_BODY >= len(body)
            self.link.send(HEADER.pack(op if last else op | MORE, chan) + body[i : i + MAX_BODY])

    def send_chunks(self, op: int, chan: int, data: bytes) -> None:
        """Bytes of a stream (command output, file data, TCP data) as independent messages."""
        for i in range(0, len(data), MAX_BODY):
            self.link.send(HEADER.pack(op, chan) + data[i : i + MAX_BODY])

    def _dispatch(self):
        while True:
            payload = self.inbox.get()
            if payload is None:
                return
            op, chan = HEADER.unpack_from(payload)
            body = payload[HEADER.size :]
            if op & MORE:
                self.partial.setdefault((op & ~MORE, chan), []).append(body)
                continue
            parts = self.partial.pop((op, chan), None)
            if parts:
                parts.append(body)
                body = b"".join(parts)
            try:
                if op == TCP_DATA:
                    self._stream_data(chan, body)
                elif op == TCP_FIN:
                    self._stream_fin(chan)
                elif op == TCP_ACK:
                    self._stream_ack(chan, body)
                else:
                    self.handle(op, chan, body)
            except LinkDead:
                return

    def handle(self, op: int, chan: int, body: bytes) -> None:
        raise NotImplementedError

    def stop_dispatch(self) -> None:
        self.inbox.put(None)

    # -- TCP streams (same on both ends) ------------------------------------
    def start_pump(self, chan: int) -> None:
        """Send what the socket of stream ``chan`` receives over the link (a thread per stream)."""
        st = self.streams.get(chan)
        if st is None:
            return
        t = threading.Thread(target=self._pump, args=(chan, st), name="serial-stream-%d" % chan)
        t.daemon = True
        t.start()

    def _pump(self, chan, st):
        try:
            while True:
                with st.cond:  # the other end holds at most a window of our data unwritten
                    while st.in_flight >= STREAM_WINDOW and not st.closed and not self.link.dead:
                        st.cond.wait(0.5)
                    if st.closed:
                        return
                data = st.sock.recv(65536)
                if not data:
                    break
                with st.cond:
                    st.in_flight += len(data)
                self.send_chunks(TCP_DATA, chan, data)
        except LinkDead:
            self._drop_stream(chan, reset=True)
            return
        except OSError:
            pass
        if st.closed:
            return
        st.fin_sent = True
        try:
            self.send(TCP_FIN, chan)
        except LinkDead:
            self._drop_stream(chan, reset=True)
            return
        self._maybe_drop(chan, st)

    def _queue_out(self, chan, st, item):
        with st.cond:
            if item is not None:
                if st.queued + len(item) > 2 * STREAM_WINDOW:  # more than the window allows: a broken peer
                    overflow = True
                else:
                    overflow = False
                    st.queued += len(item)
            else:
                overflow = False
            if not overflow:
                st.outbox.append(item)
                if st.writer is None:
                    st.writer = threading.Thread(
                        target=self._write_out, args=(chan, st), name="serial-stream-%d-out" % chan
                    )
                    st.writer.daemon = True
                    st.writer.start()
                st.cond.notify_all()
        if overflow:
            self._drop_stream(chan, reset=True)

    def _write_out(self, chan, st):
        """The stream's writer thread: the socket gets the other end's bytes; acknowledge them as written."""
        done = 0
        while True:
            with st.cond:
                while not st.outbox and not st.closed:
                    st.cond.wait()
                if st.closed:
                    return
                data = st.outbox.popleft()
                if data is not None:
                    st.queued -= len(data)
                st.writing = data is not None and not st.broken
            if data is None:
                st.fin_received = True
                try:
                    st.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self._maybe_drop(chan, st)
                return
            if st.writing:
                try:
                    st.sock.sendall(data)
                except OSError:
                    st.broken = True
                    try:
                        st.sock.shutdown(socket.SHUT_RDWR)  # the pump sees it and sends FIN
                    except OSError:
                        pass
                st.writing = False
            done += len(data)
            if done >= STREAM_ACK_EVERY:
                try:
                    self.send(TCP_ACK, chan, struct.pack(">I", done))
                except LinkDead:
                    return
                done = 0

    def _stream_data(self, chan, body):
        st = self.streams.get(chan)
        if st is not None:
            self._queue_out(chan, st, body)

    def _stream_fin(self, chan):
        st = self.streams.get(chan)
        if st is not None:
            self._queue_out(chan, st, None)

    def _stream_ack(self, chan, body):
        st = self.streams.get(chan)
        if st is None or len(body) != 4:
            return
        with st.cond:
            st.in_flight = max(0, st.in_flight - struct.unpack(">I", body)[0])
            st.cond.notify_all()

    def _maybe_drop(self, chan, st):
        if st.fin_sent and st.fin_received:
            self._drop_stream(chan)

    def _drop_stream(self, chan, reset=False):
        with self.slock:
            st = self.streams.pop(chan, None)
        if st is None:
            return
        with st.cond:
            st.closed = True
            st.cond.notify_all()
        if reset:  # tell the local peer the stream broke rather than ended
            try:
                st.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        try:  # wake the pump's recv (and a writer stuck in sendall): closing alone does not
            st.sock.shutdown(socket.SHUT_RDWR if st.writing else socket.SHUT_RD)
        except OSError:
            pass
        try:
            st.sock.close()
        except OSError:
            pass

    def drop_all_streams(self) -> None:
        for chan in list(self.streams):
            self._drop_stream(chan, reset=True)


def file_sha256(path: str, limit: Optional[int] = None) -> str:
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h.hexdigest()


class Endpoint(Mux):
    """The device side: runs commands, writes files, opens loopback TCP streams."""

    def __init__(self):
        Mux.__init__(self)
        self.puts = {}
        self.done = threading.Event()

    def handle(self, op: int, chan: int, body: bytes) -> None:
        if op == RUN:
            t = threading.Thread(target=self._run, args=(chan, json.loads(body.decode("utf-8"))))
            t.daemon = True
            t.start()
        elif op in (PUT_OPEN, PUT_START, PUT_DATA, PUT_END):
            self._put(op, chan, body)
        elif op == TCP_OPEN:  # connecting may take a while: not on the dispatch thread
            t = threading.Thread(target=self._tcp_open, args=(chan, json.loads(body.decode("utf-8"))))
            t.daemon = True
            t.start()
        elif op == BYE:
            self.send(BYE_OK, 0)
            self.link.drain(3.0)
            self.done.set()
        else:
            self.send(FAIL, chan, {"error": "unknown message %d" % op})

    def _tcp_open(self, chan, req):
        try:
            try:
                sock = socket.create_connection(("127.0.0.1", int(req["port"])), timeout=10)
                sock.settimeout(None)
            except OSError as e:
                self.send(TCP_FAIL, chan, {"error": "127.0.0.1:%s: %s" % (req.get("port"), e.strerror or e)})
                return
            with self.slock:  # registered before TCP_OK: the host sends data as soon as it has the OK
                self.streams[chan] = _Stream(sock)
            self.send(TCP_OK, chan)
        except LinkDead:
            self._drop_stream(chan, reset=True)
            return
        self.start_pump(chan)

    def _run(self, chan, req):
        argv = [str(a) for a in req["argv"]]
        try:
            try:
                p = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=req.get("cwd") or None,
                )
            except OSError as e:
                rc = 127 if isinstance(e, FileNotFoundError) else 126
                self.send_chunks(
                    ERR,
                    chan,
                    ("%s: not found (%s)" % (argv[0], e) if rc == 127 else "%s: %s" % (argv[0], e)).encode("utf-8"),
                )
                self.send(EXIT, chan, {"rc": rc})
                return
            timed_out = False
            try:
                out, err = p.communicate(timeout=req.get("timeout"))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                timed_out = True
            self.send_chunks(OUT, chan, out)
            self.send_chunks(ERR, chan, err)
            self.send(EXIT, chan, {"rc": p.returncode, "timed_out": timed_out})
        except LinkDead:
            pass

    def _put(self, op, chan, body):
        st = self.puts.get(chan)
        try:
            if op == PUT_OPEN:
                req = json.loads(body.decode("utf-8"))
                path = os.path.expanduser(req["path"])
                part = path + ".part"
                parent = os.path.dirname(path)
                if parent and not os.path.isdir(parent):
                    os.makedirs(parent)
                have, digest = 0, hashlib.sha256().hexdigest()
                if os.path.isfile(part):
                    have = os.path.getsize(part)
                    if have > int(req["size"]):
                        have = 0
                    else:
                        digest = file_sha256(part, have)
                self.puts[chan] = {
                    "path": path,
                    "part": part,
                    "size": int(req["size"]),
                    "sha256": req["sha256"],
                    "mode": req.get("mode"),
                    "f": None,
                    "error": None,
                }
                self.send(PUT_STATE, chan, {"have": have, "sha256": digest})
            elif st is None:
                self.send(PUT_DONE, chan, {"error": "no upload open on channel %d" % chan})
            elif op == PUT_START:
                offset = json.loads(body.decode("utf-8"))["offset"]
                f = open(st["part"], "r+b" if offset and os.path.exists(st["part"]) else "wb", buffering=0)
                f.truncate(offset)
                f.seek(offset)
                st["f"] = f
            elif op == PUT_DATA:
                if st["error"] is None and st["f"] is not None:
                    st["f"].write(body)
            elif op == PUT_END:
                self.puts.pop(chan, None)
                self.send(PUT_DONE, chan, self._finish(st))
        except (OSError, ValueError, KeyError) as e:
            if st is not None:
                st["error"] = st["error"] or str(e)
            if op == PUT_OPEN:
                self.send(PUT_STATE, chan, {"error": str(e)})

    @staticmethod
    def _finish(st):
        f = st["f"]
        try:
            if st["error"] is not None:
                return {"error": st["error"]}
            if f is None:
                return {"error": "upload ended before it started"}
            f.flush()
            os.fsync(f.fileno())
            f.close()
            size = os.path.getsize(st["part"])
            digest = file_sha256(st["part"])
            if size != st["size"] or digest != st["sha256"]:
                os.remove(st["part"])
                return {
                    "error": "%s arrived with %d bytes, sha256 %s; expected %d bytes, sha256 %s"
                    % (st["path"], size, digest[:16], st["size"], st["sha256"][:16])
                }
            if st.get("mode"):
                os.chmod(st["part"], int(st["mode"]) & 0o777)
            os.replace(st["part"], st["path"])
            try:
                dfd = os.open(os.path.dirname(st["path"]) or ".", os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            except OSError:
                pass
            return {"ok": True, "sha256": digest, "size": size}
        except OSError as e:
            return {"error": "%s: %s" % (st["path"], e)}
        finally:
            if f is not None and not f.closed:
                f.close()


def fd_reader(fd: int, wait: float = 0.1) -> Callable[[], bytes]:
    def read():
        r, _, _ = select.select([fd], [], [], wait)
        if not r:
            return b""
        data = os.read(fd, 65536)
        if not data:
            raise EOFError("the console closed")
        return data

    return read


def fd_writer(fd: int) -> Callable[[bytes], None]:
    def write(data):
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    return write


def main() -> None:
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    saved = None
    try:
        import termios
        import tty

        if os.isatty(fd_in):
            saved = termios.tcgetattr(fd_in)
            tty.setraw(fd_in)
    except (ImportError, OSError):
        termios = None  # type: ignore[assignment]
    try:
        rto = min(MAX_RTO, max(MIN_RTO, float(sys.argv[1])))  # the host's first resend timeout
        byte_time = max(0.0, float(sys.argv[2]))  # 10 / baud, or 0 (a pty)
    except (IndexError, ValueError):
        rto, byte_time = 1.0, 0.0
    ep = Endpoint()
    link = Link(
        fd_reader(fd_in),
        fd_writer(fd_out),
        None,
        initial_rto=rto,
        on_dead=lambda reason: ep.done.set(),
        interruptible=True,
        byte_time=byte_time,
    )
    ep.attach(link)
    link.start()
    status = 0
    try:
        ep.send(
            HELLO,
            0,
            {
                "protocol": PROTOCOL,
                "pid": os.getpid(),
                "python": "%d.%d.%d" % sys.version_info[:3],
                "executable": sys.executable,
            },
        )
        ep.done.wait()
    except LinkDead:
        status = 1
    except KeyboardInterrupt:
        status = 130
    finally:
        ep.drop_all_streams()
        if saved is not None:
            try:
                termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
            except Exception:  # the console may be gone already
                pass
    os._exit(status)


if __name__ == "__main__":
    main()
