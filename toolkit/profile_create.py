"""A device profile written from what :func:`edgekit.probe.device_probe` read on the device.

    profile_from_probe(name, info) -> (data, todos)   the profile dict (validated) and what is left to the user
    profile_toml(data, todos) -> str                  the TOML text, each TODO a comment in its section
    create_profile(name, info, out_dir, force) -> Path

Only what the device said goes in: a field it could not tell is left out (or, where the schema needs one,
the profile is refused with what is missing), and a ``# TODO:`` comment says what to fill in. Accelerators
need a name, APIs and precisions no file on the device gives: those seen (/dev/dri, ICDs, NPU nodes) are
listed as TODOs. The runtimes are those whose wheels exist for the arch: on x86_64 the host's own list.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from . import profiles
from .errors import ProfileError

NAME_PATTERN = "^[a-z0-9][a-z0-9._-]*$"
DEFAULT_ROOT = "~/.cache/edgekit/device"


def _arm_runtimes(arch: str, isa: list[str]) -> dict[str, Any]:
    """CPU settings of the backends whose runtime wheels exist for 32/64-bit ARM Linux."""
    fp16 = "fp16" in isa
    ranked = ["ort", "tflite", "mnn", "openvino"] if arch == "aarch64" else ["ort", "tflite"]
    every = {
        "ort": {"providers": ["CPUExecutionProvider"], "format": "ort", "precisions": ["int8", "fp32"]},
        "tflite": {"delegates": ["xnnpack"], "precisions": ["int8", "fp32"]},
        "mnn": {
            "backend": "CPU",
            "precisions": ["int8", "fp16", "fp32"] if fp16 else ["int8", "fp32"],
            "precision_mode": "low" if fp16 else "normal",
        },
        "openvino": {"device": "CPU", "precisions": ["fp16", "fp32"] if fp16 else ["fp32"], "hint": "LATENCY"},
    }
    return {"ranked": ranked, **{n: every[n] for n in ranked}}


def _cpu(info: dict[str, Any], arch: str, todos: dict[str, list[str]]) -> dict[str, Any]:
    cpu = info.get("cpu") or {}
    cores = cpu.get("count")
    if not cores:
        raise ProfileError("the device did not tell its number of CPUs (/proc/cpuinfo, os.cpu_count()); cannot write")
    out: dict[str, Any] = {"arch": arch}
    android = (info.get("os") or {}).get("android") or {}
    soc = (android.get("properties") or {}).get("ro.soc.model")
    if soc:
        out["soc"] = soc
    else:
        todos["cpu"].append('soc = "..."  (the system on chip; the device did not say)')
    clusters = cpu.get("clusters") or []
    freqs = [c["max_freq_khz"] for c in clusters if c.get("max_freq_khz")]
    parts = []
    for c in clusters:
        what = c.get("core") or (f"CPU part {c['part']}" if c.get("part") else None)
        if what:
            freq = f" @ {c['max_freq_khz'] / 1e6:.2g} GHz" if c.get("max_freq_khz") else ""
            parts.append(f"{len(c['cpus'])}x {what}{freq}")
    model = " + ".join(parts) or cpu.get("model")
    if model:
        out["model"] = model
    out["cores"] = cores
    if len(freqs) == len(clusters) and len(set(freqs)) > 1:
        # big.LITTLE: inference threads go on every cluster but the slowest
        slowest = min(freqs)
        out["performance_cores"] = sum(len(c["cpus"]) for c in clusters if c["max_freq_khz"] != slowest)
    else:
        out["performance_cores"] = cpu.get("usable") or cores
        if len(clusters) > 1:
            todos["cpu"].append("performance_cores: the big cores (cluster frequencies were not readable)")
    if freqs:
        out["max_freq_ghz"] = round(max(freqs) / 1e6, 2)
    else:
        todos["cpu"].append("max_freq_ghz = ...  (cpufreq was not readable)")
    out["isa"] = profiles.isa_of(arch, cpu.get("flags") or [])
    return out


def _accelerator_todos(info: dict[str, Any]) -> list[str]:
    acc = info.get("accelerators") or {}
    seen = [p for key in ("dri", "vulkan_icds", "opencl_icds", "apex", "rknpu", "nvidia") for p in acc.get(key) or []]
    android = (info.get("os") or {}).get("android") or {}
    level = android.get("nnapi_feature_level")
    lines = [f"seen on the device: {p}" for p in seen]
    if level:
        lines.append(f"NNAPI feature level {level} (Android API {android['properties'].get('ro.build.version.sdk')})")
    if lines:
        lines.insert(0, "add [[accelerators]] entries (kind, name, apis, precisions) for what the device has:")
    return lines


def profile_from_probe(
    name: str, info: dict[str, Any], python: str = "python3", root: str = DEFAULT_ROOT
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The profile ``name`` for the probed device (validated) and the TODOs per section."""
    if not re.match(NAME_PATTERN, name):
        raise ProfileError(f"invalid profile name {name!r}: use lowercase letters, digits, '.', '_' and '-'")
    todos: dict[str, list[str]] = {"top": [], "os": [], "cpu": [], "memory": [], "accelerators": [], "agent": []}
    system = info.get("os") or {}
    machine = (info.get("cpu") or {}).get("machine") or ""
    arch = profiles._normalise_arch(machine)
    if arch not in ("aarch64", "armv7l", "x86_64"):
        raise ProfileError(f"the device's architecture {machine or '(unknown)'!r} is not one edgekit profiles describe")
    android = system.get("android")
    family = "android" if android else profiles.os_family_of(system.get("system") or "linux")
    os_section: dict[str, Any] = {"family": family}
    props = (android or {}).get("properties") or {}
    distribution = system.get("distribution") or (
        f"Android (API {props['ro.build.version.sdk']})" if props.get("ro.build.version.sdk") else None
    )
    if distribution:
        os_section["distribution"] = distribution
    else:
        todos["os"].append('distribution = "..."  (no /etc/os-release)')
    cpu = _cpu(info, arch, todos)
    total_kb = (info.get("memory") or {}).get("total_kb")
    if not total_kb:
        raise ProfileError("the device did not tell its memory size (/proc/meminfo MemTotal); cannot write a profile")
    product = props.get("ro.product.model")
    data: dict[str, Any] = {
        "schema_version": 1,
        "name": name,
        "description": f"{product or cpu.get('model') or arch} ({distribution or family}), read from the device",
        "os": os_section,
        "cpu": cpu,
        "memory": {"ram_gb": round(total_kb / 1024 / 1024, 1)},
        "accelerators": [],
        "runtimes": _arm_runtimes(arch, cpu["isa"]) if arch != "x86_64" else profiles.runtimes_for(arch, cpu["isa"]),
        "agent": {"transport": info.get("transport") or "ssh", "python": python, "root": root},
    }
    todos["accelerators"] = _accelerator_todos(info)
    todos["top"].append('sources = ["..."]  (vendor pages or datasheets for what the device could not tell)')
    profiles.validate(data, f"{name} (from the device)")
    return data, todos


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {type(v).__name__}")


