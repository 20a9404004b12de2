"""deploy --adb end to end: the real adb command and server against tests/harness/adbd.py.

Everything device-side (the adb server, the daemons, the agents they start, and the edgekit
commands that talk to them) runs in a private network namespace that has only a loopback
interface, so nothing here can reach, or be reached from, beyond this machine. The server
has its own HOME, TMPDIR, a non-default port and no mDNS.
"""

import hashlib
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from harness.adblab import ADB, Lab, Phone, bundled_adb

import edgekit

pytestmark = pytest.mark.e2e

ROOT = "~/edgekit"  # each test device has its own HOME, like separate phones


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if ADB is None:
        pytest.skip("the adb command is not installed (Debian: apt-get install adb)")
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("unshare/nsenter (util-linux) are needed to isolate the adb server")
    pytest.importorskip("adbutils")
    lab = Lab(tmp_path_factory.mktemp("adb-lab"))
    yield lab
    lab.close()


@pytest.fixture
def phones(lab, tmp_path):
    """``phones(n)`` attaches n test devices; all are detached and their agents stopped afterwards."""
    made = []

    def make(n=1):
        new = [Phone(lab, tmp_path / f"phone{len(made) + i}") for i in range(n)]
        made.extend(new)
        return new

    yield make
    for p in made:
        p.close()


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# -- the real adb client against the test daemon ----------------------------------
@pytest.mark.parametrize("client", ["debian", "adbutils-bundled"])
def test_adb_client_shell_push_pull(lab, phones, tmp_path, client):
    binary = ADB if client == "debian" else bundled_adb()
    if binary is None:
        pytest.skip("adbutils ships no adb binary for this platform")
    (phone,) = phones()
    s = phone.serial
    devices = lab.adb("devices", "-l", check=0, binary=binary).stdout
    assert f"{s}" in devices and "model:edgekit_adbd" in devices

    p = lab.adb("-s", s, "shell", "echo out; echo err >&2; exit 3", binary=binary)
    assert (p.returncode, p.stdout, p.stderr) == (3, "out\n", "err\n")

    data = np.random.default_rng(0).integers(0, 256, 3 * 1024 * 1024 + 17, dtype=np.uint8).tobytes()
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    remote = tmp_path / "device-side" / "sub" / "pushed.bin"
    lab.adb("-s", s, "push", src, remote, check=0, binary=binary)
    assert _sha256(remote) == _sha256(src)
    back = tmp_path / "pulled.bin"
    lab.adb("-s", s, "pull", remote, back, check=0, binary=binary)
    assert _sha256(back) == _sha256(src)
    listing = lab.adb("-s", s, "shell", "ls", remote.parent, check=0, binary=binary).stdout
    assert listing.split() == ["pushed.bin"]


# -- edgekit over ADB ---------------------------------------------------------------
RUN_SCRIPT = textwrap.dedent("""
    import json, sys
    from edgekit.transports import connect

    with connect("adb", sys.argv[1]) as t:
        out = {}
        for shell_v2 in (True, False):  # the v1 shell is what devices without shell_v2 get
            t.shell_v2 = shell_v2
            rs = [t.run(["echo", "a  b", "$HOME", "it's", ";", "`id`"]),
                  t.run(["sh", "-c", "echo out; echo err >&2; exit 7"]),
                  t.run(["no-such-command-here"])]
            out[str(shell_v2)] = [[r.returncode, r.stdout, r.stderr] for r in rs]
        print(json.dumps(out))
""")


def test_run_quotes_argv_and_returns_exit_codes(lab, phones, tmp_path):
    (phone,) = phones()
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    out = json.loads(lab.run([sys.executable, script, phone.serial], check=0).stdout)
    v2, v1 = out["True"], out["False"]
    assert v2[0] == v1[0] == [0, "a  b $HOME it's ; `id`\n", ""]
    assert v2[1] == [7, "out\n", "err\n"]
    assert v1[1][0] == 7 and sorted(v1[1][1].split()) == ["err", "out"]  # v1: one stream
    assert v2[2][0] == 127 and "not found" in v2[2][2]
    assert v1[2][0] == 127


