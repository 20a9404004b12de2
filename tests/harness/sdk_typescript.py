"""The TypeScript SDK (sdk_bindings/typescript) built for the tests: its contract runner and its own unit tests.

The package's sources are copied into the build folder, where ``npm ci`` installs the compiler (the npm package
``typescript``, with npm's cache in the repository's ``.cache/npm``, never in HOME) and ``tsc`` compiles the
library (first on its own, without Node's types, so it stays browser-safe), the runner and the tests into ``dist``.
A build whose sources did not change is reused.
"""

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

from .paths import ROOT

PACKAGE = ROOT / "sdk_bindings" / "typescript"
#: What a build copies: the package's manifest, lock file and compiler settings, and its source folders.
SOURCES = (
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "tsconfig.lib.json",
    "src",
    "node",
    "test",
    "runner",
    "scripts",
)
OPENAPI = ROOT / "on_device_agent" / "openapi.json"
NPM_CACHE = ROOT / ".cache" / "npm"
MIN_NODE = 18  # Debian 12 ships 18.19; the SDK is tested on 18 and 20


class BuildError(Exception):
    """npm or tsc failed (not a missing tool: the harness must not take it for one)."""


def tool(name: str) -> str:
    """The path of ``node`` or ``npm``; RuntimeError naming it when it is missing or too old."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: the TypeScript SDK needs Node {MIN_NODE}+ and npm (Debian: nodejs, npm)")
    if name == "node":
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
        m = re.match(r"v(\d+)\.", version)
        if not m or int(m.group(1)) < MIN_NODE:
            raise RuntimeError(f"node {version or '?'} at {path} is too old: the TypeScript SDK needs Node {MIN_NODE}+")
    return path


def _files() -> Dict[str, bytes]:
    out = {}
    for name in SOURCES:
        path = PACKAGE / name
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                out[f.relative_to(PACKAGE).as_posix()] = f.read_bytes()
    return out


def _digest(files: Dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel, data in sorted(files.items()):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def _run(argv: List[str], cwd: Path, what: str) -> None:
    env = dict(os.environ, npm_config_cache=str(NPM_CACHE), npm_config_update_notifier="false")
    env.update(npm_config_fund="false", npm_config_audit="false")
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        output = proc.stdout[-4000:] + proc.stderr[-4000:]
        raise BuildError(f"{what} failed (exit {proc.returncode}) in {cwd}:\n{output}")


def build(build_dir: Path) -> Path:
    """The package compiled under ``build_dir/typescript`` (its ``dist/`` holds the SDK, the runner and the
    tests); returns that folder."""
    node, npm = tool("node"), tool("npm")
    out = Path(build_dir) / "typescript"
    files = _files()
    digest = _digest(files)
    stamp = out / ".built"
    if stamp.exists() and stamp.read_text() == digest:
        return out
    lock = hashlib.sha256(files["package.json"] + files["package-lock.json"]).hexdigest()
    installed = out / "node_modules" / ".installed"
    if out.exists():
        for entry in out.iterdir():  # sources from an earlier build, not its node_modules
            if entry.name != "node_modules":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    if not (installed.exists() and installed.read_text() == lock):
        _run([npm, "ci", "--ignore-scripts", "--prefer-offline"], out, "npm ci")
        installed.write_text(lock)
    tsc = str(out / "node_modules" / "typescript" / "bin" / "tsc")
    _run([node, tsc, "-p", "tsconfig.lib.json", "--noEmit"], out, "tsc (the library without Node's types)")
    _run([node, tsc, "-p", "tsconfig.json"], out, "tsc")
    stamp.write_text(digest)
    return out


def command(build_dir: Path) -> List[str]:
    """The contract runner: ``node dist/runner/runner.js`` (the scenario path is appended)."""
    out = build(build_dir)
    return [tool("node"), str(out / "dist" / "runner" / "runner.js")]


def unit_test_env() -> Dict[str, str]:
    """The environment of the unit tests: the agent's openapi.json, which the generated types are checked against."""
    return dict(os.environ, EDGEKIT_OPENAPI=str(OPENAPI))
