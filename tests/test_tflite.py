"""TFLite / LiteRT backend: real onnx2tf conversions in the tflite tool environment, real LiteRT runs.

The tool environment lives in the toolenv root (not the per-run cache), so it is created once
(~2 min, from PyPI) and reused by later runs.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from harness import run_cli

pytest.importorskip("ai_edge_litert")
from edgekit import toolenvs  # noqa: E402
from edgekit.converters import tflite  # noqa: E402

PPOCR = Path(__file__).resolve().parent.parent / "examples" / "ppocr_mobile_v2_cls.onnx"
OUT = "save_infer_model/scale_0.tmp_1"


@pytest.fixture(scope="module", autouse=True)
def tool_env():
    try:
        toolenvs.find_python(tflite.TOOLENV)
    except Exception as e:
        pytest.skip(f"no interpreter for the tflite tool environment: {e}")
    return toolenvs.ensure(tflite.TOOLENV)


@pytest.fixture(scope="module")
def ppocr_int8(tmp_path_factory, textlines):
    out = tmp_path_factory.mktemp("tflite") / "ppocr-pi5"
    p = run_cli(
        "build",
        PPOCR,
        "--profile",
        "raspberrypi5",
        "--backend",
        "tflite",
        "--precision",
        "int8",
        "--calib",
        textlines,
        "--input-shape",
        "x=1,3,48,192",
        "-o",
        out,
        "--json",
        check=0,
    )
    return out, json.loads(p.stdout), p.stderr


def test_ppocr_int8_build_is_validated(ppocr_int8):
    out, report, log = ppocr_int8
    assert report["backend"] == "tflite" and report["format"] == "tflite" and report["precision"] == "int8"
    assert (out / "model.tflite").is_file() and (out / "io_layout.json").is_file()
    steps = report["fidelity"]["steps"]
    assert [s["step"].split(" ")[0] for s in steps] == ["fp32", "int8"] and all(s["passed"] for s in steps)
    fp32, int8 = steps[0]["outputs"][OUT], steps[1]["outputs"][OUT]
    assert fp32["max_abs"] < 1e-3 and fp32["accuracy"] == fp32["accuracy_reference"]
    assert abs(int8["accuracy"] - fp32["accuracy"]) <= 2.0
    assert int8["accuracy"] > 80  # real text lines: the classifier works, not chance
    ops = {o["op"]: o for o in report["ops"]}
    assert "CONV_2D" in ops and all(isinstance(o["version"], int) and o["count"] > 0 for o in report["ops"])
    assert report["quantization"]["tool"] == "ai-edge-quantizer"
    layout = report["tflite"]["layout"]
    assert layout["transposed"] == ["x"] and layout["io"]["inputs"][0]["perm"] == [0, 2, 3, 1]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 3, 48, 192]  # the bundle takes what the user feeds
    assert manifest["runner"]["io"]["inputs"][0]["shape"] == [1, 48, 192, 3]
    assert "onnx2tf" in report["tflite"]["versions"] and report["tflite"]["versions"]["python"] >= "3.12"
    assert report["quantization"]["calibration_samples"] > 0 and "calibration samples" in steps[1]["step"]


def test_ppocr_int8_deploys_locally(ppocr_int8, local_device):
    from edgekit.deployer import deploy

    out, _, _ = ppocr_int8
    timings = deploy(str(out), local_device, runs=20)
    assert timings["runtime"] == "ai-edge-litert" and timings["accelerator"] == "xnnpack"
    assert timings["threads"] >= 1 and timings["latency_ms"]["p50"] > 0
    assert timings["placement"]["xnnpack"] > 0
    assert not [w for w in timings.get("warnings", []) if "differ" in w]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8-dynamic"])
def test_mobilenetv2_precisions(tmp_path, precision):
    from make_mobilenetv2 import make_mobilenetv2

    import edgekit

    src = tmp_path / "mobilenetv2.onnx"
    make_mobilenetv2(src)
    report = edgekit.build(
        str(src), profile="raspberrypi5", output=str(tmp_path / "out"), backend="tflite", precision=precision
    )
    steps = report["fidelity"]["steps"]
    assert len(steps) == (1 if precision == "fp32" else 2) and all(s["passed"] for s in steps)
    size = report["model_size_bytes"]
    ratio = {"fp32": 1.1, "fp16": 0.55, "int8-dynamic": 0.3}[precision]  # of the FP32 ONNX source
    assert size < ratio * report["source_size_bytes"]
    if precision != "fp32":
        assert report["quantization"]["tool"] == "ai-edge-quantizer"


def _spatial_model(path):
    """Conv -> Relu -> Conv with a 4-D output: both the input and the output change layout in onnx2tf."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 6, 1, 1)).astype(np.float32) * 0.3, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "spatial",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 14])],
        [w1, w2],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))


