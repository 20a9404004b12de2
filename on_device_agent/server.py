"""The agent's local HTTP API (documented in ``openapi.json`` beside this file).

Listens on 127.0.0.1 unless told otherwise; on any other address it refuses to start
without a token, and then every request must carry ``Authorization: Bearer TOKEN``.
Every error is answered with a JSON ``{"error": message}`` and a 4xx/5xx status; no
request can bring the server down. Each route parses its request and makes one call
to the service (``service.py``); the HTTP plumbing is in ``httpd.py``.
"""

import os
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from .bench import device_info
from .breaker import check_limits
from .childproc import self_command  # noqa: F401  (re-exported: how to start this agent again)
from .httpd import ROUTES, AgentServer, Handler, HTTPError, route  # noqa: F401
from .service import AgentService
from .store import StoreError
from .telemetry import Recorder, TelemetryError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
DRAIN_LIMIT = 256 << 20


@route("GET", "/v1/health")
def health(h: Handler) -> Dict[str, Any]:
    return h.service.health()


@route("GET", "/openapi.json")
def openapi(h: Handler) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import pkgutil

        data = pkgutil.get_data("edgekit_agent", "openapi.json")
    except OSError:
        data = None
    if data is None:
        raise HTTPError(404, "openapi.json is not packaged with this agent (%s)" % here)
    h.send(200, data)


@route("GET", "/v1/models")
def list_models(h: Handler) -> Dict[str, Any]:
    models, unreadable = h.service.models()
    return {"models": models, "unreadable": unreadable}


@route("POST", "/v1/models/([^/]+)/load")
def load_model(h: Handler, name: str) -> Dict[str, Any]:
    body = h.json_body()
    return h.service.load_info(
        name, threads=body.get("threads"), providers=body.get("providers"), warmup=body.get("warmup")
    )


@route("POST", "/v1/models/([^/]+)/unload")
def unload_model(h: Handler, name: str) -> Dict[str, Any]:
    h.body()
    return h.service.unload(name)


@route("DELETE", "/v1/models/([^/]+)")
def remove_model(h: Handler, name: str) -> Dict[str, Any]:
    h.body()
    return h.service.remove(name)


@route("POST", "/v1/models/([^/]+)/infer", serving=True)
def infer(h: Handler, name: str) -> Optional[Dict[str, Any]]:
    from edgekit_sdk.wire import (
        CONTENT_TYPE,
        WireError,
        decode_tensors,
        encode_tensors,
        tensors_from_json,
        tensors_to_json,
    )

    t_arrive = time.perf_counter()
    binary = h.headers.get("Content-Type", "").startswith(CONTENT_TYPE)
    pre_ms: Any = h.headers.get("X-Edgekit-Pre-Ms")
    session = h.headers.get("X-Edgekit-Session")  # a stream's session (sessions.py); JSON bodies may name it too
    try:
        try:
            pre_ms = float(pre_ms) if pre_ms is not None else None
            if binary:
                feeds, _ = decode_tensors(h.body())
            else:
                body = h.json_body()
                feeds = tensors_from_json(body.get("inputs"))  # type: ignore[arg-type]
                session = body.get("session", session)
        except (WireError, ValueError, TypeError) as e:
            raise HTTPError(400, str(e)) from None
        except RecursionError:
            raise HTTPError(400, "inputs nested too deeply") from None
    except Exception as e:
        h.service.reject(name, e)
        raise
    outputs, meta = h.service.infer(name, feeds, t_arrive, pre_ms, session)
    if binary:
        h.send(200, encode_tensors(outputs, meta), CONTENT_TYPE)
        return None
    meta["outputs"] = tensors_to_json(outputs)
    return meta


@route("GET", "/v1/models/([^/]+)/sessions")
def list_sessions(h: Handler, name: str) -> Dict[str, Any]:
    return h.service.list_sessions(name)


@route("DELETE", "/v1/models/([^/]+)/sessions", serving=True)
def end_session(h: Handler, name: str) -> Dict[str, Any]:
    from urllib.parse import parse_qs

    h.body()
    given: Sequence[Optional[str]] = parse_qs(h.path.partition("?")[2]).get("session") or [
        h.headers.get("X-Edgekit-Session")
    ]
    if given[0] is None:
        raise HTTPError(400, "name the session to end: ?session=ID (or the X-Edgekit-Session header)")
    return h.service.end_session(name, given[0])


@route("POST", "/v1/models/([^/]+)/bench")
def bench(h: Handler, name: str) -> Dict[str, Any]:
    body = h.json_body()
    return h.service.bench(
        name,
        runs=body.get("runs", 100),
        warmup=body.get("warmup", 0),
        threads=body.get("threads"),
        providers=body.get("providers"),
        timeout=body.get("timeout_s", 600.0),
    )


@route("POST", "/v1/models/([^/]+)/profile")
def profile(h: Handler, name: str) -> Dict[str, Any]:
    body = h.json_body()
    return h.service.profile(
        name,
        runs=body.get("runs", 20),
        warmup=body.get("warmup", 3),
        threads=body.get("threads"),
        providers=body.get("providers"),
        timeout=body.get("timeout_s", 600.0),
    )


@route("PUT", "/v1/models/([^/]+)/split")
def split(h: Handler, name: str) -> Dict[str, Any]:
    body = h.json_body()
    if "breaker" in body:
        check_limits(body["breaker"])  # a bad one is refused before the split changes
    out = h.service.set_split(name, body.get("versions"))
    if "breaker" in body:
        out["breaker"] = h.service.set_breaker(name, body["breaker"])["limits"]
    return out


@route("PUT", "/v1/models/([^/]+)/breaker")
def breaker(h: Handler, name: str) -> Dict[str, Any]:
    return h.service.set_breaker(name, h.json_body().get("limits"))


