"""The serial transport over a null-modem cable made of ptys, with a real shell on the device end."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from harness import one_json, run_cli
from harness.pythons import find_python, missing
from harness.serialdev import Cable

import edgekit
from edgekit.deployer import deploy, open_device
from edgekit.errors import TransportError
from edgekit.transports import connect, serial_line
from edgekit_agent import serial_endpoint as proto

pytest.importorskip("serial")
pytestmark = pytest.mark.e2e

PY37 = find_python("3.7")


def device_env(tmp_path, python_dir=None):
    tmp = tmp_path / "device-tmp"
    tmp.mkdir(exist_ok=True)
    path = os.pathsep.join([python_dir or os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    home = tmp_path / "device-home"
    home.mkdir(exist_ok=True)
    return {"PATH": path, "TMPDIR": str(tmp), "HOME": str(home), "PS1": "$ ", "ENV": ""}


@pytest.fixture
def cable(tmp_path):
    with Cable(env=device_env(tmp_path)) as c:
        yield c


@pytest.fixture
def device_root(agent_roots):
    return agent_roots("serial-device")


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def remote_sha256(transport, path):
    r = transport.run(
        [
            sys.executable,
            "-c",
            "import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())",
            str(path),
        ]
    )
    assert r.ok, r.stderr
    return r.stdout.strip()


# -- the line protocol -----------------------------------------------------------------
def test_frames_escape_ctrl_c_and_drop_bad_crc():
    payload = bytes(range(256)) * 4
    frame = proto.encode_frame(proto.F_DATA, 7, payload)
    assert b"\x03" not in frame and b"\x11" not in frame and frame.count(b"\x7e") == 2
    dec = proto.Decoder()
    bad = bytearray(frame)
    bad[10] ^= 0x40
    frames = dec.feed(b"$ echo junk\r\n" + bytes(bad) + frame[:5]) + dec.feed(frame[5:])
    assert frames == [(proto.F_DATA, 7, payload)]
    assert dec.bad == 2 and b"echo junk" in dec.junk and not dec.interrupted  # the text and the damaged frame
    dec.feed(b"\x03\x03")
    dec.feed(b"\x03")
    assert dec.interrupted


# -- a session over the cable ----------------------------------------------------------------
def test_commands_files_and_console_given_back(cable, tmp_path):
    with connect("serial", cable.port, baud=115200) as t:
        assert t.description.startswith(f"serial {cable.port} at 115200 baud (a pty")
        r = t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
        r = t.run(["no-such-program-here"])
        assert r.returncode == 127 and "not found" in r.stderr
        with pytest.raises(TransportError, match="did not finish within 1 s"):
            t.run(["sleep", "5"], timeout=1)
        src = tmp_path / "data.bin"
        src.write_bytes(os.urandom(300_000))
        dst = tmp_path / "remote" / "sub" / "data.bin"
        seen = []
        t.put_file(src, str(dst), progress=lambda name, done, total: seen.append((name, done, total)))
        assert dst.read_bytes() == src.read_bytes() and not Path(str(dst) + ".part").exists()
        assert seen[0] == ("data.bin", 0, 300_000) and seen[-1] == ("data.bin", 300_000, 300_000)
        assert "kB/s measured" in t.description
    # The endpoint restored the console: the same shell answers a second session.
    with connect("serial", cable.port) as t:
        assert t.run(["echo", "again"]).stdout == "again\n"
        assert t.link.stats["frames_resent"] == 0


@pytest.mark.parametrize(
    "shell", [("bash", "--norc", "--noprofile", "-i"), ("busybox", "sh", "-i")], ids=["bash", "busybox-ash"]
)
def test_other_console_shells(shell, tmp_path):
    if not shutil.which(shell[0]):
        pytest.skip(f"{shell[0]} is not installed")
    env = dict(device_env(tmp_path), PS1="pi@raspberrypi:~ $ ", TERM="xterm")
    with Cable(shell=shell, env=env) as cable:
        for _ in range(2):  # the second session finds the console given back, and the endpoint kept in ~/.cache
            with connect("serial", cable.port) as t:
                assert t.run(["echo", "hello"]).stdout == "hello\n"


@pytest.mark.skipif(PY37 is None, reason=missing("3.7"))
def test_corrupted_and_dropped_frames_are_resent(tmp_path):
    """The endpoint runs on Python 3.7; the cable damages frames both ways; the data still arrives intact."""
    with Cable(env=device_env(tmp_path, python_dir=os.path.dirname(PY37))) as cable:
        src = tmp_path / "model.bin"
        src.write_bytes(os.urandom(400_000))
        dst = tmp_path / "remote" / "model.bin"
        with connect("serial", cable.port) as t:
            assert t.endpoint["python"].startswith("3.7.")
            cable.damage(corrupt_to_device=6, drop_to_device=2, corrupt_to_host=3, drop_to_host=1, every=3)
            t.put_file(src, str(dst))
            assert remote_sha256(t, dst) == sha256(src)
            out = t.run([sys.executable, "-c", "print('x' * 200000)"]).stdout
            assert out == "x" * 200000 + "\n"
            assert cable.damaged == {"to_device": 8, "to_host": 4}
            assert t.link.stats["frames_resent"] > 0


def test_paced_like_a_real_115200_line(tmp_path, monkeypatch):
    """The cable passes ~11.5 kB/s each way and the transport treats the port as a real line (wire time counted)."""
    from edgekit.transports import serial_line

    monkeypatch.setattr(serial_line, "_is_pty", lambda path: False)
    with Cable(env=device_env(tmp_path), baud=115200) as cable:
        src = tmp_path / "weights.bin"
        src.write_bytes(os.urandom(30_000))
        dst = tmp_path / "remote" / "weights.bin"
        with connect("serial", cable.port, baud=115200) as t:
            t.put_file(src, str(dst))
            assert t.description.startswith(f"serial {cable.port} at 115200 baud, ")
            assert "kB/s measured" in t.description
        assert sha256(dst) == sha256(src)


def test_upload_resumes_after_the_port_vanished(cable, tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(1_500_000))
    dst = tmp_path / "remote" / "big.bin"
    with connect("serial", cable.port) as t:
        cable.unplug_after_bytes(500_000)
        with pytest.raises(TransportError) as e:
            t.put_file(src, str(dst))
    assert str(e.value).startswith(f"serial {cable.port}: uploading big.bin failed: the port vanished")
    assert not dst.exists() and Path(str(dst) + ".part").exists()
    # Plugged in again: the endpoint left running on the console is stopped, the rest is sent.
    port = cable.plug()
    with connect("serial", port) as t:
        t.put_file(src, str(dst))
        assert 0 < t.last_put["resumed_from"] < 1_500_000
    assert sha256(dst) == sha256(src)


def test_forward_stops_listening_on_close(cable):
    """A forwarded port carries bytes over the line; closing the transport refuses it and ends its thread."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    try:
        with connect("serial", cable.port) as t:
            host_port = t.forward(server.getsockname()[1])
            assert t.forward(server.getsockname()[1]) == host_port  # one listener per device port
            with socket.create_connection(("127.0.0.1", host_port), timeout=30) as c:
                peer, _ = server.accept()
                with peer:
                    c.sendall(b"ping")
                    assert peer.recv(4) == b"ping"
                    peer.sendall(b"pong")
                    assert c.recv(4) == b"pong"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", host_port), timeout=5)
        assert not [th.name for th in threading.enumerate() if th.name == f"serial-forward-{host_port}"]
    finally:
        server.close()