def test_layout_with_structured_inputs(tmp_path):
    """Images with spatial structure: a wrong transpose of the input or the 4-D output shows at once."""
    import onnxruntime as ort

    import edgekit

    src = tmp_path / "spatial.onnx"
    _spatial_model(src)
    yy, xx = np.meshgrid(np.arange(10), np.arange(14), indexing="ij")
    x = np.stack([np.sin(xx / 2.0 + c) * np.cos(yy / 3.0 - c) + 0.1 * c * yy for c in range(3)])[None].astype(
        np.float32
    )
    data = tmp_path / "data.npz"
    np.savez(data, x=np.concatenate([x, x[:, :, ::-1], x[:, :, :, ::-1]] * 4))
    out = tmp_path / "out"
    report = edgekit.build(
        str(src), profile="raspberrypi5", output=str(out), backend="tflite", precision="fp32", val=str(data)
    )
    io = report["tflite"]["layout"]["io"]
    assert io["inputs"][0]["perm"] == [0, 2, 3, 1] and io["outputs"][0]["perm"] == [0, 3, 1, 2]
    assert report["outputs"][0]["shape"] == [1, 4, 10, 14]
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = tflite.BACKEND.predict(out / "model.tflite", [{"x": x}])[0]["y"]
    assert got.shape == want.shape == (1, 4, 10, 14)
    assert np.abs(got - want).max() < 1e-4
    wrong = np.transpose(got.reshape(1, 10, 14, 4), (0, 3, 1, 2))  # what an ignored output layout would give
    assert np.abs(wrong - want).max() > 0.1


def test_delegate_that_cannot_load_falls_back_to_cpu(ppocr_int8):
    from edgekit_agent.bench import run_bench

    out, _, _ = ppocr_int8
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["runner"]["delegate_libraries"] = {"gpu": str(out / "no_such_gpu_delegate.so")}
    report = run_bench(str(out), manifest, runs=5, warmup=1, providers=["gpu", "xnnpack"])
    assert report["accelerator"] == "xnnpack"
    assert report["accelerators_requested"] == ["gpu", "xnnpack"]
    warn = " ".join(report["warnings"])
    assert "delegate gpu was requested but" in warn and "failed to load" in warn and "runs on the CPU" in warn


def test_backends_cli_lists_tflite_env():
    p = run_cli("backends", "--json", check=0)
    rows = {r["name"]: r for r in json.loads(p.stdout)["backends"]}
    assert rows["tflite"]["ok"] and rows["tflite"]["toolenv"]["ready"]
    assert rows["tflite"]["precisions"] == ["fp32", "fp16", "int8-dynamic", "int8"]
    p = run_cli("backends", "install", "ort", check=1)
    assert "has no tool environment" in p.stderr


def test_an_unconverted_reference_is_timed_in_litert_too(ppocr_int8, tmp_path):
    """The unpruned reference of a pruned build is not what the build converted: host timing converts it to an
    FP32 .tflite instead of timing it in onnxruntime, and names both runtimes."""
    from edgekit.host_timing import time_on_host as _time_on_host
    from edgekit.model import load_model

    out, _, _ = ppocr_int8
    ref = load_model(PPOCR, {"x": [1, 3, 48, 192]}).save(tmp_path / "reference.onnx")
    with np.load(out / "sample_inputs.npz") as z:
        feed = {k: z[k] for k in z.files}
    hl = _time_on_host(tflite.BACKEND, ref, out / "model.tflite", feed, 1, rounds=1, runs=3)
    assert hl["runtimes"] == {"reference": "ai-edge-litert", "built": "ai-edge-litert"}
    assert hl["reference_p50_ms"] > 0 and hl["built_p50_ms"] > 0


def test_delegate_partitions_are_attributed_honestly(ppocr_int8):
    """Without a hardware delegate the partitions are XNNPACK's; with one, XNNPACK is left out so they are the
    hardware delegate's; where it could not be left out they are reported unattributed. (No hardware delegate
    library exists on this machine: the attribution is checked on the loaded CPU interpreter.)"""
    from edgekit_agent.runners.tflite import TFLiteRunner

    out, _, _ = ppocr_int8
    manifest = json.loads((out / "manifest.json").read_text())
    r = TFLiteRunner(str(out), manifest, threads=1)
    r.load()
    with np.load(out / "sample_inputs.npz") as z:
        feed = {k: z[k] for k in z.files}
    d = r.describe()
    assert d["accelerators_active"] == ["xnnpack"] and set(r.placement(feed)) <= {"xnnpack", "cpu"}
    r.active, r.xnnpack = ["gpu"], False
    assert "gpu" in r.placement(feed) and r.describe()["accelerators_active"] == ["gpu"]
    r.xnnpack = None
    assert any(k.startswith("delegated (unattributed") for k in r.placement(feed))
    assert r.describe()["accelerators_active"] == ["gpu", "xnnpack"]
    r.close()
