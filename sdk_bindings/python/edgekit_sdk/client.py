"""HTTP client for the agent (standard library ``http.client``; one kept-alive connection)."""

import http.client
import json

from .wire import CONTENT_TYPE, decode_tensors, encode_tensors


class AgentHTTPError(Exception):
    def __init__(self, status, message):
        Exception.__init__(self, "agent answered %d: %s" % (status, message))
        self.status = status
        self.message = message


class AgentClient(object):
    def __init__(self, host="127.0.0.1", port=8765, token=None, timeout=60.0):
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self._conn = None

    def _connection(self):
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method, path, body=None, content_type="application/json", timeout=None, raw=False, length=None):
        """One request; ``body`` is a dict (sent as JSON), bytes, or a file object of ``length`` bytes."""
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if length is not None:
            headers["Content-Length"] = str(length)
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        for attempt in (0, 1):
            conn = self._connection()
            if timeout is not None:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection the server closed: retry once on a fresh one.
                self.close()
                if attempt or hasattr(body, "read"):
                    raise
            finally:
                if timeout is not None and self._conn is not None:
                    self._conn.timeout = self.timeout
        if resp.status >= 400:
            try:
                message = json.loads(data.decode("utf-8")).get("error", "")
            except ValueError:
                message = data[:200].decode("utf-8", "replace")
            raise AgentHTTPError(resp.status, message)
        if raw:
            return data, resp.getheader("Content-Type", "")
        return json.loads(data.decode("utf-8")) if data else {}

    # -- API -------------------------------------------------------------------
    def health(self):
        return self.request("GET", "/v1/health")

    def models(self):
        return self.request("GET", "/v1/models")["models"]

    def load(self, name, threads=None, providers=None):
        return self.request("POST", "/v1/models/%s/load" % name, {"threads": threads, "providers": providers})

    def unload(self, name):
        return self.request("POST", "/v1/models/%s/unload" % name, {})

    def infer(self, name, inputs, with_meta=False):
        """``inputs``: ``{name: ndarray}``; returns ``{name: ndarray}`` (and the response header)."""
        data, ctype = self.request("POST", "/v1/models/%s/infer" % name, encode_tensors(inputs),
                                   content_type=CONTENT_TYPE, raw=True)
        outputs, header = decode_tensors(data)
        return (outputs, header) if with_meta else outputs

    def infer_json(self, name, inputs):
        return self.request("POST", "/v1/models/%s/infer" % name, {"inputs": inputs})

    def bench(self, name, runs=100, warmup=10, threads=None, providers=None, timeout=600):
        body = {"runs": runs, "warmup": warmup, "threads": threads, "providers": providers}
        return self.request("POST", "/v1/models/%s/bench" % name, body, timeout=timeout)

    def rollback(self, name):
        return self.request("POST", "/v1/models/%s/rollback" % name, {})

    def begin_upload(self, name, version, manifest):
        return self.request("POST", "/v1/bundles/%s/%s" % (name, version), manifest)

    def put_file(self, name, version, filename, data, length=None):
        """Send one bundle file: ``data`` is bytes, or a file object with ``length``."""
        return self.request("PUT", "/v1/bundles/%s/%s/files/%s" % (name, version, filename), data,
                            content_type="application/octet-stream", timeout=max(self.timeout, 300), length=length)

    def commit(self, name, version):
        return self.request("POST", "/v1/bundles/%s/%s/commit" % (name, version), {})
