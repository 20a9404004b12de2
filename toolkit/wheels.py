"""Wheels for a device's platform, fetched on this machine: platform tags, ``pip download`` and ``pip index``.

    platform_tags("aarch64", "glibc", "2.36")  -> ["manylinux_2_36_aarch64", ..., "manylinux2014_aarch64"]
    Target(tags, "3.11").download("onnxruntime==1.16.3", dest)  -> the wheel's path (WheelMissing if none)
    Target(tags, "3.11").versions("onnxruntime")  -> ["1.16.3", ...] (newest first; [] when none)
    requirements(wheel)  -> {"numpy": "numpy>=1.24.2", ...} (the wheel's unconditional Requires-Dist)

pip runs with ``--only-binary=:all: --no-deps`` and the device's tags, Python version, implementation and ABI,
so what it picks is what the device's Python can import; this machine's own platform plays no part.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ARCHES = {
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "armv8l": "armv7l",
    "armv7l": "armv7l",
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "i686": "i686",
    "i386": "i686",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
# legacy manylinux names and the glibc they mean
LEGACY = (("manylinux2014", (2, 17)), ("manylinux2010", (2, 12)), ("manylinux1", (2, 5)))
LEGACY_ARCHES = {"manylinux2014": None, "manylinux2010": ("x86_64", "i686"), "manylinux1": ("x86_64", "i686")}


class WheelMissing(Exception):
    """pip found no wheel for the platform; ``versions`` are those it saw for it (maybe empty)."""

    def __init__(self, message: str, versions: list[str]) -> None:
        super().__init__(message)
        self.versions = versions


def _version_pair(text: str | None) -> tuple[int, int] | None:
    nums = re.findall(r"\d+", text or "")
    return (int(nums[0]), int(nums[1])) if len(nums) >= 2 else None


def platform_tags(machine: str | None, libc: str | None, libc_version: str | None) -> list[str]:
    """pip platform tags a Linux device runs, most specific first; [] when PyPI's wheel tags cover none of it
    (an unknown architecture or C library, such as Android's bionic, or a glibc/musl whose version is unknown)."""
    arch = ARCHES.get((machine or "").lower())
    have = _version_pair(libc_version)
    if arch is None or have is None:
        return []
    if libc == "glibc":
        tags = [f"manylinux_{have[0]}_{minor}_{arch}" for minor in range(have[1], 4, -1)] if have[0] == 2 else []
        for name, needs in LEGACY:
            arches = LEGACY_ARCHES[name]
            if have >= needs and (arches is None or arch in arches):
                tags.append(f"{name}_{arch}")
        return tags
    if libc == "musl":
        return [f"musllinux_{have[0]}_{minor}_{arch}" for minor in range(have[1], 0, -1)] if have[0] == 1 else []
    return []


def requirements(wheel: str | Path) -> dict[str, str]:
    """``{normalised name: requirement}`` of a wheel's Requires-Dist lines without an environment marker."""
    with zipfile.ZipFile(wheel) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    out = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:") or ";" in line:
            continue
        spec = line.split(":", 1)[1].strip().replace("(", "").replace(")", "").replace(" ", "")
        name = re.match(r"[A-Za-z0-9._-]+", spec)
        if name:
            out[normalise(name.group(0))] = spec
    return out


def normalise(name: str) -> str:
    """A package or module name compared as pip does (``Foo_bar`` == ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Target:
    """A device platform as pip targets it."""

    tags: list[str]
    python: str  # "3.11"
    implementation: str = "cp"

    @property
    def abi(self) -> str:
        return self.implementation + self.python.replace(".", "")

    def describe(self) -> str:
        return f"{', '.join(self.tags[:1] + self.tags[-1:])} (and {len(self.tags)} tags between), CPython {self.python}"

    def pip_args(self) -> list[str]:
        args = ["--only-binary=:all:"]
        for tag in self.tags:
            args += ["--platform", tag]
        return args + ["--python-version", self.python, "--implementation", self.implementation, "--abi", self.abi]

    def cached(self, requirement: str, dest: Path) -> Path | None:
        """The newest wheel in ``dest`` that satisfies ``requirement`` and runs on this platform, or None."""
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import InvalidWheelFilename, parse_wheel_filename

        try:
            req = Requirement(requirement)
        except InvalidRequirement:
            return None
        pythons = {self.abi, f"py{self.python.split('.')[0]}", f"py{self.python.replace('.', '')}"}
        found = []
        for wheel in dest.glob("*.whl") if dest.is_dir() else []:
            try:
                name, version, _, tags = parse_wheel_filename(wheel.name)
            except InvalidWheelFilename:
                continue
            if normalise(name) != normalise(req.name) or not req.specifier.contains(version, prereleases=True):
                continue
            if any(
                t.platform in self.tags + ["any"] and t.interpreter in pythons and t.abi in (self.abi, "abi3", "none")
                for t in tags
            ):
                found.append((version, wheel))
        return max(found)[1] if found else None

    def download(self, requirement: str, dest: Path, timeout: float = 900) -> Path:
        """Fetch the wheel of ``requirement`` (``name==version`` or ``name>=...``) into ``dest``; its path. A wheel
        already in ``dest`` that satisfies it is used as it is: a host with no network sets devices up from its
        cache."""
        hit = self.cached(requirement, dest)
        if hit is not None:
            return hit
        dest.mkdir(parents=True, exist_ok=True)
        before = set(dest.glob("*.whl"))
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
        p = subprocess.run(cmd + self.pip_args() + [requirement], capture_output=True, text=True, timeout=timeout)
        said = (p.stderr + p.stdout).strip()
        if p.returncode != 0:
            seen = re.search(r"\(from versions: ([^)]*)\)", said)
            versions = [v.strip() for v in seen.group(1).split(",") if v.strip() not in ("", "none")] if seen else []
            if "No matching distribution" in said or "Could not find a version" in said:
                error = [line for line in said.splitlines() if line.startswith("ERROR")] or said.splitlines()[-1:]
                raise WheelMissing(error[-1].replace("ERROR: ", ""), list(reversed(versions)))
            raise OSError(f"pip download {requirement} failed: {said[-800:]}")
        name = normalise(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))  # type: ignore[union-attr]
        wheels = [w for w in dest.glob("*.whl") if normalise(w.name.split("-")[0]) == name]
        saved = re.findall(r"(?:Saved|File was already downloaded) (\S+\.whl)", said)
        if saved:
            return Path(saved[-1])
        fresh = [w for w in wheels if w not in before]
        if fresh or wheels:
            return max(fresh or wheels, key=lambda w: w.stat().st_mtime)
        raise OSError(f"pip download {requirement} saved no wheel in {dest}: {said[-400:]}")

    def versions(self, package: str, timeout: float = 300) -> list[str]:
        """Versions of ``package`` with a wheel for this platform, newest first ([] when none or pip cannot say)."""
        cmd = [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check"]
        try:
            p = subprocess.run(cmd + self.pip_args() + [package], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            return []
        found = re.search(r"Available versions: (.*)", p.stdout)
        return [v.strip() for v in found.group(1).split(",")] if p.returncode == 0 and found else []


__all__ = ["Target", "WheelMissing", "normalise", "platform_tags", "requirements"]
