"""The agent's local HTTP API (documented in ``openapi.json`` beside this file).

Listens on 127.0.0.1 unless told otherwise; on any other address it refuses to start
without a token, and then every request must carry ``Authorization: Bearer TOKEN``.
Every error is answered with a JSON ``{"error": message}`` and a 4xx/5xx status; no
request can bring the server down.
"""

import hmac
import json
import os
import re
import subprocess
import sys
import threading
import time
from http import HTTPStatus

try:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
except ImportError:  # pragma: no cover - Python < 3.7 is not supported
    raise SystemExit("edgekit-agent needs Python 3.7 or newer")

from . import API_VERSION, __version__, runners
from .bench import device_info
from .metrics import Metrics
from .store import Store, StoreError, check_name
from .telemetry import Recorder, TelemetryError

MAX_JSON_BODY = 256 << 20
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Headers(dict):
    """Request headers, keys lower-cased; ``get`` is case-insensitive."""

    def get(self, key, default=None):
        return dict.get(self, key.lower(), default)


class HTTPError(Exception):
    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status


def self_command():
    """How to start this agent again in a child process (zipapp or installed package)."""
    here = os.path.abspath(__file__)
    marker = ".pyz" + os.sep
    if marker in here:
        return [sys.executable, here.split(marker)[0] + ".pyz"]
    return [sys.executable, "-m", "edgekit_agent"]


class LoadedModel(object):
    def __init__(self, name, version, runner):
        self.name, self.version, self.runner = name, version, runner
        self.lock = threading.Lock()
        self.requests = 0
        self.warmup_ms = 0.0
        self.options = {}
        self.accelerator = runner.describe().get("accelerator")


class Agent(object):
    """State shared by all request threads."""

    def __init__(self, root, token=None, telemetry=True, warmup_on_load=3, flush_interval=0.2, context_interval=30.0):
        self.store = Store(root)
        self.token = token
        self.loaded = {}
        self.lock = threading.Lock()
        self._load_locks = {}
        self.started = time.time()
        self.warmup_on_load = warmup_on_load
        self.metrics = Metrics()
        self.recorder = (
            Recorder(root, flush_interval=flush_interval, context_interval=context_interval) if telemetry else None
        )
        self._loaded_file = os.path.join(self.store.root, "agent", "loaded.json")

    def _load_lock(self, name):
        with self.lock:
            return self._load_locks.setdefault(name, threading.Lock())

    def load(self, name, threads=None, providers=None, warmup=None):
        """Load the current version and warm it up, so the first real request pays no cold start."""
        with self._load_lock(name):
            return self._load(name, threads, providers, warmup)

    def _load(self, name, threads=None, providers=None, warmup=None):
        version, bundle_dir, manifest = self.store.current(name)
        runner_cls = runners.get(manifest["backend"])
        runner = runner_cls(bundle_dir, manifest, threads=threads, providers=providers)
        runner.load()
        warmup = self.warmup_on_load if warmup is None else int(warmup)
        t0 = time.perf_counter()
        if warmup > 0:
            from .bench import load_inputs

            feeds, _ = load_inputs(bundle_dir, manifest)
            for _ in range(warmup):
                runner.run(feeds)
        model = LoadedModel(name, version, runner)
        model.warmup_ms = (time.perf_counter() - t0) * 1000.0
        model.options = {"threads": threads, "providers": providers}
        with self.lock:
            old = self.loaded.get(name)
            self.loaded[name] = model
            self._remember()
        if old is not None:
            with old.lock:  # a request still running on the old runner finishes first
                old.runner.close()
        self.metrics.load(name, version)
        if self.recorder:
            self.recorder.event("load", name, version, {"load_ms": runner.load_ms, "warmup_runs": warmup})
        return model

    def _remember(self):
        """Which models are loaded (with their options), so a restarted agent loads them again."""
        data = dict((n, m.options) for n, m in self.loaded.items())
        tmp = self._loaded_file + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self._loaded_file)
        except OSError:
            pass

    def restore(self):
        """Load again what was loaded before a restart or reboot (in the background)."""
        try:
            with open(self._loaded_file) as f:
                wanted = json.load(f)
        except (OSError, ValueError):
            return
        for name, options in sorted(wanted.items()):
            try:
                self.load(name, **(options or {}))
            except Exception as e:  # a model that no longer loads must not stop the agent
                sys.stderr.write("could not load %s again after restart: %s\n" % (name, e))

    def record(self, name, model, outcome, queue_ms=None, infer_ms=None, shape=None, error=None, pre_ms=None):
        version = model.version if model else None
        backend = model.runner.manifest.get("backend") if model else None
        accelerator = model.accelerator if model else None
        # Names of models that do not exist come from clients: one label for all of them keeps /metrics bounded.
        label = name if (model is not None or name in self.loaded or outcome != "unknown_model") else "(unknown)"
        self.metrics.request(label, version, backend, accelerator, outcome, infer_ms, queue_ms)
        if self.recorder:
            return self.recorder.record(
                name, version, backend, accelerator, shape, queue_ms, infer_ms, outcome, error, pre_ms
            )
        return None

    def get_loaded(self, name):
        """The loaded model, (re)loaded if it is not loaded or a newer version was installed."""
        version = self.store.current_version(check_name("model name", name))
        with self.lock:
            model = self.loaded.get(name)
        if model is None or model.version != version:
            with self._load_lock(name):  # concurrent first requests load it once
                with self.lock:
                    model = self.loaded.get(name)
                if model is None or model.version != self.store.current_version(name):
                    model = self._load(name)
        return model


