"""Bundles: the directory a build writes and a deploy ships.

    OUTDIR/
      manifest.json      what the agent verifies: files with size and sha256, inputs and
                         outputs, backend, precision, profile, versions, operator set
      model.onnx|.ort    the model the runner loads (name in manifest["model"])
      required_operators.config, sample_inputs.npz, ...
      report.json        the build report (schema: edgekit.report)
      report.txt         the same, for people

A bundle is written to a temporary sibling directory and renamed into place, so a
failed build never leaves a half-written OUTDIR and never damages a previous one.
"""

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

from .errors import BundleError
from .model import file_sha256

_R = TypeVar("_R")

MANIFEST_SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
REPORT_JSON = "report.json"
REPORT_TXT = "report.txt"


def file_entry(path: Path, name: str, role: str) -> dict[str, Any]:
    path = Path(path)
    return {"name": name, "role": role, "size": path.stat().st_size, "sha256": file_sha256(path)}


def bundle_id(manifest: dict[str, Any]) -> str:
    """Content id: same files, same target -> same id (the version the device installs)."""
    key = {
        "files": sorted((f["name"], f["sha256"]) for f in manifest["files"]),
        "backend": manifest["backend"],
        "precision": manifest["precision"],
        "profile": manifest["profile"],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def write_json(path: str | Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def replace_dir(staged: str | Path, target: str | Path) -> None:
    """Move a finished directory onto ``target``; an existing target is swapped out, then removed."""
    staged, target = Path(staged), Path(target)
    old = None
    if target.exists():
        if not (target / MANIFEST).exists() and any(target.iterdir()):
            raise BundleError(f"{target} exists and is not an edgekit bundle; choose another -o directory or remove it")
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, old)
    os.replace(staged, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check_output(target: str | Path) -> None:
    """Refuse, before any work, an output path that cannot become a bundle directory."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise BundleError(f"{target} is a file; -o needs a directory (a new one, or an existing bundle to replace)")
    if target.is_dir() and not (target / MANIFEST).exists() and any(target.iterdir()):
        raise BundleError(f"{target} exists and is not an edgekit bundle; choose another -o directory or empty it")


def staging_dir(target: str | Path) -> Path:
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staged.chmod(0o755)
    return staged


def publish_copy(source: str | Path, target: str | Path, edit: Callable[[Path], _R]) -> _R:
    """Put a copy of bundle ``source`` at ``target``, changed by ``edit(staged_dir)`` first, atomically.

    Returns what ``edit`` returns; on any failure ``target`` is left as it was.
    """
    staged = staging_dir(target)
    try:
        shutil.rmtree(staged)
        shutil.copytree(source, staged)
        result = edit(staged)
        replace_dir(staged, target)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return result


def check_manifest(manifest: object, mf: Path) -> None:
    """The manifest's shape, before anything reads a field of it: what is wrong and what to do."""
    if not isinstance(manifest, dict):
        raise BundleError(f"{mf} must hold a JSON object, not {type(manifest).__name__}; rebuild the bundle")
    version = manifest.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > MANIFEST_SCHEMA_VERSION:
        raise BundleError(
            f"{mf} has schema_version {version}, newer than the {MANIFEST_SCHEMA_VERSION} this edgekit reads: "
            "the bundle was made by a newer edgekit; upgrade edgekit (pip install -U edgekit)"
        )
    if version != MANIFEST_SCHEMA_VERSION:
        raise BundleError(
            f"{mf} has schema_version {version!r}; this edgekit reads {MANIFEST_SCHEMA_VERSION}: rebuild the bundle"
        )
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise BundleError(f"{mf} has no 'files' list (the files the bundle ships); rebuild the bundle")
    for f in files:
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("size"), int)):
            raise BundleError(f"{mf}: every 'files' entry needs a name, a size and a sha256; rebuild the bundle")
        if (
            not isinstance(f.get("sha256"), str)
            or f["name"] in ("", ".", "..")
            or "/" in f["name"]
            or "\\" in f["name"]
        ):
            raise BundleError(
                f"{mf}: file entry {f['name']!r} has no sha256 or is not a plain file name; rebuild the bundle"
            )
    for key in ("id", "backend", "model"):
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise BundleError(f"{mf} has no {key!r}; rebuild the bundle")


def load(path: str | Path) -> dict[str, Any]:
    """Read and verify a bundle: every manifest file present with its size and sha256."""
    path = Path(path)
    mf = path / MANIFEST
    if not mf.is_file():
        build = "`edgekit build MODEL --profile P -o DIR` writes one"
        if not path.exists():
            raise BundleError(f"{path}: no such directory, so not an edgekit bundle; {build}, then pass DIR")
        if not path.is_dir():
            raise BundleError(f"{path} is a file, not a bundle directory; {build}, then pass DIR")
        raise BundleError(
            f"{path} is a directory but not an edgekit bundle (no {MANIFEST}): pass the directory that "
            f"`edgekit build ... -o DIR` wrote (a new DIR: build refuses to write into an existing one)"
        )
    try:
        manifest = json.loads(mf.read_text())
    except ValueError as e:
        raise BundleError(f"{mf} is not valid JSON ({e}); rebuild the bundle") from None
    check_manifest(manifest, mf)
    for f in manifest["files"]:
        fp = path / f["name"]
        if not fp.is_file():
            raise BundleError(f"bundle {path} is missing {f['name']}; rebuild it")
        if fp.stat().st_size != f["size"] or file_sha256(fp) != f["sha256"]:
            raise BundleError(
                f"bundle file {fp} does not match its sha256 in the manifest (modified or corrupt); rebuild the bundle"
            )
    return manifest
