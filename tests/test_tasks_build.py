"""Builds judged by what the model is for: a public YOLOv8 detector (benchmarks/zoo, fetched from PyPI) on photos,
and PP-OCRv4's text detector (DBNet) on rendered text.

FP32 conversions pass under the detection metric on every backend tried; an INT8 build that loses its detections is
refused naming the task metric, although its cosine is high; INT8 keeps the detector's decoder tail in float when
the metric fails (the report says which nodes and what it changed); ONNX Runtime FP16 of the text detector keeps
the node whose constants leave float16's range in float32 and passes; --task and --metric are recorded in the report.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import edgekit
from edgekit.errors import FidelityError

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo"
SHAPE = ["images=1,3,320,320"]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """NudeNet's YOLOv8n (one output [1, 22, 2100]) and letterboxed photos shipped with scikit-image's data."""
    sys.path.insert(0, str(ZOO))
    import data  # noqa: PLC0415
    import fetch  # noqa: PLC0415
    from PIL import Image

    cache = fetch.zoo_dir()
    try:
        fetch.fetch_all(cache, ["nudenet_yolov8n"])
    except fetch.FetchError as exc:
        pytest.fail(f"cannot fetch the zoo model: {exc}")
    photos = [Image.open(p).convert("RGB") for p in sorted((cache / "data").glob("*.png"))]
    rng = np.random.default_rng(0)
    xs = []
    for k in range(40):
        im = photos[k % len(photos)]
        if k >= len(photos):  # random crops and flips of the same photos
            im = data.random_crop(im, rng, flip=bool(k % 2))
        boxed, _ = data.letterbox(im, 320)
        xs.append((np.asarray(boxed, np.float32) / 255.0).transpose(2, 0, 1))
    d = tmp_path_factory.mktemp("yolo-data")
    np.savez(d / "calib.npz", images=np.stack(xs[:24]))
    np.savez(d / "val.npz", images=np.stack(xs[24:]))
    return cache / "models" / "nudenet_yolov8n.onnx", d / "calib.npz", d / "val.npz"


@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_fp32_detector_passes_under_its_task_metric(detector, tmp_path, backend):
    model, calib, val = detector
    r = edgekit.build(model, "host", tmp_path / "b", backend=backend, precision="fp32", val=val, input_shapes=SHAPE)
    assert r["task"]["family"] == "detection" and r["task"]["head"] == "yolov8" and r["task"]["inferred"]
    assert r["task"]["gate"] == "task metric" and "YOLOv8" in r["task"]["reason"]
    step = r["fidelity"]["steps"][-1]
    assert r["fidelity"]["passed"] and step["task"]["metrics"]["box_f1"] >= 0.99


def test_int8_that_loses_its_detections_is_refused_by_the_task_metric(detector, tmp_path):
    """The plain INT8 model (the decoder tail quantized too): boxes and scores share one scale at the output."""
    model, calib, val = detector
    with pytest.raises(FidelityError) as e:
        edgekit.build(
            model,
            "host",
            tmp_path / "b",
            precision="int8",
            calib=calib,
            val=val,
            input_shapes=SHAPE,
            use_cache=False,
            keep_head_float=False,
        )
    assert "box_f1" in str(e.value) and "detection" in str(e.value) and not (tmp_path / "b").exists()
    record = e.value.report
    assert record["task"]["metrics"]["box_f1"] < 0.8
    assert min(m["cosine_mean"] for m in record["outputs"].values()) > 0.95  # the generic gate would have kept it


def test_int8_keeps_the_detection_tail_float_when_the_task_metric_needs_it(detector, tmp_path):
    """ONNX Runtime INT8 quantizes the [boxes 0..320, scores 0..1] concat with one uint8 scale: scores come out above
    1. The task metric fails, the tail (DFL softmax and integral, box decode, sigmoid, concat) is kept float and the
    build is judged again; the report names the nodes and both scores. On these photos the reference's detections
    are mostly near the 0.25 threshold, and the rest of the network's INT8 noise still moves some of them across it
    (measured: quantizing the first block alone costs box F1 ~0.3), so the build is kept here only as degraded."""
    import onnxruntime as ort

    model, calib, val = detector
    r = edgekit.build(
        model, "host", tmp_path / "b", precision="int8", calib=calib, val=val, input_shapes=SHAPE, use_cache=False,
        allow_degraded=True,
    )  # fmt: skip
    kept = r["kept_float"]
    assert kept["kept"] and kept["metric"] == "box_f1" and kept["tail_float"] > kept["plain"]
    assert {"/model.22/Concat_25", "/model.22/Sigmoid", "/model.22/dfl/Softmax"} <= set(kept["nodes"])
    assert all("/model.22/cv" in b for b in kept["after_layers"]) and len(kept["nodes"]) < 40
    assert kept["reason"].startswith("detection tail: box_f1 ") and "nodes float" in kept["reason"]
    step = r["fidelity"]["steps"][-1]
    assert "node(s) of the detection tail kept float" in step["step"]
    assert step["task"]["metrics"]["box_f1"] == pytest.approx(kept["tail_float"])
    session = ort.InferenceSession(str(tmp_path / "b" / "model.onnx"), providers=["CPUExecutionProvider"])
    scores = np.concatenate([session.run(None, {"images": x[None]})[0][0, 4:] for x in np.load(val)["images"]])
    assert scores.min() >= 0 and scores.max() <= 1.0  # sigmoid outputs, no longer quantized with the boxes


def test_openvino_int8_tries_the_tail_in_nncfs_ignored_scope(detector, tmp_path):
    """OpenVINO INT8 keeps this detector's boxes (box F1 ~0.9); a stricter --min-score makes it fail, and the tail is
    tried in NNCF's ignored scope (its IR ops found by the tensors the ONNX nodes produce); the better one is kept."""
    model, calib, val = detector
    r = edgekit.build(
        model, "host", tmp_path / "b", backend="openvino", precision="int8", calib=calib, val=val, input_shapes=SHAPE,
        use_cache=False, min_score=0.999, allow_degraded=True,
    )  # fmt: skip
    kept = r["kept_float"]
    assert kept["metric"] == "box_f1" and kept["plain"] < 0.999 and "/model.22/Concat_25" in kept["nodes"]
    assert kept["reason"].startswith("detection tail: box_f1 ") and len(kept["nodes"]) == 24
    best = max(kept["plain"], kept["tail_float"])
    assert r["fidelity"]["steps"][-1]["task"]["metrics"]["box_f1"] == pytest.approx(best)


