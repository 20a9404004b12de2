"""PyTorch in: an nn.Module, an ExportedProgram .pt2 and a TorchScript .pt, exported with torch's own ONNX exporters
in this Python; the export is the first fidelity step, judged against torch running the original (docs/INTAKE.md)."""

import sys

import jsonschema
import pytest
import torch
from harness.cli import one_json, run_cli

import edgekit
from edgekit.errors import ConversionError, ModelError
from edgekit.report import schema


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, stride=2), torch.nn.ReLU()
        )
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(self.features(x).mean((2, 3))), dim=1)


class Sequence(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)).mean(1)


class Embedder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(100, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(tokens).mean(1))


@torch.library.custom_op("edgekit_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.sin()


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Inner(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mystery(x)


class Odd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.odd = Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.odd(self.lin(x))


def cnn() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN().eval()


X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def export_step(report):
    first = report["fidelity"]["steps"][0]
    assert first["step"].startswith("export (PyTorch") and first["passed"], first
    assert first["reference"].startswith(f"PyTorch {torch.__version__}")
    return first


@pytest.mark.e2e
def test_module_builds_for_ort_with_the_export_judged_first(tmp_path):
    report = edgekit.build(cnn(), "host", tmp_path / "out", example_inputs=(X,), use_cache=False)
    jsonschema.validate(report, schema())
    first = export_step(report)
    assert [s["step"] for s in report["fidelity"]["steps"]][1:] == ["fp32 (shapes fixed)"]
    ex = report["export"]
    assert ex["from"] == "nn.Module" and ex["opset"] == 18 and ex["torch"] == torch.__version__
    assert "dynamo=True" in ex["exporter"] and "fallback" not in ex and ex["dynamic_dims"] == {}
    assert ex["example_inputs"] == {"x": {"shape": [1, 3, 16, 16], "dtype": "float32"}}
    assert ex["step"]["passed"] and ex["step"]["outputs"] == first["outputs"]
    out = next(iter(first["outputs"].values()))
    assert out["cosine_min"] > 0.99999 and out["top1_agreement"] == 1.0
    assert report["name"] == "smallcnn" and report["fidelity"]["passed"]
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "export     PyTorch nn.Module -> ONNX opset 18 by torch.onnx.export(dynamo=True)" in text, text
    assert "source     " in text and "nodes in the ONNX graph exported (smallcnn.onnx)" in text


@pytest.mark.e2e
def test_module_builds_for_openvino(tmp_path):
    report = edgekit.build(
        cnn(), "host", tmp_path / "ov", backend="openvino", precision="fp32", example_inputs=(X,), use_cache=False
    )
    export_step(report)
    assert report["backend"] == "openvino" and report["fidelity"]["passed"]
    assert (tmp_path / "ov" / "model.xml").is_file()


@pytest.mark.e2e
def test_pt2_from_the_cli_uses_its_own_example_inputs(tmp_path):
    torch.export.save(torch.export.export(cnn(), (X,)), str(tmp_path / "cnn.pt2"))
    p = run_cli("build", tmp_path / "cnn.pt2", "--profile", "host", "-o", tmp_path / "out", "--json", check=0)
    report = one_json(p.stdout)
    export_step(report)
    assert report["export"]["from"] == "ExportedProgram" and report["export"]["file"].endswith("cnn.pt2")
    assert report["export"]["sha256"] and report["name"] == "cnn"


@pytest.mark.e2e
def test_torchscript_file_takes_the_torchscript_exporter_and_builds_for_tflite(tmp_path):
    torch.jit.trace(cnn(), (X,)).save(str(tmp_path / "cnn.pt"))
    with pytest.raises(ModelError, match="need example inputs"):
        edgekit.build(tmp_path / "cnn.pt", "host", tmp_path / "none", use_cache=False)
    report = edgekit.build(
        tmp_path / "cnn.pt", "host", tmp_path / "tfl", backend="tflite", input_shapes=["x=1,3,16,16"], use_cache=False
    )
    ex = report["export"]
    assert ex["from"] == "TorchScript" and "dynamo=False" in ex["exporter"] and ex["opset"] == 17
    assert "TorchScript module cannot be exported by torch.export" in ex["fallback"]
    export_step(report)
    assert report["backend"] == "tflite" and report["fidelity"]["passed"]
    assert not (tmp_path / "none").exists()


@pytest.mark.e2e
def test_declared_dynamic_batch_and_sequence_stay_dynamic(tmp_path):
    torch.manual_seed(0)
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=64)
    report = edgekit.build(
        Sequence().eval(),
        "host",
        tmp_path / "out",
        example_inputs=(torch.randn(2, 10, 8),),
        dynamic_shapes={"x": {0: batch, 1: seq}},
        use_cache=False,
    )
    assert report["export"]["dynamic_dims"] == {"x": {"0": "batch", "1": "seq"}}
    assert report["shapes"]["dynamic"]
    assert report["shapes"]["allowed"]["x"] == [{"min": 1, "max": 8}, {"min": 2, "max": 64}, 8]
    export_step(report)
    assert [s["step"] for s in report["fidelity"]["steps"]][1] == "fp32 (dynamic shapes kept)"


@pytest.mark.e2e
def test_a_torchscript_file_takes_declared_ranges(tmp_path):
    torch.manual_seed(0)
    torch.jit.trace(Sequence().eval(), (torch.randn(2, 10, 8),)).save(str(tmp_path / "seq.pt"))
    report = edgekit.build(tmp_path / "seq.pt", "host", tmp_path / "out", input_shapes=["x=[1:8],[2:64],8"])
    assert report["export"]["dynamic_dims"] == {"x": {"0": "x_0", "1": "x_1"}}
    assert report["shapes"]["allowed"]["x"] == [{"min": 1, "max": 8}, {"min": 2, "max": 64}, 8]
    export_step(report)
    assert all(s["passed"] for s in report["fidelity"]["steps"])


@pytest.mark.e2e
def test_an_int64_embedding_model_is_fed_ids_in_range(tmp_path):
    torch.manual_seed(0)
    tokens = torch.randint(0, 100, (1, 12))
    report = edgekit.build(Embedder().eval(), "host", tmp_path / "out", example_inputs=(tokens,), use_cache=False)
    assert report["inputs"][0]["dtype"] == "int64"
    assert report["fidelity"]["data"]["non_float_inputs"]["tokens"].startswith("0..99")
    export_step(report)


@pytest.mark.e2e
def test_an_op_no_exporter_takes_is_named_with_where_it_is(tmp_path):
    with pytest.raises(ConversionError) as e:
        edgekit.build(Odd().eval(), "host", tmp_path / "out", example_inputs=(torch.randn(1, 4),), use_cache=False)
    msg = str(e.value)
    assert "edgekit_test::mystery" in msg and "module odd (Inner)" in msg
    assert "custom_translation_table" in msg and "register_custom_op_symbolic" in msg and "opset" in msg
    assert not (tmp_path / "out").exists()


def test_a_wrong_example_input_is_refused_clearly(tmp_path):
    with pytest.raises(ModelError, match=r"fails on its example inputs \(x: \[1, 5\] torch.float32\)"):
        edgekit.build(cnn(), "host", tmp_path / "out", example_inputs=(torch.randn(1, 5),))
    with pytest.raises(ModelError, match="must be torch tensors"):
        edgekit.build(cnn(), "host", tmp_path / "out", example_inputs=([1.0, 2.0],))
    assert not (tmp_path / "out").exists()


def test_a_state_dict_file_is_not_a_model(tmp_path):
    torch.save(cnn().state_dict(), str(tmp_path / "weights.pt"))
    with pytest.raises(ModelError, match="not a TorchScript file.*torch.export.save"):
        edgekit.build(tmp_path / "weights.pt", "host", tmp_path / "out", input_shapes=["x=1,3,16,16"])
    assert not (tmp_path / "out").exists()


def test_without_torch_the_error_says_how_to_get_it(tmp_path, monkeypatch):
    (tmp_path / "m.pt2").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setenv("EDGEKIT_TORCH", "here")  # else the torch tool environment exports it: test_intake_torch_env
    with pytest.raises(ModelError) as e:
        edgekit.build(tmp_path / "m.pt2", "host", tmp_path / "out")
    assert "pip install 'edgekit[torch]'" in str(e.value) and "export to ONNX yourself" in str(e.value)
    assert e.value.exit_code == 1 and not (tmp_path / "out").exists()


def test_example_inputs_are_refused_for_an_onnx_model(tmp_path, tiny_model):
    with pytest.raises(ModelError, match="example_inputs and dynamic_shapes are for a PyTorch model"):
        edgekit.build(tiny_model, "host", tmp_path / "out", example_inputs=(X,))
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_a_dynamo_failure_falls_back_to_the_torchscript_exporter_with_the_reason(tmp_path, monkeypatch):
    from edgekit import intake_torch

    def refuse(*args, **kwargs):
        raise RuntimeError("this exporter cannot take the model today")

    monkeypatch.setattr(intake_torch, "_export_dynamo", refuse)
    report = edgekit.build(cnn(), "host", tmp_path / "out", example_inputs=(X,), use_cache=False)
    ex = report["export"]
    assert ex["fallback"] == "the dynamo exporter failed: this exporter cannot take the model today"
    assert "dynamo=False" in ex["exporter"] and ex["opset"] == 17
    export_step(report)


@pytest.mark.e2e
def test_int8_from_a_module_with_calibration_data(tmp_path):
    import numpy as np

    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (32, 1, 3, 16, 16)).astype(np.float32))
    report = edgekit.build(
        cnn(),
        "host",
        tmp_path / "out",
        example_inputs=(X,),
        precision="int8",
        calib=tmp_path / "calib.npz",
        min_cosine=0.95,
        use_cache=False,
    )
    first = export_step(report)
    assert first["samples"] == 32 and report["fidelity"]["data"]["synthetic"] is False
    assert report["precision"] == "int8" and report["fidelity"]["steps"][-1]["step"].startswith("int8")
