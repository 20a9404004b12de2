"""What an environment holds, and adopting an existing environment that already holds exactly a new spec's pins."""

import glob
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from .interpreters import _version_ok
from .lock import _Lock
from .spec import MARKER, ToolEnvSpec, _env_python, root
from .status import _read_marker


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python: str | Path) -> dict[str, str] | None:
    """``{normalized name: version}`` of what the environment of ``python`` holds (pip itself left out)."""
    r = subprocess.run(
        [str(python), "-I", "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        return None
    out = {}
    for line in r.stdout.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            out[_norm(name.strip())] = version.strip()
    out.pop("pip", None)
    return out


def _pins(spec: ToolEnvSpec) -> dict[str, str]:
    return {_norm(r.split("==", 1)[0]): r.split("==", 1)[1].strip() for r in spec.requirements if "==" in r}


def _unpinned(spec: ToolEnvSpec, have: dict[str, str]) -> list[str]:
    """Installed packages the spec does not pin (setuptools/wheel that venv itself put there do not count)."""
    pins = _pins(spec)
    return sorted(f"{n}=={v}" for n, v in have.items() if n not in pins and n not in ("setuptools", "wheel"))


def _relocate(d: Path) -> None:
    """Point the console scripts of an environment made or renamed into ``d`` (their ``#!`` names the directory they
    were installed in: the temporary one, or the adopted environment's) at ``d``'s interpreter."""
    where = re.compile(rb"#!" + re.escape(str(root()).encode()) + rb"/[^/\s]+(/bin/python[0-9.]*)")
    for f in (d / "bin").iterdir() if (d / "bin").is_dir() else ():
        try:
            if f.is_symlink() or not f.is_file() or f.stat().st_size > 1 << 20:
                continue
            data = f.read_bytes()
            m = where.match(data)
            if m and not data.startswith(b"#!" + str(d).encode() + b"/"):
                f.write_bytes(b"#!" + str(d).encode() + m.group(1) + data[m.end() :])
        except OSError:
            pass


def _adopt(spec: ToolEnvSpec, d: Path, log: Callable[[str], Any]) -> bool:
    """Rename an existing environment of ``spec.name`` whose installed packages are exactly ``spec``'s pins (and whose
    interpreter is one the spec accepts, and which passes its check) into ``d``. Returns True if one was adopted."""
    pins = _pins(spec)
    if len(pins) != len(spec.requirements):  # only a fully pinned spec says exactly what an environment must hold
        return False
    for x in sorted(glob.glob(str(root() / f"{spec.name}-*"))):
        other = Path(x)
        if other == d or not re.fullmatch(re.escape(spec.name) + r"-[0-9a-f]{12}", other.name):
            continue
        marker = _read_marker(other)
        py = _env_python(other)
        if (
            not marker
            or not py.exists()
            or not any(_version_ok(marker.get("python_version", ""), v) for v in spec.pythons)
        ):
            continue
        with _Lock(root() / f".{other.name}.lock"):
            have = installed(py)
            if have is None or {n: v for n, v in have.items() if n in pins} != pins or _unpinned(spec, have):
                continue
            r = subprocess.run(
                [str(py), "-I", "-c", spec.check],
                capture_output=True,
                text=True,
                env=dict(os.environ, **dict(spec.env)),
            )
            if r.returncode != 0:
                continue
            marker.update(
                name=spec.name,
                digest=spec.digest(),
                spec=asdict(spec),
                adopted_from=other.name,
                adopted=time.strftime("%Y-%m-%dT%H:%M:%S"),
                unpinned=[],
            )
            (other / MARKER).write_text(json.dumps(marker, indent=2, default=list))
            if d.exists():  # a leftover without a valid marker
                shutil.rmtree(d)
            os.rename(other, d)
            _relocate(d)
        log(
            f"{spec.name} tool environment: {other.name} already holds exactly the new spec's {len(pins)} pinned "
            f"packages; adopted it as {d.name} (nothing installed)"
        )
        return True
    return False
