"""Deploys that survive the real world: only changed bytes travel, cut uploads resume,
versions switch atomically and roll back, and the agent comes back after a crash."""

import json
import os
import signal
import socket
import time

import pytest
from harness import one_json, run_cli

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory, tiny_model, tiny_calib):
    import edgekit

    base = tmp_path_factory.mktemp("delta")
    fp32, int8 = base / "tiny-fp32", base / "tiny-int8"
    edgekit.build(tiny_model, "host", fp32, precision="fp32", calib=tiny_calib, name="tiny")
    edgekit.build(tiny_model, "host", int8, precision="int8", calib=tiny_calib, name="tiny")
    return fp32, int8


def _manifest(bundle):
    return json.loads((bundle / "manifest.json").read_text())


def test_unchanged_redeploy_sends_under_1kb_and_shared_files_are_not_sent(local_device, two_builds):
    from edgekit.deployer import deploy

    fp32, int8 = two_builds
    first = deploy(fp32, local_device, bench=False)["installed"]
    assert first["transfer"]["files_sent"] == len(_manifest(fp32)["files"])
    again = deploy(fp32, local_device, bench=False)["installed"]
    assert again["unchanged"] and again["transfer"]["payload_bytes"] == 0
    assert again["transfer"]["request_bytes"] < 1024, again["transfer"]
    # The int8 build shares its sample inputs with the fp32 one: the device links its copy.
    second = deploy(int8, local_device, bench=False)["installed"]
    shared = {f["sha256"] for f in _manifest(fp32)["files"]} & {f["sha256"] for f in _manifest(int8)["files"]}
    assert shared and second["transfer"]["files_reused"] == len(shared)
    new_bytes = sum(f["size"] for f in _manifest(int8)["files"] if f["sha256"] not in shared)
    assert second["transfer"]["payload_bytes"] == new_bytes


def _cut_upload(port, name, version, fname, data, keep, token):
    """Send ``keep`` bytes of a file upload, then drop the connection (a cable pulled mid-transfer)."""
    s = socket.create_connection(("127.0.0.1", port))
    head = (
        f"PUT /v1/bundles/{name}/{version}/files/{fname} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    s.sendall(head + data[:keep])
    time.sleep(0.3)
    s.close()


def test_cut_upload_resumes_at_the_byte_it_stopped(local_device, two_builds):
    from edgekit.deployer import deploy

    fp32, int8 = two_builds
    deploy(fp32, local_device, bench=False)
    m = _manifest(int8)
    big = max(m["files"], key=lambda f: f["size"])
    data = (int8 / big["name"]).read_bytes()
    c = local_device.client
    state = c.begin_upload(m["name"], m["id"], m)
    assert big["name"] in state["missing"]
    keep = len(data) // 2
    _cut_upload(local_device.state["port"], m["name"], m["id"], big["name"], data, keep, local_device.client.token)
    deadline = time.time() + 10
    while time.time() < deadline:
        partial = c.begin_upload(m["name"], m["id"], m)["partial"]
        if partial.get(big["name"]) == keep:
            break
        time.sleep(0.1)
    assert partial.get(big["name"]) == keep
    # the device still serves the fp32 version, whole
    assert c.models()[0]["version"] == _manifest(fp32)["id"]
    result = deploy(int8, local_device, bench=False)["installed"]
    assert result["transfer"]["resumed_bytes"] == keep
    assert local_device.client.models()[0]["version"] == m["id"]


def test_resume_at_a_wrong_offset_is_refused(local_device, two_builds):
    from edgekit_sdk import AgentHTTPError

    fp32, _ = two_builds
    local_device.ensure_agent()
    m = dict(_manifest(fp32), id="offsettest000001")
    entry = m["files"][0] = dict(m["files"][0], sha256="ab" * 32)
    local_device.client.begin_upload(m["name"], m["id"], m)
    with pytest.raises(AgentHTTPError) as e:
        local_device.client.put_file(m["name"], m["id"], entry["name"], b"x" * (entry["size"] - 10), offset=10)
    assert e.value.status == 409 and "cannot resume at byte 10" in e.value.message


def test_rollback_and_models_commands(agent_roots, tmp_path, two_builds):
    fp32, int8 = two_builds
    root = agent_roots("device")
    where = ["--local", "--device-root", root]
    run_cli("deploy", fp32, *where, "--runs", "3", "--warmup", "1", "--json", check=0)
    run_cli("deploy", int8, *where, "--runs", "3", "--warmup", "1", "--json", check=0)
    v32, v8 = _manifest(fp32)["id"], _manifest(int8)["id"]
    models = one_json(run_cli("models", *where, "--json", check=0).stdout)["models"]
    assert models[0]["version"] == v8 and set(models[0]["versions"]) == {v32, v8}
    r = one_json(run_cli("rollback", "tiny", *where, "--json", check=0).stdout)
    assert r["version"] == v32 and r["previous"] == v8
    r = one_json(run_cli("rollback", "tiny", "--to", v8, *where, "--json", check=0).stdout)
    assert r["version"] == v8
    p = run_cli("rollback", "tiny", "--to", "0000000000000000", *where, check=5)
    assert "no version '0000000000000000'" in p.stderr and v32 in p.stderr
    p = run_cli("rollback", "nosuchmodel", *where, check=5)
    assert "unknown model" in p.stderr
    text = run_cli("models", *where, check=0).stdout
    assert "tiny" in text and v8 + "*" in text
    run_cli("models", "--remove", "tiny", *where, check=0)
    assert one_json(run_cli("models", *where, "--json", check=0).stdout)["models"] == []
    assert "unknown model" in run_cli("models", "--remove", "tiny", *where, check=5).stderr


def test_agent_comes_back_after_a_crash_on_the_same_port(local_device, two_builds):
    from edgekit.deployer import deploy
    from edgekit_agent import daemon

    fp32, _ = two_builds
    deploy(fp32, local_device, bench=False)
    before = daemon.read_state(local_device.root)
    assert before["supervisor_pid"] and before["restarts"] == 0
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.time() + 20
    after = before
    while time.time() < deadline:
        after = daemon.status(local_device.root)
        if after.get("running") and after["pid"] != before["pid"]:
            break
        time.sleep(0.1)
    assert after.get("running") and after["pid"] != before["pid"], after
    assert after["port"] == before["port"] and after["restarts"] == 1
    # the forwarded port and the client keep working; the model is served again
    import numpy as np

    out = local_device.client.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})
    assert out
    stopped = daemon.stop(local_device.root)
    assert stopped["stopped"]
    assert not daemon.alive(after["pid"]) and not daemon._is_supervisor(after["supervisor_pid"])


