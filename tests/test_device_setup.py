"""``edgekit device setup`` and ``deploy --setup``: a device with an empty Python and no network made able to
run a bundle (wheels for its platform downloaded on this machine, pushed and unpacked there)."""

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from harness import one_json, run_cli

from edgekit.wheels import Target, normalise, platform_tags, requirements
from edgekit_agent.__main__ import use_site

# -- the platform tags of a device (fast) -------------------------------------------------------------------------


def test_glibc_aarch64_tags_go_from_the_device_glibc_down_to_manylinux2014():
    tags = platform_tags("aarch64", "glibc", "2.36")
    assert tags[0] == "manylinux_2_36_aarch64"
    assert "manylinux_2_28_aarch64" in tags and "manylinux_2_17_aarch64" in tags
    assert tags[-1] == "manylinux2014_aarch64"
    assert not any(t.startswith(("manylinux1", "manylinux2010", "musllinux")) for t in tags)
    assert platform_tags("arm64", "glibc", "2.36") == tags


def test_an_old_glibc_gets_only_the_tags_it_can_run():
    tags = platform_tags("x86_64", "glibc", "2.12")
    assert tags[0] == "manylinux_2_12_x86_64"
    assert "manylinux2010_x86_64" in tags and "manylinux1_x86_64" in tags
    assert "manylinux2014_x86_64" not in tags and "manylinux_2_17_x86_64" not in tags
    assert "manylinux2014_x86_64" in platform_tags("AMD64", "glibc", "2.31")


def test_musl_gets_musllinux_tags():
    assert platform_tags("aarch64", "musl", "1.2.4") == ["musllinux_1_2_aarch64", "musllinux_1_1_aarch64"]


@pytest.mark.parametrize(
    "machine, libc, version", [("aarch64", "bionic", "34"), ("sparc64", "glibc", "2.36"), ("x86_64", "glibc", None)]
)
def test_platforms_without_wheel_tags_get_none(machine, libc, version):
    assert platform_tags(machine, libc, version) == []


def test_pip_targets_the_device_python_not_this_one():
    args = Target(["manylinux_2_17_aarch64", "manylinux2014_aarch64"], "3.9").pip_args()
    assert args[0] == "--only-binary=:all:"
    assert args.count("--platform") == 2
    assert args[args.index("--python-version") + 1] == "3.9"
    assert args[args.index("--abi") + 1] == "cp39" and args[args.index("--implementation") + 1] == "cp"


def test_requirements_are_the_unconditional_requires_dist(tmp_path):
    wheel = tmp_path / "rt-1.0-cp311-cp311-manylinux2014_aarch64.whl"
    meta = (
        "Name: rt\nVersion: 1.0\nRequires-Dist: numpy (>=1.24.2)\nRequires-Dist: Flat_Buffers\n"
        'Requires-Dist: pytest ; extra == "test"\n'
    )
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("rt-1.0.dist-info/METADATA", meta)
    assert requirements(wheel) == {"numpy": "numpy>=1.24.2", "flat-buffers": "Flat_Buffers"}
    assert normalise("Flat_Buffers") == normalise("flat.buffers") == "flat-buffers"


