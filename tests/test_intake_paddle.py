"""Paddle in: a Paddle inference model (made here by Paddle, in the paddlelite tool environment) built for Paddle Lite
by ``opt`` from the model itself, and for the other backends through paddle2onnx; every build judged against Paddle
Inference running the original (docs/INTAKE.md)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from harness.cli import one_json, run_cli

import edgekit
from edgekit import intake_paddle, toolenvs
from edgekit.converters import get
from edgekit.errors import BackendUnavailable, ConversionError, ModelError

BE = get("paddlelite")
OUT = "save_infer_model/scale_0.tmp_0"
MAKER = Path(__file__).resolve().parent / "harness" / "paddle_models.py"


@pytest.fixture(scope="module")
def env_python():
    if toolenvs.state(BE.toolenv).get("interpreter_missing"):
        pytest.skip("no Python 3.10 on this machine for the paddlelite tool environment")
    return toolenvs.ensure(BE.toolenv, log=print)  # the first run creates it (~1-2 min); later runs reuse it


@pytest.fixture(scope="module")
def models(env_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("paddle")
    subprocess.run([str(env_python), str(MAKER), str(out)], check=True, capture_output=True, timeout=300)
    return out


def export_step(report):
    first = report["fidelity"]["steps"][0]
    assert first["step"] == "export (Paddle inference model -> ONNX opset 14, paddle2onnx 1.2.11)", first
    assert first["passed"] and first["reference"] == "Paddle Inference 2.6.2 running the original model"
    assert first["outputs"][OUT]["cosine_min"] > 0.99999 and first["outputs"][OUT]["top1_agreement"] == 1.0
    return first


@pytest.mark.e2e
def test_paddlelite_from_the_cli_converts_the_model_itself_judged_against_paddle(models, tmp_path):
    p = run_cli(
        "build", models / "mnv3" / "inference.pdmodel", "--profile", "rk3588", "--backend", "paddlelite",
        "-o", tmp_path / "out", "--json", check=0,
    )  # fmt: skip
    r = one_json(p.stdout)
    export_step(r)
    step = r["fidelity"]["steps"][1]
    assert step["step"] == "fp32 (Paddle inference model -> opt, x86 .nb on this host)" and step["passed"]
    assert step["outputs"][OUT]["cosine_min"] > 0.9999 and step["outputs"][OUT]["top1_agreement"] == 1.0
    sec = r["paddlelite"]
    assert sec["converter"] == "opt (paddlelite 2.13rc0) on the Paddle inference model as given"
    assert sec["judged_against"] == "Paddle Inference 2.6.2 running the original model"
    assert sec["built_targets"] == ["x86", "arm"] and sec["target"] == "arm"
    ex = r["export"]
    assert ex["framework"] == "Paddle" and ex["paddlepaddle"] == "2.6.2" and ex["paddle2onnx"] == "1.2.11"
    assert ex["opset"] == 14 and ex["dynamic_dims"] == {"image": {"0": "-1"}} and ex["sha256"]
    assert ex["feed"] == {"image": {"shape": [-1, 3, 96, 96], "dtype": "float32"}}
    assert r["name"] == "inference" and (tmp_path / "out" / "model.nb").is_file()
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "export     Paddle inference model inference.pdmodel -> ONNX opset 14 by paddle2onnx 1.2.11" in text


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_a_model_directory_builds_for_other_backends_through_paddle2onnx(models, tmp_path, backend):
    r = edgekit.build(models / "mnv3", "host", tmp_path / "out", backend=backend, precision="fp32", use_cache=False)
    export_step(r)
    assert [s["passed"] for s in r["fidelity"]["steps"]] == [True, True] and r["backend"] == backend
    assert "paddlelite" not in r


@pytest.mark.e2e
def test_int8_with_calibration_data(models, tmp_path):
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calib.npz", image=rng.uniform(0, 1, (24, 1, 3, 96, 96)).astype(np.float32))
    r = edgekit.build(
        models / "mnv3" / "inference.pdmodel", "host", tmp_path / "out", precision="int8",
        calib=tmp_path / "calib.npz", min_cosine=0.9, min_top1=0.75, use_cache=False,
    )  # fmt: skip
    first = export_step(r)
    assert first["samples"] == 24 and r["fidelity"]["data"]["synthetic"] is False
    assert r["precision"] == "int8" and r["fidelity"]["steps"][-1]["step"].startswith("int8")


@pytest.mark.e2e
def test_free_height_and_width_need_input_shape(models, tmp_path):
    with pytest.raises(ModelError, match=r"input 'x' \[1,3,H,W\] has dynamic dimensions"):
        edgekit.build(models / "hw", "host", tmp_path / "none", use_cache=False)
    with pytest.raises(ModelError, match=r"names \['y'\] but the Paddle model's inputs \(feed vars\) are \['x'\]"):
        edgekit.build(models / "hw", "host", tmp_path / "none", input_shapes=["y=1,3,8,8"], use_cache=False)
    r = edgekit.build(models / "hw", "host", tmp_path / "out", input_shapes=["x=1,3,20,24"], use_cache=False)
    assert r["fidelity"]["steps"][0]["passed"] and r["inputs"][0]["shape"] == [1, 3, 20, 24]
    assert not (tmp_path / "none").exists()


@pytest.mark.e2e
def test_an_op_paddle2onnx_lacks_is_named_with_its_output(models, tmp_path):
    with pytest.raises(ConversionError) as e:
        edgekit.build(models / "histogram", "host", tmp_path / "out", use_cache=False)
    assert "paddle2onnx 1.2.11 cannot export the Paddle op(s) histogram (output 'histogram_0.tmp_0')" in str(e.value)
    assert "custom_op_info" in str(e.value) and not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_an_op_opt_lacks_is_named_with_its_output(models, tmp_path):
    with pytest.raises(ConversionError) as e:
        edgekit.build(models / "logsumexp", "host", tmp_path / "out", backend="paddlelite", use_cache=False)
    assert (
        "opt (paddlelite 2.13rc0) has no x86 kernel for the Paddle op(s) logsumexp (output 'logsumexp_0.tmp_0'): "
        "replace the op in the model, or choose another backend"
    ) in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_a_training_program_is_refused(models, tmp_path):
    p = run_cli("build", models / "training" / "train.pdmodel", "--profile", "host", "-o", tmp_path / "out", check=1)
    assert "train.pdmodel is a training program, not an inference model: it holds training ops (" in p.stderr
    assert "sgd" in p.stderr and "paddle.jit.save" in p.stderr and not (tmp_path / "out").exists()


def test_detection_and_the_files_a_model_needs(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "model.pdmodel").write_bytes(b"x")
    assert intake_paddle.is_paddle_source(tmp_path / "d") and intake_paddle.is_paddle_source("a/inference.pdmodel")
    assert not intake_paddle.is_paddle_source(tmp_path / "x.onnx") and not intake_paddle.is_paddle_source(object())
    with pytest.raises(ModelError, match=r"model.pdmodel has no parameters beside it: model.pdiparams is missing"):
        intake_paddle.locate(tmp_path / "d")
    (tmp_path / "d" / "model.pdiparams").write_bytes(b"x")
    assert intake_paddle.locate(tmp_path / "d") == (
        tmp_path / "d" / "model.pdmodel",
        tmp_path / "d" / "model.pdiparams",
    )
    (tmp_path / "inference.json").write_text(json.dumps({"program": {}}))
    assert not intake_paddle.is_paddle_source(tmp_path / "inference.json")  # a JSON file without parameters
    (tmp_path / "inference.pdiparams").write_bytes(b"x")
    assert intake_paddle.is_paddle_source(tmp_path / "inference.json")  # Paddle 3's JSON format (tests/..._paddle3)
    assert intake_paddle.locate(tmp_path / "inference.json") == (
        tmp_path / "inference.json",
        tmp_path / "inference.pdiparams",
    )
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "inference.json").write_text("{}")
    (tmp_path / "j" / "inference.pdiparams").write_bytes(b"x")
    assert intake_paddle.locate(tmp_path / "j")[0] == tmp_path / "j" / "inference.json"
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "x.pdiparams").write_bytes(b"x")
    with pytest.raises(ModelError, match=r"holds no Paddle program \(looked for inference.pdmodel, model.pdmodel, "):
        intake_paddle.locate(tmp_path / "e")


def test_a_tool_environment_that_cannot_be_made_says_what_to_do(tmp_path, monkeypatch):
    def ensure(spec, log=None):
        raise BackendUnavailable("pip could not install paddlepaddle==2.6.2 (no network)")

    monkeypatch.setattr(toolenvs, "ensure", ensure)
    (tmp_path / "inference.pdmodel").write_bytes(b"x")
    (tmp_path / "inference.pdiparams").write_bytes(b"x")
    with pytest.raises(BackendUnavailable, match=r"could not be created: pip could not install.*paddle2onnx\)"):
        edgekit.build(tmp_path / "inference.pdmodel", "host", tmp_path / "out", use_cache=False)
    assert not (tmp_path / "out").exists()
