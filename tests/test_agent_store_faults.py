"""Damage and exhaustion on the device, against a real agent: a truncated manifest, flipped bits in a model
file, a full disk during an upload, a kill -9 in the middle of an install."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from edgekit import agent_package
from edgekit_sdk import AgentClient, AgentHTTPError

pytestmark = pytest.mark.e2e
X = np.zeros((1, 3, 16, 16), np.float32)


@pytest.fixture
def deployed(local_device, tiny_bundle):
    from edgekit.deployer import deploy

    deploy(tiny_bundle, local_device, bench=False)
    return local_device


def version_dir(dev, version):
    return os.path.join(dev.root, "models", "tiny", "versions", version)


def test_unreadable_model_is_skipped_and_a_redeploy_repairs_it(deployed, tiny_bundle):
    from edgekit.deployer import deploy

    version = deployed.client.models()[0]["version"]
    mf = os.path.join(version_dir(deployed, version), "manifest.json")
    with open(mf, "r+") as f:
        f.truncate(40)
    answer = deployed.client.request("GET", "/v1/models")
    assert answer["models"] == [] and answer["unreadable"][0]["name"] == "tiny"
    assert "damaged" in answer["unreadable"][0]["error"] and "deploy it again" in answer["unreadable"][0]["error"]
    deploy(tiny_bundle, deployed, bench=False)  # the same version again: found damaged, sent again
    assert deployed.client.models()[0]["version"] == version
    assert deployed.client.infer("tiny", {"input": X})["probs"].shape == (1, 10)


def test_flipped_bits_are_found_on_load_and_rollback_copies_are_not_shared(deployed, tiny_model, tiny_calib, tmp_path):
    import edgekit
    from edgekit.deployer import deploy

    first = deployed.client.models()[0]["version"]
    out = tmp_path / "tiny-int8"
    edgekit.build(tiny_model, "host", out, precision="int8", calib=tiny_calib, name="tiny")
    second = deploy(out, deployed, bench=False)["installed"]["version"]
    a, b = version_dir(deployed, first), version_dir(deployed, second)
    shared = set(os.listdir(a)) & set(os.listdir(b)) - {"manifest.json"}
    for name in shared:  # a file both versions hold is a copy: damage to one cannot reach the other
        assert os.stat(os.path.join(a, name)).st_ino != os.stat(os.path.join(b, name)).st_ino, name
    with open(os.path.join(b, "manifest.json")) as f:
        manifest = json.load(f)
    model = os.path.join(b, manifest["model"])
    with open(model, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with open(model, "r+b") as f:  # in place, as a failing flash cell would
        f.write(bytes(data))
    with pytest.raises(AgentHTTPError) as e:
        deployed.client.load("tiny")
    assert e.value.status == 409 and "damaged" in e.value.message and "roll back" in e.value.message
    assert deployed.client.rollback("tiny")["version"] == first
    assert deployed.client.load("tiny")["version"] == first
    assert deployed.client.infer("tiny", {"input": X})["probs"].shape == (1, 10)


def _can_mount_tmpfs():
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return r.returncode == 0


def _upload(client, bundle_dir, manifest, files):
    for name in client.begin_upload("tiny", manifest["id"], manifest)["missing"]:
        client.put_file("tiny", manifest["id"], name, files[name])
    return client.commit("tiny", manifest["id"])


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unprivileged user and mount namespaces (unshare -Urm)")
def test_disk_full_during_upload_says_so_and_cleans_up(tmp_path, tiny_bundle):
    """The agent's model store on a 1 MiB tmpfs (in its own mount namespace): a real ENOSPC."""
    root = tmp_path / "dev"
    (root / "models").mkdir(parents=True)
    pyz, _ = agent_package.build(tmp_path)
    script = 'mount -t tmpfs -o size=1m tmpfs "$1" && exec "$2" "$3" serve --root "$4" --port 0'
    cmd = ["unshare", "-Urm", "sh", "-c", script, "sh", str(root / "models"), sys.executable, str(pyz), str(root)]
    log = tmp_path / "agent.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        state_file = root / "agent" / "state.json"
        while not state_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert state_file.exists(), log.read_text()
        state = json.loads(state_file.read_text())
        client = AgentClient("127.0.0.1", state["port"], root=str(root))
        manifest = json.loads((tiny_bundle / "manifest.json").read_text())
        files = {f["name"]: (tiny_bundle / f["name"]).read_bytes() for f in manifest["files"]}
        first = _upload(client, tiny_bundle, manifest, files)["version"]
        big = os.urandom(2 << 20)
        files["weights.bin"] = big
        manifest["files"].append(
            {"name": "weights.bin", "role": "weights", "size": len(big), "sha256": hashlib.sha256(big).hexdigest()}
        )
        manifest["id"] = "toobig0000000001"
        with pytest.raises(AgentHTTPError) as e:
            _upload(client, tiny_bundle, manifest, files)
        assert e.value.status == 507 and "disk is full" in e.value.message
        seen = f"/proc/{proc.pid}/root{root}/models/tiny/staging"  # the store as the agent sees it
        assert not os.path.exists(os.path.join(seen, manifest["id"])), os.listdir(seen)
        assert client.models()[0]["version"] == first
        assert client.infer("tiny", {"input": X})["probs"].shape == (1, 10)
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_kill_9_mid_install_loses_nothing(deployed, tiny_bundle, tmp_path):
    """The agent killed while a new version is half uploaded: the old version still serves, after the
    supervisor's restart, and the same upload resumes and installs."""
    first = deployed.client.models()[0]["version"]
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    big = os.urandom(8 << 20)
    manifest["files"].append(
        {"name": "weights.bin", "role": "weights", "size": len(big), "sha256": hashlib.sha256(big).hexdigest()}
    )
    manifest["id"] = "halfway000000001"
    c = deployed.client
    c.begin_upload("tiny", manifest["id"], manifest)
    pid = deployed.state["pid"]

    class Slow:
        sent, killed = 0, False

        def read(self, n):
            block = big[self.sent : self.sent + min(n, 1 << 20)]
            self.sent += len(block)
            if self.sent >= len(big) // 2 and not self.killed:
                self.killed = True
                os.kill(pid, signal.SIGKILL)
            return block

    with pytest.raises((OSError, AgentHTTPError)):
        c.put_file("tiny", manifest["id"], "weights.bin", Slow(), length=len(big))
    deadline = time.monotonic() + 30
    while True:  # the supervisor starts the agent again
        try:
            deployed.ensure_agent()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert deployed.state["pid"] != pid
    c = deployed.client
    assert c.models()[0]["version"] == first
    assert c.infer("tiny", {"input": X})["probs"].shape == (1, 10)
    again = c.begin_upload("tiny", manifest["id"], manifest)
    offset = again["partial"].get("weights.bin", 0)
    assert again["missing"] == ["weights.bin"] and offset > 0  # what arrived before the kill is kept
    c.put_file("tiny", manifest["id"], "weights.bin", big[offset:], offset=offset)
    assert c.commit("tiny", manifest["id"])["version"] == manifest["id"]
    assert c.infer("tiny", {"input": X})["probs"].shape == (1, 10)
