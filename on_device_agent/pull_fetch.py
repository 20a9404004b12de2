"""Fetching a bundle from a content-addressed store over HTTP(S): the pull twin of an upload.

``Fetcher(store).install(name, store_url, digest)`` gets the manifest (checked against the digest), asks the
store what it lacks (``Store.begin``: files already installed under the same sha256 are copied, not fetched;
a ``.part`` left by a cut transfer is reported), fetches each missing blob with an HTTP ``Range`` request
starting where its ``.part`` ends, streams it through ``Store.receive`` (sha256 checked on arrival) and
commits. A broken connection leaves staging as it is and the old version serving; the next attempt (with
backoff) resumes. Any static file server or S3-compatible store serves the layout of :mod:`.pull_layout`.
"""

import hashlib
import http.client
import json
import re
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Optional, Tuple

from .pull_layout import PayloadError, blob_path, digest_hex, join_url, manifest_path, signature_path
from .storefiles import StoreError, check_name

MANIFEST_MAX = 16 << 20
SIGNATURE_MAX = 64 << 10  # an SSH signature is about 300 bytes
CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)\Z")
TRANSIENT = (OSError, http.client.HTTPException, socket.timeout)


class FetchError(Exception):
    """An install that failed; ``permanent``: trying again will not help (a missing blob, a wrong digest)."""

    def __init__(self, message: str, permanent: bool = False, status: Optional[int] = None) -> None:
        Exception.__init__(self, message)
        self.permanent = permanent
        self.status = status  # the HTTP status that caused it, if any