@route("POST", "/v1/models/([^/]+)/rollback")
def rollback(h: Handler, name: str) -> Dict[str, Any]:
    return h.service.rollback(name, h.json_body().get("version"))


@route("POST", "/v1/bundles/([^/]+)/([^/]+)")
def begin_upload(h: Handler, name: str, version: str) -> Dict[str, Any]:
    return h.service.begin_upload(name, version, h.json_body())


@route("PUT", "/v1/bundles/([^/]+)/([^/]+)/files/([^/]+)")
def upload_file(h: Handler, name: str, version: str, filename: str) -> Dict[str, Any]:
    n = h.length()
    h.consumed = True  # the store reads the body; what it leaves unread is drained below
    body = _Counted(h.rfile)
    try:
        return h.service.receive(name, version, filename, body, n, h.query_int("offset"))
    except StoreError:
        # Read what the client is still sending (up to a bound) so it gets this answer, not a broken pipe.
        left = n - body.count
        if 0 < left <= DRAIN_LIMIT:
            try:
                while left > 0:
                    block = h.rfile.read(min(1 << 16, left))
                    if not block:
                        break
                    left -= len(block)
            except OSError:
                pass
        h.close_connection = True
        raise


class _Counted(object):
    """A body stream that counts what was read from it."""

    def __init__(self, f: Any) -> None:
        self.f, self.count = f, 0

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        self.count += len(data)
        return data


@route("POST", "/v1/bundles/([^/]+)/([^/]+)/commit")
def commit(h: Handler, name: str, version: str) -> Dict[str, Any]:
    body = h.json_body()
    return h.service.commit(name, version, verify=bool(body.get("verify")), signature=body.get("signature"))


@route("GET", "/metrics")
def metrics(h: Handler) -> None:
    h.send(200, h.service.metrics_text().encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8")


def _recorder(h: Handler) -> Recorder:
    if h.service.recorder is None:
        raise HTTPError(404, "this agent was started with --no-telemetry")
    return h.service.recorder


def _query(h: Handler) -> Tuple[int, int, float, int, int]:
    from urllib.parse import parse_qs

    q = parse_qs(h.path.partition("?")[2])
    try:
        return (
            int(q.get("after_id", ["0"])[0]),
            int(q.get("after_event", ["0"])[0]),
            float(q.get("after_context", ["0"])[0]),
            int(q.get("limit", ["5000"])[0]),
            int(q.get("after_annotation", ["0"])[0]),
        )
    except ValueError:
        raise HTTPError(
            400, "after_id, after_event, after_annotation and limit are integers; after_context a number"
        ) from None


@route("GET", "/v1/telemetry")
def telemetry_pull(h: Handler) -> Dict[str, Any]:
    rec = _recorder(h)
    after_id, after_event, after_context, limit, after_annotation = _query(h)
    try:
        out = rec.pull(after_id, after_event, after_context, limit, after_annotation)
    except TelemetryError as e:
        raise HTTPError(e.status, str(e)) from None
    out["device"] = device_info()
    return out


@route("GET", "/v1/telemetry/status")
def telemetry_status(h: Handler) -> Dict[str, Any]:
    return _recorder(h).stats()


@route("POST", "/v1/telemetry/annotate", serving=True)
def telemetry_annotate(h: Handler) -> Dict[str, Any]:
    body = h.json_body()
    try:
        rid = body["request_id"]
        if not isinstance(rid, int) or isinstance(rid, bool):
            raise TypeError
        pre = None if body.get("pre_ms") is None else float(body["pre_ms"])
        post = None if body.get("post_ms") is None else float(body["post_ms"])
    except (KeyError, TypeError, ValueError):
        raise HTTPError(
            400, "annotate needs request_id (from the infer response) and pre_ms and/or post_ms numbers"
        ) from None
    try:
        _recorder(h).annotate(rid, pre, post)
    except TelemetryError as e:
        raise HTTPError(e.status, str(e)) from None
    except ValueError as e:
        raise HTTPError(400, str(e)) from None
    return {"request_id": rid, "queued": True}


def ensure_token(root: str) -> str:
    """The agent's token file, ``ROOT/agent/token``, created (readable by this user only) if missing."""
    import secrets

    path = token_path(root)
    d = os.path.dirname(path)
    if not os.path.isdir(d):
        os.makedirs(d, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        with open(path) as f:
            token = f.read().strip()
        if token:
            return token
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def token_path(root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(root)), "agent", "token")


def make_server(
    root: str,
    host: str = "127.0.0.1",
    port: int = 0,
    token: Optional[str] = None,
    max_connections: int = 256,
    header_timeout: float = 10.0,
    **agent_options: Any,
) -> AgentServer:
    """The agent's server. Without ``token`` (loopback only) it makes one, ``ROOT/agent/token``: reads and
    inference stay open to local apps, and every request that changes state must carry it."""
    loopback = host in LOOPBACK
    if not loopback and not token:
        raise SystemExit(
            "refusing to listen on %s without a token: pass --token-file FILE (or set "
            "EDGEKIT_AGENT_TOKEN), or listen on 127.0.0.1 and reach the agent through SSH/ADB forwarding" % host
        )
    open_reads = not token
    if not token:
        token = ensure_token(root)
    if ":" in host:
        import socket

        AgentServer.address_family = socket.AF_INET6
    server = AgentServer((host, port), Handler)
    server.loopback, server.open_reads, server.host = loopback, open_reads, host
    server.max_connections, server.header_timeout = max_connections, header_timeout
    server.service = AgentService(root, token, **agent_options)
    server.service.open_reads = open_reads
    return server
