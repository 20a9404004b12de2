"""Model files encrypted at rest (``--encrypt-key``), against real agents started from the zipapp."""

import ctypes
import glob
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from harness import stop_agent

from edgekit import agent_package
from edgekit_sdk import AgentHTTPError

pytestmark = pytest.mark.e2e
X = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)


def key_file(path, mode=0o600):
    path.write_bytes(os.urandom(32))
    path.chmod(mode)
    return path


def agent(root, *args, python=sys.executable):
    """``edgekit-agent.pyz ARGS --root ROOT`` (the zipapp where a deploy puts it): its exit code, JSON and stderr."""
    pyz = root / "agent" / "edgekit-agent.pyz"
    if not pyz.exists():
        built, _ = agent_package.build(root / "agent")
        shutil.copy(built, pyz)
    p = subprocess.run([python, str(pyz), *args, "--root", str(root)], capture_output=True, text=True, timeout=90)
    out = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else None
    return p.returncode, out, p.stderr


def deploy(root, bundle):
    from edgekit.deployer import deploy, open_device

    dev = open_device("local", device_root=str(root))
    deploy(bundle, dev, bench=False)
    return dev


def stored(root, name):
    (version_dir,) = glob.glob(str(root / "models" / name / "versions" / "*"))
    return version_dir, json.loads(read(version_dir, "manifest.json"))


def read(directory, name):
    with open(os.path.join(directory, name), "rb") as f:
        return f.read()


def entropy(data):
    counts = Counter(data)
    return -sum(c / len(data) * math.log2(c / len(data)) for c in counts.values())


def renamed(bundle, name, tmp_path):
    out = tmp_path / name
    shutil.copytree(bundle, out)
    mf = json.loads((out / "manifest.json").read_text())
    mf["name"] = name
    (out / "manifest.json").write_text(json.dumps(mf))
    return out


