"""Finding an interpreter of a version a tool environment accepts (PATH, pyenv, uv)."""

import glob
import os
import shutil
import subprocess
from pathlib import Path

from ..errors import BackendUnavailable
from .spec import ToolEnvSpec


def _probe(exe: str | Path) -> tuple[str, str] | None:
    """``(real executable, "3.12.1")`` if ``exe`` runs, else None (pyenv shims of unselected versions fail)."""
    try:
        r = subprocess.run(
            [str(exe), "-I", "-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    lines = r.stdout.split()
    if len(lines) < 2 or not lines[0]:
        return None
    return lines[0], lines[1]


def _candidates(version: str) -> list[str]:
    """Places an interpreter of ``version`` ("3.12") may be, in order of preference."""
    found = []
    w = shutil.which(f"python{version}")
    if w:
        found.append(w)
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found += sorted(glob.glob(os.path.join(pyenv, "versions", f"{version}*", "bin", f"python{version}")), reverse=True)
    uv = os.environ.get("UV_PYTHON_INSTALL_DIR") or str(Path.home() / ".local" / "share" / "uv" / "python")
    found += sorted(glob.glob(os.path.join(uv, f"cpython-{version}*", "bin", f"python{version}")), reverse=True)
    return found


def _version_ok(full: str, version: str) -> bool:
    return full == version or full.startswith(version + ".")


def find_python(spec: ToolEnvSpec) -> str:
    """An interpreter of one of ``spec.pythons`` (best first), or BackendUnavailable saying how to get one."""
    for version in spec.pythons:
        for exe in _candidates(version):
            p = _probe(exe)
            if p and _version_ok(p[1], version):
                return p[0]
    want = " or ".join(spec.pythons)
    first = spec.pythons[0]
    raise BackendUnavailable(
        f"the {spec.name} tool environment ({spec.purpose}) needs Python {want}, and none was found on PATH "
        f"(python{first}), under pyenv or uv. Install one: `pyenv install {first}`, `uv python install {first}`, "
        f"or your distribution's python{first} package (with its venv module), then run "
        f"`edgekit backends install {spec.name}`"
    )
