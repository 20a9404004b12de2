"""Pull delivery from an S3-compatible store: `edgekit publish --store s3://... --endpoint` to moto's server, and
the agent's fetcher reading the same layout over plain HTTP, range resume included."""

from __future__ import annotations

import json

import pytest
from harness.pullbundles import variant
from harness.servers import CuttingProxy, MotoS3

from edgekit.errors import EdgekitError
from edgekit.fleet_pull import publish
from edgekit_agent.pull_fetch import Fetcher, FetchError
from edgekit_agent.store import Store

boto3 = pytest.importorskip("boto3", reason="edgekit[fleet] installs boto3")


@pytest.fixture
def s3(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    with MotoS3() as server:
        client = boto3.client("s3", endpoint_url=server.url)
        client.create_bucket(Bucket="models")
        # devices read the store anonymously: the bucket's policy lets anyone get its objects (as for a CDN origin)
        statement = {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::models/*"}
        client.put_bucket_policy(
            Bucket="models", Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]})
        )
        yield server


def test_publish_to_s3_and_fetch_with_a_resume(s3, tiny_bundle, tmp_path):
    v1, v2 = (variant(tiny_bundle, tmp_path / f"v{i}", pad_bytes=200_000, seed=i) for i in (1, 2))
    first = publish(v1, "s3://models/edge", endpoint=s3.url)
    second = publish(v2, "s3://models/edge", endpoint=s3.url)
    n = len(json.loads((v1 / "manifest.json").read_text())["files"])
    assert first["blobs_written"] == n and second["blobs_written"] == 1 and second["blobs_present"] == n - 1
    assert publish(v2, "s3://models/edge", endpoint=s3.url)["blobs_written"] == 0
    index = boto3.client("s3", endpoint_url=s3.url).get_object(Bucket="models", Key=f"edge/bundles/{second['id']}.json")
    assert json.loads(index["Body"].read())["digest"] == second["digest"]

    device = Store(str(tmp_path / "device"))
    base = f"{s3.url}/models/edge"
    v1_id = Fetcher(device).install("tiny", base, first["digest"])["version"]
    pad = json.loads((v2 / "manifest.json").read_text())["files"][-1]["sha256"]
    with CuttingProxy(s3.port, f"/blobs/sha256/{pad}", after=80_000) as proxy:
        proxied = f"{proxy.url}/models/edge"
        with pytest.raises(FetchError, match="next try resumes"):
            Fetcher(device, attempts=1).install("tiny", proxied, second["digest"])
        assert device.current_version("tiny") == v1_id
        result = Fetcher(device).install("tiny", proxied, second["digest"])
    assert result["version"] == second["id"] and result["transfer"]["resumed_bytes"] > 0
    assert result["transfer"]["resumed_bytes"] + result["transfer"]["payload_bytes"] == 200_000


def test_s3_store_errors_are_clear(s3, tiny_bundle):
    with pytest.raises(EdgekitError, match="not s3://BUCKET"):
        publish(tiny_bundle, "s3://", endpoint=s3.url)
    with pytest.raises(EdgekitError, match="NoSuchBucket|does not exist"):
        publish(tiny_bundle, "s3://no-such-bucket/x", endpoint=s3.url)
