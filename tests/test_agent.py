"""The on-device agent, started for real from its zipapp, and its HTTP API."""

import glob
import hashlib
import http.client
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from harness.isolation import kept
from harness.pythons import find_python, missing

from edgekit import agent_package, bundle
from edgekit_sdk import AgentClient, AgentHTTPError


def _python(version):
    return find_python(version)


# The oldest Python that boards still ship, and the newest this machine has.
OLDEST, NEWEST = "3.7", "3.13"


@pytest.fixture
def deployed(local_device, tiny_bundle):
    from edgekit.deployer import deploy

    deploy(tiny_bundle, local_device, bench=False)
    return local_device


def raw(dev, method, path, body=b"", headers=None):
    """One request as a well-behaved client sends it (the agent's token, JSON typed as JSON), unless overridden."""
    conn = http.client.HTTPConnection("127.0.0.1", dev.client.port, timeout=30)
    h = {"Content-Length": str(len(body)), "Authorization": "Bearer " + dev.client.token}
    if body.startswith(b"{"):
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data) if data.startswith(b"{") else data


def test_health_and_models(deployed):
    h = deployed.client.health()
    assert h["status"] == "ok" and h["api"] == "v1" and not h["auth"]
    assert h["runtimes"]["ort"]
    models = deployed.client.models()
    assert models[0]["name"] == "tiny" and models[0]["inputs"][0]["shape"] == [1, 3, 16, 16]


def test_agent_listens_on_loopback_only(deployed):
    assert deployed.state["host"] == "127.0.0.1"


def test_infer_binary_and_json_match_onnxruntime(deployed, tiny_bundle):
    import onnxruntime as ort

    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(tiny_bundle / "model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )[0]
    got, meta = deployed.client.infer("tiny", {"input": x}, with_meta=True)
    np.testing.assert_allclose(got["probs"], want, rtol=1e-5, atol=1e-6)
    assert meta["inference_ms"] > 0 and meta["version"] == bundle.load(tiny_bundle)["id"]
    j = deployed.client.infer_json(
        "tiny", {"input": {"dtype": "float32", "shape": [1, 3, 16, 16], "data": x.ravel().tolist()}}
    )
    np.testing.assert_allclose(
        np.asarray(j["outputs"]["probs"]["data"], np.float32).ravel(), want.ravel(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    "inputs,message",
    [
        ({"input": np.zeros((1, 3, 8, 8), np.float32)}, "has shape [1, 3, 8, 8]; the model wants [1, 3, 16, 16]"),
        ({"input": np.zeros((1, 3, 16, 16), np.float64)}, "has dtype float64; the model wants float32"),
        ({"wrong": np.zeros((1, 3, 16, 16), np.float32)}, "inputs do not match the model"),
    ],
)
def test_bad_inputs_are_400_and_the_agent_keeps_serving(deployed, inputs, message):
    with pytest.raises(AgentHTTPError) as e:
        deployed.client.infer("tiny", inputs)
    assert e.value.status == 400 and message in e.value.message
    assert deployed.client.health()["status"] == "ok"


def test_malformed_requests(deployed):
    assert raw(deployed, "POST", "/v1/models/tiny/infer", b"{not json", {"Content-Type": "application/json"})[0] == 400
    assert (
        raw(
            deployed,
            "POST",
            "/v1/models/tiny/infer",
            b"EKT1\xff\xff\xff\xff",
            {"Content-Type": "application/x-edgekit-tensors"},
        )[0]
        == 400
    )
    status, body = raw(deployed, "POST", "/v1/models/nope/infer", json.dumps({"inputs": {}}).encode())
    assert status == 404 and "unknown model 'nope'" in body["error"]
    assert raw(deployed, "GET", "/v1/nothing")[0] == 404
    assert raw(deployed, "DELETE", "/v1/health")[0] == 405
    assert raw(deployed, "POST", "/v1/models/..%2Fetc/load", b"{}")[0] == 400
    assert deployed.client.health()["status"] == "ok"


def test_tampered_upload_is_rejected_and_current_version_kept(deployed, tiny_bundle, tmp_path):
    current = deployed.client.models()[0]["version"]
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    manifest["id"] = "tampered0000001"
    # A model the device does not hold yet (else its copy would be reused, not sent)...
    other = bytearray((tiny_bundle / "model.onnx").read_bytes())
    other[200] ^= 0x11
    entry = next(f for f in manifest["files"] if f["name"] == "model.onnx")
    entry["sha256"] = hashlib.sha256(bytes(other)).hexdigest()
    c = deployed.client
    missing = c.begin_upload("tiny", manifest["id"], manifest)["missing"]
    assert "model.onnx" in missing
    # ... whose bytes are altered in transit.
    data = bytearray(other)
    data[100] ^= 0x55
    with pytest.raises(AgentHTTPError) as e:
        c.put_file("tiny", manifest["id"], "model.onnx", bytes(data))
    assert e.value.status == 422 and "sha256" in e.value.message
    with pytest.raises(AgentHTTPError) as e:
        c.commit("tiny", manifest["id"])
    assert e.value.status == 409 and "never received" in e.value.message
    assert c.models()[0]["version"] == current
    c.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})


