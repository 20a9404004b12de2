"""Bundles on the device: received file by file, verified, installed atomically.

    ROOT/models/NAME/staging/VERSION/     files as they arrive (each verified on arrival)
    ROOT/models/NAME/versions/VERSION/    complete, verified bundles
    ROOT/models/NAME/current              symlink -> versions/VERSION (swapped with os.replace)

A transfer that breaks off leaves only ``staging``: ``current`` keeps serving the
previous version, and the next upload of the same version resumes (files already
received and verified are not sent again).
"""

import hashlib
import json
import os
import re
import shutil
import stat
import threading

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
RESERVED = ("manifest.json",)
KEEP_VERSIONS = 3
CHUNK = 1 << 16


class StoreError(Exception):
    """A request the store refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message, status=400):
        Exception.__init__(self, message)
        self.status = status


def fsync_dir(path):
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


def _regular(path):
    """A regular file, not a symlink (the store never follows links it did not make)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_name(kind, value):
    if not isinstance(value, str) or not NAME_RE.match(value) or ".." in value:
        raise StoreError("invalid %s %r: use letters, digits, '.', '_' and '-'" % (kind, value))
    return value


def check_manifest(manifest):
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


class Store(object):
    def __init__(self, root):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.models_dir = os.path.join(self.root, "models")
        if not os.path.isdir(self.models_dir):
            os.makedirs(self.models_dir)
        self._lock = threading.RLock()

    def _model_dir(self, name):
        return os.path.join(self.models_dir, check_name("model name", name))

    # -- upload -------------------------------------------------------------
    def begin(self, name, version, manifest):
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
                return {"installed": True, "missing": [], "partial": {}, "reused": []}
            staging = os.path.join(self._model_dir(name), "staging", version)
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
                if _regular(part) and 0 < os.path.getsize(part) < entry["size"]:
                    partial[entry["name"]] = os.path.getsize(part)
                    partial_sha[entry["name"]] = sha256_file(part)
            return {
                "installed": False,
                "missing": missing,
                "partial": partial,
                "partial_sha256": partial_sha,
                "reused": reused,
            }

    def _installed_files(self, exclude):
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
                    if _regular(path) and os.path.getsize(path) == entry.get("size"):
                        found[(entry.get("sha256"), entry.get("size"))] = path
        return found

    @staticmethod
    def _link(source, dest, sha256):
        """Put an installed file's content at ``dest`` (hard link, else copy); verify it first."""
        if not _regular(source) or sha256_file(source) != sha256:
            return False
        tmp = dest + ".link"
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            try:
                os.link(source, tmp, follow_symlinks=False)
            except OSError:
                shutil.copyfile(source, tmp, follow_symlinks=False)
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(tmp, dest)
            return True
        except OSError:
            return False

    def _staged_manifest(self, name, version):
        staging = os.path.join(self._model_dir(name), "staging", check_name("version", version))
        mf = os.path.join(staging, "manifest.json")
        if not os.path.isfile(mf):
            raise StoreError("no upload of %s version %s in progress: POST the manifest first" % (name, version), 409)
        with open(mf) as f:
            return staging, json.load(f)

    def receive(self, name, version, filename, stream, length, offset=0):
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

    def commit(self, name, version, verify=None):
        """Verify every staged file again, optionally check that the bundle loads (``verify(dir,
        manifest)`` raises StoreError if not), move it into place, switch ``current``."""
        with self._lock:
            model_dir = self._model_dir(name)
            final = os.path.join(model_dir, "versions", version)
            if not os.path.isdir(final):
                staging, manifest = self._staged_manifest(name, version)
                check_manifest(manifest)
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
                if verify is not None:
                    verify(staging, manifest)
                if not os.path.isdir(os.path.dirname(final)):
                    os.makedirs(os.path.dirname(final))
                fsync_dir(staging)
                os.rename(staging, final)
                fsync_dir(os.path.dirname(final))
            previous = self.current_version(name)
            self._point_current(name, version)
            self._prune(name, keep=(version, previous))
            return {"name": name, "version": version, "previous": previous}

    def _point_current(self, name, version, how="install"):
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

    def _prune(self, name, keep):
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
    def history(self, name, installs_only=False):
        """Versions in the order they became current (``installs_only``: leave out rollbacks)."""
        p = os.path.join(self._model_dir(name), "history")
        if not os.path.isfile(p):
            return []
        with open(p) as f:
            rows = [l.split() for l in f if l.strip()]
        return [r[0] for r in rows if not (installs_only and len(r) > 1)]

    def current_version(self, name):
        link = os.path.join(self._model_dir(name), "current")
        if not os.path.islink(link):
            return None
        return os.path.basename(os.readlink(link))

    def current(self, name):
        """``(version, directory, manifest)`` of what the model serves now; StoreError 404 if none."""
        version = self.current_version(name)
        if version is None:
            known = ", ".join(self.names()) or "none"
            raise StoreError("unknown model %r (installed: %s); deploy it first" % (name, known), 404)
        d = os.path.join(self._model_dir(name), "versions", version)
        with open(os.path.join(d, "manifest.json")) as f:
            return version, d, json.load(f)

    def remove(self, name):
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

    def names(self):
        return sorted(
            n for n in os.listdir(self.models_dir) if os.path.islink(os.path.join(self.models_dir, n, "current"))
        )

    def versions(self, name):
        d = os.path.join(self._model_dir(name), "versions")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def rollback(self, name, version=None):
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