def test_repeated_rollbacks_step_back_through_the_installs(tmp_path):
    from edgekit_agent.store import Store

    store = Store(str(tmp_path / "root"))
    import hashlib

    for i in (1, 2, 3):
        data = f"model {i}".encode()
        m = {
            "files": [{"name": "m.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}],
            "model": "m.bin",
        }
        v = f"v{i}"
        store.begin("m", v, m)
        import io

        store.receive("m", v, "m.bin", io.BytesIO(data), len(data))
        store.commit("m", v)
    assert store.current_version("m") == "v3"
    assert [store.rollback("m")["version"] for _ in range(2)] == ["v2", "v1"]
    from edgekit_agent.store import StoreError

    with pytest.raises(StoreError, match="no earlier version"):
        store.rollback("m")
    assert store.rollback("m", "v3")["version"] == "v3"


def test_manifest_names_that_could_collide_are_refused(tmp_path):
    from edgekit_agent.store import Store, StoreError

    store = Store(str(tmp_path / "root"))
    entry = {"name": "a.bin", "size": 1, "sha256": "0" * 64}
    with pytest.raises(StoreError, match="listed twice"):
        store.begin("m", "v1", {"files": [entry, dict(entry)], "model": "a.bin"})
    with pytest.raises(StoreError, match="reserved"):
        store.begin("m", "v1", {"files": [dict(entry, name="a.link")], "model": "a.link"})


def test_a_partial_file_that_is_not_this_files_beginning_is_sent_whole(local_device, two_builds):
    from edgekit.deployer import deploy

    fp32, int8 = two_builds
    deploy(fp32, local_device, bench=False)
    m = _manifest(int8)
    big = max(m["files"], key=lambda f: f["size"])
    c = local_device.client
    c.begin_upload(m["name"], m["id"], m)
    junk = b"\x00" * (big["size"] // 3)
    _cut_upload(
        local_device.state["port"],
        m["name"],
        m["id"],
        big["name"],
        junk + b"\x00" * (big["size"] - len(junk)),
        len(junk),
        c.token,
    )
    result = deploy(int8, local_device, bench=False)["installed"]
    assert result["transfer"]["resumed_bytes"] == 0 and local_device.client.models()[0]["version"] == m["id"]


def test_stop_leaves_no_supervisor_or_server(local_device, two_builds):
    from edgekit_agent import daemon

    local_device.ensure_agent()
    state = daemon.read_state(local_device.root)
    for _ in range(3):
        result = daemon.stop(local_device.root)
        assert result["stopped"] and not result["forced"]  # stopped by SIGTERM, cleanly, not killed
        assert not daemon.alive(state["pid"]) and not daemon._is_supervisor(state["supervisor_pid"])
        assert daemon.read_state(local_device.root) is None
        local_device.ensure_agent()
        state = daemon.read_state(local_device.root)
    from pathlib import Path

    assert "Traceback" not in Path(daemon.log_path(local_device.root)).read_text()
