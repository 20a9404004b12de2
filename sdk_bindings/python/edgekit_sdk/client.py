"""HTTP client for the agent: one kept-alive connection, standard library only.

The transport is a minimal HTTP/1.1 client over a socket (request in one ``sendall``,
``Content-Length`` bodies only, which is all the agent sends) rather than
``http.client``, whose header parsing costs about as much as a small model's inference.
"""

import json
import os
import socket
from typing import Any, BinaryIO, Dict, List, Optional, Tuple, Union

from .wire import CONTENT_TYPE, decode_tensors, encode_tensors

_CHUNK = 65536
DEFAULT_ROOT = "~/.cache/edgekit/device"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def local_token(port: int, root: Optional[str] = None) -> Optional[str]:
    """The token of the agent serving ``root`` on this machine, if it listens on ``port`` and this user may read
    it (``ROOT/agent/token``); ``root``: argument, else ``$EDGEKIT_AGENT_ROOT``, else the default root."""
    root = os.path.abspath(os.path.expanduser(root or os.environ.get("EDGEKIT_AGENT_ROOT") or DEFAULT_ROOT))
    try:
        with open(os.path.join(root, "agent", "state.json")) as f:
            if json.load(f).get("port") != port:
                return None
        with open(os.path.join(root, "agent", "token")) as f:
            return f.read().strip() or None
    except (OSError, ValueError, AttributeError):
        return None


class AgentHTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        Exception.__init__(self, "agent answered %d: %s" % (status, message))
        self.status = status
        self.message = message


class _Connection(object):
    def __init__(self, host: str, port: int, timeout: Optional[float]) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()

    def exchange(
        self, head: bytes, body: Optional[Union[bytes, BinaryIO]], length: int
    ) -> Tuple[int, Dict[str, str], bytes]:
        if body is None or isinstance(body, bytes):
            self.sock.sendall(head + (body or b""))
        else:  # a file object: stream it
            self.sock.sendall(head)
            sent = 0
            while sent < length:
                block = body.read(min(_CHUNK, length - sent))
                if not block:
                    raise IOError("request body ended after %d of %d bytes" % (sent, length))
                self.sock.sendall(block)
                sent += len(block)
        status_line = self.rfile.readline(65537)
        if not status_line:
            raise ConnectionResetError("the agent closed the connection")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ConnectionError("not an HTTP response: %r" % status_line[:80])
        status = int(parts[1])
        headers = {}
        while True:
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("iso-8859-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", "0"))
        data = self.rfile.read(n) if n else b""
        if len(data) != n:
            raise ConnectionResetError("response ended after %d of %d bytes" % (len(data), n))
        return status, headers, data


