"""Receiving a version: staged file by file (each verified on arrival), then installed atomically.

A transfer that breaks off leaves only ``staging``: ``current`` keeps serving the previous version,
and the next upload of the same version resumes. A full disk removes the upload and says so (507).
"""

import errno
import hashlib
import json
import os
import shutil
import time
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, Optional, Sequence, Tuple

from .storefiles import (
    CHUNK,
    STALE_STAGING_S,
    StoreError,
    check_manifest,
    check_name,
    disk_full,
    fsync_dir,
    regular,
    sha256_file,
)
from .trust import SIGNATURE

if TYPE_CHECKING:
    import threading

    from .trust import Trust


class Uploads(object):
    """The upload half of :class:`edgekit_agent.store.Store` (a mixin: it uses the store's paths and lock)."""

    if TYPE_CHECKING:  # what the store provides
        models_dir: str
        seal: Callable[[str, Dict[str, Any]], None]
        trust: Trust
        _lock: threading.RLock

        def _model_dir(self, name: str) -> str: ...
        def _intact(self, directory: str) -> bool: ...
        def current_version(self, name: str) -> Optional[str]: ...
        def _point_current(self, name: str, version: str, how: str = "install") -> None: ...
        def _prune(self, name: str, keep: Sequence[Optional[str]]) -> None: ...

    # -- upload -------------------------------------------------------------
    def begin(self, name: str, version: str, manifest: Any) -> Dict[str, Any]:
        try:
            return self._begin(name, version, manifest)
        except OSError as e:
            if not disk_full(e):
                raise
            raise self._disk_full(name, version, e) from None

    def _begin(self, name: str, version: str, manifest: Dict[str, Any]) -> Dict[str, Any]:
        """Start (or resume) an upload. Returns what the host still has to send.

        Files already on the device under the same sha256 (in this model's kept versions or
        another model's) are linked into staging instead of sent again; a ``.part`` left by an
        interrupted upload is reported in ``partial`` so the host sends only the rest.
        """
        check_name("version", version)
        check_manifest(manifest)
        if manifest.get("id") and manifest["id"] != version:
            raise StoreError("manifest id %r does not match version %r" % (manifest.get("id"), version))
        with self._lock:
            final = os.path.join(self._model_dir(name), "versions", version)
            if os.path.isdir(final):
                if self._intact(final):
                    return {"installed": True, "missing": [], "partial": {}, "reused": []}
                shutil.rmtree(final, ignore_errors=True)  # damaged on the device: this upload repairs it
            staging = os.path.join(self._model_dir(name), "staging", version)
            self._remove_stale_staging(keep=staging)
            if not os.path.isdir(staging):
                os.makedirs(staging)
            with open(os.path.join(staging, "manifest.json.part"), "w") as f:
                json.dump(manifest, f)
            os.replace(os.path.join(staging, "manifest.json.part"), os.path.join(staging, "manifest.json"))
            missing, partial, partial_sha, reused = [], {}, {}, []
            known = None
            for entry in manifest["files"]:
                p = os.path.join(staging, entry["name"])
                if os.path.isfile(p) and os.path.getsize(p) == entry["size"] and sha256_file(p) == entry["sha256"]:
                    continue
                if known is None:
                    known = self._installed_files(exclude=staging)
                source = known.get((entry["sha256"], entry["size"]))
                if source and self._link(source, p, entry["sha256"]):
                    reused.append(entry["name"])
                    continue
                missing.append(entry["name"])
                part = p + ".part"
                if regular(part) and 0 < os.path.getsize(part) < entry["size"]:
                    partial[entry["name"]] = os.path.getsize(part)
                    partial_sha[entry["name"]] = sha256_file(part)
            return {
                "installed": False,
                "missing": missing,
                "partial": partial,
                "partial_sha256": partial_sha,
                "reused": reused,
            }

    def _installed_files(self, exclude: str) -> Dict[Tuple[str, int], str]:
        """``{(sha256, size): path}`` of every file in installed versions (manifests say their hashes)."""
        found = {}
        for model in os.listdir(self.models_dir):
            versions = os.path.join(self.models_dir, model, "versions")
            if not os.path.isdir(versions):
                continue
            for v in os.listdir(versions):
                d = os.path.join(versions, v)
                if d == exclude:
                    continue
                try:
                    with open(os.path.join(d, "manifest.json")) as f:
                        files = json.load(f)["files"]
                except (OSError, ValueError, KeyError):
                    continue
                for entry in files:
                    path = os.path.join(d, entry.get("name", ""))
                    if regular(path) and os.path.getsize(path) == entry.get("size"):
                        found[(entry.get("sha256"), entry.get("size"))] = path
        return found

    @staticmethod
    def _link(source: str, dest: str, sha256: str) -> bool:
        """Put a copy of an installed file's content at ``dest``; verify it first.

        A copy, not a hard link: two versions sharing one inode would share any damage, and the
        version kept for rollback must survive what happens to the one serving.
        """
        if not regular(source) or sha256_file(source) != sha256:
            return False
        tmp = dest + ".link"
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            shutil.copyfile(source, tmp, follow_symlinks=False)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, dest)
            return True
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if disk_full(e):
                raise
            return False

    def _staged_manifest(self, name: str, version: str) -> Tuple[str, Dict[str, Any]]:
        staging = os.path.join(self._model_dir(name), "staging", check_name("version", version))
        mf = os.path.join(staging, "manifest.json")
        if not os.path.isfile(mf):
            raise StoreError("no upload of %s version %s in progress: POST the manifest first" % (name, version), 409)
        with open(mf) as f:
            return staging, json.load(f)

    def receive(
        self, name: str, version: str, filename: str, stream: Any, length: int, offset: int = 0
    ) -> Dict[str, Any]:
        try:
            return self._receive(name, version, filename, stream, length, offset)
        except OSError as e:
            if not disk_full(e):
                raise
            raise self._disk_full(name, version, e) from None

    def _receive(
        self, name: str, version: str, filename: str, stream: BinaryIO, length: int, offset: int = 0
    ) -> Dict[str, Any]:
        """Stream ``length`` bytes into staging at ``offset``, verifying size and sha256 against the manifest.

        ``offset`` > 0 resumes an interrupted upload: the ``.part`` on the device must hold exactly
        ``offset`` bytes. A connection that drops midway keeps what arrived for the next resume.
        """
        staging, manifest = self._staged_manifest(name, version)
        entry = None
        for f in manifest["files"]:
            if f["name"] == filename:
                entry = f
        if entry is None:
            raise StoreError("file %r is not in the manifest of %s %s" % (filename, name, version), 404)
        if offset < 0 or offset + length != entry["size"]:
            raise StoreError(
                "file %r: %d bytes sent from offset %d, manifest says %d in all"
                % (filename, length, offset, entry["size"])
            )
        part = os.path.join(staging, filename + ".part")
        h = hashlib.sha256()
        if offset:
            have = os.path.getsize(part) if os.path.isfile(part) else 0
            if have != offset:
                raise StoreError(
                    "file %r: cannot resume at byte %d, the device has %d; begin the upload again"
                    % (filename, offset, have),
                    409,
                )
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        remaining = length
        with open(part, "ab" if offset else "wb") as out:
            try:
                while remaining > 0:
                    block = stream.read(min(CHUNK, remaining))
                    if not block:
                        break
                    h.update(block)
                    out.write(block)
                    remaining -= len(block)
            finally:
                out.flush()
                os.fsync(out.fileno())  # what arrived survives a power cut, for the resume
        if remaining:
            raise StoreError(
                "file %r: connection closed after %d of %d bytes; the next upload resumes there"
                % (filename, entry["size"] - remaining, entry["size"])
            )
        if h.hexdigest() != entry["sha256"]:
            os.unlink(part)
            raise StoreError(
                "file %r: sha256 %s does not match the manifest's %s; the file was altered or corrupted "
                "in transit and was discarded" % (filename, h.hexdigest(), entry["sha256"]),
                422,
            )
        os.replace(part, os.path.join(staging, filename))
        fsync_dir(staging)
        return {"file": filename, "verified": True, "resumed_at": offset}

    def commit(
        self, name: str, version: str, verify: Optional[Callable] = None, signature: Any = None
    ) -> Dict[str, Any]:
        try:
            return self._commit(name, version, verify, signature)
        except OSError as e:
            if not disk_full(e):
                raise
            raise self._disk_full(name, version, e) from None

    def _commit(
        self,
        name: str,
        version: str,
        verify: Optional[Callable[[str, Dict[str, Any]], Any]] = None,
        signature: Any = None,
    ) -> Dict[str, Any]:
        """Verify every staged file again, check the manifest's signature when the device trusts signers
        (``signature``: ``{"manifest": its text as signed, "signature": manifest.json.sig}``, kept beside it),
        optionally check that the bundle loads (``verify(dir, manifest)`` raises StoreError if not), move it
        into place, switch ``current``."""
        with self._lock:
            model_dir = self._model_dir(name)
            final = os.path.join(model_dir, "versions", version)
            what = "%s version %s" % (name, version)
            if os.path.isdir(final):  # a kept version: serving it again is an install too
                if signature is not None:
                    self._attach_signature(final, self._kept_manifest(final), signature)
                signer = self.trust.check(final, what)
            else:
                staging, manifest = self._staged_manifest(name, version)
                check_manifest(manifest)
                if signature is not None:
                    self._attach_signature(staging, manifest, signature)
                for entry in manifest["files"]:
                    p = os.path.join(staging, entry["name"])
                    if not os.path.isfile(p):
                        raise StoreError(
                            "cannot commit %s %s: %s was never received" % (name, version, entry["name"]), 409
                        )
                    if sha256_file(p) != entry["sha256"]:
                        raise StoreError(
                            "cannot commit %s %s: %s no longer matches its sha256" % (name, version, entry["name"]), 422
                        )
                signer = self.trust.check(staging, what)  # before anything of the bundle is loaded
                if verify is not None:
                    verify(staging, manifest)
                self.seal(staging, manifest)  # encrypted at rest (with a key) once checked and loadable
                if not os.path.isdir(os.path.dirname(final)):
                    os.makedirs(os.path.dirname(final))
                fsync_dir(staging)
                os.rename(staging, final)
                fsync_dir(os.path.dirname(final))
            previous = self.current_version(name)
            self._point_current(name, version)
            self._prune(name, keep=(version, previous))
            result = {"name": name, "version": version, "previous": previous}  # type: Dict[str, Any]
            if signer is not None:
                result["signed_by"] = signer
            return result

    @staticmethod
    def _kept_manifest(directory: str) -> Dict[str, Any]:
        with open(os.path.join(directory, "manifest.json")) as f:
            return json.load(f)

    @staticmethod
    def _attach_signature(directory: str, manifest: Dict[str, Any], signature: Any) -> None:
        """Keep the manifest as it was signed (its exact bytes) and its signature in ``directory``."""
        if not (
            isinstance(signature, dict)
            and isinstance(signature.get("manifest"), str)
            and isinstance(signature.get("signature"), str)
            and len(signature["signature"]) < 65536
        ):
            raise StoreError('"signature" must be {"manifest": the signed manifest.json text, "signature": its .sig}')
        try:
            signed = json.loads(signature["manifest"])
        except ValueError:
            signed = None
        if signed != manifest:
            raise StoreError(
                "the signed manifest sent with the commit is not the manifest of this upload; sign the bundle "
                "again (`edgekit sign`) and deploy it",
                422,
            )
        for fname, text in (("manifest.json", signature["manifest"]), (SIGNATURE, signature["signature"])):
            tmp = os.path.join(directory, fname + ".part")
            with open(tmp, "wb") as f:
                f.write(text.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(directory, fname))
        fsync_dir(directory)

    def _disk_full(self, name: str, version: str, error: OSError) -> StoreError:
        """Answer a full disk: remove this upload's staging and abandoned ones; the error that says so."""
        staging = os.path.join(self._model_dir(name), "staging", version)
        shutil.rmtree(staging, ignore_errors=True)
        self._remove_stale_staging(keep=None, older_than=0.0 if error.errno == errno.ENOSPC else STALE_STAGING_S)
        return StoreError(
            "the device's disk is full (%s) while installing %s %s: the upload was removed and the model keeps "
            "serving its current version; free space on the device (or remove a model), then deploy again"
            % (os.strerror(error.errno), name, version),  # type: ignore[arg-type]
            507,
        )

    def _remove_stale_staging(self, keep: Optional[str], older_than: float = STALE_STAGING_S) -> None:
        """Staging directories of uploads nobody touched for ``older_than`` seconds (abandoned) go."""
        now = time.time()
        try:
            models = os.listdir(self.models_dir)
        except OSError:
            return
        for model in models:
            base = os.path.join(self.models_dir, model, "staging")
            try:
                versions = os.listdir(base)
            except OSError:
                continue
            for v in versions:
                d = os.path.join(base, v)
                if d == keep:
                    continue
                try:
                    newest = max([os.path.getmtime(d)] + [os.path.getmtime(os.path.join(d, f)) for f in os.listdir(d)])
                except OSError:
                    continue
                if now - newest >= older_than:
                    shutil.rmtree(d, ignore_errors=True)
