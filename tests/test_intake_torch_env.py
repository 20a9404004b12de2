"""PyTorch files exported in the torch tool environment (docs/INTAKE.md): where torch is not importable in edgekit's
Python, or with ``EDGEKIT_TORCH=toolenv`` (these tests: their own Python has torch). The environment is created on
first use and kept between runs (``.cache/tests/keep/toolenvs``); the export step is judged against torch running
the original there."""

import sys

import jsonschema
import pytest
import torch
from harness.cli import one_json, run_cli
from test_intake_torch import X, cnn

import edgekit
from edgekit import intake_torch_env, toolenvs
from edgekit.errors import BackendUnavailable, ModelError
from edgekit.report import schema

FORCED = {"EDGEKIT_TORCH": "toolenv"}


@pytest.fixture(autouse=True)
def forced(monkeypatch):
    if toolenvs.state(intake_torch_env.TOOLENV).get("interpreter_missing"):
        pytest.skip("no Python 3.11-3.13 on this machine for the torch tool environment")
    monkeypatch.setenv("EDGEKIT_TORCH", "toolenv")


def export_step_in_the_env(report):
    ex = report["export"]
    assert ex["tool_environment"].startswith("torch (Python 3.")
    assert "(torch tool environment)" in ex["exporter"] and ex["torch"].startswith("2.13.0")
    first = report["fidelity"]["steps"][0]
    assert first["step"].startswith("export (PyTorch") and first["passed"], first
    assert first["reference"] == f"PyTorch {ex['torch']} running the original model (torch tool environment)"
    out = next(iter(first["outputs"].values()))
    assert out["cosine_min"] > 0.9999 and out["top1_agreement"] == 1.0
    assert ex["step"]["passed"]
    return ex


@pytest.mark.e2e
def test_a_pt2_builds_for_raspberrypi5_from_the_cli(tmp_path):
    torch.export.save(torch.export.export(cnn(), (X,)), str(tmp_path / "cnn.pt2"))
    p = run_cli(
        "build", tmp_path / "cnn.pt2", "--profile", "raspberrypi5", "-o", tmp_path / "out", "--json", env=FORCED
    )
    assert p.returncode == 0, p.stderr
    report = one_json(p.stdout)
    jsonschema.validate(report, schema())
    ex = export_step_in_the_env(report)
    assert ex["from"] == "ExportedProgram" and ex["opset"] == 18 and "dynamo=True" in ex["exporter"]
    assert ex["example_inputs"] == {"x": {"shape": [1, 3, 16, 16], "dtype": "float32"}}
    assert ex["file"].endswith("cnn.pt2") and ex["sha256"] and report["name"] == "cnn"
    assert report["fidelity"]["passed"]
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "by torch.onnx.export(dynamo=True) (torch tool environment) (torch 2.13.0" in text, text


@pytest.mark.e2e
def test_a_torchscript_file_builds_for_the_host_with_its_declared_shape(tmp_path):
    torch.jit.trace(cnn(), (X,)).save(str(tmp_path / "cnn.pt"))
    with pytest.raises(ModelError, match="need example inputs"):
        edgekit.build(tmp_path / "cnn.pt", "host", tmp_path / "none", use_cache=False)
    report = edgekit.build(tmp_path / "cnn.pt", "host", tmp_path / "out", input_shapes=["x=1,3,16,16"])
    ex = export_step_in_the_env(report)
    assert ex["from"] == "TorchScript" and "dynamo=False" in ex["exporter"] and ex["opset"] == 17
    assert "TorchScript module cannot be exported by torch.export" in ex["fallback"]
    assert report["fidelity"]["passed"] and not (tmp_path / "none").exists()


@pytest.mark.e2e
def test_a_state_dict_file_is_not_a_model(tmp_path):
    torch.save(cnn().state_dict(), str(tmp_path / "weights.pt"))
    with pytest.raises(ModelError, match="not a TorchScript file.*torch.export.save"):
        edgekit.build(tmp_path / "weights.pt", "host", tmp_path / "out", input_shapes=["x=1,3,16,16"])
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_without_torch_here_a_file_goes_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEKIT_TORCH")
    (tmp_path / "m.pt2").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ModelError, match="is not an ExportedProgram torch.export.load reads"):
        edgekit.build(tmp_path / "m.pt2", "host", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_torch_objects_are_refused_for_a_file_exported_there(tmp_path):
    (tmp_path / "m.pt2").write_bytes(b"not read")
    with pytest.raises(ModelError, match="example_inputs and dynamic_shapes are torch objects"):
        edgekit.build(tmp_path / "m.pt2", "host", tmp_path / "out", example_inputs=(X,))
    assert not (tmp_path / "out").exists()


def test_an_environment_that_cannot_be_created_says_how_to_create_it(tmp_path, monkeypatch):
    def fail(spec, log=None):
        raise BackendUnavailable("installing the torch tool environment failed; pip said: no network")

    monkeypatch.setattr(toolenvs, "ensure", fail)
    (tmp_path / "m.pt2").write_bytes(b"not read")
    with pytest.raises(BackendUnavailable) as e:
        edgekit.build(tmp_path / "m.pt2", "host", tmp_path / "out")
    assert "no network" in str(e.value) and "edgekit backends install torch" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_live_module_is_exported_here_whatever_the_setting(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="fails on its example inputs"):
        edgekit.build(cnn(), "host", tmp_path / "out", example_inputs=(torch.randn(1, 5),))


def test_a_bad_setting_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_TORCH", "gpu")
    with pytest.raises(ModelError, match="EDGEKIT_TORCH='gpu': expected one of auto, here, toolenv"):
        edgekit.build(tmp_path / "m.pt2", "host", tmp_path / "out")