ROUTES = []


def route(method, pattern):
    def deco(fn):
        ROUTES.append((method, re.compile("^" + pattern + "$"), fn))
        return fn

    return deco


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
    def agent(self):
        return self.server.agent

    # -- plumbing -----------------------------------------------------------
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

    def _send(self, status, body, content_type="application/json"):
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

    def _length(self):
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
        n = self._length()
        if n > MAX_JSON_BODY:
            raise HTTPError(413, "body of %d bytes is larger than %d" % (n, MAX_JSON_BODY))
        data = self.rfile.read(n) if n else b""
        self._consumed = True
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

    def _authorized(self):
        token = self.agent.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())

    def _dispatch(self):
        self._consumed = False
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
                            self._send(200, result)
                        return
                    allowed.append(method)
            if allowed:
                raise HTTPError(405, "%s not allowed on %s (use %s)" % (self.command, path, ", ".join(allowed)))
            raise HTTPError(404, "no such endpoint: %s %s (see /openapi.json)" % (self.command, path))
        except HTTPError as e:
            self._error(e.status, str(e))
        except StoreError as e:
            self._error(e.status, str(e))
        except runners.RunnerError as e:
            self._error(e.status, str(e))
        except Exception as e:  # a bug or a runtime failure: answer 500, keep serving
            import traceback

            sys.stderr.write(traceback.format_exc())
            self._error(500, "%s: %s" % (type(e).__name__, e))

    def _error(self, status, message):
        if not self._consumed and self.command in ("POST", "PUT"):
            # Unread body: the connection cannot be reused safely.
            self.close_connection = True
        self._send(status, {"error": message, "status": status})

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


# -- endpoints ----------------------------------------------------------------
@route("GET", "/v1/health")
def health(h):
    a = h.agent
    return {
        "status": "ok",
        "agent_version": __version__,
        "api": API_VERSION,
        "pid": os.getpid(),
        "uptime_s": round(time.time() - a.started, 3),
        "root": a.store.root,
        "auth": bool(a.token),
        "device": device_info(),
        "runtimes": runners.runtimes(),
        "models": a.store.names(),
        "telemetry": a.recorder.stats() if a.recorder else {"ok": False, "error": "disabled (--no-telemetry)"},
    }


@route("GET", "/openapi.json")
def openapi(h):
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import pkgutil

        data = pkgutil.get_data("edgekit_agent", "openapi.json")
    except OSError:
        data = None
    if data is None:
        raise HTTPError(404, "openapi.json is not packaged with this agent (%s)" % here)
    h._send(200, data)


@route("GET", "/v1/models")
def list_models(h):
    a = h.agent
    out = []
    for name in a.store.names():
        version, _, manifest = a.store.current(name)
        loaded = a.loaded.get(name)
        out.append(
            {
                "name": name,
                "version": version,
                "versions": a.store.versions(name),
                "backend": manifest.get("backend"),
                "precision": manifest.get("precision"),
                "profile": manifest.get("profile"),
                "inputs": manifest.get("inputs"),
                "outputs": manifest.get("outputs"),
                "loaded": bool(loaded and loaded.version == version),
            }
        )
    return {"models": out}


@route("POST", "/v1/models/([^/]+)/load")
def load_model(h, name):
    body = h.json_body()
    model = h.agent.load(name, threads=body.get("threads"), providers=body.get("providers"), warmup=body.get("warmup"))
    info = model.runner.describe()
    info.update({"name": name, "version": model.version, "load_ms": model.runner.load_ms, "warmup_ms": model.warmup_ms})
    return info


