"""HTTP/1.1 plumbing of the agent: request parsing, one-write responses, routing, errors as JSON.

Routes are registered with :func:`route` (in ``server.py``) and receive the handler;
they read the request through it and call only the service (``handler.service``).
The server itself (connection bounds, request-head deadline) is :class:`AgentServer` in ``httpserver.py``.
"""

import hmac
import json
import math
import os
import re
import socket
import sys
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Callable, Dict, NoReturn, Optional

try:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: F401
except ImportError:  # pragma: no cover - Python < 3.7 is not supported
    raise SystemExit("edgekit-agent needs Python 3.7 or newer") from None

from . import __version__, runners
from .errors import AgentError
from .httpserver import AgentServer  # noqa: F401  (server.py imports it from here)
from .store import StoreError

if TYPE_CHECKING:
    from .service import AgentService

MAX_JSON_BODY = 256 << 20
MAX_REQUEST_LINE = 8192
MAX_HEADER_BYTES = 65536  # request line and every header together, read before the token is checked
MAX_HEADERS = 100
JSON_TYPE = "application/json"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
HTTPError = AgentError  # routes raise HTTPError(status, message)

ROUTES = []  # type: list


def route(method: str, pattern: str, serving: bool = False) -> Callable[[Callable], Callable]:
    """Register ``fn(handler, *groups)``; ``serving``: an app's request (infer) that, like every GET, needs no
    token on a loopback agent. Everything else that changes state needs the token on loopback too."""

    def deco(fn: Callable) -> Callable:
        fn.open_on_loopback = method == "GET" or serving  # type: ignore[attr-defined]
        ROUTES.append((method, re.compile("^" + pattern + "$"), fn))
        return fn

    return deco


