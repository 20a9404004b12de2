"""HTTP/1.1 plumbing of the agent: request parsing, one-write responses, routing, errors as JSON.

Routes are registered with :func:`route` (in ``server.py``) and receive the handler;
they read the request through it and call only the service (``handler.service``).
"""

import hmac
import json
import os
import re
import sys
from http import HTTPStatus

try:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
except ImportError:  # pragma: no cover - Python < 3.7 is not supported
    raise SystemExit("edgekit-agent needs Python 3.7 or newer")

from . import __version__, runners
from .errors import AgentError
from .store import StoreError

MAX_JSON_BODY = 256 << 20
HTTPError = AgentError  # routes raise HTTPError(status, message)

ROUTES = []


def route(method, pattern):
    def deco(fn):
        ROUTES.append((method, re.compile("^" + pattern + "$"), fn))
        return fn

    return deco


class Headers(dict):
    """Request headers, keys lower-cased; ``get`` is case-insensitive."""

    def get(self, key, default=None):
        return dict.get(self, key.lower(), default)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (~40 ms a request on Linux).
    disable_nagle_algorithm = True
    # A client that stalls (mid-upload, or an idle kept-alive connection) frees its thread after this long.
    timeout = 600
    server_version = "edgekit-agent/" + __version__

    def log_message(self, fmt, *args):  # quiet by default; errors go to the log below
        if os.environ.get("EDGEKIT_AGENT_ACCESS_LOG"):
            BaseHTTPRequestHandler.log_message(self, fmt, *args)

    @property
    def service(self):
        return self.server.service

    def parse_request(self):
        """HTTP/1.x request line and headers, without the ``email`` package http.server uses.

        That parser costs more than a small model's inference; this one is a plain loop.
        """
        self.command = None
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
        for _ in range(101):
            raw = self.rfile.readline(65537)
            if len(raw) > 65536:
                self.send_error(431, "Header line too long")
                return False
            if raw in (b"\r\n", b"\n", b""):
                break
            name, sep, value = raw.decode("iso-8859-1").partition(":")
            if not sep:
                self.send_error(400, "Malformed header line")
                return False
            headers[name.strip().lower()] = value.strip()
        else:
            self.send_error(431, "Too many headers")
            return False
        self.headers = headers
        connection = headers.get("Connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive"
        )
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")
        if headers.get("Expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def send(self, status, body, content_type="application/json"):
        """One write per response: status line, headers and body together."""
        if not isinstance(body, bytes):
            body = json.dumps(body).encode("utf-8")
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        head = "HTTP/1.1 %d %s\r\nServer: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
            status,
            reason,
            self.server_version,
            content_type,
            len(body),
            "Connection: close\r\n" if self.close_connection else "",
        )
        self.wfile.write(head.encode("latin-1") + body)

    def length(self):
        raw = self.headers.get("Content-Length")
        if raw is None:
            if self.command in ("POST", "PUT"):
                raise HTTPError(411, "Content-Length is required")
            return 0
        try:
            n = int(raw)
        except ValueError:
            raise HTTPError(400, "bad Content-Length")
        if n < 0:
            raise HTTPError(400, "bad Content-Length")
        return n

    def body(self):
        n = self.length()
        if n > MAX_JSON_BODY:
            raise HTTPError(413, "body of %d bytes is larger than %d" % (n, MAX_JSON_BODY))
        data = self.rfile.read(n) if n else b""
        self.consumed = True
        return data

    def json_body(self):
        data = self.body()
        if not data:
            return {}
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise HTTPError(400, "request body is not valid JSON: %s" % e)
        if not isinstance(obj, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return obj

    def query_int(self, key, default=0):
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        for pair in query.split("&"):
            k, _, v = pair.partition("=")
            if k == key:
                try:
                    return int(v)
                except ValueError:
                    raise HTTPError(400, "query parameter %s must be an integer, got %r" % (key, v))
        return default

    def _authorized(self):
        token = self.service.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())

    def _dispatch(self):
        self.consumed = False
        path = self.path.split("?", 1)[0]
        try:
            if not self._authorized():
                raise HTTPError(401, "missing or wrong token: send 'Authorization: Bearer TOKEN'")
            allowed = []
            for method, pattern, fn in ROUTES:
                m = pattern.match(path)
                if m:
                    if method == self.command:
                        result = fn(self, *m.groups())
                        if result is not None:
                            self.send(200, result)
                        return
                    allowed.append(method)
            if allowed:
                raise HTTPError(405, "%s not allowed on %s (use %s)" % (self.command, path, ", ".join(allowed)))
            raise HTTPError(404, "no such endpoint: %s %s (see /openapi.json)" % (self.command, path))
        except (AgentError, StoreError, runners.RunnerError) as e:
            self._error(e.status, str(e))
        except Exception as e:  # a bug or a runtime failure: answer 500, keep serving
            import traceback

            sys.stderr.write(traceback.format_exc())
            self._error(500, "%s: %s" % (type(e).__name__, e))

    def _error(self, status, message):
        if not self.consumed and self.command in ("POST", "PUT"):
            # Unread body: the connection cannot be reused safely.
            self.close_connection = True
        self.send(status, {"error": message, "status": status})

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


class AgentServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
