"""Device profiles: what a target device is and runs well.

Profiles are TOML files checked against ``device_profiles/schema.json``. The built-in
ones ship in :mod:`edgekit.device_profiles`; users add their own from directories named
in ``EDGEKIT_PROFILE_PATH`` (``os.pathsep``-separated) or passed as ``extra_dirs``. A
user profile with the same name as a built-in one replaces it. ``host`` is not a file:
it is detected from the machine edgekit runs on.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from typing import TYPE_CHECKING, Any, Iterable

import jsonschema

from .errors import ProfileError
from .suggest import did_you_mean

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

HOST = "host"


@dataclass(frozen=True)
class Profile:
    """A validated device profile. ``data`` is the profile as the schema describes it."""

    name: str
    data: dict
    source: str

    @property
    def arch(self) -> str:
        return self.data["cpu"]["arch"]

    @property
    def os_family(self) -> str:
        return self.data["os"]["family"]

    @property
    def threads(self) -> int:
        cpu = self.data["cpu"]
        return cpu.get("performance_cores", cpu["cores"])

    @property
    def build_only(self) -> bool:
        return self.data["agent"]["transport"] == "none"

    def backend(self, name: str) -> dict[str, Any]:
        """The profile's settings for one backend (``{}`` if it has none)."""
        return self.data["runtimes"].get(name, {})

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data, source=self.source)


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(resources.files("edgekit.device_profiles").joinpath("schema.json").read_text())


def effective_schema() -> dict[str, Any]:
    """The schema, with backends registered beyond edgekit's own (``edgekit.converters.register``) allowed."""
    from edgekit_agent.runners.table import TABLE

    base = schema()
    runtimes = base["properties"]["runtimes"]
    extra = [n for n in TABLE.names() if n not in runtimes["properties"]["ranked"]["items"]["enum"]]
    if not extra:
        return base
    runtimes = dict(
        runtimes,
        properties={
            **runtimes["properties"],
            "ranked": dict(
                runtimes["properties"]["ranked"],
                items={"enum": runtimes["properties"]["ranked"]["items"]["enum"] + extra},
            ),
            **{n: {"type": "object"} for n in extra},
        },
    )
    return dict(base, properties=dict(base["properties"], runtimes=runtimes))