def test_redeploy_keeps_previous_for_rollback(deployed, tiny_model, tiny_calib, tmp_path):
    import edgekit
    from edgekit.deployer import deploy

    first = deployed.client.models()[0]["version"]
    out = tmp_path / "tiny-int8"
    edgekit.build(tiny_model, "host", out, precision="int8", calib=tiny_calib, name="tiny")
    result = deploy(out, deployed, bench=False)
    second = result["installed"]["version"]
    assert result["installed"]["previous"] == first and second != first
    assert deployed.client.models()[0]["version"] == second
    assert deployed.client.rollback("tiny")["version"] == first
    assert deployed.client.models()[0]["version"] == first


def test_bench_report(deployed):
    r = deployed.bench("tiny", runs=20, warmup=3, threads=1)
    for key in (
        "backend",
        "precision",
        "accelerator",
        "threads",
        "runtime_version",
        "init_ms",
        "first_inference_ms",
        "latency_ms",
        "runs",
        "peak_rss_mb",
        "device",
        "profile",
    ):
        assert key in r, key
    assert r["accelerator"] == "CPUExecutionProvider" and r["threads"] == 1 and r["runs"] == 20
    lat = r["latency_ms"]
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert r["placement"]["CPUExecutionProvider"] >= 1


def test_requested_accelerator_that_is_missing_is_reported(deployed):
    r = deployed.bench("tiny", runs=5, warmup=1, providers=["NNAPIExecutionProvider", "CPUExecutionProvider"])
    assert r["accelerator"] == "CPUExecutionProvider"
    assert any("NNAPIExecutionProvider was requested" in w for w in r["warnings"])


def _zipapp(tmp_path):
    path, _ = agent_package.build(tmp_path)
    return path


