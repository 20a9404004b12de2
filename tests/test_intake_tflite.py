"""TFLite in: a .tflite deployed as it is (docs/INTAKE.md). The file is made here by the tflite tool environment
(onnx2tf + ai-edge-quantizer, full INT8 with int8 inputs and outputs) from the harness's tiny CNN."""

import hashlib
import shutil

import jsonschema
import numpy as np
import pytest
from harness.cli import one_json, run_cli
from harness.models import tiny_calib, tiny_cnn

import edgekit
from edgekit.errors import ConversionError, ModelError
from edgekit.report import schema


@pytest.fixture(scope="module")
def given_tflite(tmp_path_factory):
    """An INT8 .tflite (int8 input and output tensors), as a model hub would hand one out."""
    from edgekit import toolenvs
    from edgekit.converters import tflite

    toolenvs.ensure(tflite.TOOLENV)
    d = tmp_path_factory.mktemp("given")
    src, calib = tiny_cnn(d / "cnn.onnx", dynamic_batch=False), tiny_calib(d / "calib.npz")
    edgekit.build(str(src), "host", d / "built", backend="tflite", precision="int8", calib=str(calib))
    shutil.copyfile(d / "built" / "model.tflite", d / "cnn_int8.tflite")
    return d / "cnn_int8.tflite"


@pytest.mark.e2e
def test_a_tflite_is_bundled_as_given(given_tflite, tmp_path):
    report = edgekit.build(given_tflite, "host", tmp_path / "out", backend="tflite")
    jsonschema.validate(report, schema())
    sha = hashlib.sha256(given_tflite.read_bytes()).hexdigest()
    assert (tmp_path / "out" / "model.tflite").read_bytes() == given_tflite.read_bytes()
    assert report["precision"] == "int8" and report["precision_detail"] == "int8 (as given)"
    assert report["source"] == {"file": "cnn_int8.tflite", "sha256": sha, "format": "tflite", "taken_as_given": True}
    [step] = report["fidelity"]["steps"]
    assert step["step"] == "taken as given (identical bytes)" and step["sha256"] == sha and step["outputs"] == {}
    assert report["inputs"] == [{"name": "input", "shape": [1, 16, 16, 3], "dtype": "int8", "layout": "NHWC"}]
    assert report["outputs"][0]["dtype"] == "int8"
    assert {o["op"] for o in report["ops"]} >= {"CONV_2D", "FULLY_CONNECTED"}
    assert "error" not in report["placement"] and report["placement"]["precision"] == "int8"
    assert report["model_size_bytes"] == given_tflite.stat().st_size
    text = (tmp_path / "out" / "report.txt").read_text()
    assert (
        "precision int8 (as given)" in text and f"cnn_int8.tflite taken as given (no conversion), sha256 {sha}" in text
    )


@pytest.mark.e2e
def test_options_that_would_change_it_are_refused(given_tflite, tmp_path):
    with pytest.raises(ModelError, match="deployed as it is.*precision=fp16"):
        edgekit.build(given_tflite, "host", tmp_path / "out", backend="tflite", precision="fp16")
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_other_backends_are_refused_with_the_reason(given_tflite, tmp_path):
    with pytest.raises(ConversionError, match="no maintained TFLite -> ONNX converter") as e:
        edgekit.build(given_tflite, "host", tmp_path / "out", backend="openvino")
    assert "tflite2onnx" in str(e.value) and "tf2onnx" in str(e.value) and "--tflite" in str(e.value)
    p = run_cli("build", given_tflite, "--profile", "host", "--backend", "ort", "-o", tmp_path / "out", check=1)
    assert "--backend tflite" in p.stderr
    p = run_cli("build", given_tflite, "--profile", "host", "--auto", "-o", tmp_path / "out", check=1)
    assert "--auto builds from an ONNX model" in p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_the_cli_builds_it_for_tflite_and_it_serves(given_tflite, tmp_path, local_device):
    from edgekit.deployer import deploy

    out = tmp_path / "bundle"
    report = one_json(run_cli("build", given_tflite, "--profile", "host", "-o", out, "--json", check=0).stdout)
    assert report["backend"] == "tflite" and report["fidelity"]["steps"][0]["step"].startswith("taken as given")
    timings = deploy(str(out), local_device, runs=5)
    assert timings["runtime"] == "ai-edge-litert" and timings["latency_ms"]["p50"] > 0
    assert not [w for w in timings.get("warnings", []) if "differ" in w]
    sample = dict(np.load(out / "sample_inputs.npz"))
    answer = local_device.client.infer("cnn_int8", sample)
    expected = dict(np.load(out / "expected_outputs.npz"))
    for name, value in expected.items():
        np.testing.assert_array_equal(np.asarray(answer[name]), value)