def validate(data: dict[str, Any], source: str = "<profile>") -> dict[str, Any]:
    """Check a profile dict against the schema; raise ProfileError naming the field and the reason."""
    validator = jsonschema.Draft202012Validator(effective_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for err in errors[:5]:
            field = ".".join(str(p) for p in err.absolute_path) or "(top level)"
            lines.append(f"  {field}: {err.message}")
        raise ProfileError(f"invalid device profile {source}:\n" + "\n".join(lines))
    return data


def load_file(path: str | Path) -> Profile:
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ProfileError(f"cannot read device profile {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"invalid device profile {path}: not valid TOML ({e})") from None
    validate(data, str(path))
    expected = path.stem
    if data["name"] != expected:
        raise ProfileError(
            f"invalid device profile {path}: name = {data['name']!r} "
            f"but the file is named {expected}.toml; make them match"
        )
    return Profile(data["name"], data, str(path))


def _search_dirs(extra_dirs: Iterable[str | Path] = ()) -> list[Path]:
    dirs = [Path(d) for d in extra_dirs]
    env = os.environ.get("EDGEKIT_PROFILE_PATH", "")
    dirs += [Path(d) for d in env.split(os.pathsep) if d]
    return dirs


def _builtin_files() -> dict[str, Traversable]:
    root = resources.files("edgekit.device_profiles")
    return {Path(e.name).stem: e for e in root.iterdir() if e.name.endswith(".toml")}


def names(extra_dirs: Iterable[str | Path] = ()) -> list[str]:
    found = set(_builtin_files()) | {HOST}
    for d in _search_dirs(extra_dirs):
        if d.is_dir():
            found |= {p.stem for p in d.glob("*.toml")}
    return sorted(found)


def load(name: str, extra_dirs: Iterable[str | Path] = ()) -> Profile:
    """Load a profile by name (or from a ``.toml`` path)."""
    if str(name).endswith(".toml"):
        return load_file(name)
    for d in _search_dirs(extra_dirs):
        candidate = d / f"{name}.toml"
        if candidate.is_file():
            return load_file(candidate)
    if name == HOST:
        return detect_host()
    builtin = _builtin_files()
    if name in builtin:
        with resources.as_file(builtin[name]) as p:
            return load_file(p)
    raise ProfileError(
        f"unknown device profile {name!r}{did_you_mean(name, names(extra_dirs))}. "
        f"Known profiles: {', '.join(names(extra_dirs))}. "
        "Add your own as NAME.toml in a directory listed in EDGEKIT_PROFILE_PATH "
        "(see `edgekit profiles show raspberrypi5` for the shape)."
    )


def load_all(extra_dirs: Iterable[str | Path] = ()) -> list[Profile]:
    return [load(n, extra_dirs) for n in names(extra_dirs)]


# --- host detection -------------------------------------------------------------

_X86_FLAGS = {
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
_ARM_FLAGS = {
    "asimd": "neon",
    "asimdhp": "fp16",
    "asimddp": "dotprod",
    "i8mm": "i8mm",
    "bf16": "bf16",
    "sve": "sve",
    "sve2": "sve2",
    "sme": "sme",
}


def _cpuinfo() -> tuple[set[str], str]:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return set(), ""
    flags, model = set(), ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features"):
            flags |= set(value.split())
        elif key == "model name" and not model:
            model = value.strip()
    return flags, model


def _ram_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 1.0


def _normalise_arch(machine: str) -> str:
    machine = machine.lower()
    if machine in ("amd64", "x86_64"):
        return "x86_64"
    if machine in ("arm64", "aarch64"):
        return "aarch64"
    if machine.startswith("armv7"):
        return "armv7l"
    return machine


def isa_of(arch: str, flags: Iterable[str]) -> list[str]:
    """A CPU's ISA features under the profile names, from its /proc/cpuinfo ``flags`` / ``Features``."""
    table = _X86_FLAGS if arch == "x86_64" else _ARM_FLAGS
    flags = set(flags)
    return sorted({v for k, v in table.items() if k in flags})


def os_family_of(system: str) -> str:
    """The profile's ``os.family`` for a ``platform.system()`` name."""
    system = system.lower()
    return {"darwin": "macos"}.get(system, system if system in ("linux", "windows") else "linux")


def runtimes_for(arch: str, isa: list[str]) -> dict[str, Any]:
    """``[runtimes]`` as this machine's installed backends would run on ``arch`` with ``isa``, best first."""
    from . import converters

    # Each backend says what it runs here (None: not on this machine), in the backend table's order.
    runtimes = {}
    for name, be in converters.all_backends().items():  # type: ignore[attr-defined]
        settings = be.host_settings(arch, isa)
        if settings is not None:
            runtimes[name] = settings
    return {"ranked": list(runtimes), **runtimes}


def detect_host() -> Profile:
    """A profile for the machine edgekit runs on, read from /proc and the installed runtimes."""
    flags, model = _cpuinfo()
    arch = _normalise_arch(platform.machine())
    isa = isa_of(arch, flags)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    data = {
        "schema_version": 1,
        "name": HOST,
        "description": f"This machine ({model or platform.processor() or arch}), detected",
        "os": {"family": os_family_of(platform.system()), "distribution": platform.platform()},
        "cpu": {"arch": arch, "model": model or arch, "cores": cores, "performance_cores": cores, "isa": isa},
        "memory": {"ram_gb": _ram_gb()},
        "accelerators": [],
        "runtimes": runtimes_for(arch, isa),
        "agent": {"transport": "local", "python": "python3", "root": "~/.cache/edgekit/device"},
    }
    validate(data, "host (detected)")
    return Profile(HOST, data, "detected")