def test_endpoint_is_kept_private_and_run_from_the_bytes_it_checked(tmp_path):
    env = device_env(tmp_path)
    with Cable(env=env) as cable:
        with connect("serial", cable.port) as t:
            path = Path(t.endpoint_path)
            assert path.parent == Path(env["HOME"]) / ".cache" / "edgekit" / "serial"
            assert path.parent.stat().st_mode & 0o777 == 0o700
            assert path.read_bytes() == serial_line.endpoint_source()
    # No writable $HOME: a fresh private directory, removed when the session ends.
    home_file = tmp_path / "not-a-directory"
    home_file.write_text("")
    with Cable(env=dict(env, HOME=str(home_file))) as cable:
        with connect("serial", cable.port) as t:
            fresh = Path(t.endpoint_path).parent
            assert fresh.parent == Path(env["TMPDIR"]) and fresh.stat().st_mode & 0o777 == 0o700
            assert t.run(["echo", "ok"]).stdout == "ok\n"
        for _ in range(300):  # the shell removes it after the endpoint gave the console back
            if not fresh.exists():
                break
            threading.Event().wait(0.1)
        assert not fresh.exists()
    # The loader hashes the bytes it then runs: a file that differs is not run.
    swapped = tmp_path / "endpoint.py"
    swapped.write_text("open(__file__ + '.ran', 'w').write('ran')\n")
    good = hashlib.sha256(serial_line.endpoint_source()).hexdigest()
    r = subprocess.run(
        [sys.executable, "-c", serial_line.LOADER, str(swapped), good, "1.0", "0"], capture_output=True, text=True
    )
    assert r.returncode == 1 and "EK_BAD_ENDPOINT" in r.stderr and not Path(str(swapped) + ".ran").exists()
    r = subprocess.run(
        [sys.executable, "-c", serial_line.LOADER, str(swapped), hashlib.sha256(swapped.read_bytes()).hexdigest()],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and Path(str(swapped) + ".ran").read_text() == "ran"


def test_a_stream_nobody_reads_does_not_hold_up_the_line(cable):
    """The device's side of a forwarded stream never reads: its data waits per stream (at most a window of it),
    and commands on the same line still run."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck = []
    try:
        with connect("serial", cable.port) as t:
            host_port = t.forward(server.getsockname()[1])
            client = socket.create_connection(("127.0.0.1", host_port), timeout=30)
            stuck.append(client)
            peer, _ = server.accept()  # accepted, never read
            stuck.append(peer)
            client.settimeout(None)
            blob = b"x" * (64 << 20)
            threading.Thread(target=lambda: _send_quietly(client, blob), daemon=True).start()
            st = None
            for _ in range(600):  # until the host side has a full window in flight
                st = next(iter(t.mux.streams.values()), None)
                if st is not None and st.in_flight >= proto.STREAM_WINDOW:
                    break
                threading.Event().wait(0.05)
            assert st is not None and st.in_flight >= proto.STREAM_WINDOW
            assert st.in_flight <= proto.STREAM_WINDOW + 65536
            r = t.run(["echo", "still here"], timeout=30)
            assert r.stdout == "still here\n"
            assert st.in_flight <= proto.STREAM_WINDOW + 65536
            # the reader wakes up: everything arrives, in order
            got = bytearray()
            peer.settimeout(60)
            while len(got) < 1 << 20:
                got += peer.recv(1 << 20)
            assert got[: 1 << 20] == blob[: len(got)][: 1 << 20]
    finally:
        for s in stuck:
            s.close()
        server.close()


def _send_quietly(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass


def test_link_timers_ignore_wall_clock_jumps(monkeypatch):
    """A board without an RTC steps its clock at NTP sync: resend timers run on the monotonic clock."""
    import select
    import socket
    import time

    a, b = socket.socketpair()

    def reader(s):
        def read():
            if not select.select([s], [], [], 0.05)[0]:
                return b""
            data = s.recv(65536)
            if not data:
                raise EOFError("closed")
            return data

        return read

    got = []
    links = [
        proto.Link(reader(a), a.sendall, lambda p: None, initial_rto=0.25),
        proto.Link(reader(b), b.sendall, got.append, initial_rto=0.25),
    ]
    try:
        for link in links:
            link.start()
        real, jumps = time.time, [0.0]

        def jumping():
            jumps[0] += 3600.0
            return real() + jumps[0]

        monkeypatch.setattr(time, "time", jumping)
        for i in range(50):
            links[0].send(b"payload %d" % i)
        assert links[0].drain(60)
        monkeypatch.undo()
        assert got == [b"payload %d" % i for i in range(50)]
        assert links[0].stats["frames_resent"] == 0 and not links[0].dead
    finally:
        monkeypatch.undo()
        for link in links:
            link.close()
        a.close()
        b.close()


# -- errors ------------------------------------------------------------------------------
def test_missing_port_is_a_clear_error(tiny_bundle, tmp_path):
    p = run_cli("deploy", tiny_bundle, "--serial", "/dev/ttyUSB-not-here", "--device-root", tmp_path / "r")
    assert p.returncode == 4
    assert "serial /dev/ttyUSB-not-here: opening the port failed: no such port" in p.stderr
    assert "Traceback" not in p.stderr


def test_silent_console_names_the_baud_rate(tmp_path):
    with Cable(device=["sleep", "60"], wait_output=False) as cable:
        with pytest.raises(TransportError) as e:
            connect("serial", cable.port, baud=57600, timeout=1)
    assert "57600 baud" in str(e.value) and "getting the console's attention failed" in str(e.value)


def test_login_prompt_is_explained(tmp_path):
    getty = (
        "import signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "sys.stdout.write('raspberrypi login: '); sys.stdout.flush()\n"
        "for line in sys.stdin:\n    sys.stdout.write('\\nraspberrypi login: '); sys.stdout.flush()\n"
    )
    with Cable(device=[sys.executable, "-c", getty]) as cable:
        with pytest.raises(TransportError, match="login prompt, not a shell") as e:
            connect("serial", cable.port, timeout=3)
    assert "log in" in str(e.value).lower()


# -- deploy end to end -------------------------------------------------------------------
def test_cli_deploy_and_bench_over_serial(cable, tiny_bundle, device_root):
    p = run_cli(
        "deploy",
        tiny_bundle,
        "--serial",
        cable.port,
        "--baud",
        115200,
        "--device-python",
        sys.executable,
        "--device-root",
        device_root,
        "--runs",
        20,
        "--warmup",
        2,
        "--json",
        check=0,
    )
    r = one_json(p.stdout)
    assert r["transport"].startswith(f"serial {cable.port} at 115200 baud") and "kB/s measured" in r["transport"]
    assert r["runs"] == 20 and r["latency_ms"]["p50"] > 0
    assert (device_root / "models" / "tiny" / "current").is_symlink()
    p = run_cli(
        "bench",
        tiny_bundle,
        "--serial",
        cable.port,
        "--device-python",
        sys.executable,
        "--device-root",
        device_root,
        "--runs",
        5,
        "--json",
        check=0,
    )
    assert one_json(p.stdout)["bundle_id"] == r["bundle_id"]


def test_port_vanishing_mid_deploy_keeps_the_previous_version(cable, tiny_bundle, tiny_calib, tmp_path, device_root):
    from harness.models import tiny_cnn

    with open_device("serial", cable.port, device_python=sys.executable, device_root=str(device_root)) as dev:
        v1 = deploy(tiny_bundle, dev, bench=False)["installed"]["version"]
    # v2: same name, a 320 kB model, so the plug is pulled in the middle of its upload
    big = tiny_cnn(tmp_path / "big.onnx", classes=5000)
    v2_dir = tmp_path / "v2"
    edgekit.build(big, "host", v2_dir, precision="fp32", calib=tiny_calib, name="tiny")
    cable.unplug_after_bytes(120_000)
    p = run_cli(
        "deploy",
        v2_dir,
        "--serial",
        cable.port,
        "--device-python",
        sys.executable,
        "--device-root",
        device_root,
        "--runs",
        5,
    )
    assert p.returncode == 4, p.stderr
    assert "uploading" in p.stderr and "the port vanished" in p.stderr and "Traceback" not in p.stderr

    port = cable.plug()
    with open_device("serial", port, device_python=sys.executable, device_root=str(device_root)) as dev:
        dev.ensure_agent()
        assert dev.client.models()[0]["version"] == v1
    p = run_cli(
        "deploy",
        v2_dir,
        "--serial",
        port,
        "--device-python",
        sys.executable,
        "--device-root",
        device_root,
        "--runs",
        5,
        "--json",
        check=0,
    )
    r = one_json(p.stdout)
    assert r["installed"]["previous"] == v1 and r["bundle_id"] != v1
    assert r["installed"]["transfer"]["resumed_bytes"] > 0  # resumed where the cut upload stopped (--json: no log)


@pytest.mark.slow
def test_an_empty_python_is_set_up_over_serial_then_serves(cable, tiny_bundle, agent_roots, tmp_path):
    """`deploy --setup` over the serial line: the runtime's wheels pushed through the framed protocol to a device
    whose Python has nothing, unpacked into ROOT/site, and the agent started there imports them."""
    base = find_python("3.12")
    if base is None:
        pytest.skip(missing("3.12"))
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    root = agent_roots("serial-bare", python=str(python))
    device = ["--serial", cable.port, "--device-python", python, "--device-root", root]
    p = run_cli("deploy", tiny_bundle, *device, "--setup", "--runs", 5, "--warmup", 1, "--json", check=0)
    r = one_json(p.stdout)
    built = json.loads((tiny_bundle / "manifest.json").read_text())["runtime"]["version"]
    assert r["runtime_version"] == built and r["device_fidelity"]["passed"] is True
    assert r["transport"].startswith(f"serial {cable.port}")
    assert json.loads((root / "site" / "edgekit-setup.json").read_text())["runtime"]["version"] == built
