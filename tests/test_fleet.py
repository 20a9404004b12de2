"""Fleet inventory and parallel deploy/bench: URL and inventory validation, local fleets through the
Python API, and a fleet of emulated devices in network namespaces (one dead, one slow) through the CLI."""

import json
import os
import subprocess
import sys

import pytest
from harness import run_cli, stop_agent

from edgekit import fleet
from edgekit.fleet import InventoryError, load_inventory, parse_url


# -- URLs ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, expected",
    [
        ("ssh://pi@10.0.0.5", ("ssh", "pi@10.0.0.5", {})),
        ("ssh://pi@10.0.0.5:2200", ("ssh", "pi@10.0.0.5:2200", {})),
        ("ssh://raspberrypi.local", ("ssh", "raspberrypi.local", {})),
        ("ssh://pi@[fe80::1]:22", ("ssh", "pi@[fe80::1]:22", {})),
        ("adb://R58M123ABC", ("adb", "R58M123ABC", {})),
        ("adb://", ("adb", None, {})),
        ("serial:///dev/ttyUSB0?baud=115200", ("serial", "/dev/ttyUSB0", {"baud": 115200})),
        ("serial:///dev/ttyACM1", ("serial", "/dev/ttyACM1", {})),
        ("local://", ("local", None, {})),
    ],
)
def test_parse_url(url, expected):
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    "url, says",
    [
        ("10.0.0.5", "not a device URL"),
        ("http://10.0.0.5", "unknown scheme 'http'"),
        ("ssh://", "has no host"),
        ("ssh://pi@host:99999", "bad port"),
        ("ssh://pi@host/path", "only USER@HOST"),
        ("serial://dev/ttyUSB0", "three slashes"),
        ("serial:///dev/ttyUSB0?baud=fast", "baud must be a positive integer"),
        ("serial:///dev/ttyUSB0?parity=even", "unknown option 'parity'"),
        ("local://somewhere", "local:// takes no host"),
    ],
)
def test_parse_url_errors(url, says):
    with pytest.raises(ValueError, match=says):
        parse_url(url)


