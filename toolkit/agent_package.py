"""Build the agent's zipapp (``edgekit-agent.pyz``) from the installed packages.

The zip is deterministic (sorted entries, fixed timestamps), so its sha256 only
changes when the agent's code does, and a deploy skips re-uploading an unchanged agent.

``EDGEKIT_AGENT_TREE=DIR`` builds it from another edgekit checkout instead (its ``on_device_agent/`` and
``sdk_bindings/python/edgekit_sdk/``): ``scripts/attacks_vs_old_agent.py`` runs the attack tests against an
older agent this way.
"""

import hashlib
import io
import os
import threading
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

PACKAGES = ("edgekit_agent", "edgekit_sdk")
TREE_ENV = "EDGEKIT_AGENT_TREE"
TREE_DIRS = {"edgekit_agent": "on_device_agent", "edgekit_sdk": "sdk_bindings/python/edgekit_sdk"}
MAIN = (
    "import sys\n"
    "if sys.version_info < (3, 7):\n"
    "    sys.exit('edgekit-agent needs Python 3.7 or newer, this is ' + sys.version.split()[0])\n"
    "from edgekit_agent.__main__ import main\n"
    "sys.exit(main())\n"
)
FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def _source(package: str) -> Any:
    """The package's directory: installed, or in the checkout ``EDGEKIT_AGENT_TREE`` names."""
    tree = os.environ.get(TREE_ENV)
    if not tree:
        return resources.files(package)
    path = Path(tree) / TREE_DIRS[package]
    if not path.is_dir():
        raise FileNotFoundError(f"{TREE_ENV}={tree}: no {TREE_DIRS[package]}/ there (an edgekit checkout has one)")
    return path


def _files(package: str) -> Iterator[tuple[str, bytes]]:
    root = _source(package)
    stack = [(root, package)]
    while stack:
        node, prefix = stack.pop()
        for entry in node.iterdir():
            if entry.is_dir():
                if entry.name != "__pycache__":
                    stack.append((entry, f"{prefix}/{entry.name}"))
            elif entry.name.endswith((".py", ".json")):
                yield f"{prefix}/{entry.name}", entry.read_bytes()


def build_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        entries = [("__main__.py", MAIN.encode())]
        for package in PACKAGES:
            entries += list(_files(package))
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return b"#!/usr/bin/env python3\n" + buf.getvalue()


def build(directory: str | Path) -> tuple[Path, str]:
    """Write the zipapp into ``directory``; return ``(path, sha256)``."""
    data = build_bytes()
    digest = hashlib.sha256(data).hexdigest()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"edgekit-agent-{digest[:12]}.pyz"
    if not path.exists():
        tmp = path.with_name(
            f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"
        )  # parallel deploys build it at once
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.replace(path)
    return path, digest
