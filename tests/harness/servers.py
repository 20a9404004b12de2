"""Throwaway real servers for the pull-delivery tests: nginx (a static store), Mosquitto (an MQTT broker), and a
TCP proxy that cuts one response off midway. Each runs on a free loopback port with its configuration, logs and
state in its own temporary directory, and stops when its ``with`` block ends."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

NGINX = "/usr/sbin/nginx"
MOSQUITTO = "/usr/sbin/mosquitto"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(
    port: int,
    proc: subprocess.Popen,
    log: Path,
    what: str,
    timeout: float = 15.0,
    host: str = "127.0.0.1",
    netns: list[str] | None = None,
) -> None:
    """Wait until ``host:port`` accepts a connection; ``netns``: from inside that namespace (an ``ip netns exec``
    prefix), where the server listens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        if netns:
            probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=0.5).close()"
            if subprocess.run([*netns, sys.executable, "-c", probe], capture_output=True, timeout=30).returncode == 0:
                return
            time.sleep(0.1)
            continue
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout}s")


def make_tls(directory: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl): ``{"ca", "cert", "key"}``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=edgekit test CA",
    )
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    return {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key"}


class _Server:
    proc: subprocess.Popen
    dir: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Nginx(_Server):
    """``nginx`` serving ``root`` at ``http://127.0.0.1:PORT/`` (range requests on, as by default); the access log
    records each request's status and Range header (:meth:`requests`). ``host``/``netns``: listen on that address
    inside a network namespace (``netns``: its ``ip netns exec`` prefix, e.g. ``NetnsLab.exec_prefix``)."""

    def __init__(
        self,
        root: str | Path,
        tls: dict[str, Path] | None = None,
        worker_connections: int = 64,
        host: str = "127.0.0.1",
        netns: list[str] | None = None,
    ) -> None:
        if not os.path.exists(NGINX):
            raise RuntimeError("nginx is not installed: apt-get install nginx-light (scripts/bootstrap.sh --test)")
        self.dir = Path(tempfile.mkdtemp(prefix="nginx-"))
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}"
        self.access_log = self.dir / "access.log"
        listen = f"listen {host}:{self.port}" + (
            f" ssl; ssl_certificate {tls['cert']}; ssl_certificate_key {tls['key']}" if tls else ""
        )
        user = "user root;" if os.geteuid() == 0 else ""
        d = self.dir
        (d / "nginx.conf").write_text(
            f"""{user}
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections {worker_connections}; }}
http {{
    log_format edgekit '$request_uri $status range=$http_range';
    access_log {d}/access.log edgekit;
    client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
    uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
    types {{ application/json json; }}
    default_type application/octet-stream;
    server {{
        {listen};
        root {Path(root).resolve()};
    }}
}}
"""
        )
        with open(d / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(
                [*(netns or []), NGINX, "-p", str(d), "-c", str(d / "nginx.conf")],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        _wait_port(self.port, self.proc, d / "stderr.log", "nginx", host=host, netns=netns)

    def requests(self) -> list[str]:
        return self.access_log.read_text().splitlines() if self.access_log.exists() else []


class Mosquitto(_Server):
    """``mosquitto`` on ``mqtt://127.0.0.1:PORT`` (anonymous, or with ``users={name: password}`` only those);
    ``host``/``netns`` as for :class:`Nginx`."""

    def __init__(
        self,
        users: dict[str, str] | None = None,
        tls: dict[str, Path] | None = None,
        extra: list[str] | None = None,
        host: str = "127.0.0.1",
        netns: list[str] | None = None,
    ) -> None:
        if not os.path.exists(MOSQUITTO):
            raise RuntimeError("mosquitto is not installed: apt-get install mosquitto (scripts/bootstrap.sh --test)")
        self.dir = Path(tempfile.mkdtemp(prefix="mosquitto-"))
        self.port = free_port()
        self.url = f"{'mqtts' if tls else 'mqtt'}://{host}:{self.port}"
        lines = [f"listener {self.port} {host}", "persistence false", f"log_dest file {self.dir}/mosquitto.log"]
        if tls:
            lines += [f"cafile {tls['ca']}", f"certfile {tls['cert']}", f"keyfile {tls['key']}"]
        lines.append("user root" if os.geteuid() == 0 else "")
        if users:
            pw = self.dir / "passwords"
            pw.write_text("")
            for name, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(pw), name, password], check=True, capture_output=True)
            pw.chmod(0o600)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines.append("allow_anonymous true")
        lines += extra or []  # further mosquitto.conf lines, e.g. "max_queued_messages 0"
        (self.dir / "mosquitto.conf").write_text("\n".join(lines) + "\n")
        with open(self.dir / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(
                [*(netns or []), MOSQUITTO, "-c", str(self.dir / "mosquitto.conf")],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        _wait_port(self.port, self.proc, self.dir / "stderr.log", "mosquitto", host=host, netns=netns)


class CuttingProxy:
    """A loopback TCP proxy to ``port``: the first response to a request whose line contains ``cut_path`` is cut
    off (connection closed) after ``after`` bytes; every other connection passes whole."""

    def __init__(self, port: int, cut_path: str, after: int) -> None:
        self.target, self.cut_path, self.after = port, cut_path.encode(), after
        self.cuts = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        request = client.recv(65536)
        cut = self.cuts == 0 and self.cut_path in request.split(b"\r\n", 1)[0]
        if cut:
            self.cuts += 1
        upstream.sendall(request)
        sent = 0
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if cut and sent + len(data) >= self.after:
                    client.sendall(data[: self.after - sent])
                    break
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MotoS3(_Server):
    """moto's S3-compatible server (``moto[server]`` from PyPI) on ``http://127.0.0.1:PORT``; objects are reached
    path-style, ``URL/BUCKET/KEY``, and read anonymously."""

    def __init__(self) -> None:
        import sys

        self.dir = Path(tempfile.mkdtemp(prefix="moto-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with open(self.dir / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=err,
                stderr=subprocess.STDOUT,
            )
        _wait_port(self.port, self.proc, self.dir / "stderr.log", "moto_server", timeout=60)
