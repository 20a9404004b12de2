"""What a device is, read from the device itself: ``python3 probe.py`` prints one JSON object.

Self-contained (standard library only, Python 3.7+) so it runs on a bare device, alone or from the agent
zipapp. Every field comes from something read on the device; what cannot be read is ``None`` (or an empty
list), never a guess:

    os           system, kernel release, distribution (/etc/os-release), Android properties (getprop)
    cpu          machine, model, logical CPUs, raw flags (/proc/cpuinfo, AT_HWCAP on aarch64), features
                 under edgekit's names, clusters (by ARM "CPU part" and cpufreq cpuinfo_max_freq)
    memory       MemTotal / MemAvailable (/proc/meminfo)
    libc         glibc (confstr) or musl (/lib/ld-musl-*)
    pythons      python3.N on PATH with their versions
    accelerators /dev/dri, Vulkan and OpenCL ICDs, /dev/apex_*, /dev/rknpu, /dev/nvidia*
    thermal      /sys/class/thermal/thermal_zone*
    disk         free and total bytes of the filesystem holding the device root
"""

import glob
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

PROBE_VERSION = 1

# cpuinfo flag -> edgekit's feature name (the ISA names of device profiles)
X86_FEATURES = {
    "sse4_2": "sse4_2",
    "avx": "avx",
    "avx2": "avx2",
    "fma": "fma",
    "f16c": "f16c",
    "avx512f": "avx512f",
    "avx512_vnni": "avx512_vnni",
    "avx_vnni": "avx_vnni",
    "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16",
    "amx_tile": "amx",
}
ARM_FEATURES = {
    "asimd": "neon",
    "neon": "neon",  # 32-bit ARM kernels
    "fphp": "fp16",
    "asimdhp": "fp16",
    "asimddp": "dotprod",
    "asimdrdm": "rdm",
    "i8mm": "i8mm",
    "bf16": "bf16",
    "sve": "sve",
    "sve2": "sve2",
    "sme": "sme",
}
# aarch64 getauxval(AT_HWCAP) / AT_HWCAP2 bits (linux/arch/arm64/include/uapi/asm/hwcap.h), as cpuinfo names them
HWCAP_BITS = {0: "fp", 1: "asimd", 9: "fphp", 10: "asimdhp", 12: "asimdrdm", 20: "asimddp", 22: "sve"}
HWCAP2_BITS = {1: "sve2", 13: "i8mm", 14: "bf16", 23: "sme"}
AT_HWCAP, AT_HWCAP2 = 16, 26
# ARM Ltd (implementer 0x41) "CPU part" numbers
ARM_PARTS = {
    "0xd03": "Cortex-A53",
    "0xd04": "Cortex-A35",
    "0xd05": "Cortex-A55",
    "0xd07": "Cortex-A57",
    "0xd08": "Cortex-A72",
    "0xd09": "Cortex-A73",
    "0xd0a": "Cortex-A75",
    "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1",
    "0xd0d": "Cortex-A77",
    "0xd40": "Neoverse-V1",
    "0xd41": "Cortex-A78",
    "0xd44": "Cortex-X1",
    "0xd46": "Cortex-A510",
    "0xd47": "Cortex-A710",
    "0xd48": "Cortex-X2",
    "0xd49": "Neoverse-N2",
    "0xd4d": "Cortex-A715",
    "0xd4e": "Cortex-X3",
    "0xd4f": "Neoverse-V2",
    "0xd80": "Cortex-A520",
    "0xd81": "Cortex-A720",
    "0xd82": "Cortex-X4",
}
ANDROID_PROPS = ("ro.soc.model", "ro.soc.manufacturer", "ro.product.model", "ro.build.version.sdk", "ro.hardware")
# Android API level -> the NNAPI feature level its platform ships (the updatable NNAPI module may be newer)
NNAPI_LEVELS = {27: 1, 28: 2, 29: 3, 30: 4, 31: 5, 32: 5, 33: 6, 34: 7, 35: 8}


def read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


# -- /proc/cpuinfo -------------------------------------------------------------------
def parse_cpuinfo(text: Optional[str]) -> Tuple[Dict[str, str], List[Dict[str, Any]]]:
    """``(common, processors)``: the key/values outside any processor block and one dict per ``processor``."""
    common: Dict[str, str] = {}
    processors: List[Dict[str, Any]] = []
    current: Optional[Dict[str, Any]] = None
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor" and value.isdigit():
            current = {"processor": int(value)}
            processors.append(current)
        elif current is not None and key not in ("Hardware", "Revision", "Serial", "Model"):
            current.setdefault(key, value)
        else:
            common.setdefault(key, value)
    return common, processors