def _table(header: str | None, values: dict[str, Any], todos: list[str]) -> list[str]:
    lines = [f"[{header}]"] if header else []
    lines += [f"{k} = {_value(v)}" for k, v in values.items() if not isinstance(v, dict)]
    lines += [f"# TODO: {t}" for t in todos]
    return lines + [""]


def profile_toml(data: dict[str, Any], todos: dict[str, list[str]]) -> str:
    """The profile as TOML, each TODO a comment in its section (the text loads back to ``data``)."""
    top = {k: v for k, v in data.items() if not isinstance(v, (dict, list)) or k == "sources"}
    lines = ["# Written by `edgekit profiles create --from-device`: check it, and fill in the TODOs."]
    lines += _table(None, top, todos.get("top", []))
    # an array of tables cannot be empty in TOML's table syntax: accelerators stays a top-level key
    lines += _table(None, {"accelerators": data["accelerators"]}, todos.get("accelerators", []))
    for section in ("os", "cpu", "memory"):
        lines += _table(section, data[section], todos.get(section, []))
    runtimes = data["runtimes"]
    lines += _table("runtimes", {"ranked": runtimes["ranked"]}, [])
    for backend in runtimes["ranked"]:
        lines += _table(f"runtimes.{backend}", runtimes[backend], [])
    lines += _table("agent", data["agent"], todos.get("agent", []))
    return "\n".join(lines).rstrip() + "\n"


def create_profile(
    name: str,
    info: dict[str, Any],
    out_dir: str | Path = ".",
    force: bool = False,
    python: str = "python3",
    root: str = DEFAULT_ROOT,
) -> Path:
    """Write ``<out_dir>/<name>.toml`` for the probed device; refuse to replace a file unless ``force``."""
    data, todos = profile_from_probe(name, info, python, root)
    path = Path(out_dir) / f"{name}.toml"
    if path.exists() and not force:
        raise ProfileError(f"{path} exists: pass --force to replace it, or choose another name or -o DIR")
    text = profile_toml(data, todos)
    if profiles.validate(profiles.tomllib.loads(text), str(path)) != data:  # the text must load back to the data
        raise ProfileError(f"internal error: the TOML written for {name} does not load back to the profile")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # never a half-written profile
    return path