class Headers(dict):
    """Request headers, keys lower-cased; ``get`` is case-insensitive."""

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (~40 ms a request on Linux).
    disable_nagle_algorithm = True
    # A client that stops sending mid-body (or stops reading an answer) frees its thread after this long;
    # a request's head has its own, shorter bound (AgentServer.header_timeout).
    timeout = 60
    server_version = "edgekit-agent/" + __version__
    server = None  # type: Any  # the AgentServer (set per connection by socketserver)

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default; errors go to the log below
        if os.environ.get("EDGEKIT_AGENT_ACCESS_LOG"):
            BaseHTTPRequestHandler.log_message(self, fmt, *args)

    @property
    def service(self) -> "AgentService":
        return self.server.service

    def handle_one_request(self) -> None:
        """One request; until its head has arrived the connection counts as waiting (see AgentServer)."""
        self.server.waiting(self.connection, True)
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline, self.request_version, self.command = "", "HTTP/1.0", ""
                self._refuse_head(414, "Request line longer than %d bytes" % MAX_REQUEST_LINE)
                return
            if not self.parse_request():
                return
        except (socket.timeout, OSError, ValueError):
            self.close_connection = True
            return
        finally:
            self.server.waiting(self.connection, False)
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501, "Unsupported method (%r)" % self.command)
            return
        method()
        self.wfile.flush()

    def _refuse_head(self, status: int, message: str) -> None:
        """Answer a request whose head is too large, then read (a bounded amount, briefly) what the client is
        still sending, so it receives the answer rather than a connection reset."""
        self.send_error(status, message)
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(1.0)
            left = 1 << 20
            while left > 0:
                block = self.connection.recv(65536)
                if not block:
                    break
                left -= len(block)
        except OSError:
            pass
        self.close_connection = True

    def parse_request(self) -> bool:
        """HTTP/1.x request line and headers, without the ``email`` package http.server uses.

        That parser costs more than a small model's inference; this one is a plain loop.
        """
        self.command = ""
        self.request_version = "HTTP/1.0"
        self.close_connection = True
        line = self.raw_requestline.decode("iso-8859-1").rstrip("\r\n")
        self.requestline = line
        words = line.split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.send_error(400, "Bad request line (%r)" % line[:100])
            return False
        self.command, self.path, self.request_version = words
        headers = Headers()
        budget = MAX_HEADER_BYTES - len(self.raw_requestline)
        for _ in range(MAX_HEADERS + 1):
            raw = self.rfile.readline(max(budget, 0) + 1)
            budget -= len(raw)
            if budget < 0:
                self._refuse_head(431, "Request headers larger than %d bytes in all" % MAX_HEADER_BYTES)
                return False
            if raw in (b"\r\n", b"\n", b""):
                break
            name, sep, value = raw.decode("iso-8859-1").partition(":")
            if not sep:
                self.send_error(400, "Malformed header line")
                return False
            headers[name.strip().lower()] = value.strip()
        else:
            self._refuse_head(431, "More than %d headers" % MAX_HEADERS)
            return False
        self.headers = headers  # type: ignore[assignment]
        connection = headers.get("Connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive"
        )
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")
        if headers.get("Expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def send(
        self, status: int, body: Any, content_type: str = "application/json", headers: Optional[Dict[str, str]] = None
    ) -> None:
        """One write per response: status line, headers and body together."""
        if not isinstance(body, bytes):
            body = dumps(body).encode("utf-8")
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        extra = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
        head = "HTTP/1.1 %d %s\r\nServer: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
            status,
            reason,
            self.server_version,
            content_type,
            len(body),
            extra,
            "Connection: close\r\n" if self.close_connection else "",
        )
        self.wfile.write(head.encode("latin-1") + body)

    def length(self) -> int:
        raw = self.headers.get("Content-Length")
        if raw is None:
            if self.command in ("POST", "PUT"):
                raise HTTPError(411, "Content-Length is required")
            return 0
        try:
            n = int(raw)
        except ValueError:
            raise HTTPError(400, "bad Content-Length") from None
        if n < 0:
            raise HTTPError(400, "bad Content-Length")
        return n

    def body(self) -> bytes:
        n = self.length()
        if n > MAX_JSON_BODY:
            raise HTTPError(413, "body of %d bytes is larger than %d" % (n, MAX_JSON_BODY))
        data = self.rfile.read(n) if n else b""
        self.consumed = True
        return data

    def json_body(self) -> Dict[str, Any]:
        data = self.body()
        if not data:
            return {}
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype != JSON_TYPE:
            raise HTTPError(415, "a JSON body must be sent as Content-Type: application/json (got %r)" % ctype[:100])
        try:
            obj = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
        except RecursionError:
            raise HTTPError(400, "request body is JSON nested too deeply") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise HTTPError(400, "request body is not valid JSON: %s" % e) from None
        if not isinstance(obj, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return obj

    def query_int(self, key: str, default: int = 0) -> int:
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        for pair in query.split("&"):
            k, _, v = pair.partition("=")
            if k == key:
                try:
                    return int(v)
                except ValueError:
                    raise HTTPError(400, "query parameter %s must be an integer, got %r" % (key, v)) from None
        return default

    def _check_access(self, fn: Optional[Callable]) -> None:
        """Who may ask: the right ``Host`` and no foreign ``Origin`` (browsers), and the token where needed."""
        server, token = self.server, self.service.token
        if server.loopback:
            host = self.headers.get("Host")
            if host is not None and _hostname(host) not in LOOPBACK_NAMES:
                raise HTTPError(403, "Host %r is not this agent's address (a DNS rebinding attempt?)" % host[:100])
        origin = self.headers.get("Origin")
        if origin is not None and _hostname(origin.partition("://")[2]) not in LOOPBACK_NAMES + (server.host,):
            raise HTTPError(403, "cross-origin requests are refused (Origin %r)" % origin[:100])
        if self.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            raise HTTPError(403, "cross-site requests are refused")
        if not token or (server.open_reads and getattr(fn, "open_on_loopback", False)):
            return
        given = self.headers.get("Authorization", "")
        if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())):
            where = "" if not server.open_reads else " (on loopback too: the token is in ROOT/agent/token)"
            raise HTTPError(401, "missing or wrong token: send 'Authorization: Bearer TOKEN'%s" % where)

    def _dispatch(self) -> None:
        self.consumed = False
        path = self.path.split("?", 1)[0]
        try:
            allowed = []
            for method, pattern, fn in ROUTES:
                m = pattern.match(path)
                if m:
                    if method == self.command:
                        self._check_access(fn)
                        result = fn(self, *m.groups())
                        if result is not None:
                            self.send(200, result)
                        return
                    allowed.append(method)
            self._check_access(None)
            if allowed:
                raise HTTPError(405, "%s not allowed on %s (use %s)" % (self.command, path, ", ".join(allowed)))
            raise HTTPError(404, "no such endpoint: %s %s (see /openapi.json)" % (self.command, path))
        except (AgentError, StoreError, runners.RunnerError) as e:
            self._error(e.status, str(e), getattr(e, "headers", None))
        except RecursionError:
            self._error(400, "request nested too deeply")
        except Exception as e:  # a bug or a runtime failure: answer 500, keep serving
            import traceback

            sys.stderr.write(traceback.format_exc())
            self._error(500, "%s: %s" % (type(e).__name__, e))

    def _error(self, status: int, message: str, headers: Optional[Dict[str, str]] = None) -> None:
        if not self.consumed and self.command in ("POST", "PUT"):
            # Unread body: the connection cannot be reused safely.
            self.close_connection = True
        self.send(status, {"error": message, "status": status}, headers=headers)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


def _hostname(value: str) -> str:
    """``host[:port]`` or ``[v6]:port`` -> host."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _no_constant(name: str) -> NoReturn:
    raise ValueError("%s is not JSON (send null, or a number)" % name)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return dict((k, _finite(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Standard JSON: a NaN or infinity becomes null (JSON has no such numbers)."""
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), allow_nan=False)