class AgentClient(object):
    """A client of one agent. ``token``: given, else ``$EDGEKIT_AGENT_TOKEN``, else (an agent on this machine)
    read from the agent's root (``root``, see :func:`local_token`); reads and inference need none on loopback."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        token: Optional[str] = None,
        timeout: float = 60.0,
        root: Optional[str] = None,
    ) -> None:
        if token is None:
            token = os.environ.get("EDGEKIT_AGENT_TOKEN") or (local_token(port, root) if host in LOOPBACK else None)
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self._conn: Optional[_Connection] = None
        self.bytes_sent = 0  # request bytes written (headers + bodies), for transfer accounting

    @classmethod
    def local(cls, root: Optional[str] = None, timeout: float = 60.0) -> "AgentClient":
        """The agent running on this machine for ``root`` (its port and token from the root's state)."""
        root = os.path.abspath(os.path.expanduser(root or os.environ.get("EDGEKIT_AGENT_ROOT") or DEFAULT_ROOT))
        with open(os.path.join(root, "agent", "state.json")) as f:
            port = json.load(f)["port"]
        return cls("127.0.0.1", port, timeout=timeout, root=root)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Optional[float] = None,
        raw: bool = False,
        length: Optional[int] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> Any:
        """One request; ``body`` is a dict (sent as JSON), bytes, or a file object of ``length`` bytes;
        ``headers``: more request headers ``{name: value}``."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        if length is None:
            length = len(body) if body is not None else 0
        head: Any = [
            "%s %s HTTP/1.1" % (method, path),
            "Host: %s:%d" % (self.host, self.port),
            "Content-Type: " + content_type,
            "Accept: application/json",
            "Content-Length: %d" % length,
        ]
        if self.token:
            head.append("Authorization: Bearer " + self.token)
        for key, value in (headers or {}).items():
            if any(c in str(key) + str(value) for c in "\r\n"):
                raise ValueError("header %s: a value cannot hold a line break" % key)
            head.append("%s: %s" % (key, value))
        head = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        for attempt in (0, 1):
            fresh = self._conn is None
            if fresh:
                self._conn = _Connection(self.host, self.port, self.timeout)
            self._conn.sock.settimeout(timeout or self.timeout)  # type: ignore[union-attr]
            try:
                self.bytes_sent += len(head) + length
                status, got, data = self._conn.exchange(head, body, length)  # type: ignore[union-attr]
                break
            except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
                # A kept-alive connection the agent had closed: retry once on a new one.
                self.close()
                if attempt or fresh or hasattr(body, "read"):
                    raise
            except Exception:
                self.close()
                raise
        if got.get("connection", "").lower() == "close":
            self.close()
        if status >= 400:
            try:
                message = json.loads(data.decode("utf-8")).get("error", "")
            except ValueError:
                message = data[:200].decode("utf-8", "replace")
            raise AgentHTTPError(status, message)
        if raw:
            return data, got.get("content-type", "")
        return json.loads(data.decode("utf-8")) if data else {}

    # -- API -------------------------------------------------------------------
    def health(self) -> Dict[str, Any]:
        return self.request("GET", "/v1/health")

    def models(self) -> List[Dict[str, Any]]:
        return self.request("GET", "/v1/models")["models"]

    def load(
        self,
        name: str,
        threads: Optional[int] = None,
        providers: Optional[List[str]] = None,
        warmup: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Load (or reload) the current version and run ``warmup`` inferences (default: the agent's setting)."""
        return self.request(
            "POST", "/v1/models/%s/load" % name, {"threads": threads, "providers": providers, "warmup": warmup}
        )

    def annotate(
        self, request_id: str, pre_ms: Optional[float] = None, post_ms: Optional[float] = None
    ) -> Dict[str, Any]:
        """Record the pre/post-processing time the app spent around a request (id from ``infer(with_meta=True)``)."""
        return self.request(
            "POST", "/v1/telemetry/annotate", {"request_id": request_id, "pre_ms": pre_ms, "post_ms": post_ms}
        )

    def metrics(self) -> str:
        """The Prometheus text exposition."""
        return self.request("GET", "/metrics", raw=True)[0].decode("utf-8")

    def unload(self, name: str) -> Dict[str, Any]:
        return self.request("POST", "/v1/models/%s/unload" % name, {})

    def infer(self, name: str, inputs: Dict[str, Any], with_meta: bool = False, session: Optional[str] = None) -> Any:
        """``inputs``: ``{name: ndarray}``; returns ``{name: ndarray}`` (and the response header).
        ``session``: a stream's session id (the agent feeds and keeps its state; see :meth:`stream`)."""
        data, ctype = self.request(
            "POST",
            "/v1/models/%s/infer" % name,
            encode_tensors(inputs),
            content_type=CONTENT_TYPE,
            raw=True,
            headers={"X-Edgekit-Session": session} if session is not None else None,
        )
        outputs, header = decode_tensors(data)
        return (outputs, header) if with_meta else outputs

    def stream(self, name: str, session: Optional[str] = None) -> Any:
        """A :class:`~edgekit_sdk.stream.Stream` over a model built with ``--stream``: send each step's data
        inputs, the agent keeps the state (``session``: its id, default a new random one)."""
        from .stream import Stream

        return Stream(self, name, session)

    def sessions(self, name: str) -> Dict[str, Any]:
        """The stream sessions the agent keeps for ``name``, and the table's bounds."""
        return self.request("GET", "/v1/models/%s/sessions" % name)

    def end_session(self, name: str, session: str) -> Dict[str, Any]:
        """Forget a session's state (its next request starts from the initial state)."""
        return self.request("DELETE", "/v1/models/%s/sessions" % name, headers={"X-Edgekit-Session": session})

    def infer_json(self, name: str, inputs: Dict[str, Any]) -> Dict[str, Any]:
        return self.request("POST", "/v1/models/%s/infer" % name, {"inputs": inputs})

    def bench(
        self,
        name: str,
        runs: int = 100,
        warmup: int = 10,
        threads: Optional[int] = None,
        providers: Optional[List[str]] = None,
        timeout: float = 600,
    ) -> Dict[str, Any]:
        body = {"runs": runs, "warmup": warmup, "threads": threads, "providers": providers}
        return self.request("POST", "/v1/models/%s/bench" % name, body, timeout=timeout)

    def profile(
        self,
        name: str,
        runs: int = 20,
        warmup: int = 3,
        threads: Optional[int] = None,
        providers: Optional[List[str]] = None,
        timeout: float = 600,
    ) -> Dict[str, Any]:
        """Per-layer times of the current version with the runtime's own profiler (schema edgekit.profile/1)."""
        body = {"runs": runs, "warmup": warmup, "threads": threads, "providers": providers}
        return self.request("POST", "/v1/models/%s/profile" % name, body, timeout=timeout)

    def rollback(self, name: str, version: Optional[str] = None) -> Dict[str, Any]:
        """Serve the previous kept version again, or ``version`` if the device keeps it."""
        return self.request("POST", "/v1/models/%s/rollback" % name, {"version": version} if version else {})

    def split(self, name: str, versions: Dict[str, int]) -> Dict[str, Any]:
        """Serve several kept versions at once: ``{"v1": 90, "v2": 10}`` (``{}`` ends the split)."""
        return self.request("PUT", "/v1/models/%s/split" % name, {"versions": versions})

    def breaker(self, name: str, limits: Dict[str, Any]) -> Dict[str, Any]:
        """Circuit-breaker limits of one model, e.g. ``{"error_rate": 0.2, "p99_ms": 50}`` (``{}``: the agent's)."""
        return self.request("PUT", "/v1/models/%s/breaker" % name, {"limits": limits})

    def remove(self, name: str) -> Dict[str, Any]:
        """Unload a model and delete every version the device keeps of it."""
        return self.request("DELETE", "/v1/models/%s" % name)

    def begin_upload(self, name: str, version: str, manifest: Dict[str, Any]) -> Dict[str, Any]:
        return self.request("POST", "/v1/bundles/%s/%s" % (name, version), manifest)

    def put_file(
        self,
        name: str,
        version: str,
        filename: str,
        data: Union[bytes, BinaryIO],
        length: Optional[int] = None,
        offset: int = 0,
    ) -> Dict[str, Any]:
        """Send one bundle file (or its rest from ``offset``): ``data`` is bytes, or a file object with ``length``."""
        query = "?offset=%d" % offset if offset else ""
        return self.request(
            "PUT",
            "/v1/bundles/%s/%s/files/%s%s" % (name, version, filename, query),
            data,
            content_type="application/octet-stream",
            timeout=max(self.timeout, 300),
            length=length,
        )

    def commit(
        self, name: str, version: str, verify: bool = False, signature: Optional[Dict[str, str]] = None
    ) -> Dict[str, Any]:
        """Install an uploaded version; with ``verify`` the agent first checks it loads and runs on the device.
        ``signature``: ``{"manifest": manifest.json's text, "signature": manifest.json.sig's text}`` of a signed
        bundle (a device that trusts signers installs nothing else)."""
        body = {"verify": bool(verify)}  # type: Dict[str, Any]
        if signature is not None:
            body["signature"] = signature
        return self.request(
            "POST",
            "/v1/bundles/%s/%s/commit" % (name, version),
            body,
            timeout=max(self.timeout, 330),
        )
