"""The real adb server and client against tests/harness/adbd.py daemons ("phones").

A :class:`Lab` is an adb server with its own HOME, TMPDIR, a non-default port and no mDNS. By default everything
device-side (the server, the daemons, the agents they start, the edgekit commands that talk to them) runs in a
private network namespace that has only a loopback interface; ``isolate=False`` keeps them on this machine's own
loopback instead (on a free port), so the test process itself can reach the server.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.agents import stop_agent

HERE = Path(__file__).resolve().parent  # tests/harness
SERVER_PORT = 5137  # not the default 5037: the transport must honour ANDROID_ADB_SERVER_PORT
ADB = shutil.which("adb")


def bundled_adb():
    try:
        from adbutils._utils import _get_bin_dir

        path = os.path.join(_get_bin_dir(), "adb")
        return path if os.access(path, os.X_OK) else None
    except ImportError:
        return None


class Phone:
    """One tests/harness/adbd.py daemon, attached to the lab's adb server."""

    def __init__(self, lab, home, port=0):
        self.lab, self.home = lab, Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            lab.ns + [sys.executable, str(HERE / "adbd.py"), "--port", str(port)],
            env=dict(lab.env, HOME=str(self.home)),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.port = int(line.split()[-1])
        self.serial = f"127.0.0.1:{self.port}"
        self.root = self.home / "edgekit"
        lab.attach(self.serial)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def restart(self):
        self.kill()
        self.__init__(self.lab, self.home, self.port)

    def close(self):
        stop_agent(sys.executable, self.root)
        self.kill()
        self.lab.adb("disconnect", self.serial)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """An adb server of its own: in a loopback-only network namespace, or (``isolate=False``) on this machine's
    loopback at a free port."""

    def __init__(self, tmp, isolate=True):
        self.tmp = Path(tmp)
        home = self.tmp / "host-home"
        home.mkdir()
        self.holder = None
        self.ns = []
        self.port = SERVER_PORT if isolate else _free_port()
        if isolate:
            self._enter_namespace()
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ADB_SERVER_SOCKET", "ANDROID_SERIAL", "ANDROID_ADB_SERVER_ADDRESS", "ANDROID_ADB_SERVER_HOST")
        }
        env.update(
            HOME=str(home),
            ANDROID_USER_HOME=str(home / ".android"),
            TMPDIR=str(self.tmp),
            ANDROID_ADB_SERVER_PORT=str(self.port),
            ADB_MDNS="0",
            ADB_MDNS_AUTO_CONNECT="0",
            PYTHONPATH=os.pathsep.join(p for p in (str(HERE.parent.parent), env.get("PYTHONPATH")) if p),
        )
        self.env = env
        self.adb("start-server", check=0)

    def _enter_namespace(self):
        self.holder = subprocess.Popen(
            ["unshare", "--net", "sh", "-c", "ip link set lo up && echo up && exec cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.holder.stdout.readline().strip() != "up":
            self.holder.stdin.close()
            self.holder.wait()
            self.holder.stdout.close()
            pytest.skip("cannot create a network namespace here (`unshare --net` needs root or user namespaces)")
        self.ns = ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--"]

    def run(self, argv, check=None, timeout=120, env=None):
        p = subprocess.run(
            self.ns + [str(a) for a in argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=dict(self.env, **(env or {})),
        )
        if check is not None:
            assert p.returncode == check, f"{argv}: exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
        return p

    def adb(self, *args, check=None, binary=ADB):
        return self.run([binary, "-P", self.port, *args], check=check, timeout=60)

    def cli(self, *args, check=None):
        return self.run([sys.executable, "-m", "edgekit", *args], check=check, timeout=300)

    def attach(self, serial):
        self.adb("connect", serial, check=0)
        deadline = time.monotonic() + 20
        while self.adb("-s", serial, "get-state").stdout.strip() != "device":
            assert time.monotonic() < deadline, self.adb("devices").stdout
            time.sleep(0.1)

    def close(self):
        self.adb("kill-server")
        if self.holder is not None:
            self.holder.stdin.close()
            self.holder.wait()
            self.holder.stdout.close()
