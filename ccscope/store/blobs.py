"""Content-addressed trace files: a blob's name is the sha256 of its bytes.

Content addressing makes writes idempotent (a retried upload of the same trace is a no-op) and
lets any reader verify what it got. `LocalBlobs` (a directory) is the embedded default;
`S3Blobs` (an S3-compatible bucket, `s3://bucket/prefix`) serves the distributed deployment.
`open_blobs(location)` picks one from the location's form.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from ccscope.settings import settings

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
    """Blobs in an S3-compatible bucket: `s3://bucket/prefix` (the prefix is optional).

    Same contract as LocalBlobs: the key is the sha256 of the bytes (`<prefix>/ab/cd/<sha256>`),
    a put of bytes already there writes nothing, and every read is checked against its name.
    The upload carries its SHA-256 (x-amz-checksum-sha256), so the server refuses bytes that
    changed on the way. The endpoint is `endpoint_url`, else CCSCOPE_S3_ENDPOINT, else
    boto3's own configuration (AWS_ENDPOINT_URL, or AWS itself); credentials and region come
    from boto3's usual chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, ...).
    """

    def __init__(self, url: str, endpoint_url: str | None = None, client: Any = None) -> None:
        parsed = urlsplit(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise BlobError(f"not an s3://bucket[/prefix] location: {url!r}")
        self.url = url
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.endpoint_url = endpoint_url or settings().s3_endpoint or None
        if client is None:
            import boto3
            from botocore.config import Config

            region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
            client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=region,
                config=Config(
                    retries={"max_attempts": 5, "mode": "standard"},
                    connect_timeout=10,
                    read_timeout=60,
                    # Path-style URLs work with every S3-compatible server (MinIO, Ceph, moto...).
                    s3={"addressing_style": "path"},
                ),
            )
        self.client = client

    def ensure_bucket(self) -> bool:
        """Create the bucket if it does not exist (a fresh deployment's `ccscope db migrate`);
        True when it was created."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return False
        except Exception as e:
            if _s3_code(e) not in ("NoSuchBucket", "404", "NotFound"):
                raise BlobError(f"looking up bucket {self.bucket}: {_s3_error(e)}") from None
        try:
            self.client.create_bucket(Bucket=self.bucket)
        except Exception as e:
            if _s3_code(e) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise BlobError(f"creating bucket {self.bucket}: {_s3_error(e)}") from None
        return True

    def key(self, sha256: str) -> str:
        if not _SHA.match(sha256):
            raise BlobError("not a sha256 digest")
        name = f"{sha256[:2]}/{sha256[2:4]}/{sha256}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, data: bytes) -> str:
        digest = sha256_hex(data)
        if self.exists(digest):
            return digest
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.key(digest),
                Body=data,
                ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(),
            )
        except Exception as e:
            raise BlobError(f"storing trace {digest} in {self.url}: {_s3_error(e)}") from None
        return digest

    def get(self, sha256: str) -> bytes:
        key = self.key(sha256)
        try:
            data = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as e:
            if _s3_code(e) in ("NoSuchKey", "404", "NotFound"):
                raise BlobError(f"trace {sha256} is missing from {self.url}") from None
            raise BlobError(f"reading trace {sha256} from {self.url}: {_s3_error(e)}") from None
        if sha256_hex(data) != sha256:
            raise BlobError(f"trace {sha256} is corrupt (checksum mismatch)")
        return bytes(data)

    def exists(self, sha256: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
        except Exception as e:
            if _s3_code(e) in ("NoSuchKey", "404", "NotFound"):
                return False
            raise BlobError(f"looking up trace {sha256} in {self.url}: {_s3_error(e)}") from None
        return True


def _s3_code(e: Exception) -> str:
    response = getattr(e, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _s3_error(e: Exception) -> str:
    return f"{_s3_code(e) or type(e).__name__}: {e}"[:500]


def open_blobs(location: str) -> BlobStore:
    if location.startswith("s3://"):
        return S3Blobs(location)
    return LocalBlobs(location.removeprefix("file://"))