# -- inventory ----------------------------------------------------------------------
def write(tmp_path, text, name="devices.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """
[defaults]
python = "/usr/bin/python3"

[[device]]
name = "pi-1"
url = "ssh://pi@10.0.0.5"
profile = "raspberrypi5"
tags = ["lab", "pi"]
key = "id_test"
connect_timeout = 5

[[device]]
name = "phone"
url = "adb://R58M123ABC"
tags = ["android"]
device_timeout = 60

[[device]]
name = "board"
url = "serial:///dev/ttyUSB0?baud=921600"
tags = ["lab"]
python = "/opt/py/bin/python3"

[[device]]
name = "here"
url = "local://"
root = "/tmp/x"
"""


def test_inventory_parses_defaults_paths_and_tags(tmp_path):
    (tmp_path / "id_test").write_text("key")
    devices = load_inventory(write(tmp_path, GOOD))
    assert [d.name for d in devices] == ["pi-1", "phone", "board", "here"]
    pi, phone, board, here = devices
    assert (pi.kind, pi.target, pi.profile) == ("ssh", "pi@10.0.0.5", "raspberrypi5")
    assert pi.options == {
        "key_file": str(tmp_path / "id_test"),
        "ssh_config": None,
        "known_hosts": None,
        "timeout": 5.0,
    }
    assert pi.python == "/usr/bin/python3" and board.python == "/opt/py/bin/python3"
    assert (phone.kind, phone.target, phone.device_timeout) == ("adb", "R58M123ABC", 60)
    assert (board.kind, board.target, board.options) == ("serial", "/dev/ttyUSB0", {"baud": 921600})
    assert (here.kind, here.root, here.profile) == ("local", "/tmp/x", None)
    assert [d.name for d in load_inventory(tmp_path / "devices.toml", tag="lab")] == ["pi-1", "board"]
    with pytest.raises(InventoryError, match="no device is tagged 'nope'; tags in use: android, lab, pi"):
        load_inventory(tmp_path / "devices.toml", tag="nope")


@pytest.mark.parametrize(
    "text, says",
    [
        ('[[device]]\nname = "a"\n', "device #1 ('a'): missing field 'url'"),
        ('[[device]]\nurl = "local://"\n', "device #1: missing field 'name'"),
        (
            '[[device]]\nname = "a"\nurl = "local://"\n[[device]]\nname = "a"\nurl = "local://"\n',
            "device #2 ('a'): name 'a' is already used by device #1",
        ),
        ('[[device]]\nname = "a"\nurl = "local://"\nport = 22\n', "device #1 ('a'): unknown field 'port'"),
        ('[[device]]\nname = "a"\nurl = "local://"\ntags = "lab"\n', "field 'tags' must be a list of strings"),
        ('[[device]]\nname = "a"\nurl = "local://"\ndevice_timeout = -1\n', "field 'device_timeout' must be positive"),
        ('[[device]]\nname = "a"\nurl = "ftp://x"\n', "device #1 ('a'): field 'url': unknown scheme 'ftp'"),
        (
            '[[device]]\nname = "a"\nurl = "local://"\nprofile = "toaster"\n',
            "field 'profile': unknown profile 'toaster'",
        ),
        ('[[device]]\nname = "a"\nurl = "ssh://pi@h"\nkey = "missing_key"\n', "field 'key': no such file"),
        ('[[device]]\nname = "a b"\nurl = "local://"\n', "field 'name' must be letters"),
        ('[[device]]\nname = "a"\nurl = "local://"\nknown_hosts = "devices.toml"\n', "applies to ssh:// devices only"),
        ('[defaults]\nname = "x"\n[[device]]\nname = "a"\nurl = "local://"\n', "[defaults]: unknown field 'name'"),
        ('name = "a"\n', "unknown top-level key(s) name"),
        ("", "no devices"),
        ("[[device]\nname=", "is not valid TOML"),
    ],
)
def test_inventory_errors_name_the_entry_and_field(tmp_path, text, says):
    with pytest.raises(InventoryError) as e:
        load_inventory(write(tmp_path, text))
    assert says in str(e.value)
    assert str(tmp_path / "devices.toml") in str(e.value)


def test_cli_inventory_errors(tmp_path, tiny_bundle):
    p = run_cli("deploy", tiny_bundle, "--fleet", tmp_path / "nope.toml")
    assert p.returncode == 1 and "fleet inventory" in p.stderr and "does not exist" in p.stderr
    inv = write(tmp_path, '[[device]]\nname = "a"\nurl = "adb:/x"\n')
    p = run_cli("deploy", tiny_bundle, "--fleet", inv)
    assert p.returncode == 1 and "device #1 ('a'): field 'url'" in p.stderr
    inv = write(tmp_path, '[[device]]\nname = "a"\nurl = "local://"\n')
    p = run_cli("deploy", tiny_bundle, "--fleet", inv, "--ssh", "pi@h")
    assert p.returncode == 2 and "not allowed with argument" in p.stderr
    p = run_cli("bench", tiny_bundle, "--fleet", inv, "--device-root", tmp_path)
    assert p.returncode == 1 and "--device-root cannot be combined with --fleet" in p.stderr
    p = run_cli("deploy", tiny_bundle, "--fleet", inv, "--tag", "lab")
    assert p.returncode == 1 and "no device is tagged 'lab'" in p.stderr
    assert not (tmp_path / "a").exists()


# -- local fleet through the API -------------------------------------------------------
@pytest.fixture
def local_roots(agent_roots):
    return [agent_roots(f"dev{i}") for i in range(3)]


def test_local_fleet_api_deploy_then_bench(tmp_path, tiny_bundle, local_roots):
    text = "".join(
        f'[[device]]\nname = "d{i}"\nurl = "local://"\nroot = "{r}"\ntags = ["t{i % 2}"]\n'
        for i, r in enumerate(local_roots)
    )
    text += '[[device]]\nname = "gone"\nurl = "local://"\npython = "/nonexistent/python3"\n'
    devices = load_inventory(write(tmp_path, text))
    seen = []
    rows = fleet.deploy_fleet(tiny_bundle, devices, jobs=2, runs=10, warmup=1, on_row=seen.append)
    assert [r["name"] for r in rows] == ["d0", "d1", "d2", "gone"]
    assert sorted(r["name"] for r in seen) == ["d0", "d1", "d2", "gone"]
    for r in rows[:3]:
        assert r["status"] == "ok" and r["error"] is None, r
        assert r["p50_ms"] > 0 and r["p90_ms"] >= r["p50_ms"] and r["accelerator"] == "CPUExecutionProvider"
        assert r["deploy_seconds"] > 0 and r["machine"]
    for root in local_roots:
        assert (root / "models" / "tiny" / "current").is_symlink()
    pids = {json.loads((root / "agent" / "state.json").read_text())["pid"] for root in local_roots}
    assert len(pids) == 3, "each device has its own agent"
    gone = rows[3]
    assert gone["status"] == "failed" and gone["step"] == "probing the device's Python"
    assert "/nonexistent/python3" in gone["error"] and gone["exit_code"] == 4
    assert fleet.exit_code(rows) == 4
    text_table = fleet.fleet_text(rows, 1.0)
    assert "3/4 ok, 1 failed, 0 timed out" in text_table and "at probing the device's Python" in text_table

    rows = fleet.bench_fleet(tiny_bundle, fleet.select(devices, "t0"), runs=5, warmup=1)
    assert [(r["name"], r["status"]) for r in rows] == [("d0", "ok"), ("d2", "ok")]
    assert all(r["deploy_seconds"] is None and r["p50_ms"] > 0 for r in rows)


def test_device_deadline_gives_a_timeout_row_and_does_not_block_others(tmp_path, tiny_bundle, local_roots):
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(f'#!/bin/sh\nsleep 4\nexec {sys.executable} "$@"\n')
    slow_python.chmod(0o755)
    text = (
        f'[[device]]\nname = "fast"\nurl = "local://"\nroot = "{local_roots[0]}"\n'
        f'[[device]]\nname = "stuck"\nurl = "local://"\nroot = "{local_roots[1]}"\npython = "{slow_python}"\n'
        "device_timeout = 1.5\n"
    )
    devices = load_inventory(write(tmp_path, text))
    rows = fleet.deploy_fleet(tiny_bundle, devices, jobs=1, runs=5, warmup=1)
    stuck = next(r for r in rows if r["name"] == "stuck")
    assert stuck["status"] == "timeout" and stuck["step"] == "probing the device's Python"
    assert stuck["error"] == "timeout after 1.5 s at step: probing the device's Python"
    assert next(r for r in rows if r["name"] == "fast")["status"] == "ok"
    assert fleet.exit_code(rows) == 4


# -- emulated devices in network namespaces ---------------------------------------------
@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from harness import netns

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"emulated devices need network namespaces: {reason}")
    with netns.NetnsLab() as lab:
        for i in range(10):
            lab.add_device("dead" if i == 3 else "slow" if i == 6 else "ok")
        lab.roots = [tmp_path_factory.mktemp("netns-devices") / f"dev{d.index}" for d in lab.devices]
        try:
            yield lab
        finally:
            for r in lab.roots:
                stop_agent(sys.executable, r)


def lab_cli(lab, *args):
    """The real `edgekit` command, run where the emulated devices are reachable."""
    p = subprocess.run(
        lab.exec_prefix + [sys.executable, "-m", "edgekit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    return p


def _netns_of(pid):
    return os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.e2e
def test_fleet_of_ten_emulated_devices_over_the_network(lab, tmp_path, tiny_bundle):
    inv = tmp_path / "fleet.toml"
    inv.write_text(lab.inventory(lab.devices, lab.roots, extra={3: {"connect_timeout": 3}}))
    p = lab_cli(
        lab,
        "deploy",
        tiny_bundle,
        "--fleet",
        inv,
        "--jobs",
        10,
        "--runs",
        20,
        "--warmup",
        2,
        "--device-timeout",
        240,
        "--json",
    )
    assert p.returncode == 4, p.stderr
    out = json.loads(p.stdout)
    rows = {r["name"]: r for r in out["devices"]}
    assert out["summary"]["devices"] == 10 and out["summary"]["ok"] == 9 and out["summary"]["failed"] == 1
    dead = rows["dev3"]
    assert dead["status"] == "failed" and dead["step"] == "connecting"
    assert "10.213.0.13" in dead["error"] and dead["exit_code"] == 4
    for name, r in rows.items():
        if name != "dev3":
            assert r["status"] == "ok", r
            assert r["p50_ms"] > 0 and r["accelerator"] == "CPUExecutionProvider" and r["deploy_seconds"] > 0
    # Separate agents, each in its device's own network namespace.
    live = [(d, root) for d, root in zip(lab.devices, lab.roots) if d.state != "dead"]
    pids = [json.loads((root / "agent" / "state.json").read_text())["pid"] for _, root in live]
    assert len(set(pids)) == 9
    assert len({_netns_of(pid) for pid in pids}) == 9
    assert _netns_of(pids[0]) != _netns_of(os.getpid())
    assert rows["dev6"]["deploy_seconds"] > 0  # the slow one got there (see lab.devices[6].shaping)

    # The text table: one row per device and a summary line.
    p = lab_cli(lab, "bench", tiny_bundle, "--fleet", inv, "--tag", "ok", "--runs", 10, "--warmup", 1)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["device", "url", "status"]
    assert len(lines) == 1 + 8 + 1 and lines[-1].startswith("8/8 ok, 0 failed, 0 timed out in ")
    assert all(" ok " in line for line in lines[1:-1])


@pytest.mark.e2e
def test_slow_device_past_its_deadline_times_out(agent_roots, lab, tmp_path, tiny_bundle):
    slow = lab.devices[6]
    fresh_root = agent_roots("slow-root")  # a fresh agent directory: the whole agent has to cross the slow link
    inv = tmp_path / "slow.toml"
    inv.write_text(lab.inventory([slow], [fresh_root]))
    p = lab_cli(lab, "deploy", tiny_bundle, "--fleet", inv, "--device-timeout", 1.0, "--runs", 5, "--json")
    rows = {r["name"]: r for r in json.loads(p.stdout)["devices"]}
    r = rows[f"dev{slow.index}"]
    assert r["status"] == "timeout" and r["error"].startswith("timeout after 1 s at step: ")
    assert p.returncode == 4


# -- abandoning a device (host logic; the devices are stand-ins) ---------------------------------
class _SlowTransport:
    """A transport whose close() hangs until released."""

    description = "slow"

    def __init__(self):
        import threading

        self.release = threading.Event()
        self.closing = threading.Event()
        self.closed = threading.Event()

    def close(self):
        self.closing.set()
        self.release.wait(60)
        self.closed.set()


def test_abandon_closes_in_the_background_and_no_step_starts_after_it():
    from edgekit.device import Device
    from edgekit.errors import TransportError

    job = fleet._Job(fleet.FleetDevice("slow", "local://", "local", None, {}))
    t = _SlowTransport()
    dev = Device(t, hooks={"step": [job.on_step]})  # the fleet observes the device's steps through its hook
    calls = []
    job.attach(dev)
    dev.call("benchmarking tiny", lambda: calls.append("benchmarking tiny"))
    assert job.abandon() == "benchmarking tiny"
    # abandon() returned while the device's close() still hangs: the scheduler is not held up by it
    assert t.closing.wait(30) and not t.closed.is_set()
    with pytest.raises(TransportError, match="given up after its deadline, before verifying and committing"):
        dev.call("verifying and committing the bundle", lambda: calls.append("COMMITTED"))
    assert "COMMITTED" not in calls and calls == ["benchmarking tiny"]
    t.release.set()
    assert t.closed.wait(30)


def test_connect_timeout_reaches_the_serial_transport(tmp_path, tiny_bundle):
    pytest.importorskip("serial")
    from harness.serialdev import Cable

    with Cable(device=["sleep", "60"], wait_output=False) as cable:
        inv = write(tmp_path, f'[[device]]\nname = "board"\nurl = "serial://{cable.port}"\nconnect_timeout = 1\n')
        devices = load_inventory(inv)
        assert devices[0].options == {"timeout": 1.0}
        rows = fleet.deploy_fleet(tiny_bundle, devices, device_timeout=120)
    assert rows[0]["status"] == "failed" and rows[0]["step"] == "connecting"
    assert "within 1 s" in rows[0]["error"]  # not the default 10 s


@pytest.mark.parametrize(
    "url, says", [("adb://R58M123ABC", "the adb server holds the connection"), ("local://", "nothing to connect to")]
)
def test_connect_timeout_is_refused_where_there_is_no_connection_to_time_out(tmp_path, url, says):
    with pytest.raises(
        InventoryError, match="field 'connect_timeout' applies to ssh:// and serial:// devices only"
    ) as e:
        load_inventory(write(tmp_path, f'[[device]]\nname = "a"\nurl = "{url}"\nconnect_timeout = 5\n'))
    assert says in str(e.value)
    # from [defaults] it applies to the devices that have a connection and is no error for the others
    devices = load_inventory(
        write(
            tmp_path,
            f'[defaults]\nconnect_timeout = 5\n[[device]]\nname = "a"\nurl = "{url}"\n'
            '[[device]]\nname = "b"\nurl = "serial:///dev/ttyUSB0"\n',
        )
    )
    assert devices[1].options == {"timeout": 5.0}