def is_arm(machine: Optional[str]) -> bool:
    machine = (machine or "").lower()
    return machine.startswith("arm") or machine == "aarch64"


def cpu_flags(common: Dict[str, str], processors: List[Dict[str, Any]], machine: Optional[str] = None) -> List[str]:
    """The flags every CPU has (x86 ``flags``, ARM ``Features``: the key of ``machine``'s kind if given), sorted."""
    keys = (("Features",) if is_arm(machine) else ("flags",)) if machine else ("flags", "Features")
    sets = [set(next((p[k] for k in keys if k in p), "").split()) for p in processors]
    sets = [s for s in sets if s]
    shared = next((common[k] for k in keys if common.get(k)), None)
    if not sets and shared:
        sets = [set(shared.split())]
    return sorted(set.intersection(*sets)) if sets else []


def describes(machine: Optional[str], common: Dict[str, str], processors: List[Dict[str, Any]]) -> bool:
    """Whether /proc/cpuinfo is this CPU's: under user-mode emulation (qemu-user) it is the host's."""
    keys = set(common).union(*processors) if processors else set(common)
    if is_arm(machine):
        return bool(keys & {"Features", "CPU implementer", "CPU architecture"})
    if (machine or "").lower() in ("x86_64", "amd64", "i386", "i686"):
        return bool(keys & {"flags", "vendor_id"})
    return True


def features(flags: Iterable[str]) -> List[str]:
    """Flags under edgekit's names (``asimddp`` -> ``dotprod``, ``avx512_vnni`` stays), sorted."""
    table = dict(X86_FEATURES, **ARM_FEATURES)
    return sorted({table[f] for f in flags if f in table})


def cpu_model(common: Dict[str, str], processors: List[Dict[str, Any]]) -> Optional[str]:
    first = processors[0] if processors else {}
    for key in ("model name", "Processor", "cpu model", "uarch"):
        value = first.get(key) or common.get(key)
        if value:
            return value
    return common.get("Hardware") or common.get("Model")


def clusters(processors: List[Dict[str, Any]], max_freq_khz: Dict[int, int]) -> List[Dict[str, Any]]:
    """CPUs grouped by (core type, max frequency), the biggest first: ``[{"cpus", "core", "part", "max_freq_khz"}]``.

    ``max_freq_khz`` maps a CPU index to its cpufreq ``cpuinfo_max_freq`` (absent where not readable)."""
    groups: Dict[Tuple[Optional[str], Optional[int]], Dict[str, Any]] = {}
    indices = [p["processor"] for p in processors] or sorted(max_freq_khz)
    by_index = {p["processor"]: p for p in processors}
    for cpu in indices:
        p = by_index.get(cpu, {})
        part = p.get("CPU part")
        implementer = p.get("CPU implementer")
        core = ARM_PARTS.get(part.lower()) if part and implementer == "0x41" else None
        key = (part, max_freq_khz.get(cpu))
        g = groups.setdefault(
            key, {"cpus": [], "core": core, "part": part, "implementer": implementer, "max_freq_khz": key[1]}
        )
        g["cpus"].append(cpu)
    return sorted(groups.values(), key=lambda g: (-(g["max_freq_khz"] or 0), g["cpus"][0]))


def cpufreq_max() -> Dict[int, int]:
    out = {}
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"):
        m = re.search(r"/cpu(\d+)/cpufreq/", path)
        value = (read(path) or "").strip()
        if m and value.isdigit():
            out[int(m.group(1))] = int(value)
    return out


def auxv_flags() -> List[str]:
    """aarch64 flags from this process's AT_HWCAP/AT_HWCAP2 (what getauxval returns), or [] elsewhere."""
    if platform.machine().lower() not in ("aarch64", "arm64"):
        return []
    try:
        with open("/proc/self/auxv", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    hwcap = hwcap2 = 0
    for i in range(0, len(raw) - 15, 16):
        key, value = struct.unpack("<QQ", raw[i : i + 16])
        if key == AT_HWCAP:
            hwcap = value
        elif key == AT_HWCAP2:
            hwcap2 = value
    names = [n for bit, n in HWCAP_BITS.items() if hwcap >> bit & 1]
    return names + [n for bit, n in HWCAP2_BITS.items() if hwcap2 >> bit & 1]


def cpu() -> Dict[str, Any]:
    machine = platform.machine()
    common, processors = parse_cpuinfo(read("/proc/cpuinfo"))
    if not describes(machine, common, processors):
        common, processors = {}, []  # another CPU's cpuinfo: nothing in it is this one's
    flags = set(cpu_flags(common, processors, machine)) | set(auxv_flags())
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "machine": machine or None,
        "model": cpu_model(common, processors),
        "count": os.cpu_count(),
        "usable": usable,
        "flags": sorted(flags),
        "features": features(flags),
        "clusters": clusters(processors, cpufreq_max()),
    }