@pytest.fixture(scope="module")
def text_detector(tmp_path_factory):
    """PP-OCRv4's DBNet text detector and two pages (rendered text, scikit-image's scanned page) at 160x480."""
    sys.path.insert(0, str(ZOO))
    import data  # noqa: PLC0415
    import fetch  # noqa: PLC0415

    cache = fetch.zoo_dir()
    try:
        fetch.fetch_all(cache, ["ppocr_v4_det"])
    except fetch.FetchError as exc:
        pytest.fail(f"cannot fetch the zoo model: {exc}")
    lines = ["Shipping models to small devices", "Edge devices run small models close to the camera."]
    pages = [data.text_page(lines), data.photo(cache, "page.png")]
    xs = [data.to_tensor(p, (480, 160), mean=(0.5,) * 3, std=(0.5,) * 3, bgr=True)[0] for p in pages]
    d = tmp_path_factory.mktemp("ocr-data")
    np.savez(d / "pages.npz", x=np.stack(xs))
    return cache / "models" / "ppocr_v4_det.onnx", d / "pages.npz"


def test_ort_fp16_keeps_the_nodes_beyond_fp16s_range_in_float32(text_detector, tmp_path):
    """Its head's BatchNormalization has a running variance of ~1e8: the fp16 converter clamps it to 1e4 and the
    probability map is garbage (cosine ~0.5); kept in float32 (the one node), the map matches FP32."""
    model, pages = text_detector
    r = edgekit.build(
        model, "host", tmp_path / "b", precision="fp16", val=pages, input_shapes=["x=1,3,160,480"], use_cache=False
    )
    kept = r["kept_float"]
    assert kept["kind"] == "fp16 range" and kept["scan_samples"] == 2 and kept["rounds"] == 1
    assert [n["node"] for n in kept["nodes"]] == ["p2o.BatchNormalization.1"]
    assert "batch_norm_0.w_2" in kept["nodes"][0]["reason"] and "beyond fp16" in kept["nodes"][0]["reason"]
    step = r["fidelity"]["steps"][-1]
    assert r["fidelity"]["passed"] and "1 node(s) kept float32" in step["step"]
    assert r["task"]["family"] == "dense" and step["task"]["metrics"]["mask_iou"] >= 0.97


def test_given_task_and_user_metric_are_recorded(detector, tmp_path):
    model, calib, val = detector
    metric = tmp_path / "mymetric.py"
    metric.write_text(
        "import numpy as np\n"
        "def score(reference, candidate, labels):\n"
        "    return -max(float(np.abs(r[k] - c[k]).max()) for r, c in zip(reference, candidate) for k in r)\n"
    )
    r = edgekit.build(
        model,
        "host",
        tmp_path / "b",
        precision="fp32",
        val=val,
        input_shapes=SHAPE,
        task="detection:yolov8,conf=0.3",
        metric=f"{metric}:score",
        min_score=-1e-3,
    )
    assert r["task"]["spec"].startswith("detection:yolov8") and not r["task"]["inferred"]
    assert r["task"]["metric"]["name"].endswith("mymetric.py:score") and len(r["task"]["metric"]["sha256"]) == 64
    assert r["fidelity"]["passed"]