def test_deploy_and_bench_over_adb(lab, phones, tiny_bundle):
    (phone,) = phones()
    p = lab.cli(
        "deploy",
        tiny_bundle,
        "--adb",
        phone.serial,
        "--device-python",
        sys.executable,
        "--device-root",
        ROOT,
        "--runs",
        20,
        "--warmup",
        2,
        "--json",
        check=0,
    )
    r = json.loads(p.stdout)
    assert r["transport"] == f"adb {phone.serial}"
    assert r["runs"] == 20 and r["latency_ms"]["p50"] > 0 and r["deploy_seconds"] > 0
    assert r["agent"]["root"] == str(phone.root)
    assert (phone.root / "models" / "tiny" / "current").is_symlink()
    assert (phone.root / "agent" / "edgekit-agent.pyz").is_file()
    assert not list(phone.root.rglob("*.part"))
    # the only device attached: --adb without a serial finds it; the bundle is not sent again
    p = lab.cli(
        "bench",
        tiny_bundle,
        "--adb",
        "--device-python",
        sys.executable,
        "--device-root",
        ROOT,
        "--runs",
        5,
        "--json",
        check=0,
    )
    assert json.loads(p.stdout)["bundle_id"] == r["bundle_id"]
    # the forwards edgekit made are gone again
    assert lab.adb("forward", "--list", check=0).stdout.strip() == ""


@pytest.mark.slow
def test_several_devices_need_a_serial_or_all(lab, phones, tiny_bundle):
    a, b = phones(2)
    p = lab.cli("deploy", tiny_bundle, "--adb", "--device-python", sys.executable, "--device-root", ROOT)
    assert p.returncode == 4
    assert a.serial in p.stderr and b.serial in p.stderr and "--adb SERIAL" in p.stderr
    assert not a.root.exists() and not b.root.exists()

    p = lab.cli(
        "agent", "start", "--adb", b.serial, "--device-python", sys.executable, "--device-root", ROOT, "--json", check=0
    )
    assert json.loads(p.stdout)["root"] == str(b.root) and not a.root.exists()

    p = lab.cli(
        "deploy",
        tiny_bundle,
        "--adb",
        "all",
        "--device-python",
        sys.executable,
        "--device-root",
        ROOT,
        "--runs",
        5,
        "--warmup",
        1,
        "--json",
        check=0,
    )
    rows = json.loads(p.stdout)["devices"]
    assert sorted(r["name"] for r in rows) == sorted([a.serial, b.serial])
    assert all(r["status"] == "ok" and r["p50_ms"] > 0 for r in rows)
    for phone in (a, b):
        assert (phone.root / "models" / "tiny" / "current").is_symlink()
    p = lab.cli("bench", tiny_bundle, "--adb", "all", "--device-python", sys.executable)
    assert p.returncode == 4 and "deploy" in p.stderr


def test_device_probe_over_adb(lab, phones):
    """``device probe --adb``: the probe script pushed to the device root and run there, no agent started."""
    (phone,) = phones()
    p = lab.cli("device", "probe", "--adb", phone.serial, "--device-python", sys.executable, "--device-root", ROOT,
                "--json", check=0)  # fmt: skip
    info = json.loads(p.stdout)
    assert info["transport"] == "adb" and info["disk"]["path"] == str(phone.root)
    assert info["cpu"]["machine"] == os.uname().machine and info["cpu"]["count"] == os.cpu_count()
    assert (phone.root / "probe.py").is_file() and not (phone.root / "agent").exists()


def test_no_device_is_a_clear_error(lab, tiny_bundle, tmp_path):
    p = lab.cli("deploy", tiny_bundle, "--adb", "--device-python", sys.executable, "--device-root", tmp_path / "r")
    assert p.returncode == 4
    assert "no Android device" in p.stderr and "USB debugging" in p.stderr and "adb devices" in p.stderr
    p = lab.cli(
        "deploy",
        tiny_bundle,
        "--adb",
        "0123456789ABCDEF",
        "--device-python",
        sys.executable,
        "--device-root",
        tmp_path / "r",
    )
    assert p.returncode == 4 and "0123456789ABCDEF" in p.stderr and "adb devices" in p.stderr
    p = lab.cli("deploy", tiny_bundle, "--adb", "all", "--device-python", sys.executable)
    assert p.returncode == 4 and "no Android device" in p.stderr
    assert not (tmp_path / "r").exists()


CUT_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    from edgekit.deployer import deploy, open_device
    from edgekit.errors import TransportError

    serial, pid, root, what, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    killed = []

    def cut(name, done, total):
        if not killed and done >= total // 2:
            os.kill(pid, signal.SIGKILL)  # halfway through the first file
            killed.append([done, total])

    def adb_sockets(port):
        # this process's open TCP connections to the adb server
        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                mine.add(target[8:-1])
        n = 0
        for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
            with open(table) as f:
                for line in list(f)[1:]:
                    cols = line.split()
                    if int(cols[2].rsplit(":", 1)[1], 16) == port and cols[9] in mine:
                        n += 1
        return n

    with open_device("adb", serial, device_python=sys.executable, device_root=root) as dev:
        try:
            if what == "put_file":
                dev.probe()
                dev.transport.put_file(path, dev.root + "/big.bin", progress=cut)
            else:
                deploy(path, dev, bench=False, progress=cut)
            print(json.dumps({"error": None, "killed": killed}))
        except TransportError as e:
            kept = [e]  # errors are kept (a CLI's, a fleet row's): what they reference must not hold sockets
            try:
                dev.transport.run(["true"])  # the device is gone: refused by the adb server
            except TransportError as again:
                kept.append(again)
            sockets = adb_sockets(dev.transport.port)
            print(json.dumps({"error": str(e), "killed": killed, "adb_sockets": sockets, "after": str(kept[-1])}))