def test_non_loopback_needs_a_token(tmp_path):
    pyz = _zipapp(tmp_path)
    p = subprocess.run(
        [sys.executable, str(pyz), "serve", "--root", str(tmp_path / "r"), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode != 0 and "without a token" in p.stderr


def test_token_is_enforced(agent_roots, tmp_path):
    pyz = _zipapp(tmp_path)
    (tmp_path / "tok").write_text("s3cret\n")
    root = agent_roots("r")
    env = dict(os.environ, EDGEKIT_AGENT_TOKEN="s3cret")
    p = subprocess.run(
        [
            sys.executable,
            str(pyz),
            "start",
            "--root",
            str(root),
            "--host",
            "0.0.0.0",
            "--token-file",
            str(tmp_path / "tok"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    state = json.loads(p.stdout)
    anonymous, authorized = (
        AgentClient("127.0.0.1", state["port"]),
        AgentClient("127.0.0.1", state["port"], token="s3cret"),
    )
    with pytest.raises(AgentHTTPError) as e:
        anonymous.health()
    assert e.value.status == 401
    assert authorized.health()["auth"] is True
    anonymous.close()
    authorized.close()


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_agent_runs_on_oldest_and_newest_python(agent_roots, tmp_path, tiny_bundle, version):
    """Syntax, stdlib, server, verified install on a bare interpreter; no runtime there -> a clear 501."""
    python = _python(version)
    if python is None:
        pytest.skip(missing(version))
    pyz = _zipapp(tmp_path)
    root = agent_roots("r", python=python)
    p = subprocess.run([python, str(pyz), "start", "--root", str(root)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    state = json.loads(p.stdout)
    c = AgentClient("127.0.0.1", state["port"], token=state["token"])
    h = c.health()
    assert h["device"]["python"].startswith(version + ".") and h["runtimes"]["ort"] is None
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    for f in c.begin_upload("tiny", manifest["id"], manifest)["missing"]:
        c.put_file("tiny", manifest["id"], f, (tiny_bundle / f).read_bytes())
    assert c.commit("tiny", manifest["id"])["version"] == manifest["id"]
    with pytest.raises(AgentHTTPError) as e:
        c.bench("tiny", runs=2)
    assert e.value.status == 501 and "onnxruntime is not installed" in e.value.message
    c.close()


def test_agent_source_is_python37_syntax():
    import ast

    for base in ("on_device_agent", "sdk_bindings/python/edgekit_sdk"):
        for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", base, "**", "*.py"), recursive=True):
            with open(path) as f:
                ast.parse(f.read(), path, feature_version=(3, 7))


def test_openapi_documents_every_route():
    from openapi_spec_validator import validate

    from edgekit_agent import server

    with open(os.path.join(os.path.dirname(server.__file__), "openapi.json")) as f:
        spec = json.load(f)
    validate(spec)
    documented = set()
    for path, ops in spec["paths"].items():
        for method in ops:
            documented.add((method.upper(), path))
    for method, pattern, _ in server.ROUTES:
        p = pattern.pattern.strip("^$")
        for name in ("name", "version", "file"):
            p = p.replace("([^/]+)", "{%s}" % name, 1)
        assert (method, p) in documented, (method, p)


def test_a_version_that_does_not_run_is_not_installed(deployed, tiny_bundle):
    """The agent loads and runs a staged version before it may serve; a broken one leaves the old in place."""
    import hashlib

    c = deployed.client
    current = c.models()[0]["version"]
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    garbage = b"this is not a model" * 100
    manifest["files"] = [f for f in manifest["files"] if f["name"] != "model.onnx"] + [
        {"name": "model.onnx", "role": "model", "size": len(garbage), "sha256": hashlib.sha256(garbage).hexdigest()}
    ]
    manifest["id"] = "broken000000001"
    for f in c.begin_upload("tiny", manifest["id"], manifest)["missing"]:
        c.put_file("tiny", manifest["id"], f, garbage if f == "model.onnx" else (tiny_bundle / f).read_bytes())
    with pytest.raises(AgentHTTPError) as e:
        c.commit("tiny", manifest["id"], verify=True)
    assert e.value.status == 422 and "does not run on this device" in e.value.message
    assert c.models()[0]["version"] == current
    c.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})


@pytest.mark.parametrize(
    "change,message",
    [
        ({"model": "/etc/passwd"}, "'model' must name one of its files"),
        ({"files": [{"name": "manifest.json", "size": 1, "sha256": "0" * 64}], "model": "manifest.json"}, "reserved"),
        ({"files": [{"name": "a\n", "size": 1, "sha256": "0" * 64}], "model": "a\n"}, "invalid file name"),
        ({"files": [{"name": "..", "size": 1, "sha256": "0" * 64}], "model": ".."}, "invalid file name"),
        ({"files": [{"name": "x.onnx", "size": -1, "sha256": "0" * 64}], "model": "x.onnx"}, "size must be"),
    ],
)
def test_manifest_names_are_checked(deployed, tiny_bundle, change, message):
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    manifest.update(change)
    manifest.pop("id")
    with pytest.raises(AgentHTTPError) as e:
        deployed.client.begin_upload("tiny", "v-evil", manifest)
    assert e.value.status == 400 and message in e.value.message


def test_stop_never_kills_a_process_that_is_not_the_agent(tmp_path):
    pyz = _zipapp(tmp_path)
    root = tmp_path / "r"
    (root / "agent").mkdir(parents=True)
    victim = subprocess.Popen(["sleep", "30"])
    try:
        (root / "agent" / "state.json").write_text(
            json.dumps({"pid": victim.pid, "host": "127.0.0.1", "port": 9, "root": str(root)})
        )
        p = subprocess.run([sys.executable, str(pyz), "stop", "--root", str(root)], capture_output=True, text=True)
        assert json.loads(p.stdout)["stopped"] is False
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_a_new_agent_replaces_the_running_one(local_device, tiny_bundle, monkeypatch):
    from edgekit.deployer import deploy

    deploy(tiny_bundle, local_device, bench=False)
    old_pid = local_device.state["pid"]
    monkeypatch.setattr(agent_package, "MAIN", agent_package.MAIN + "# another build of the agent\n")
    deploy(tiny_bundle, local_device, bench=False)
    assert local_device.state["pid"] != old_pid and local_device.state["started"]
    out = local_device.client.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})
    assert out["probs"].shape == (1, 10)


def test_device_compares_its_outputs_with_the_build_machine(deployed):
    r = deployed.bench("tiny", runs=3, warmup=0)
    assert r["device_fidelity"]["passed"] and r["device_fidelity"]["cosine"] > 0.9999


@pytest.fixture(scope="session")
def py37_with_runtime():
    """Python 3.7 with the last onnxruntime built for it: what an older board image runs.

    Created once under the tests' kept cache (from PyPI), then reused."""
    base = _python(OLDEST)
    if base is None:
        pytest.skip(missing(OLDEST))
    venv = str(kept("py37-ort"))
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import onnxruntime, numpy"]
    if not os.path.exists(python) or subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([base, "-m", "venv", "--clear", venv], check=True, capture_output=True)
        p = subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "numpy==1.21.6",
                "onnxruntime==1.14.1",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stderr[-2000:]
    return python


def test_full_deploy_on_python37_with_onnxruntime(agent_roots, py37_with_runtime, tiny_bundle, tmp_path):
    from edgekit.deployer import deploy, open_device

    root = agent_roots("dev37", python=py37_with_runtime)
    dev = open_device("local", device_python=py37_with_runtime, device_root=str(root))
    try:
        r = deploy(tiny_bundle, dev, runs=10, warmup=2)
        assert r["device"]["python"].startswith("3.7.") and r["runtime_version"] == "1.14.1"
        assert r["accelerator"] == "CPUExecutionProvider" and r["device_fidelity"]["passed"]
        out = dev.client.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})
        assert out["probs"].shape == (1, 10)
    finally:
        dev.close()
