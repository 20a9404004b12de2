"""Bundles on the device: received file by file, verified, installed atomically.

    ROOT/models/NAME/staging/VERSION/     files as they arrive (each verified on arrival)
    ROOT/models/NAME/versions/VERSION/    complete, verified bundles
    ROOT/models/NAME/current              symlink -> versions/VERSION (swapped with os.replace)

A transfer that breaks off leaves only ``staging``: ``current`` keeps serving the
previous version, and the next upload of the same version resumes (files already
received and verified are not sent again).
"""

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from . import atrest
from .storefiles import (  # noqa: F401  (re-exported: the store's API)
    KEEP_VERSIONS,
    NAME_RE,
    StoreError,
    check_manifest,
    check_name,
    fsync_dir,
    regular,
    sha256_file,
)
from .trust import Trust
from .uploads import Uploads


def uncached(manifest: Dict[str, Any]) -> Dict[str, Any]:
    """The manifest a runtime gets for decrypted files: no compiled-model cache (it would keep a plain copy)."""
    return dict(manifest, runner=dict(manifest.get("runner") or {}, model_cache=False))


class Store(Uploads):
    def __init__(self, root: str, sealer: Any = None) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.sealer = sealer  # an atrest.Sealer: installed files are encrypted at rest
        self.trust = Trust(self.root)  # ROOT/trust/allowed_signers: installs must be signed by one of its keys
        self.models_dir = os.path.join(self.root, "models")
        if not os.path.isdir(self.models_dir):
            os.makedirs(self.models_dir)
        self._lock = threading.RLock()

    def _model_dir(self, name: str) -> str:
        return os.path.join(self.models_dir, check_name("model name", name))

    def _point_current(self, name: str, version: str, how: str = "install") -> None:
        """Switch ``current`` atomically (and durably); the history line says how (install | rollback)."""
        model_dir = self._model_dir(name)
        tmp = os.path.join(model_dir, ".current.tmp")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.join("versions", version), tmp)
        os.replace(tmp, os.path.join(model_dir, "current"))
        fsync_dir(model_dir)
        with open(os.path.join(model_dir, "history"), "a") as f:
            f.write(version + ("" if how == "install" else " " + how) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _prune(self, name: str, keep: Sequence[Optional[str]]) -> None:
        versions_dir = os.path.join(self._model_dir(name), "versions")
        history = self.history(name)
        order = [v for v in reversed(history) if v in os.listdir(versions_dir)]
        kept = set(k for k in keep if k)
        for v in order:
            if len(kept) >= KEEP_VERSIONS:
                break
            kept.add(v)
        for v in os.listdir(versions_dir):
            if v not in kept:
                shutil.rmtree(os.path.join(versions_dir, v), ignore_errors=True)

    # -- queries ------------------------------------------------------------
    def history(self, name: str, installs_only: bool = False) -> List[str]:
        """Versions in the order they became current (``installs_only``: leave out rollbacks)."""
        p = os.path.join(self._model_dir(name), "history")
        if not os.path.isfile(p):
            return []
        with open(p) as f:
            rows = [line.split() for line in f if line.strip()]
        return [r[0] for r in rows if not (installs_only and len(r) > 1)]

    def current_version(self, name: str) -> Optional[str]:
        link = os.path.join(self._model_dir(name), "current")
        if not os.path.islink(link):
            return None
        return os.path.basename(os.readlink(link))

    def current(self, name: str) -> Tuple[str, str, Dict[str, Any]]:
        """``(version, directory, manifest)`` of what the model serves now; StoreError 404 if none."""
        version = self.current_version(name)
        if version is None:
            known = ", ".join(self.names()) or "none"
            raise StoreError("unknown model %r (installed: %s); deploy it first" % (name, known), 404)
        d = os.path.join(self._model_dir(name), "versions", version)
        try:
            with open(os.path.join(d, "manifest.json")) as f:
                manifest = json.load(f)
            check_manifest(manifest)
        except (OSError, ValueError, StoreError) as e:
            raise StoreError(
                "model %r version %s is damaged on the device (its manifest.json cannot be read: %s); "
                "deploy it again, or roll back" % (name, version, e),
                409,
            ) from None
        return version, d, manifest

    def _intact(self, directory: str) -> bool:
        try:
            with open(os.path.join(directory, "manifest.json")) as f:
                manifest = json.load(f)
            check_manifest(manifest)
            self.verify_files(directory, manifest)
            return True
        except (OSError, ValueError, StoreError):
            return False

    def version(self, name: str, version: str) -> Tuple[str, Dict[str, Any]]:
        """``(directory, manifest)`` of a kept version; StoreError 404 if the device does not keep it."""
        check_name("version", version)
        d = os.path.join(self._model_dir(name), "versions", version)
        if not os.path.isdir(d):
            raise StoreError(
                "model %r keeps no version %r (kept: %s)" % (name, version, ", ".join(self.versions(name))), 404
            )
        try:
            with open(os.path.join(d, "manifest.json")) as f:
                manifest = json.load(f)
            check_manifest(manifest)
        except (OSError, ValueError, StoreError) as e:
            raise StoreError(
                "model %r version %s is damaged on the device (%s); deploy it again" % (name, version, e), 409
            ) from None
        return d, manifest

    def has(self, name: str) -> bool:
        """The model is installed (checked before a lock or a record is made for the name)."""
        return os.path.islink(os.path.join(self._model_dir(name), "current"))

    def verify_files(self, directory: str, manifest: Dict[str, Any]) -> None:
        """Every file of an installed version still matches its manifest's size and sha256 (sealed files
        are decrypted in memory to be checked)."""
        for entry in manifest["files"]:
            self._plain(directory, manifest, entry)

    def _plain(
        self, directory: str, manifest: Dict[str, Any], entry: Dict[str, Any], out: Optional[str] = None
    ) -> None:
        """Check one file; a sealed one is decrypted, and its plain bytes written to ``out`` when given."""
        p = os.path.join(directory, entry["name"])
        version = manifest.get("id") or os.path.basename(directory)
        model = manifest.get("name")
        what = "model file %s of %s" % (entry["name"], ("%s " % model if model else "") + "version " + version)
        damaged = StoreError(
            "%s is damaged on the device (it no longer matches the sha256 it was installed with); it was not "
            "loaded. Deploy the version again, or roll back" % what,
            409,
        )
        if not regular(p):
            raise damaged
        if not atrest.sealed(p):
            if os.path.getsize(p) != entry["size"] or sha256_file(p) != entry["sha256"]:
                raise damaged
            if out is not None:
                shutil.copyfile(p, out)
            return
        if self.sealer is None:
            raise StoreError(
                "%s is encrypted at rest and this agent has no key: start it with --encrypt-key FILE (or "
                "keyring:NAME), the key it was installed with; the agent keeps serving its other models" % what,
                409,
            )
        with open(p, "rb") as f:
            data = f.read()
        try:
            plain = self.sealer.open_bytes(data, entry["name"])
        except atrest.WrongKey as e:
            raise StoreError(
                "%s was encrypted with another key (key id %s; this agent's key %s is %s): start the agent with "
                "the key it was installed with, or deploy the version again"
                % (what, e.key_id, self.sealer.source, self.sealer.key_id),
                409,
            ) from None
        except ValueError:
            raise damaged from None
        if len(plain) != entry["size"] or hashlib.sha256(plain).hexdigest() != entry["sha256"]:
            raise damaged
        if out is not None:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(plain)

    @contextlib.contextmanager
    def opened(self, directory: str, manifest: Dict[str, Any]) -> Iterator[str]:
        """A directory with the version's plain files, each checked against its sha256 on the way.

        A version with no sealed file is its own directory. Otherwise the files are decrypted into a private
        temporary directory (mode 700; in ``/dev/shm``, memory, where there is one), which is removed when the
        block ends: runtimes load from a path, and once a model is loaded they hold it in memory.
        """
        names = [e["name"] for e in manifest["files"]]
        if not any(atrest.sealed(os.path.join(directory, n)) for n in names):
            self.verify_files(directory, manifest)
            yield directory
            return
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        plain_dir = tempfile.mkdtemp(prefix="edgekit-model-", dir=shm)
        try:
            for entry in manifest["files"]:
                self._plain(directory, manifest, entry, out=os.path.join(plain_dir, entry["name"]))
            with open(os.path.join(plain_dir, "manifest.json"), "w") as f:
                json.dump(uncached(manifest), f)
            yield plain_dir
        finally:
            shutil.rmtree(plain_dir, ignore_errors=True)

    def seal(self, directory: str, manifest: Dict[str, Any]) -> None:
        """Encrypt every plain file of a version in place (no-op without a key)."""
        if self.sealer is None:
            return
        for entry in manifest["files"]:
            p = os.path.join(directory, entry["name"])
            if regular(p) and not atrest.sealed(p):
                self.sealer.seal_file(p, entry["name"])
        fsync_dir(directory)

    def seal_existing(self) -> List[str]:
        """Encrypt the versions installed before the agent had a key (rollback copies included)."""
        done = []  # type: List[str]
        if self.sealer is None:
            return done
        with self._lock:
            for name in self.names():
                for version in self.versions(name):
                    try:
                        d, manifest = self.version(name, version)
                        self.verify_files(d, manifest)  # damage is not sealed in: a redeploy repairs it
                    except StoreError:
                        continue
                    self.seal(d, manifest)
                    done.append("%s/%s" % (name, version))
        return done

    def remove(self, name: str) -> Dict[str, Any]:
        """Delete a model and every version kept of it (its directory is moved aside, then removed)."""
        with self._lock:
            d = self._model_dir(name)
            if not os.path.isdir(d):
                raise StoreError("unknown model %r (installed: %s)" % (name, ", ".join(self.names()) or "none"), 404)
            gone = os.path.join(self.models_dir, ".removed-%s-%d" % (name, os.getpid()))
            os.rename(d, gone)
            fsync_dir(self.models_dir)
        shutil.rmtree(gone, ignore_errors=True)
        return {"name": name, "removed": True}

    def names(self) -> List[str]:
        return sorted(
            n for n in os.listdir(self.models_dir) if os.path.islink(os.path.join(self.models_dir, n, "current"))
        )

    def versions(self, name: str) -> List[str]:
        d = os.path.join(self._model_dir(name), "versions")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def kept_installs(self, name: str) -> List[str]:
        """The kept versions in the order they were installed (oldest first)."""
        kept = set(self.versions(name))
        return [v for v in dict.fromkeys(self.history(name, installs_only=True)) if v in kept]

    def rollback(self, name: str, version: Optional[str] = None) -> Dict[str, Any]:
        """Serve the previous kept version again (or ``version``, if it is kept)."""
        with self._lock:
            current = self.current_version(name)
            if current is None:
                raise StoreError("unknown model %r" % name, 404)
            available = set(self.versions(name))
            if version is not None:
                if version not in available:
                    raise StoreError(
                        "model %r has no version %r on this device (kept: %s)"
                        % (name, version, ", ".join(sorted(available))),
                        404,
                    )
                if version == current:
                    return {"name": name, "version": version, "previous": current, "unchanged": True}
                self._point_current(name, version, "rollback")
                return {"name": name, "version": version, "previous": current}
            # Step back through the installs from where the current version was installed, so
            # repeated rollbacks walk v3 -> v2 -> v1 instead of bouncing between two versions.
            installs = self.history(name, installs_only=True)
            at = max([i for i, v in enumerate(installs) if v == current] or [len(installs)])
            for v in reversed(installs[:at]):
                if v != current and v in available:
                    self._point_current(name, v, "rollback")
                    return {"name": name, "version": v, "previous": current}
            raise StoreError("model %r has no earlier version kept to roll back to" % name, 409)
