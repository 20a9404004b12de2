"""Pull delivery, store half: `edgekit publish` to a directory served by a real nginx, and the agent's fetcher
(range requests, resume after a cut connection, verification through the store's upload path)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from harness.pullbundles import variant
from harness.servers import CuttingProxy, Nginx

from edgekit.errors import BundleError, EdgekitError
from edgekit.fleet_pull import publish
from edgekit_agent.pull_fetch import Fetcher, FetchError
from edgekit_agent.store import Store

needs_nginx = pytest.mark.skipif(
    not os.path.exists("/usr/sbin/nginx"), reason="scripts/bootstrap.sh --test installs nginx-light"
)


@pytest.fixture
def versions(tiny_bundle, tmp_path):
    return [variant(tiny_bundle, tmp_path / f"v{i}", pad_bytes=300_000, seed=i) for i in (1, 2)]


def test_publish_writes_content_addressed_layout(versions, tmp_path):
    store = tmp_path / "store"
    first = publish(versions[0], store)
    manifest_bytes = (versions[0] / "manifest.json").read_bytes()
    assert first["digest"] == "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    assert (store / "manifests/sha256" / first["digest"][7:]).read_bytes() == manifest_bytes
    manifest = json.loads(manifest_bytes)
    for entry in manifest["files"]:
        assert hashlib.sha256((store / "blobs/sha256" / entry["sha256"]).read_bytes()).hexdigest() == entry["sha256"]
    index = json.loads((store / "bundles" / f"{manifest['id']}.json").read_text())
    assert index["digest"] == first["digest"] and index["name"] == manifest["name"]
    assert first["blobs_written"] == len(manifest["files"]) and first["blobs_present"] == 0
    # the second version shares every file but the padding: only that blob is written
    second = publish(versions[1], store)
    assert second["blobs_written"] == 1 and second["blobs_present"] == len(manifest["files"]) - 1
    assert publish(versions[1], store)["blobs_written"] == 0  # publishing again writes no blob


def test_publish_refuses_a_damaged_bundle_and_a_bad_store(versions, tmp_path):
    (versions[0] / "pad.bin").write_bytes(b"altered")
    with pytest.raises(BundleError, match="does not match its sha256"):
        publish(versions[0], tmp_path / "store")
    assert not (tmp_path / "store").exists()  # nothing half-written
    (tmp_path / "file").write_text("x")
    with pytest.raises(EdgekitError, match="is a file"):
        publish(versions[1], tmp_path / "file")
    with pytest.raises(EdgekitError, match="--endpoint is for an s3:// store"):
        publish(versions[1], tmp_path / "store", endpoint="http://127.0.0.1:1")


@needs_nginx
def test_fetch_installs_from_nginx_and_reuses_installed_files(versions, tmp_path):
    store_dir = tmp_path / "store"
    d1, d2 = (publish(v, store_dir)["digest"] for v in versions)
    device = Store(str(tmp_path / "device"))
    with Nginx(store_dir) as nginx:
        fetcher = Fetcher(device, backoff_s=0.01)
        r1 = fetcher.install("tiny", nginx.url, d1)
        assert r1["version"] == json.loads((versions[0] / "manifest.json").read_text())["id"]
        assert device.current_version("tiny") == r1["version"]
        assert r1["transfer"]["files_fetched"] == len(json.loads((versions[0] / "manifest.json").read_text())["files"])
        r2 = fetcher.install("tiny", nginx.url, d2)
        assert r2["previous"] == r1["version"] and r2["transfer"]["files_fetched"] == 1  # only the new blob
        assert r2["transfer"]["files_reused"] >= 1
        assert fetcher.install("tiny", nginx.url, d2)["unchanged"]
        # every blob and manifest whole (200); the signature each unsigned bundle may have had, not there (404)
        assert all(" 200 " in line or line.split()[0].endswith(".sig") and " 404 " in line for line in nginx.requests())


@needs_nginx
def test_fetch_cut_midway_keeps_old_version_then_resumes_with_a_range(versions, tmp_path):
    store_dir = tmp_path / "store"
    d1, d2 = (publish(v, store_dir)["digest"] for v in versions)
    pad_sha = json.loads((versions[1] / "manifest.json").read_text())["files"][-1]["sha256"]
    device = Store(str(tmp_path / "device"))
    with Nginx(store_dir) as nginx, CuttingProxy(nginx.port, f"/blobs/sha256/{pad_sha}", after=100_000) as proxy:
        v1 = Fetcher(device).install("tiny", proxy.url, d1)["version"]
        with pytest.raises(FetchError, match="next try resumes") as cut:
            Fetcher(device, attempts=1).install("tiny", proxy.url, d2)
        assert not cut.value.permanent
        assert device.current_version("tiny") == v1  # the old version keeps serving
        v2 = json.loads((versions[1] / "manifest.json").read_text())["id"]
        part = tmp_path / "device/models/tiny/staging" / v2 / "pad.bin.part"
        kept = part.stat().st_size
        assert 0 < kept < 300_000
        result = Fetcher(device).install("tiny", proxy.url, d2)
        assert result["version"] == v2 and device.current_version("tiny") == v2
        assert result["transfer"]["resumed_bytes"] == kept
        assert result["transfer"]["payload_bytes"] == 300_000 - kept
        assert any(f"{pad_sha} 206 range=bytes={kept}-" in line for line in nginx.requests())
        device.verify_files(*device.version("tiny", v2))


@needs_nginx
def test_fetch_refuses_a_wrong_digest_and_a_missing_blob(versions, tmp_path):
    store_dir = tmp_path / "store"
    d1, d2 = (publish(v, store_dir)["digest"] for v in versions)
    device = Store(str(tmp_path / "device"))
    with Nginx(store_dir) as nginx:
        v1 = Fetcher(device).install("tiny", nginx.url, d1)["version"]
        with pytest.raises(FetchError, match="has no bundle with digest") as e:
            Fetcher(device).install("tiny", nginx.url, "sha256:" + "0" * 64)
        assert e.value.permanent
        pad_sha = json.loads((versions[1] / "manifest.json").read_text())["files"][-1]["sha256"]
        (store_dir / "blobs/sha256" / pad_sha).unlink()
        with pytest.raises(FetchError, match="lacks blobs/sha256/"):
            Fetcher(device, backoff_s=0.01).install("tiny", nginx.url, d2)
        # a blob altered in the store: received, found not to match its sha256, discarded; never installed
        (store_dir / "blobs/sha256" / pad_sha).write_bytes(b"x" * 300_000)
        with pytest.raises(FetchError, match="does not match the manifest"):
            Fetcher(device, attempts=2, backoff_s=0.01).install("tiny", nginx.url, d2)
        with pytest.raises(FetchError, match="is model 'tiny', not 'other'"):
            Fetcher(device).install("other", nginx.url, d1)
        assert device.current_version("tiny") == v1


def test_desired_payloads_and_names_are_checked():
    from edgekit_agent.pull_config import parse_broker
    from edgekit_agent.pull_layout import PayloadError, desired_payload, device_topic, parse_desired

    good = {"tiny": {"digest": "sha256:" + "a" * 64, "store": "https://store.example/edge"}}
    assert parse_desired(desired_payload(good)) == good
    assert parse_desired(b"") == {}  # a cleared retained message desires nothing
    assert parse_desired(json.dumps({"models": {"tiny": {"digest": "a" * 64, "store": "http://s"}}}).encode()) == {
        "tiny": {"digest": "sha256:" + "a" * 64, "store": "http://s"}
    }
    removal = {"tiny": {"remove": True}, "other": good["tiny"]}  # a removal entry beside an ordinary one
    assert parse_desired(desired_payload(removal)) == removal
    for payload, message in [
        (json.dumps({"models": {"tiny": {"remove": False}}}).encode(), "a removal is"),
        (json.dumps({"models": {"tiny": dict(good["tiny"], remove=True)}}).encode(), "a removal is"),
        (b"{", "not JSON"),
        (b"[]", "must be an object"),
        (json.dumps({"models": {"../x": good["tiny"]}}).encode(), "invalid model"),
        (
            json.dumps({"models": {"tiny": {"digest": "sha256:zz", "store": "http://s"}}}).encode(),
            "invalid bundle digest",
        ),
        (json.dumps({"models": {"tiny": {"digest": "a" * 64, "store": "file:///etc"}}}).encode(), "not an http"),
    ]:
        with pytest.raises(PayloadError, match=message):
            parse_desired(payload)
    assert device_topic("lab", "cam-1", "state") == "edgekit/lab/devices/cam-1/state"
    with pytest.raises(PayloadError, match="no '/', '\\+' or '#'"):
        device_topic("lab", "cam/#", "state")
    assert parse_broker("mqtt://b") == ("b", 1883, False) and parse_broker("mqtts://b:9000") == ("b", 9000, True)
    for bad in ("http://b", "mqtt://user:pw@b"):
        with pytest.raises(PayloadError):
            parse_broker(bad)


@needs_nginx
def test_a_device_that_trusts_a_key_pulls_only_what_it_signed(versions, tmp_path):
    """`edgekit publish` puts a signed bundle's signature beside its manifest; the fetcher brings it to the store's
    commit, which judges it against the device's trusted keys: unsigned or signed by another key is refused, the
    old version still serving; signed by the trusted key installs and names its signer."""
    from edgekit import signing
    from edgekit_agent.trust import Trust

    alice = signing.keygen(tmp_path / "keys" / "alice", "alice")
    mallory = signing.keygen(tmp_path / "keys" / "mallory", "mallory")
    store_dir = tmp_path / "store"
    signing.sign(versions[0], alice, "alice@lab")
    first = publish(versions[0], store_dir)
    assert first["signed"] and (store_dir / "manifests/sha256" / (first["digest"][7:] + ".sig")).is_file()
    unsigned = publish(versions[1], store_dir)
    assert not unsigned["signed"]
    device = Store(str(tmp_path / "device"))
    Trust(device.root).add(signing.public_key(alice), "alice@lab")
    with Nginx(store_dir) as nginx:
        r1 = Fetcher(device).install("tiny", nginx.url, first["digest"])
        assert r1["signed_by"] == "alice@lab" and device.current_version("tiny") == r1["version"]
        with pytest.raises(FetchError, match="not signed") as e:
            Fetcher(device).install("tiny", nginx.url, unsigned["digest"])
        assert e.value.permanent and device.current_version("tiny") == r1["version"]
        signing.sign(versions[1], mallory, "mallory")  # signed, by a key the device does not trust
        assert publish(versions[1], store_dir)["digest"] == unsigned["digest"]  # same manifest: same digest
        with pytest.raises(FetchError, match="not trust|untrusted|not one of"):
            Fetcher(device).install("tiny", nginx.url, unsigned["digest"])
        assert device.current_version("tiny") == r1["version"]
        signing.sign(versions[1], alice, "alice@lab")
        publish(versions[1], store_dir)
        r2 = Fetcher(device).install("tiny", nginx.url, unsigned["digest"])
        assert r2["signed_by"] == "alice@lab" and r2["previous"] == r1["version"]