def test_model_files_are_encrypted_at_rest_and_answer_the_same(tmp_path, tiny_bundle, agent_roots):
    import onnxruntime as ort

    root = agent_roots("device")
    plain_model = (tiny_bundle / json.loads((tiny_bundle / "manifest.json").read_text())["model"]).read_bytes()
    expected = ort.InferenceSession(plain_model).run(None, {"input": X})[0]

    # Installed before the agent had a key: sealed (with the copies kept for rollback) once it has one.
    deploy(root, tiny_bundle).close()
    assert agent(root, "stop")[0] == 0
    key = key_file(tmp_path / "model.key")
    shm_before = set(glob.glob("/dev/shm/edgekit-model-*"))
    code, state, err = agent(root, "start", "--encrypt-key", str(key))
    assert code == 0, err
    assert state["encrypt"]["cipher"] == "AES-256-GCM" and state["encrypt"]["key"] == str(key)
    dev = deploy(root, tiny_bundle)  # deploy starts the agent the way it is: with the remembered key
    try:
        assert dev.state["encrypt"]["key_id"] == state["encrypt"]["key_id"]
        version_dir, manifest = stored(root, "tiny")
        for entry in manifest["files"]:
            data = read(version_dir, entry["name"])
            plain = (tiny_bundle / entry["name"]).read_bytes()
            assert data[:8] == b"EKSEAL01" and plain[:64] not in data and len(data) > entry["size"]
        model = read(version_dir, manifest["model"])
        assert not model.startswith(plain_model[:16]) and entropy(model[24:]) > 7.9
        got = dev.client.infer("tiny", {"input": X})["probs"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        assert dev.client.bench("tiny", runs=3, warmup=0)["version"] == manifest["id"]
        assert set(glob.glob("/dev/shm/edgekit-model-*")) == shm_before  # the plain files lived for the load only
    finally:
        dev.close()
    # A restart reloads it from the sealed files.
    assert agent(root, "stop")[0] == 0
    dev = deploy(root, tiny_bundle)
    try:
        np.testing.assert_allclose(dev.client.infer("tiny", {"input": X})["probs"], expected, rtol=1e-5, atol=1e-6)
    finally:
        dev.close()


def test_a_wrong_or_missing_key_is_named_and_other_models_keep_serving(tmp_path, tiny_bundle, agent_roots):
    root = agent_roots("device")
    key_a, key_b = key_file(tmp_path / "a.key"), key_file(tmp_path / "b.key")
    assert agent(root, "start", "--encrypt-key", str(key_a))[0] == 0
    deploy(root, tiny_bundle).close()  # sealed with key A
    assert agent(root, "stop")[0] == 0

    os.unlink(root / "agent" / "config.json")  # forget the key: the agent starts without one
    dev = deploy(root, renamed(tiny_bundle, "other", tmp_path))  # installed plain
    try:
        with pytest.raises(AgentHTTPError) as e:
            dev.client.infer("tiny", {"input": X})
        assert e.value.status == 409 and "encrypted at rest" in e.value.message and "--encrypt-key" in e.value.message
        assert dev.client.infer("other", {"input": X})["probs"].shape == (1, 10)
    finally:
        dev.close()
    assert agent(root, "stop")[0] == 0

    assert agent(root, "start", "--encrypt-key", str(key_b))[0] == 0  # seals "other" with key B
    dev = deploy(root, renamed(tiny_bundle, "other", tmp_path / "again"))
    try:
        with pytest.raises(AgentHTTPError) as e:
            dev.client.load("tiny")
        assert e.value.status == 409 and "another key" in e.value.message and str(key_b) in e.value.message
        assert dev.client.infer("other", {"input": X})["probs"].shape == (1, 10)
        version_dir, manifest = stored(root, "other")
        assert read(version_dir, manifest["model"])[:8] == b"EKSEAL01"
    finally:
        dev.close()


def test_unusable_keys_are_refused_before_the_agent_starts(tmp_path, agent_roots):
    root = agent_roots("device")
    loose = key_file(tmp_path / "loose.key", 0o644)
    code, _, err = agent(root, "start", "--encrypt-key", str(loose))
    assert code == 2 and "mode 0644" in err and f"chmod 600 {loose}" in err
    short = tmp_path / "short.key"
    short.write_text("secret\n")
    short.chmod(0o600)
    code, _, err = agent(root, "start", "--encrypt-key", str(short))
    assert code == 2 and "256-bit key" in err and "head -c 32 /dev/urandom" in err
    code, _, err = agent(root, "start", "--encrypt-key", str(tmp_path / "absent.key"))
    assert code == 2 and "cannot read the key file" in err
    code, _, err = agent(root, "start", "--encrypt-key", str(key_file(tmp_path / "ok.key")), python=sys.executable)
    assert code == 0, err
    stop_agent(sys.executable, root)


def test_without_the_cryptography_package_the_error_names_it(tmp_path, agent_roots):
    root = agent_roots("device")
    key = key_file(tmp_path / "model.key")
    pyz = root / "agent" / "edgekit-agent.pyz"
    pyz.parent.mkdir(parents=True)
    shutil.copy(agent_package.build(root / "agent")[0], pyz)
    # -S: no site-packages, so no 'cryptography' (as on a device with a bare Python)
    p = subprocess.run(
        [sys.executable, "-S", str(pyz), "start", "--root", str(root), "--encrypt-key", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "'cryptography'" in p.stderr and "-m pip install cryptography" in p.stderr


def test_the_key_can_come_from_the_kernel_keyring(tmp_path, tiny_bundle, agent_roots):
    from edgekit_agent import atrest

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    name = f"edgekit-test-{os.getpid()}"
    nr = {"x86_64": 248, "aarch64": 217}.get(os.uname().machine)
    if nr is None or libc.syscall(nr, b"user", name.encode(), os.urandom(32), 32, ctypes.c_long(-4)) < 0:
        pytest.skip(f"no kernel keyring here ({os.strerror(ctypes.get_errno())})")
    root = agent_roots("device")
    code, state, err = agent(root, "start", "--encrypt-key", f"keyring:{name}")
    assert code == 0, err
    assert state["encrypt"]["key"] == f"keyring:{name}"
    dev = deploy(root, tiny_bundle)
    try:
        version_dir, manifest = stored(root, "tiny")
        assert read(version_dir, manifest["model"])[:8] == b"EKSEAL01"
        assert dev.client.infer("tiny", {"input": X})["probs"].shape == (1, 10)
    finally:
        dev.close()
    with pytest.raises(atrest.KeyProblem, match="keyctl padd user"):
        atrest.load_key("keyring:edgekit-test-absent")


def test_the_cli_starts_and_deploys_with_a_key(tmp_path, tiny_bundle, agent_roots):
    from harness.cli import one_json, run_cli

    root = agent_roots("device")
    key, other = key_file(tmp_path / "model.key"), key_file(tmp_path / "other.key")
    where = ["--local", "--device-root", root]
    state = one_json(run_cli("agent", "start", *where, "--encrypt-key", key, "--json", check=0).stdout)
    assert state["encrypt"]["key"] == str(key)
    report = one_json(run_cli("deploy", tiny_bundle, *where, "--runs", 3, "--warmup", 0, "--json", check=0).stdout)
    version_dir, manifest = stored(root, "tiny")
    assert report["installed"]["version"] == manifest["id"]  # and benchmarked from the sealed files
    assert read(version_dir, manifest["model"])[:8] == b"EKSEAL01"
    again = one_json(run_cli("agent", "start", *where, "--encrypt-key", other, "--json", check=0).stdout)
    assert again["encrypt"]["key_id"] != state["encrypt"]["key_id"] and again["pid"] != state["pid"]
    text = run_cli("agent", "status", *where, check=0).stdout
    assert f"AES-256-GCM, key {other} (id {again['encrypt']['key_id']})" in text and "encrypted at rest" in text
    p = run_cli("agent", "status", *where, "--encrypt-key", key, check=1)
    assert "--encrypt-key is given to `edgekit agent start`" in p.stderr
