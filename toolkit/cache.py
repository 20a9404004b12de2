"""Content-addressed build cache.

The key hashes everything a build depends on (source model bytes, profile data,
backend, precision, options, data files, edgekit and runtime versions). A hit copies
the cached bundle instead of converting again.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from .bundle import MANIFEST, replace_dir, staging_dir
from .model import file_sha256


def cache_root() -> Path:
    env = os.environ.get("EDGEKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgekit"


def path_digest(path: str | Path | None) -> str | None:
    """sha256 of a data file, or of a folder's file names and contents."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        return file_sha256(p)
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(str(f.relative_to(p)).encode())
        h.update(file_sha256(f).encode())
    return h.hexdigest()


def key(parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def lookup(k: str) -> Path | None:
    """A cached bundle whose files still match their hashes; a damaged entry is dropped."""
    from .bundle import load
    from .errors import BundleError

    d = cache_root() / "builds" / k
    if not (d / MANIFEST).is_file():
        return None
    try:
        load(d)
    except BundleError:
        shutil.rmtree(d, ignore_errors=True)
        return None
    return d


def store(k: str, bundle_dir: str | Path) -> Path:
    target = cache_root() / "builds" / k
    staged = staging_dir(target)
    shutil.rmtree(staged)
    shutil.copytree(bundle_dir, staged)
    replace_dir(staged, target)
    return target
