"""Content-addressed trace files: a blob's name is the sha256 of its bytes.

Content addressing makes writes idempotent (a retried upload of the same trace is a no-op) and
lets any reader verify what it got. `LocalBlobs` is the embedded default; `S3Blobs` is the
interface an S3-compatible bucket will fill in for the distributed deployment.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol

_SHA = re.compile(r"^[0-9a-f]{64}$")


class BlobError(Exception):
    pass


class BlobStore(Protocol):
    def put(self, data: bytes) -> str: ...
    def get(self, sha256: str) -> bytes: ...
    def exists(self, sha256: str) -> bool: ...


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LocalBlobs:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        if not _SHA.match(sha256):  # the name reaches the file system: no traversal
            raise BlobError("not a sha256 digest")
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def put(self, data: bytes) -> str:
        digest = sha256_hex(data)
        dest = self.path(digest)
        if dest.exists():
            return digest
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename, so a reader or a crashed writer never leaves a partial blob under its name.
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, sha256: str) -> bytes:
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            raise BlobError(f"trace {sha256} is missing from {self.root}") from None
        if sha256_hex(data) != sha256:
            raise BlobError(f"trace {sha256} is corrupt (checksum mismatch)")
        return data

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).exists()


class S3Blobs:
    """Placeholder for an S3-compatible bucket (same contract as LocalBlobs); not built yet."""

    def __init__(self, url: str) -> None:
        self.url = url

    def put(self, data: bytes) -> str:
        raise NotImplementedError("S3-compatible trace storage is not implemented yet")

    def get(self, sha256: str) -> bytes:
        raise NotImplementedError("S3-compatible trace storage is not implemented yet")

    def exists(self, sha256: str) -> bool:
        raise NotImplementedError("S3-compatible trace storage is not implemented yet")


def open_blobs(location: str) -> BlobStore:
    if location.startswith("s3://"):
        return S3Blobs(location)
    return LocalBlobs(location.removeprefix("file://"))
