"""Upload a bundle to a device's agent: only what it lacks, resumed where a cut upload stopped, then an atomic
switch (``commit``). Used by :meth:`edgekit.device.Device.install`."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def _prefix_sha256(path: str | Path, n: int) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while n > 0:
            block = f.read(min(1 << 20, n))
            if not block:
                break
            h.update(block)
            n -= len(block)
    return h.hexdigest()


class _ProgressReader:
    def __init__(
        self, f: BinaryIO, name: str, total: int, progress: Callable[[str, int, int], None] | None, start: int = 0
    ) -> None:
        self.f, self.name, self.total, self.progress, self.done = f, name, total, progress, start

    def read(self, n: int | None = -1) -> bytes:
        data = self.f.read(65536 if n is None or n < 0 else min(n, 65536))
        self.done += len(data)
        if self.progress and data:
            self.progress(self.name, self.done, self.total)
        return data


def install(
    device: Any,
    bundle_dir: str | Path,
    manifest: dict[str, Any],
    progress: Callable[[str, int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Send what the device lacks of the bundle, then switch to it atomically.

    An unchanged redeploy sends one small request. Files the device already holds (same
    sha256, in any kept version) are not sent; an upload cut off midway resumes at the
    byte where it stopped. Returns the commit result with a ``transfer`` summary.
    """
    log = log or (lambda m: None)
    name, version = manifest["name"], manifest["id"]
    sent0 = device.client.bytes_sent
    served = {m["name"]: m for m in device.call("listing models", device.client.models)}.get(name)
    if served and served.get("version") == version:
        log(f"{name} {version} is already serving on the device: nothing to send")
        return {
            "name": name,
            "version": version,
            "previous": version,
            "unchanged": True,
            "transfer": {
                "files_sent": 0,
                "files_reused": 0,
                "payload_bytes": 0,
                "resumed_bytes": 0,
                "request_bytes": device.client.bytes_sent - sent0,
            },
        }
    state = device.call("starting the upload", device.client.begin_upload, name, version, manifest)
    if state.get("installed"):
        log(f"{name} {version} is already on the device (a kept version)")
    if state.get("reused"):
        log(f"  {len(state['reused'])} file(s) already on the device, not sent: {', '.join(state['reused'])}")
    partial = state.get("partial") or {}
    partial_sha = state.get("partial_sha256") or {}
    sizes = {f["name"]: f["size"] for f in manifest["files"]}
    asked = [f for f in state.get("missing", []) if f not in sizes]
    if asked:  # only files of this bundle ever leave this machine, whatever the other end asks for
        device.fail("uploading the bundle", f"the agent asked for files that are not in the bundle: {asked[:3]}")
    payload = resumed = 0
    for fname in state.get("missing", []):
        path = os.path.join(bundle_dir, fname)
        size = sizes[fname]
        offset = partial.get(fname, 0)
        if not (
            isinstance(offset, int) and 0 < offset < size and _prefix_sha256(path, offset) == partial_sha.get(fname)
        ):
            offset = 0  # nothing kept, or what the device kept is not this file's beginning: send it whole
        if offset:
            log(f"  resuming {fname} at byte {offset} of {size}")
        with open(path, "rb") as f:
            f.seek(offset)
            device.call(
                f"uploading {fname}",
                device.client.put_file,
                name,
                version,
                fname,
                _ProgressReader(f, fname, size, progress, start=offset),
                length=size - offset,
                offset=offset,
            )
        payload += size - offset
        resumed += offset
    from .signing import signature_of

    signed = signature_of(bundle_dir)  # travels beside the manifest; a device that trusts signers checks it
    extra = {"signature": signed} if signed else {}
    result = device.call(
        "verifying and committing the bundle", device.client.commit, name, version, verify=True, **extra
    )
    log(f"installed {name} {version} (previous: {result.get('previous') or 'none'})")
    if result.get("signed_by"):
        log(f"  signature checked by the device: signed by {result['signed_by']}")
    elif signed:
        log(
            "  notice: the bundle is signed but the device trusts no keys, so it checked nothing; "
            "`edgekit device trust add KEY.pub` makes it install only signed bundles"
        )
    result["transfer"] = {
        "files_sent": len(state.get("missing", [])),
        "files_reused": len(state.get("reused", [])),
        "payload_bytes": payload,
        "resumed_bytes": resumed,
        "request_bytes": device.client.bytes_sent - sent0,
    }
    return result