class Fetcher(object):
    """Installs bundles into ``store`` (an :class:`edgekit_agent.store.Store`) from HTTP(S) stores."""

    def __init__(
        self,
        store: Any,
        ssl_context: Any = None,
        timeout: float = 30.0,
        attempts: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.ssl_context = ssl_context
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep

    # -- HTTP -----------------------------------------------------------------
    def _open(self, url: str, offset: int = 0) -> Any:
        headers = {"User-Agent": "edgekit-agent"}
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        req = urllib.request.Request(url, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl_context)
        except urllib.error.HTTPError as e:
            e.close()
            if e.code == 416:
                raise
            permanent = e.code in (401, 403, 404, 410)
            raise FetchError("%s answered HTTP %d %s" % (url, e.code, e.reason), permanent, e.code) from None

    def manifest(self, store_url: str, digest: str) -> Dict[str, Any]:
        """The manifest a digest names, its bytes checked against the digest."""
        return self._manifest(store_url, digest)[0]

    def signature(self, store_url: str, digest: str) -> Optional[str]:
        """The signature published beside the manifest (``edgekit sign``), or None when the bundle is unsigned. The
        store's commit judges it against the device's trusted keys: an unsigned bundle is refused where any is."""
        url = join_url(store_url, signature_path(digest_hex(digest)))
        try:
            resp = self._open(url)
        except FetchError as e:
            if e.status in (403, 404):  # S3 answers 403 for a missing key it may not list
                return None
            raise
        with resp:
            body = resp.read(SIGNATURE_MAX + 1)
        if len(body) > SIGNATURE_MAX:
            raise FetchError("the signature at %s is over %d bytes; not an SSH signature" % (url, SIGNATURE_MAX), True)
        return body.decode("ascii", "replace")

    def _manifest(self, store_url: str, digest: str) -> Tuple[Dict[str, Any], str]:
        want = digest_hex(digest)
        url = join_url(store_url, manifest_path(want))
        try:
            resp = self._open(url)
        except FetchError as e:
            if e.status == 404:
                raise FetchError(
                    "the store %s has no bundle with digest sha256:%s (no %s): publish it there with "
                    "`edgekit publish BUNDLE --store ...`" % (store_url, want, manifest_path(want)),
                    permanent=True,
                ) from None
            raise
        with resp:
            body = resp.read(MANIFEST_MAX + 1)
        if len(body) > MANIFEST_MAX:
            raise FetchError("the manifest at %s is over %d bytes; not an edgekit manifest" % (url, MANIFEST_MAX), True)
        got = hashlib.sha256(body).hexdigest()
        if got != want:
            raise FetchError(
                "the manifest at %s has sha256 %s, not the desired digest %s: the store was altered or the "
                "digest is wrong" % (url, got, want),
                permanent=True,
            )
        try:
            manifest = json.loads(body.decode("utf-8"))
        except ValueError as e:
            raise FetchError("the manifest at %s is not JSON (%s)" % (url, e), permanent=True) from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("id"), str):
            raise FetchError("the manifest at %s has no bundle id; rebuild and publish the bundle" % url, True)
        return manifest, body.decode("utf-8")

    def _fetch_file(self, name: str, version: str, entry: Dict[str, Any], store_url: str, offset: int) -> int:
        """Fetch one blob into staging from ``offset``; returns the offset it resumed at."""
        url = join_url(store_url, blob_path(entry["sha256"]))
        size = entry["size"]
        try:
            resp = self._open(url, offset)
        except urllib.error.HTTPError:  # 416: what is staged is no prefix of this blob; fetch it whole
            resp, offset = self._open(url), 0
        except FetchError as e:
            if e.status == 404:
                raise FetchError(
                    "the store %s lacks %s (file %s of %s %s): publish the bundle again"
                    % (store_url, blob_path(entry["sha256"]), entry["name"], name, version),
                    permanent=True,
                ) from None
            raise
        with resp:
            if offset and resp.status == 206:
                m = CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != offset:
                    raise FetchError(
                        "%s answered range %r to bytes=%d-" % (url, resp.headers.get("Content-Range"), offset)
                    )
            elif offset:
                offset = 0  # the server ignored the range: take the whole blob again
            self.store.receive(name, version, entry["name"], resp, size - offset, offset)
        return offset

    # -- install --------------------------------------------------------------
    def install(
        self,
        name: str,
        store_url: str,
        digest: str,
        commit: Optional[Callable[[str, str, Any], Dict[str, Any]]] = None,
    ) -> Dict[str, Any]:
        """Install the bundle ``digest`` from ``store_url`` as model ``name``; FetchError when it cannot.

        ``commit(name, version, signature)`` switches to it (default ``store.commit``; the agent passes its own,
        which checks that the bundle loads and records the install); ``signature`` is the published manifest's text
        and its signature (None for an unsigned bundle), which the store checks against the trusted keys. Returns
        the commit's result with a ``transfer`` summary."""
        check_name("model name", name)
        commit = commit or (lambda n, v, sig: self.store.commit(n, v, signature=sig))
        delay = self.backoff_s
        transfer = {"files_fetched": 0, "files_reused": 0, "payload_bytes": 0, "resumed_bytes": 0, "attempts": 0}
        last = None  # type: Optional[BaseException]
        for attempt in range(self.attempts):
            if attempt:
                self.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
            transfer["attempts"] = attempt + 1
            try:
                return self._install_once(name, store_url, digest, commit, transfer)
            except FetchError as e:
                if e.permanent:
                    raise
                last = e
            except StoreError as e:
                raise FetchError(str(e), permanent=True) from None
            except PayloadError as e:
                raise FetchError(str(e), permanent=True) from None
            except TRANSIENT as e:
                last = e
        raise FetchError(
            "fetching %s (%s) from %s failed %d times, last: %s; what arrived is kept and the next try resumes"
            % (name, digest, store_url, self.attempts, last)
        )

    def _install_once(
        self,
        name: str,
        store_url: str,
        digest: str,
        commit: Callable[[str, str, Any], Dict[str, Any]],
        transfer: Dict[str, int],
    ) -> Dict[str, Any]:
        manifest, text = self._manifest(store_url, digest)
        version = manifest["id"]
        if manifest.get("name") not in (None, name):
            raise FetchError(
                "bundle %s is model %r, not %r: desire it under its own name" % (digest, manifest.get("name"), name),
                permanent=True,
            )
        if self.store.current_version(name) == version:
            return {"name": name, "version": version, "previous": version, "unchanged": True, "transfer": transfer}
        state = self.store.begin(name, version, manifest)
        transfer["files_reused"] = len(state.get("reused") or [])
        entries = {f["name"]: f for f in manifest["files"]}
        for fname in state.get("missing") or []:
            entry = entries[fname]
            offset = (state.get("partial") or {}).get(fname, 0)
            try:
                offset = self._fetch_file(name, version, entry, store_url, offset)
            except StoreError as e:
                if e.status == 507:
                    raise
                raise FetchError(str(e)) from None  # cut off or altered in transit: the next attempt resumes
            transfer["files_fetched"] += 1
            transfer["payload_bytes"] += entry["size"] - offset
            transfer["resumed_bytes"] += offset
        sig = self.signature(store_url, digest)
        result = dict(commit(name, version, None if sig is None else {"manifest": text, "signature": sig}))
        result["transfer"] = transfer
        return result
