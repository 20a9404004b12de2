"""A throwaway, real PostgreSQL server for tests and benchmarks.

``ThrowawayPostgres`` runs the distribution's ``initdb`` and ``pg_ctl`` (Debian: package ``postgresql-15``, binaries
in ``/usr/lib/postgresql/15/bin``) on a data directory in its own temporary directory, listening only on a unix
socket in that directory. PostgreSQL refuses to run as root, so as root the server runs as ``nobody``, which owns the
temporary directory. ``stop()`` stops the server and removes the directory.

Usage::

    with ThrowawayPostgres() as pg:
        url = pg.database("field")     # postgresql://edgekit@/field?host=...&port=...
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Any, List, Optional

__all__ = ["ThrowawayPostgres", "find_pg_bin"]

USER = "edgekit"


def find_pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql-15")


class ThrowawayPostgres:
    def __init__(self, port: int = 5432, durable: bool = False, settings: Optional[List[str]] = None) -> None:
        self.bin = find_pg_bin()
        self.port = port
        self.durable = durable  # False: fsync off (tests); True: the server's defaults (benchmarks)
        self.settings = settings or []
        self.dir = ""

    def _run(self, args: List[str], **kw: Any) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            kw.update(user=self.owner.pw_uid, group=self.owner.pw_gid, extra_groups=[])
        env = dict(os.environ, HOME=self.dir, LC_ALL="C")
        return subprocess.run(args, env=env, capture_output=True, text=True, **kw)

    def start(self) -> "ThrowawayPostgres":
        self.dir = tempfile.mkdtemp(prefix="edgekit-pg-")
        self.owner = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
        os.chown(self.dir, self.owner.pw_uid, self.owner.pw_gid)
        self.data = os.path.join(self.dir, "data")
        r = self._run([f"{self.bin}/initdb", "-D", self.data, "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"])
        if r.returncode:
            self.stop()
            raise RuntimeError(f"initdb failed: {r.stderr or r.stdout}")
        opts = [f"-k {self.dir}", "-c listen_addresses=''", f"-p {self.port}"]
        if not self.durable:
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        opts += [f"-c {s}" for s in self.settings]
        self.opts = " ".join(opts)
        r = self._pg_ctl_start()
        if r.returncode:
            log = open(os.path.join(self.dir, "log")).read() if os.path.exists(os.path.join(self.dir, "log")) else ""
            self.stop()
            raise RuntimeError(f"pg_ctl start failed: {r.stderr or r.stdout}\n{log}")
        return self

    def _pg_ctl_start(self) -> subprocess.CompletedProcess:
        log = os.path.join(self.dir, "log")
        return self._run(
            [f"{self.bin}/pg_ctl", "-D", self.data, "-l", log, "-w", "-t", "120", "-o", self.opts, "start"]
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@/{database}?host={self.dir}&port={self.port}"

    def database(self, name: str) -> str:
        """Create database ``name`` (dropping one of that name first); its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}"')
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restart(self) -> None:
        """Stop and start the server (its shared buffers empty; the OS page cache is not)."""
        self._run([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-m", "fast", "stop"])
        r = self._pg_ctl_start()
        if r.returncode:
            raise RuntimeError(f"pg_ctl restart failed: {r.stderr or r.stdout}")

    def stop(self) -> None:
        if self.dir and os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-m", "immediate", "stop"])
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""

    def __enter__(self) -> "ThrowawayPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
