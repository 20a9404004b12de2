"""A bundle records the runtime version its build was checked with; deploy compares it with the device's."""

from __future__ import annotations

import json
import shutil

import onnxruntime
import pytest

from edgekit import runtime_match
from edgekit.errors import AgentError

ORT = onnxruntime.__version__


def _manifest(backend="ort", model="model.ort", version="1.20.1"):
    return {"backend": backend, "model": model, "runtime": {"name": backend, "version": version}}


def test_versions_compared():
    assert runtime_match.parse_version("2026.4.1-20000-abc") == (2026, 4, 1)
    assert runtime_match.parse_version("1.32.0") == (1, 32, 0) and runtime_match.parse_version("") is None
    assert runtime_match.check(_manifest(), {"ort": "1.20.1"}, "dev") == []
    assert runtime_match.check(_manifest(), None, "dev") == []  # an agent that does not report versions
    assert runtime_match.check(_manifest(), {"ort": None}, "dev") == []  # missing: the install says how to get it
    newer = runtime_match.check(_manifest(), {"ort": "1.22.0"}, "dev")  # a newer runtime reads an older ORT file
    assert len(newer) == 1 and "built and checked with onnxruntime 1.20.1; dev runs 1.22.0" in newer[0]
    with pytest.raises(
        AgentError, match=r"dev runs onnxruntime 1.19.2, older than 1.20.1.*pip install onnxruntime==1.20.1"
    ):
        runtime_match.check(_manifest(), {"ort": "1.19.2"}, "dev")
    # a plain ONNX file on an older ONNX Runtime, an older OpenVINO: warned, not refused
    assert runtime_match.check(_manifest(model="model.onnx"), {"ort": "1.19.2"}, "dev")
    assert runtime_match.check(_manifest("openvino", "model.xml", "2026.4.1"), {"openvino": "2025.1.0"}, "dev")


@pytest.mark.e2e
def test_deploy_refuses_an_ort_format_bundle_newer_than_the_device_runtime(tmp_path, tiny_model, agent_roots):
    import edgekit
    from edgekit.deployer import deploy, open_device

    built = tmp_path / "pi"
    edgekit.build(tiny_model, "raspberrypi5", built, backend="ort", precision="fp32", name="tiny")
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["model"].endswith(".ort") and manifest["runtime"]["version"] == ORT
    newer, older = tmp_path / "newer", tmp_path / "older"
    for path, version in ((newer, "99.0.0"), (older, "1.0.0")):
        shutil.copytree(built, path)
        (path / "manifest.json").write_text(json.dumps({**manifest, "runtime": {"name": "ort", "version": version}}))
    dev = open_device("local", device_root=str(agent_roots("dev")))
    try:
        with pytest.raises(AgentError, match=f"runs onnxruntime {ORT}, older than 99.0.0"):
            deploy(newer, dev, bench=False)
        assert "tiny" not in [m["name"] for m in dev.client.models()]  # refused before the upload
        report = deploy(older, dev, bench=False)
        assert "built and checked with onnxruntime 1.0.0" in report["warnings"][0]
        assert [m["name"] for m in dev.client.models()] == ["tiny"]
    finally:
        dev.close()