# -- the rest ------------------------------------------------------------------------
def meminfo(text: Optional[str]) -> Dict[str, Optional[int]]:
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("MemTotal:", "MemAvailable:") and parts[1].isdigit():
            out[parts[0][:-1]] = int(parts[1])
    return {"total_kb": out.get("MemTotal"), "available_kb": out.get("MemAvailable")}


def os_release(text: Optional[str]) -> Dict[str, str]:
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def getprop(name: str) -> Optional[str]:
    try:
        r = subprocess.run(["getprop", name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.decode("utf-8", "replace").strip() or None


def android() -> Optional[Dict[str, Any]]:
    if not shutil.which("getprop"):
        return None
    props = {name: getprop(name) for name in ANDROID_PROPS}
    sdk = props.get("ro.build.version.sdk")
    level = NNAPI_LEVELS.get(int(sdk)) if sdk and sdk.isdigit() else None  # a level past the table: None
    return {"properties": props, "nnapi_feature_level": level}


def operating_system() -> Dict[str, Any]:
    release = os_release(read("/etc/os-release"))
    return {
        "system": platform.system() or None,
        "kernel": platform.release() or None,
        "distribution": release.get("PRETTY_NAME"),
        "id": release.get("ID"),
        "version_id": release.get("VERSION_ID"),
        "android": android(),
    }


def libc() -> Dict[str, Optional[str]]:
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        glibc = None
    if glibc and glibc.startswith("glibc "):
        return {"name": "glibc", "version": glibc.split()[1]}
    musl = sorted(glob.glob("/lib/ld-musl-*.so.1"))
    if musl:
        version = None
        try:  # the musl loader prints "musl libc (arch)\nVersion 1.2.4" on stderr
            r = subprocess.run([musl[0]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
            m = re.search(r"Version ([0-9.]+)", r.stderr.decode("utf-8", "replace"))
            version = m.group(1) if m else None
        except (OSError, subprocess.SubprocessError):
            pass
        return {"name": "musl", "version": version}
    name, version = platform.libc_ver()
    return {"name": name or None, "version": version or None}


def pythons() -> Dict[str, Any]:
    found, seen = [], set()
    names = ["python3"] + ["python3.%d" % minor for minor in range(6, 20)]
    for name in names:
        path = shutil.which(name)
        if not path or os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        try:
            r = subprocess.run(
                [path, "-c", "import platform;print(platform.python_version())"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=20,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        version = r.stdout.decode("utf-8", "replace").strip()
        if r.returncode == 0 and version:  # a launcher that runs no Python (a pyenv shim of none) is not one
            found.append({"name": name, "path": path, "version": version})
    return {"running": platform.python_version(), "executable": sys.executable or None, "found": found}


def accelerators() -> Dict[str, List[str]]:
    icd_dirs = ("/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
    return {
        "dri": sorted(glob.glob("/dev/dri/*")),
        "vulkan_icds": sorted(p for d in icd_dirs for p in glob.glob(d + "/*.json")),
        "opencl_icds": sorted(glob.glob("/etc/OpenCL/vendors/*.icd")),
        "apex": sorted(glob.glob("/dev/apex_*")),
        "rknpu": sorted(glob.glob("/dev/rknpu*") + glob.glob("/sys/class/misc/rknpu*")),
        "nvidia": sorted(glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/nvhost-*")),
    }


def thermal() -> List[Dict[str, Any]]:
    zones = []
    for path in sorted(glob.glob("/sys/class/thermal/thermal_zone*"), key=lambda p: int(re.sub(r"\D", "", p) or 0)):
        kind = (read(path + "/type") or "").strip() or None
        temp = (read(path + "/temp") or "").strip()
        value = int(temp) / 1000.0 if re.match(r"^-?\d+$", temp) else None
        zones.append({"zone": os.path.basename(path), "type": kind, "temp_c": value})
    return zones


def disk(path: str) -> Dict[str, Any]:
    path = os.path.expanduser(path)
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return {"path": path, "free_bytes": None, "total_bytes": None}
    return {"path": path, "free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}


def probe(root: str = "~") -> Dict[str, Any]:
    return {
        "probe_version": PROBE_VERSION,
        "os": operating_system(),
        "cpu": cpu(),
        "memory": meminfo(read("/proc/meminfo")),
        "libc": libc(),
        "pythons": pythons(),
        "accelerators": accelerators(),
        "thermal": thermal(),
        "disk": disk(root),
    }


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = argv[argv.index("--root") + 1] if "--root" in argv[:-1] else "~"
    print(json.dumps(probe(root), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