""")


@pytest.mark.slow
def test_connection_cut_mid_push_keeps_the_previous_version_and_resumes(lab, phones, tiny_bundle, tiny_calib, tmp_path):
    (phone,) = phones()
    script = tmp_path / "cut.py"
    script.write_text(CUT_SCRIPT)

    def cut(what, path):
        p = lab.run([sys.executable, script, phone.serial, phone.proc.pid, ROOT, what, path], check=0)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        assert r["error"] and 0 < r["killed"][0][0] < r["killed"][0][1], r  # cut in the middle
        assert r["adb_sockets"] == 0, r  # the connections refused after the cut were closed
        return r

    v1 = json.loads(
        lab.cli(
            "deploy",
            tiny_bundle,
            "--adb",
            phone.serial,
            "--device-python",
            sys.executable,
            "--device-root",
            ROOT,
            "--runs",
            5,
            "--json",
            check=0,
        ).stdout
    )["bundle_id"]

    # 1. the transport's own upload (sync push), cut after its first block
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(8 * 1024 * 1024))
    r = cut("put_file", big)
    assert f"adb {phone.serial}" in r["error"] and "uploading big.bin" in r["error"]
    assert not (phone.root / "big.bin").exists()
    phone.restart()

    # 2. a bundle upload through the forwarded agent port (a 1.3 MB model), cut halfway
    from harness.models import tiny_cnn

    v2_dir = tmp_path / "v2"
    edgekit.build(
        tiny_cnn(tmp_path / "wide.onnx", classes=20000), "host", v2_dir, precision="fp32", calib=tiny_calib, name="tiny"
    )
    r = cut("deploy", v2_dir)
    assert f"adb {phone.serial}" in r["error"] and "uploading model.onnx" in r["error"]
    assert "keeps serving what it served before" in r["error"]
    phone.restart()

    # the device still serves v1: bench of the v1 bundle needs exactly that version
    p = lab.cli(
        "bench",
        tiny_bundle,
        "--adb",
        phone.serial,
        "--device-python",
        sys.executable,
        "--device-root",
        ROOT,
        "--runs",
        3,
        "--json",
        check=0,
    )
    assert json.loads(p.stdout)["bundle_id"] == v1
    # and the same deploy again completes
    p = lab.cli(
        "deploy",
        v2_dir,
        "--adb",
        phone.serial,
        "--device-python",
        sys.executable,
        "--device-root",
        ROOT,
        "--runs",
        3,
        "--json",
        check=0,
    )
    r = json.loads(p.stdout)
    assert r["installed"]["previous"] == v1 and r["installed"]["version"] == r["bundle_id"] != v1


# -- host logic ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, ("127.0.0.1", 5037)),
        ({"ANDROID_ADB_SERVER_PORT": "6000"}, ("127.0.0.1", 6000)),
        ({"ADB_SERVER_SOCKET": "tcp:7000", "ANDROID_ADB_SERVER_PORT": "6000"}, ("127.0.0.1", 7000)),
        ({"ADB_SERVER_SOCKET": "tcp:10.0.0.2:7001"}, ("10.0.0.2", 7001)),
    ],
)
def test_server_address_from_the_environment(monkeypatch, env, expected):
    from edgekit.transports.adb import server_address

    for k in ("ADB_SERVER_SOCKET", "ANDROID_ADB_SERVER_PORT", "ANDROID_ADB_SERVER_ADDRESS", "ANDROID_ADB_SERVER_HOST"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert server_address() == expected


def test_unix_server_socket_is_refused_clearly(monkeypatch):
    from edgekit.errors import TransportError
    from edgekit.transports.adb import server_address

    monkeypatch.setenv("ADB_SERVER_SOCKET", "localfilesystem:/tmp/adb.sock")
    with pytest.raises(TransportError, match="tcp:HOST:PORT"):
        server_address()


def test_doctor_reports_adb_without_starting_a_server(monkeypatch):
    import socket

    from edgekit.transports.adb import availability

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("ADB_SERVER_SOCKET", raising=False)
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    a = availability()
    assert f"127.0.0.1:{port} not running" in a["detail"] and a["ok"] == (ADB is not None or "adb: /" in a["detail"])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