@route("POST", "/v1/models/([^/]+)/unload")
def unload_model(h, name):
    h.body()
    with h.agent.lock:
        model = h.agent.loaded.pop(name, None)
    if model is None:
        raise HTTPError(404, "model %r is not loaded" % name)
    model.runner.close()
    return {"name": name, "unloaded": True}


@route("DELETE", "/v1/models/([^/]+)")
def remove_model(h, name):
    h.body()
    with h.agent._load_lock(name):
        with h.agent.lock:
            model = h.agent.loaded.pop(name, None)
            h.agent._remember()
        if model is not None:
            with model.lock:
                model.runner.close()
        result = h.agent.store.remove(name)
    if h.agent.recorder:
        h.agent.recorder.event("remove", name, None, {})
    return result


OUTCOMES = {400: "bad_request", 404: "unknown_model", 500: "error", 501: "runtime_missing"}


@route("POST", "/v1/models/([^/]+)/infer")
def infer(h, name):
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
    pre_ms = h.headers.get("X-Edgekit-Pre-Ms")
    model = None
    try:
        try:
            pre_ms = float(pre_ms) if pre_ms is not None else None
            if binary:
                feeds, _ = decode_tensors(h.body())
            else:
                feeds = tensors_from_json(h.json_body().get("inputs"))
        except (WireError, ValueError) as e:
            raise HTTPError(400, str(e))
        model = h.agent.get_loaded(name)
        model.runner.check_feeds(feeds)
        with model.lock:
            t0 = time.perf_counter()
            outputs = model.runner.run(feeds)
            t1 = time.perf_counter()
            model.requests += 1
    except Exception as e:
        status = getattr(e, "status", 500)
        h.agent.record(name, model, OUTCOMES.get(status, "error"), error=str(e)[:300])
        raise
    infer_ms, queue_ms = (t1 - t0) * 1000.0, (t0 - t_arrive) * 1000.0
    shape = ";".join("x".join(str(d) for d in a.shape) for a in feeds.values())
    rid = h.agent.record(name, model, "ok", queue_ms, infer_ms, shape, pre_ms=pre_ms)
    meta = {"model": name, "version": model.version, "inference_ms": infer_ms, "queue_ms": queue_ms, "request_id": rid}
    if binary:
        h._send(200, encode_tensors(outputs, meta), CONTENT_TYPE)
        return None
    meta["outputs"] = tensors_to_json(outputs)
    return meta


def one_shot_bench(bundle_dir, runs, warmup, threads=None, providers=None, timeout=600.0, placement=True):
    """Run ``bench`` in a fresh process on this device (clean peak RSS, real cold start)."""
    cmd = self_command() + ["bench", "--bundle", bundle_dir, "--json", "--runs", str(runs), "--warmup", str(warmup)]
    if threads:
        cmd += ["--threads", str(threads)]
    for p in providers or []:
        cmd += ["--provider", str(p)]
    if not placement:
        cmd.append("--no-placement")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HTTPError(504, "the benchmark did not finish within %.0f s" % timeout)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise HTTPError(501 if proc.returncode == 3 else 500, err[-1] if err else "exit %d" % proc.returncode)
    return json.loads(proc.stdout.decode("utf-8", "replace").strip().splitlines()[-1])


@route("POST", "/v1/models/([^/]+)/bench")
def bench(h, name):
    body = h.json_body()
    try:
        runs, warmup = int(body.get("runs") or 100), int(body.get("warmup") or 0)
        threads = int(body["threads"]) if body.get("threads") else None
        timeout = float(body.get("timeout_s") or 600)
        providers = [str(p) for p in body.get("providers") or []]
    except (TypeError, ValueError):
        raise HTTPError(400, "runs, warmup and threads must be integers, timeout_s a number, providers a list")
    if runs < 1 or warmup < 0:
        raise HTTPError(400, "runs must be >= 1 and warmup >= 0")
    version, bundle_dir, manifest = h.agent.store.current(name)
    try:
        report = one_shot_bench(bundle_dir, runs, warmup, threads, providers, timeout)
    except HTTPError as e:
        raise HTTPError(e.status, "benchmark of %s failed: %s" % (name, e))
    report["version"] = version
    return report


@route("POST", "/v1/models/([^/]+)/rollback")
def rollback(h, name):
    body = h.json_body()
    result = h.agent.store.rollback(name, body.get("version"))
    was = h.agent.loaded.get(name)
    if was is not None and not result.get("unchanged"):
        h.agent.load(name, **was.options)  # serve the version rolled back to, warm, from now on
    if h.agent.recorder:
        h.agent.recorder.event("rollback", name, result["version"], {"from": result["previous"]})
    return result