def test_the_agent_imports_the_set_up_site_first(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    use_site(str(tmp_path))  # no site yet: nothing changes
    assert os.environ["PYTHONPATH"] == "/elsewhere"
    (tmp_path / "site").mkdir()
    use_site(str(tmp_path))
    use_site(str(tmp_path))
    site = str(tmp_path / "site")
    assert sys.path.count(site) == 1 and sys.path.index(site) <= 1
    assert os.environ["PYTHONPATH"] == site + os.pathsep + "/elsewhere"


# -- devices with an empty Python (e2e: PyPI reachable from this machine, not from the device) -------------------


@pytest.fixture(scope="module")
def arm64_bare(tmp_path_factory):
    """The arm64 userland's Python run with -S: neither numpy nor onnxruntime imports."""
    from harness import arm64

    try:
        root, info = arm64.ensure_rootfs()
    except arm64.RootfsUnavailable as e:
        pytest.skip(f"no arm64 userland: {e}")
    wrapper = arm64.python_wrapper(tmp_path_factory.mktemp("arm64-bare") / "python3-aarch64", root, bare=True)
    p = subprocess.run([str(wrapper), "-c", "import numpy"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0, "the bare arm64 Python should have no numpy"
    return wrapper, info


@pytest.mark.slow
def test_an_empty_arm64_python_is_set_up_offline_then_serves(agent_roots, arm64_bare, tiny_bundle, sshd):
    """The emulated arm64 device reached over SSH (a real sshd on loopback), its Python without numpy or runtime."""
    wrapper, info = arm64_bare
    root = agent_roots("arm64-bare", python=str(wrapper))
    keys = ["--ssh-key", sshd.client_key, "--known-hosts", sshd.known_hosts, "--ssh-config", "/dev/null"]
    device = ["--ssh", f"{sshd.user}@{sshd.host}:{sshd.port}", *keys, "--device-python", wrapper, "--device-root", root]
    # The version the userland's ONNX Runtime runs under qemu-user (newer aarch64 builds crash the emulator).
    p = run_cli("device", "setup", tiny_bundle, "--version", info["onnxruntime"], *device, "--json", check=0)
    r = one_json(p.stdout)
    assert r["platform"]["machine"] == "aarch64" and r["platform"]["python"] == info["python"]
    assert r["version"] == info["onnxruntime"]
    assert {x["name"] for x in r["installed"]} == {"onnxruntime", "numpy"}
    assert r["bundle"]["name"] == "tiny"
    record = json.loads((root / "site" / "edgekit-setup.json").read_text())
    assert record["runtime"] == {"name": "onnxruntime", "version": info["onnxruntime"]}
    cache = Path(os.environ["EDGEKIT_CACHE_DIR"]) / "wheels"
    for pkg in record["packages"]:  # the wheels kept in this machine's cache are the ones recorded
        wheel = next(cache.glob(f"cp{info['python'].replace('.', '')}-manylinux_2_*_aarch64/{pkg['wheel']}"))
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == pkg["sha256"]
    assert not (root / "site.partial").exists()
    # The agent, started by the bare Python, imports the runtime from ROOT/site and serves the bundle.
    p = run_cli("deploy", tiny_bundle, *device, "--runs", 5, "--warmup", 1, "--json", check=0)
    d = one_json(p.stdout)
    assert d["device"]["machine"] == "aarch64" and d["runtime_version"] == info["onnxruntime"]
    assert d["device_fidelity"]["passed"] is True, d["device_fidelity"]
    # Set up again: the runtime is there, nothing is downloaded or pushed.
    again = one_json(
        run_cli("device", "setup", "--backend", "ort", "--version", info["onnxruntime"], *device, "--json").stdout
    )
    assert again["installed"] == [] and again["version"] == info["onnxruntime"]


@pytest.mark.slow
def test_a_platform_without_a_wheel_is_named_and_nothing_is_installed(agent_roots, arm64_bare, tiny_bundle):
    wrapper, _ = arm64_bare
    root = agent_roots("arm64-nowheel", python=str(wrapper))
    p = run_cli(
        "device", "setup", tiny_bundle, "--backend", "paddlelite", "--local", "--device-python", wrapper,
        "--device-root", root,
    )  # fmt: skip
    assert p.returncode != 0
    err = p.stderr
    assert "no paddlelite wheel for" in err and "aarch64" in err and "manylinux2014_aarch64" in err, err
    assert "Backends the profile host lists with wheels for it:" in err and "ort (onnxruntime" in err, err
    assert "prebuilt paddlelite library" in err, err
    assert "Traceback" not in err
    assert not (root / "site").exists() and not (root / "site.partial").exists()


@pytest.mark.slow
def test_deploy_setup_fills_an_empty_venv_then_serves(agent_roots, tiny_bundle, tmp_path):
    from harness.pythons import find_python, missing

    base = find_python("3.12")
    if base is None:
        pytest.skip(missing("3.12"))
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import numpy"], capture_output=True).returncode != 0
    root = agent_roots("empty-venv", python=str(python))
    device = ["--local", "--device-python", python, "--device-root", root]
    p = run_cli("deploy", tiny_bundle, *device, "--setup", "--runs", 5, "--warmup", 1, "--json", check=0)
    r = one_json(p.stdout)
    built = json.loads((tiny_bundle / "manifest.json").read_text())["runtime"]["version"]
    assert r["runtime_version"] == built
    assert not [w for w in r["warnings"] if "was built and checked with" in w], r["warnings"]
    assert r["device_fidelity"]["passed"] is True
    assert json.loads((root / "site" / "edgekit-setup.json").read_text())["runtime"]["version"] == built
    # Another version, with the agent running: it is stopped, the site replaced, the agent started again.
    target = Target(platform_tags(*_host_platform()), "3.12")
    other = next((v for v in target.versions("onnxruntime") if v != built), None)
    if other is None:
        pytest.skip("no other onnxruntime release with a wheel for Python 3.12 here")
    s = one_json(run_cli("device", "setup", "--backend", "ort", "--version", other, *device, "--json", check=0).stdout)
    assert s["version"] == other and {x["name"] for x in s["installed"]} == {"onnxruntime", "numpy"}
    b = one_json(run_cli("bench", tiny_bundle, *device, "--runs", 3, "--warmup", 1, "--json", check=0).stdout)
    assert b["runtime_version"] == other


def _host_platform():
    import platform

    from edgekit_agent.probe import libc

    c = libc()
    return platform.machine(), c["name"], c["version"]


def test_a_cached_wheel_is_used_without_pip(tmp_path, monkeypatch):
    """A wheel of the cache that satisfies the requirement and runs on the platform is used as it is (a host with no
    network sets devices up from its cache); the newest such; another platform's or Python's is not."""
    t = Target(platform_tags("aarch64", "glibc", "2.36"), "3.11")
    for name in (
        "onnxruntime-1.16.3-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
        "onnxruntime-1.17.1-cp311-cp311-manylinux_2_27_x86_64.whl",  # another machine
        "onnxruntime-1.18.0-cp310-cp310-manylinux_2_17_aarch64.whl",  # another Python
        "numpy-1.26.4-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
        "numpy-1.24.4-cp311-cp311-manylinux_2_17_aarch64.whl",
        "numpy-2.1.0-cp311-cp311-manylinux_2_17_aarch64.whl",
        "coloredlogs-15.0.1-py2.py3-none-any.whl",
    ):
        (tmp_path / name).write_bytes(b"")

    def no_pip(*a, **k):
        raise AssertionError("pip was run for a cached wheel")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert t.download("onnxruntime==1.16.3", tmp_path).name.startswith("onnxruntime-1.16.3-")
    assert t.download("numpy>=1.21.6,<2", tmp_path).name.startswith("numpy-1.26.4-")
    assert t.download("numpy>=1.21.6", tmp_path).name.startswith("numpy-2.1.0-")
    assert t.download("coloredlogs", tmp_path).name.startswith("coloredlogs-")
    assert t.cached("onnxruntime==1.18.0", tmp_path) is None and t.cached("onnxruntime==1.17.1", tmp_path) is None
