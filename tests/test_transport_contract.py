"""The contract every transport keeps (edgekit.transports.base), checked the same way for each against a real
device end: this machine (local), a real OpenSSH server on loopback (ssh), the real adb server and client against
tests/harness/adbd.py (adb), and a shell on the far end of a pty null-modem cable (serial).

A transport runs a command and gives back its exit status and output, quoting every argument; puts a file whole
(the bytes on the device have the file's sha256, no ``.part`` is left); forwards a device port to the host; and
reports a lost connection, or a command past its timeout, as a TransportError that says which device and what
happened.
"""

import gc
import hashlib
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pytest
from harness.adblab import ADB, Lab, Phone
from harness.serialdev import Cable

from edgekit.errors import TransportError
from edgekit.transports import Transport, connect

KINDS = ["local", "ssh", "adb", "serial"]
#: transports that hold a connection that can be cut (the local one runs commands itself)
CONNECTED = [
    "ssh",
    # adbutils' open_transport raises "device offline" from check_okay() without closing its connection to the adb
    # server; the socket is collected (gc.collect() in the fixture) and only that warning is ignored.
    pytest.param(
        "adb",
        marks=pytest.mark.filterwarnings(
            r"ignore:Exception ignored in. <socket.socket .*raddr=\('127.0.0.1':pytest.PytestUnraisableExceptionWarning"
        ),
    ),
    "serial",
]


@dataclass
class Reach:
    """How a test reaches one device: ``open()`` connects; ``cut()`` breaks the connection from the device end."""

    kind: str
    open: Callable[[], Transport]
    cut: Optional[Callable[[], None]]
    words: tuple  # what a TransportError names, so the user knows which device it was


def _reach_ssh(request) -> Iterator[Reach]:
    sshd = request.getfixturevalue("sshd")
    target = f"{sshd.user}@{sshd.host}:{sshd.port}"
    yield Reach(
        "ssh",
        lambda: connect("ssh", target, key_file=sshd.client_key, known_hosts=sshd.known_hosts),
        sshd.kill_sessions,
        ("ssh", str(sshd.port)),
    )


def _reach_adb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Reach]:
    if ADB is None:
        pytest.skip("the adb command is not installed (Debian: apt-get install adb)")
    pytest.importorskip("adbutils")
    (tmp_path / "adb-lab").mkdir()
    lab = Lab(tmp_path / "adb-lab", isolate=False)  # on loopback, so this process reaches the adb server
    try:
        phone = Phone(lab, tmp_path / "phone")
        for k in ("ADB_SERVER_SOCKET", "ANDROID_SERIAL", "ANDROID_ADB_SERVER_ADDRESS", "ANDROID_ADB_SERVER_HOST"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(lab.port))
        try:
            yield Reach("adb", lambda: connect("adb", phone.serial), phone.kill, ("adb", phone.serial))
        finally:
            phone.close()
    finally:
        lab.close()
        gc.collect()  # finalize what adbutils left open while this test is still the one running


def _reach_serial(tmp_path: Path) -> Iterator[Reach]:
    pytest.importorskip("serial")
    home, tmp = tmp_path / "device-home", tmp_path / "device-tmp"
    home.mkdir()
    tmp.mkdir()
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    with Cable(env={"PATH": path, "TMPDIR": str(tmp), "HOME": str(home), "PS1": "$ ", "ENV": ""}) as cable:
        yield Reach("serial", lambda: connect("serial", cable.port), cable.unplug, ("serial", cable.port))


@pytest.fixture(params=KINDS)
def reach(request, tmp_path, monkeypatch) -> Iterator[Reach]:
    kind = request.param
    if kind == "local":
        yield Reach("local", lambda: connect("local"), None, ("local",))
    elif kind == "ssh":
        yield from _reach_ssh(request)
    elif kind == "adb":
        yield from _reach_adb(tmp_path, monkeypatch)
    else:
        yield from _reach_serial(tmp_path)


@pytest.fixture
def connected(request, reach) -> Reach:
    if reach.cut is None:
        pytest.fail(f"{reach.kind} has no connection to cut")  # not reached: parametrized over CONNECTED only
    return reach


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_run_returns_status_and_output_and_quotes_arguments(reach):
    with reach.open() as t:
        r = t.run(["echo", "a  b", "$HOME", "it's", ";", "`id`"])
        assert (r.returncode, r.stdout, r.ok) == (0, "a  b $HOME it's ; `id`\n", True)
        r = t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert r.returncode == 3 and not r.ok and "out\n" in r.stdout
        assert "err" in r.stdout + r.stderr
        r = t.run(["no-such-command-here"])
        assert r.returncode == 127


def test_put_file_arrives_whole(reach, tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 300_000 + 17, dtype=np.uint8).tobytes()
    src = tmp_path / "model.bin"
    src.write_bytes(data)
    remote = tmp_path / "device-side" / "sub dir" / "model.bin"  # a space: paths are quoted too
    seen = []
    with reach.open() as t:
        assert t.run(["mkdir", "-p", str(remote.parent)]).ok
        t.put_file(str(src), str(remote), progress=lambda name, done, total: seen.append((done, total)))
        r = t.run(["sha256sum", str(remote)])
        assert r.ok and r.stdout.split()[0] == _sha256(data), r
        listing = t.run(["ls", "-a", str(remote.parent)]).stdout.split()
    assert _sha256(remote.read_bytes()) == _sha256(data)  # every device here keeps its files on this machine
    assert sorted(listing) == [".", "..", "model.bin"]  # no .part left behind
    assert seen and seen[-1] == (len(data), len(data))


def test_forward_reaches_a_device_port(reach):
    server = socket.create_server(("127.0.0.1", 0))  # the device's service, on the device's loopback
    server.settimeout(30)
    try:
        with reach.open() as t:
            host_port = t.forward(server.getsockname()[1])
            with socket.create_connection(("127.0.0.1", host_port), timeout=30) as c:
                peer, _ = server.accept()
                with peer:
                    c.sendall(b"ping")
                    assert peer.recv(4) == b"ping"
                    peer.sendall(b"pong" * 1000)
                    got = b""
                    while len(got) < 4000:
                        chunk = c.recv(4000 - len(got))
                        assert chunk, "the forwarded connection closed early"
                        got += chunk
                    assert got == b"pong" * 1000
    finally:
        server.close()


def test_a_command_past_its_timeout_is_a_transport_error(reach):
    with reach.open() as t:
        with pytest.raises(TransportError) as e:
            t.run(["sleep", "30"], timeout=2)
        message = str(e.value)
        assert any(w in message for w in reach.words) or reach.kind == "local", f"{message!r} names no device"
        assert "sleep" in message, message


@pytest.mark.parametrize("reach", CONNECTED, indirect=True)
def test_a_cut_connection_is_a_clear_transport_error(connected):
    t = connected.open()
    try:
        assert t.run(["echo", "before"]).stdout == "before\n"
        connected.cut()
        with pytest.raises(TransportError) as e:
            for _ in range(3):  # the first command may still be answered from what was already on its way
                t.run(["echo", "after"], timeout=20)
        message = str(e.value)
        assert any(w in message for w in connected.words), f"{message!r} does not say which device"
        assert len(message.split()) >= 4, f"{message!r} does not say what happened"
    finally:
        try:
            t.close()
        except TransportError:
            pass


def test_every_transport_is_covered():
    from edgekit.transports import KINDS as SHIPPED

    assert sorted(KINDS) == sorted(SHIPPED), "a new transport must join this contract"
    assert shutil.which("sha256sum"), "the put check reads the sha256 on the device"
