"""What exists for a spec, without creating anything (``edgekit backends``, ``doctor``)."""

import glob
import json
from pathlib import Path
from typing import Any, Sequence

from ..errors import BackendUnavailable
from .interpreters import _probe, find_python
from .spec import MARKER, ToolEnvSpec, _env_python, env_dir, root


def _read_marker(d: Path) -> Any:
    try:
        return json.loads((d / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _summary(requirements: Sequence[str], unpinned: Sequence[str] = ()) -> str:
    if not requirements:
        return "no packages"
    pinned = [r for r in requirements if "==" in r]
    n = len(requirements)
    if len(pinned) == n:
        what = f"{requirements[0]} and {n - 1} other packages, all pinned" if n > 1 else f"{requirements[0]} (pinned)"
    else:
        what = f"{requirements[0]} and {n - 1} other packages, {len(pinned)} of them pinned"
    if unpinned:
        what += f"; also installed, not pinned by the spec: {', '.join(unpinned)}"
    return what


def state(spec: ToolEnvSpec) -> dict[str, Any]:
    """What exists for ``spec``, without creating anything."""
    d = env_dir(spec)
    marker = _read_marker(d)
    py = _env_python(d)
    info = {
        "name": spec.name,
        "ready": False,
        "path": str(d),
        "python": None,
        "python_version": None,
        "requirements": list(spec.requirements),
        "detail": "",
    }
    if marker and marker.get("digest") == spec.digest() and py.exists():
        info.update(
            ready=True,
            python=str(py),
            python_version=marker.get("python_version"),
            detail=f"ready: Python {marker.get('python_version')}, "
            f"{_summary(spec.requirements, marker.get('unpinned') or ())} in {d}",
        )
        return info
    try:
        base = find_python(spec)
    except BackendUnavailable as e:
        info["detail"] = str(e)
        info["interpreter_missing"] = True
        return info
    p = _probe(base)
    info["python_version"] = p[1] if p else None
    info["base_python"] = base
    others = [Path(x).name for x in glob.glob(str(root() / f"{spec.name}-*")) if Path(x).is_dir() and Path(x) != d]
    stale = f" (an environment for an older spec exists: {', '.join(others)})" if others else ""
    info["detail"] = (
        f"not created yet: `edgekit backends install {spec.name}` or the first build creates it "
        f"(Python {info['python_version']} at {base}){stale}"
    )
    return info
