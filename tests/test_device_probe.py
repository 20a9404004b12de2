"""``edgekit device probe`` and ``edgekit profiles create --from-device``: the probe script's parsers on
hand-written /proc/cpuinfo texts, then the real probe on this machine, over SSH, and on an arm64 userland,
compared with what each device really is."""

import os
import platform
import sys

import pytest
from harness import one_json, run_cli

from edgekit import profiles
from edgekit.errors import ProfileError
from edgekit.profile_create import create_profile, profile_from_probe
from edgekit_agent import probe

X86_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512_vnni avx512bw hypervisor

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512_vnni avx512bw
"""

A76_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"


def arm_cpuinfo(parts):
    blocks = [
        f"processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: {A76_FEATURES}\n"  # A55 and A76: both Armv8.2-A
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: {part}\nCPU revision\t: 1\n"
        for i, part in enumerate(parts)
    ]
    return "\n".join(blocks) + "\nHardware\t: BCM2835\nRevision\t: d04170\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n"


def test_x86_flags_map_to_feature_names():
    common, cpus = probe.parse_cpuinfo(X86_CPUINFO)
    flags = probe.cpu_flags(common, cpus, "x86_64")
    assert "hypervisor" not in flags  # only what every CPU has
    assert probe.features(flags) == ["avx", "avx2", "avx512_vnni", "avx512f", "f16c", "fma", "sse4_2"]
    assert probe.cpu_model(common, cpus) == "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    assert probe.describes("x86_64", common, cpus) and not probe.describes("aarch64", common, cpus)


def test_cortex_a76_features_and_cluster():
    common, cpus = probe.parse_cpuinfo(arm_cpuinfo(["0xd0b"] * 4))
    flags = probe.cpu_flags(common, cpus, "aarch64")
    assert probe.features(flags) == ["dotprod", "fp16", "neon", "rdm"]  # Armv8.2-A: no i8mm, no sve
    assert common["Model"] == "Raspberry Pi 5 Model B Rev 1.0"
    (cluster,) = probe.clusters(cpus, {i: 2400000 for i in range(4)})
    assert cluster == {"cpus": [0, 1, 2, 3], "core": "Cortex-A76", "part": "0xd0b", "implementer": "0x41",
                       "max_freq_khz": 2400000}  # fmt: skip
    assert probe.describes("aarch64", common, cpus)


def big_little_info(transport="ssh"):
    """A probe of an RK3588-like board: 4x A55 @ 1.8 GHz + 4x A76 @ 2.4 GHz."""
    common, cpus = probe.parse_cpuinfo(arm_cpuinfo(["0xd05"] * 4 + ["0xd0b"] * 4))
    freqs = {i: 1800000 if i < 4 else 2400000 for i in range(8)}
    flags = probe.cpu_flags(common, cpus, "aarch64")
    return {
        "os": {"system": "Linux", "distribution": "Debian GNU/Linux 12 (bookworm)", "android": None},
        "cpu": {
            "machine": "aarch64",
            "model": None,
            "count": 8,
            "usable": 8,
            "flags": flags,
            "features": probe.features(flags),
            "clusters": probe.clusters(cpus, freqs),
        },  # fmt: skip
        "memory": {"total_kb": 16 * 1024 * 1024, "available_kb": None},
        "accelerators": {"dri": ["/dev/dri/renderD128"], "rknpu": ["/sys/class/misc/rknpu"]},
        "transport": transport,
    }


def test_big_little_clusters_make_a_valid_profile(tmp_path):
    info = big_little_info()
    assert [c["core"] for c in info["cpu"]["clusters"]] == ["Cortex-A76", "Cortex-A55"]  # the biggest first
    data, todos = profile_from_probe("rk-board", info)
    cpu = data["cpu"]
    assert cpu["model"] == "4x Cortex-A76 @ 2.4 GHz + 4x Cortex-A55 @ 1.8 GHz"
    assert (cpu["arch"], cpu["cores"], cpu["performance_cores"], cpu["max_freq_ghz"]) == ("aarch64", 8, 4, 2.4)
    assert cpu["isa"] == ["dotprod", "fp16", "neon"]
    assert data["runtimes"]["ranked"] == ["ort", "tflite", "mnn", "openvino"]
    assert data["agent"]["transport"] == "ssh" and data["accelerators"] == []
    assert any("/dev/dri/renderD128" in t for t in todos["accelerators"])
    path = create_profile("rk-board", info, tmp_path)
    text = path.read_text()
    assert "# TODO: seen on the device: /sys/class/misc/rknpu" in text and "# TODO: soc" in text
    assert profiles.load_file(path).data == data  # round-trips through the schema
    with pytest.raises(ProfileError, match="exists: pass --force"):
        create_profile("rk-board", info, tmp_path)
    assert path.read_text() == text


def test_what_cannot_be_profiled_is_refused_clearly(tmp_path):
    info = big_little_info()
    with pytest.raises(ProfileError, match="invalid profile name"):
        profile_from_probe("My Board", info)
    info["cpu"]["machine"] = "riscv64"
    with pytest.raises(ProfileError, match="'riscv64' is not one edgekit profiles describe"):
        create_profile("rv", info, tmp_path)
    info = big_little_info()
    info["memory"]["total_kb"] = None
    with pytest.raises(ProfileError, match="memory size"):
        create_profile("nomem", info, tmp_path)
    assert list(tmp_path.iterdir()) == []


GETPROP = """#!/bin/sh
case "$1" in
  ro.soc.model) echo SM8650 ;;
  ro.soc.manufacturer) echo QTI ;;
  ro.product.model) echo SM-S921B ;;
  ro.build.version.sdk) echo 34 ;;
  *) echo ;;
