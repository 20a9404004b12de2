"""Versions of one bundle for the pull tests: a copy with an extra file of random bytes is another version (its
own bundle id) of the same model, large enough to cut a transfer in the middle of."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from edgekit import bundle as bundle_mod


def variant(source: Path, out: Path, pad_bytes: int, seed: int) -> Path:
    shutil.copytree(source, out)
    pad = out / "pad.bin"
    pad.write_bytes(bytes((seed * 7919 + i * 31) % 251 for i in range(pad_bytes)))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"].append(bundle_mod.file_entry(pad, "pad.bin", "padding"))
    manifest["id"] = bundle_mod.bundle_id(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    bundle_mod.load(out)
    return out
