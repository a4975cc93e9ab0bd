"""Trace storage on an S3-compatible bucket, against a real HTTP S3 endpoint (moto's server)."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest

from ccscope.store import Store
from ccscope.store.blobs import BlobError, S3Blobs, open_blobs, sha256_hex
from ccscope.verdict import Verdict
from tests.store.s3 import s3_bucket, s3_endpoint

__all__ = ["s3_bucket", "s3_endpoint"]


def test_s3_blobs_contract(s3_bucket: str, s3_endpoint: str) -> None:
    blobs = open_blobs(f"s3://{s3_bucket}/ccscope/traces")
    assert isinstance(blobs, S3Blobs) and blobs.endpoint_url == s3_endpoint
    data = b'{"format": "ccscope-trace/1"}' * 1000
    digest = blobs.put(data)
    assert digest == sha256_hex(data) and blobs.exists(digest)
    assert blobs.get(digest) == data
    assert blobs.put(data) == digest  # content-addressed: a retry is a no-op
    raw = boto3.client("s3", endpoint_url=s3_endpoint)
    key = f"ccscope/traces/{digest[:2]}/{digest[2:4]}/{digest}"
    listed = raw.list_objects_v2(Bucket=s3_bucket)["Contents"]
    assert [o["Key"] for o in listed] == [key]
    # Missing and corrupt objects are errors the caller can tell apart, never wrong bytes.
    other = sha256_hex(b"never stored")
    assert not blobs.exists(other)
    with pytest.raises(BlobError, match="missing"):
        blobs.get(other)
    raw.put_object(Bucket=s3_bucket, Key=key, Body=b"tampered")
    with pytest.raises(BlobError, match="corrupt"):
        blobs.get(digest)
    with pytest.raises(BlobError):
        blobs.get("../../etc/passwd")


def test_s3_upload_names_its_checksum(s3_bucket: str) -> None:
    # The upload carries the content's SHA-256 (x-amz-checksum-sha256), which S3 checks against
    # the bytes it receives. (moto accepts the header without checking it, so look at the wire.)
    blobs = S3Blobs(f"s3://{s3_bucket}")
    sent: list[dict[str, bytes]] = []
    blobs.client.meta.events.register(
        "before-send.s3.PutObject", lambda request, **_: sent.append(dict(request.headers))
    )
    digest = blobs.put(b"the trace")
    assert len(sent) == 1 and sent[0]["x-amz-checksum-sha256"] == _b64(digest).encode()
    assert blobs.key(digest) == f"{digest[:2]}/{digest[2:4]}/{digest}"  # no prefix
    blobs.put(b"the trace")
    assert len(sent) == 1  # already there: not sent again


def test_s3_unreachable_is_a_blob_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ccscope.store.pgcluster import free_port

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    blobs = S3Blobs("s3://nowhere/p", endpoint_url=f"http://127.0.0.1:{free_port()}")
    blobs.client.meta.config.retries = {"max_attempts": 1}
    with pytest.raises(BlobError):
        blobs.put(b"data")
    with pytest.raises(BlobError):
        S3Blobs("http://not-s3/x")


def test_store_keeps_traces_in_the_bucket(s3_bucket: str, store_url: str) -> None:
    """A store whose trace location is s3://...: traces go to the bucket, reads verify them."""
    store = Store(store_url, f"s3://{s3_bucket}/prod")
    store.migrate()
    store.add_vantage("paris")
    m, _ = store.enqueue_measurement("a.example", "paris", "tcp", "s3")
    store.transition(m.id, "running")
    t = store.add_trace(m.id, b"trace bytes", profile="A")
    assert store.read_trace(t.sha256) == b"trace bytes"
    store.transition(m.id, "captured")
    store.record_verdict(m.id, Verdict("cubic", "cca", 0.9, "e", "t-1"))
    # The API serves it from the bucket too.
    from fastapi.testclient import TestClient

    from ccscope.api.app import create_app

    with TestClient(create_app(store, token="t", lab=False)) as c:
        r = c.get(f"/v1/measurements/{m.id}/trace")
        assert r.status_code == 200 and r.content == b"trace bytes"
        assert r.headers["etag"] == f'"{t.sha256}"'
    assert store.census()[0].date == dt.datetime.now(dt.UTC).date()
    store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return str(request.getfixturevalue("pg_cluster").new_database())


def _b64(hexdigest: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(hexdigest)).decode()