esac
"""


def test_android_properties_through_getprop(tmp_path):
    """A device with ``getprop`` (Android): its properties, the NNAPI level of its API level, os.family android."""
    import json
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "getprop").write_text(GETPROP)
    (bin_dir / "getprop").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    p = subprocess.run([sys.executable, probe.__file__], capture_output=True, text=True, env=env, check=True)
    info = json.loads(p.stdout)
    android = info["os"]["android"]
    assert android["properties"]["ro.soc.model"] == "SM8650" and android["properties"]["ro.hardware"] is None
    assert android["nnapi_feature_level"] == 7
    data, todos = profile_from_probe("phone", dict(info, transport="adb"))
    assert data["os"]["family"] == "android" and data["cpu"]["soc"] == "SM8650"
    assert data["description"].startswith("SM-S921B (") and data["agent"]["transport"] == "adb"
    assert any("NNAPI feature level 7 (Android API 34)" in t for t in todos["accelerators"])


def mem_total_kb():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))


@pytest.mark.e2e
def test_probe_local_is_this_machine(tmp_path):
    root = tmp_path / "device"
    info = one_json(run_cli("device", "probe", "--local", "--device-root", root, "--json", check=0).stdout)
    assert info["transport"] == "local"
    assert info["cpu"]["machine"] == platform.machine()
    assert info["cpu"]["count"] == os.cpu_count()
    assert abs(info["memory"]["total_kb"] - mem_total_kb()) <= mem_total_kb() / 100
    assert info["cpu"]["features"] == profiles.detect_host().data["cpu"]["isa"]
    assert info["disk"]["path"] == str(root) and info["disk"]["free_bytes"] > 0
    assert info["libc"]["name"] == (platform.libc_ver()[0] or None)
    text = run_cli("device", "probe", "--local", "--device-root", root, check=0).stdout
    assert f"arch          {platform.machine()}" in text


@pytest.mark.e2e
def test_profiles_create_from_the_local_device(tmp_path):
    args = (
        "profiles",
        "create",
        "thisbox",
        "--from-device",
        "--local",
        "--device-root",
        tmp_path / "d",
        "-o",
        tmp_path,
    )
    run_cli(*args, check=0)
    made = profiles.load_file(tmp_path / "thisbox.toml")
    host = profiles.detect_host()
    assert made.arch == host.arch and made.data["cpu"]["cores"] == os.cpu_count()
    assert made.threads == host.threads and made.data["cpu"]["isa"] == host.data["cpu"]["isa"]
    assert made.data["runtimes"]["ranked"] == host.data["runtimes"]["ranked"]
    before = (tmp_path / "thisbox.toml").read_text()
    p = run_cli(*args, check=1)
    assert "exists: pass --force" in p.stderr and (tmp_path / "thisbox.toml").read_text() == before
    run_cli(*args, "--force", check=0)
    p = run_cli("profiles", "create", "thisbox", "--local", check=1)
    assert "--from-device" in p.stderr
    p = run_cli("profiles", "list", "--from-device", "--local", check=1)
    assert "--from-device applies to `edgekit profiles create" in p.stderr


@pytest.mark.e2e
def test_probe_over_ssh_with_the_oldest_python(sshd, tmp_path):
    from harness.pythons import find_python

    from edgekit import device_probe
    from edgekit.device import open_device

    python = find_python("3.7") or sys.executable
    root = tmp_path / "remote"
    with open_device(
        "ssh",
        f"{sshd.user}@{sshd.host}:{sshd.port}",
        device_python=python,
        device_root=str(root),
        key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    ) as dev:
        info = device_probe(dev)
    assert info["transport"] == "ssh" and (root / "probe.py").is_file()
    assert (info["cpu"]["machine"], info["cpu"]["count"]) == (platform.machine(), os.cpu_count())
    assert info["pythons"]["executable"] == python


@pytest.mark.e2e
def test_probe_over_a_serial_line(tmp_path):
    pytest.importorskip("serial")
    from harness.serialdev import Cable

    home = tmp_path / "device-home"
    home.mkdir()
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    with Cable(env={"PATH": path, "HOME": str(home), "PS1": "$ ", "ENV": ""}) as cable:
        p = run_cli("device", "probe", "--serial", cable.port, "--device-root", tmp_path / "d", "--json", check=0)
    info = one_json(p.stdout)
    assert info["transport"] == "serial" and info["cpu"]["machine"] == platform.machine()
    assert abs(info["memory"]["total_kb"] - mem_total_kb()) <= mem_total_kb() / 100


@pytest.mark.slow
@pytest.mark.e2e
def test_probe_an_arm64_cortex_a76(tmp_path):
    """qemu-user emulating a Cortex-A76: the features come from AT_HWCAP (its /proc/cpuinfo is the host's)."""
    from harness import arm64

    try:
        root, _ = arm64.ensure_rootfs()
    except arm64.RootfsUnavailable as e:
        pytest.skip(f"no arm64 userland: {e}")
    wrapper = arm64.python_wrapper(tmp_path / "python3-aarch64", root)
    p = run_cli(
        "device", "probe", "--local", "--device-python", wrapper, "--device-root", tmp_path / "d", "--json",
        check=0, env={"QEMU_CPU": "cortex-a76"},
    )  # fmt: skip
    cpu = one_json(p.stdout)["cpu"]
    assert cpu["machine"] == "aarch64"
    assert cpu["features"] == ["dotprod", "fp16", "neon", "rdm"]
    assert cpu["model"] is None  # the host's cpuinfo is not taken for the device's
