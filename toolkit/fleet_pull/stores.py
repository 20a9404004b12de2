"""Where published bundles live: a directory any static server serves, or an S3-compatible bucket.

Both take the same three calls, so :func:`edgekit.fleet_pull.publish` writes either the same way; the layout
(``blobs/sha256/HEX``, ``manifests/sha256/HEX``, ``bundles/ID.json``) is :mod:`edgekit_agent.pull_layout`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlparse

from ..errors import EdgekitError, TransportError
from ..model import file_sha256


class ObjectStore(Protocol):
    description: str

    def has(self, key: str, size: int, sha256: str | None = None) -> bool: ...
    def put_file(self, key: str, path: Path) -> None: ...
    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None: ...


class DirStore:
    """A directory: files written to a temporary sibling, made durable, then renamed into place."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()
        if self.root.exists() and not self.root.is_dir():
            raise EdgekitError(f"--store {root} is a file; pass a directory (a new one, or a store published before)")
        self.description = str(self.root)

    def has(self, key: str, size: int, sha256: str | None = None) -> bool:
        p = self.root / key
        if not p.is_file() or p.stat().st_size != size:
            return False
        return sha256 is None or file_sha256(p) == sha256  # a damaged blob is written again

    def _write(self, key: str, fill: Callable[[BinaryIO], object]) -> None:
        dest = self.root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)  # the static server reads it
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_file(self, key: str, path: Path) -> None:
        import shutil

        def fill(out: BinaryIO) -> None:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)

        self._write(key, fill)

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._write(key, lambda out: out.write(data))


class S3Store:
    """``s3://BUCKET/PREFIX`` at ``endpoint`` (any S3-compatible server); boto3 from ``edgekit[fleet]``."""

    def __init__(self, url: str, endpoint: str | None = None, region: str | None = None) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise EdgekitError(
                "publishing to s3:// needs boto3: pip install 'edgekit[fleet]' (or publish to a directory)"
            ) from None
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise EdgekitError(f"--store {url!r} is not s3://BUCKET[/PREFIX]")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self.description = url
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=Config(retries={"max_attempts": 3}),
        )
        self._errors = _boto_errors()

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def has(self, key: str, size: int, sha256: str | None = None) -> bool:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except self._errors as e:
            if _status(e) in (403, 404):
                return False
            raise TransportError(f"{self.description}: {e}") from None
        meta = head.get("Metadata") or {}
        return head.get("ContentLength") == size and (sha256 is None or meta.get("sha256") in (None, sha256))

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.client.upload_file(
                str(path), self.bucket, self._key(key), ExtraArgs={"Metadata": {"sha256": file_sha256(path)}}
            )
        except self._errors as e:
            raise TransportError(f"uploading {key} to {self.description}: {e}") from None

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type)
        except self._errors as e:
            raise TransportError(f"uploading {key} to {self.description}: {e}") from None


def _boto_errors() -> tuple[type[BaseException], ...]:
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, S3UploadFailedError)


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def open_store(store: str | Path, endpoint: str | None = None) -> ObjectStore:
    """A store for ``--store``: ``s3://BUCKET/PREFIX`` (with ``endpoint``) or a directory."""
    if str(store).startswith("s3://"):
        return S3Store(str(store), endpoint)
    if endpoint:
        raise EdgekitError("--endpoint is for an s3:// store; a directory store takes none")
    if "://" in str(store):
        raise EdgekitError(f"--store {store}: pass a directory or s3://BUCKET/PREFIX")
    return DirStore(store)
