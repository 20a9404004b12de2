"""``edgekit publish BUNDLE --store DIR|s3://...``: a bundle written content-addressed, for devices to pull.

Blobs go first (each file of the bundle under its sha256; ones the store already holds are not written again),
then the manifest under its own sha256 (the bundle's digest) with the bundle's signature beside it when it is signed
(``edgekit sign``: ``manifests/sha256/DIGEST.sig``), then the index ``bundles/ID.json``: a reader that finds an
index or a manifest finds every blob it names, and its signature.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from edgekit_agent.pull_layout import blob_path, index_path, manifest_path, signature_path

from .. import bundle as bundle_mod
from ..signing import SIGNATURE
from .stores import ObjectStore, open_store


def publish(bundle_dir: str | Path, store: str | Path | ObjectStore, endpoint: str | None = None) -> dict[str, Any]:
    """Publish ``bundle_dir`` to ``store`` (a directory, ``s3://BUCKET/PREFIX`` with ``endpoint``, or an
    :class:`ObjectStore`). Returns ``{"digest", "id", "name", "store", "signed", "blobs_written",
    "blobs_present", "bytes_written"}``; ``digest`` is what ``edgekit fleet desire`` takes."""
    bundle_dir = Path(bundle_dir)
    manifest = bundle_mod.load(bundle_dir)  # every file checked against its sha256 before anything is written
    target = open_store(store, endpoint) if isinstance(store, (str, Path)) else store
    raw = (bundle_dir / bundle_mod.MANIFEST).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    written = present = nbytes = 0
    for entry in manifest["files"]:
        key = blob_path(entry["sha256"])
        if target.has(key, entry["size"], entry["sha256"]):
            present += 1
            continue
        target.put_file(key, bundle_dir / entry["name"])
        written += 1
        nbytes += entry["size"]
    signature = bundle_dir / SIGNATURE
    signed = signature.is_file()
    if signed:  # before the manifest: a reader that finds the manifest finds its signature
        target.put_bytes(signature_path(digest), signature.read_bytes(), "text/plain")
    if not target.has(manifest_path(digest), len(raw)):
        target.put_bytes(manifest_path(digest), raw, "application/json")
    index = {
        "id": manifest["id"],
        "name": manifest.get("name"),
        "digest": f"sha256:{digest}",
        "backend": manifest["backend"],
        "precision": manifest.get("precision"),
        "profile": manifest.get("profile"),
        "signed": signed,
        "files": len(manifest["files"]),
        "bytes": sum(f["size"] for f in manifest["files"]),
        "published": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    target.put_bytes(index_path(manifest["id"]), (json.dumps(index, indent=2) + "\n").encode(), "application/json")
    return {
        "digest": f"sha256:{digest}",
        "id": manifest["id"],
        "name": manifest.get("name"),
        "store": target.description,
        "signed": signed,
        "blobs_written": written,
        "blobs_present": present,
        "bytes_written": nbytes,
    }
