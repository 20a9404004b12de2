"""The store's names, manifests, errors and file primitives (shared by the store and its uploads)."""

import errno
import hashlib
import os
import re
import stat
from typing import Any

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
RESERVED = ("manifest.json", "manifest.json.sig")
KEEP_VERSIONS = 3
CHUNK = 1 << 16
STALE_STAGING_S = 3600.0  # an upload untouched this long is abandoned; disk full removes it
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class StoreError(Exception):
    """A request the store refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        Exception.__init__(self, message)
        self.status = status


def disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in DISK_FULL


def fsync_dir(path: str) -> None:
    """Make a rename or new entry in ``path`` durable (a power cut must not undo an install)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def regular(path: str) -> bool:
    """A regular file, not a symlink (the store never follows links it did not make)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_name(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value) or ".." in value:
        raise StoreError("invalid %s %r: use letters, digits, '.', '_' and '-'" % (kind, value))
    return value


def check_manifest(manifest: Any) -> None:
    """The manifest decides which files the store writes and loads: check every name in it."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list) or not manifest["files"]:
        raise StoreError("manifest must be an object with a non-empty 'files' list")
    names = []
    for f in manifest["files"]:
        if not isinstance(f, dict) or not {"name", "size", "sha256"} <= set(f):
            raise StoreError("each manifest file needs name, size and sha256")
        check_name("file name", f["name"])
        if f["name"] in RESERVED or f["name"].endswith((".part", ".link")):
            raise StoreError("file name %r is reserved" % f["name"])
        if f["name"] in names:
            raise StoreError("file %r is listed twice in the manifest" % f["name"])
        if not isinstance(f["size"], int) or f["size"] < 0 or not re.match(r"[0-9a-f]{64}\Z", str(f["sha256"])):
            raise StoreError("file %r: size must be a non-negative integer and sha256 64 hex digits" % f["name"])
        names.append(f["name"])
    if manifest.get("model") not in names:
        raise StoreError("manifest 'model' must name one of its files")