@route("POST", "/v1/bundles/([^/]+)/([^/]+)")
def begin_upload(h, name, version):
    return h.agent.store.begin(name, version, h.json_body())


@route("PUT", "/v1/bundles/([^/]+)/([^/]+)/files/([^/]+)")
def upload_file(h, name, version, filename):
    n = h._length()
    h._consumed = True  # the store reads the body; what it leaves unread is drained below
    body = _Counted(h.rfile)
    try:
        return h.agent.store.receive(name, version, filename, body, n, _query_int(h, "offset"))
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


DRAIN_LIMIT = 256 << 20


class _Counted(object):
    """A body stream that counts what was read from it."""

    def __init__(self, f):
        self.f, self.count = f, 0

    def read(self, n):
        data = self.f.read(n)
        self.count += len(data)
        return data


def _query_int(h, key, default=0):
    query = h.path.split("?", 1)[1] if "?" in h.path else ""
    for pair in query.split("&"):
        k, _, v = pair.partition("=")
        if k == key:
            try:
                return int(v)
            except ValueError:
                raise HTTPError(400, "query parameter %s must be an integer, got %r" % (key, v))
    return default


def _verify_loads(staging, manifest):
    """Load the staged bundle and run its sample once, in a fresh process, before it may serve."""
    try:
        report = one_shot_bench(staging, 1, 0, placement=False, timeout=300)
    except HTTPError as e:
        raise StoreError(
            "version %s does not run on this device (%s); it was not installed and the model keeps "
            "serving what it served before" % (manifest.get("id"), e),
            422,
        )
    check = report.get("device_fidelity") or {}
    if check.get("passed") is False:
        raise StoreError(
            "version %s runs on this device but its outputs differ from the reference outputs the "
            "build recorded (%s); it was not installed" % (manifest.get("id"), check.get("detail")),
            422,
        )


@route("POST", "/v1/bundles/([^/]+)/([^/]+)/commit")
def commit(h, name, version):
    body = h.json_body()
    result = h.agent.store.commit(name, version, verify=_verify_loads if body.get("verify") else None)
    if h.agent.recorder:
        h.agent.recorder.event("install", name, version, {"previous": result["previous"]})
    return result


@route("GET", "/metrics")
def metrics(h):
    a = h.agent
    text = a.metrics.render(a.recorder.stats() if a.recorder else None, len(a.loaded))
    h._send(200, text.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8")


def _recorder(h):
    if h.agent.recorder is None:
        raise HTTPError(404, "this agent was started with --no-telemetry")
    return h.agent.recorder


def _query(h):
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
        raise HTTPError(400, "after_id, after_event, after_annotation and limit are integers; after_context a number")


@route("GET", "/v1/telemetry")
def telemetry_pull(h):
    rec = _recorder(h)
    after_id, after_event, after_context, limit, after_annotation = _query(h)
    try:
        out = rec.pull(after_id, after_event, after_context, limit, after_annotation)
    except TelemetryError as e:
        raise HTTPError(e.status, str(e))
    out["device"] = device_info()
    return out


@route("GET", "/v1/telemetry/status")
def telemetry_status(h):
    return _recorder(h).stats()


@route("POST", "/v1/telemetry/annotate")
def telemetry_annotate(h):
    body = h.json_body()
    try:
        rid = body["request_id"]
        if not isinstance(rid, int) or isinstance(rid, bool):
            raise TypeError
        pre = None if body.get("pre_ms") is None else float(body["pre_ms"])
        post = None if body.get("post_ms") is None else float(body["post_ms"])
    except (KeyError, TypeError, ValueError):
        raise HTTPError(400, "annotate needs request_id (from the infer response) and pre_ms and/or post_ms numbers")
    try:
        _recorder(h).annotate(rid, pre, post)
    except TelemetryError as e:
        raise HTTPError(e.status, str(e))
    except ValueError as e:
        raise HTTPError(400, str(e))
    return {"request_id": rid, "queued": True}


class AgentServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(root, host="127.0.0.1", port=0, token=None, **agent_options):
    if host not in LOOPBACK and not token:
        raise SystemExit(
            "refusing to listen on %s without a token: pass --token-file FILE (or set "
            "EDGEKIT_AGENT_TOKEN), or listen on 127.0.0.1 and reach the agent through SSH/ADB forwarding" % host
        )
    if ":" in host:
        import socket

        AgentServer.address_family = socket.AF_INET6
    server = AgentServer((host, port), Handler)
    server.agent = Agent(root, token, **agent_options)
    return server
