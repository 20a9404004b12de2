"""A new x86 device in three commands, over SSH, with no network on either side.

The device is a network namespace of its own with a real sshd (tests/harness/netns.py) and an empty Python (a venv
without pip, numpy or any runtime); the host side runs in the lab's controller namespace, which reaches the device
and nothing else. The runtime's wheels are fetched once beforehand, where there is network (a lab host that has
its wheel cache); then `edgekit device probe`, `edgekit device setup` and `edgekit deploy` go over SSH only, and
`edgekit profiles create --from-device` writes a profile of it that the schema accepts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from harness import one_json, run_cli

from edgekit import profiles

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab():
    from harness import netns

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"an emulated device needs network namespaces: {reason}")
    with netns.NetnsLab() as lab:
        lab.add_device("ok")
        yield lab


def _in_lab(lab, *args, timeout=600):
    return subprocess.run(
        lab.exec_prefix + [sys.executable, "-m", "edgekit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def test_a_new_x86_device_in_three_commands_over_ssh_with_no_network(lab, agent_roots, tiny_bundle, tmp_path):
    from harness.pythons import find_python, missing

    base = find_python("3.12")
    if base is None:
        pytest.skip(missing("3.12"))
    venv = tmp_path / "device-venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    built = json.loads((tiny_bundle / "manifest.json").read_text())["runtime"]["version"]
    # Where there is network: the wheels into this host's cache (a set-up of a throw-away local Python does it).
    scratch = agent_roots("prefetch", python=str(python))
    run_cli("device", "setup", "--backend", "ort", "--version", built, "--local", "--device-python", python,
            "--device-root", scratch, check=0)  # fmt: skip
    dev = lab.devices[0]
    root = agent_roots("netns-device", python=str(python))
    keys = ["--ssh-key", dev.sshd.client_key, "--known-hosts", dev.sshd.known_hosts, "--ssh-config", "/dev/null"]
    ssh = ["--ssh", f"root@{dev.address}:2222", *keys, "--device-python", python, "--device-root", root]
    took = {}
    t0 = time.perf_counter()
    p = _in_lab(lab, "device", "probe", *ssh, "--json")
    took["probe"] = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    info = one_json(p.stdout)
    assert info["transport"] == "ssh" and info["cpu"]["machine"] == "x86_64"
    assert info["pythons"]["executable"] == str(python)
    t0 = time.perf_counter()
    p = _in_lab(lab, "device", "setup", tiny_bundle, *ssh, "--json")
    took["setup"] = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    r = one_json(p.stdout)
    assert r["version"] == built and {x["name"] for x in r["installed"]} == {"onnxruntime", "numpy"}
    t0 = time.perf_counter()
    p = _in_lab(lab, "deploy", tiny_bundle, *ssh, "--runs", 10, "--warmup", 2, "--json")
    took["deploy"] = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    d = one_json(p.stdout)
    assert d["runtime_version"] == built and d["device_fidelity"]["passed"] is True, d.get("device_fidelity")
    assert d["transport"].startswith("ssh")
    # the agent runs in the device's namespace, not this one
    pid = json.loads((root / "agent" / "state.json").read_text())["pid"]
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink(f"/proc/{os.getpid()}/ns/net")
    p = _in_lab(lab, "profiles", "create", "netnsbox", "--from-device", *ssh, "-o", tmp_path)
    assert p.returncode == 0, p.stderr
    made = profiles.load_file(tmp_path / "netnsbox.toml")  # validated against the schema on load
    assert made.arch == "x86_64" and made.data["cpu"]["cores"] == os.cpu_count()
    print("three commands over SSH (s): " + ", ".join(f"{k} {v:.1f}" for k, v in took.items()))
