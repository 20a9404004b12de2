"""The device's install-time output check judges the decoded answers of the bundle's task (edgekit_agent.taskcheck).

An exact-enough build of a text detector whose map is ~0 almost everywhere (cosine ill-conditioned) passes; a
detector whose scores were crushed (cosine still ~0.998) is refused; both in pure Python, as on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_tasks_build import SHAPE, detector  # noqa: F401  (the module-scoped fixture)

from edgekit.tasks import boxes as B
from edgekit_agent import bench, taskcheck

YOLO = {"spec": "detection:yolov8", "family": "detection", "head": "yolov8", "params": {"conf": 0.25, "iou": 0.45}}


def _yolo_head(rng: np.random.Generator, classes: int = 3, anchors: int = 400) -> np.ndarray:
    """[1, 4 + C, A]: boxes in pixels, low scores except a few confident anchors."""
    head = np.zeros((1, 4 + classes, anchors), np.float32)
    head[0, 0:2] = rng.uniform(20, 300, (2, anchors))
    head[0, 2:4] = rng.uniform(10, 60, (2, anchors))
    head[0, 4:] = rng.uniform(0, 0.1, (classes, anchors))
    for k, a in enumerate(rng.choice(anchors, 8, replace=False)):
        head[0, 4 + k % classes, a] = rng.uniform(0.5, 0.95)
    return head


def _pairs(*arrays: np.ndarray) -> list[tuple[list[float], list[int]]]:
    return [(a.ravel().tolist(), list(a.shape)) for a in arrays]


def test_detections_match_the_numpy_decoder():
    head = _yolo_head(np.random.default_rng(0))
    ours = taskcheck.detections(YOLO, _pairs(head))
    bx, sc = B.yolov8_decode(head[0])
    theirs = B.class_nms(bx, sc, 0.25, 0.45)
    assert len(ours) == len(theirs) >= 6
    for (c, s, box), (c2, s2, box2) in zip(sorted(ours), sorted(theirs)):
        assert c == c2 and abs(s - s2) < 1e-6 and np.allclose(box, box2, atol=1e-4)


def _bundle(tmp_path, **outputs: np.ndarray):
    np.savez(tmp_path / "expected_outputs.npz", **outputs)
    return str(tmp_path)


def test_crushed_scores_are_refused_although_the_cosine_is_high(tmp_path):
    head = _yolo_head(np.random.default_rng(1))
    d = _bundle(tmp_path, output0=head)
    crushed = head.copy()
    step = 640 / 255  # one uint8 scale shared by boxes (0..640 pixels) and scores (0..1)
    crushed[0, 4:] = np.round(crushed[0, 4:] / step) * step
    plain = bench.compare_expected(d, {"output0": crushed})
    assert plain["passed"] and plain["cosine"] > 0.99  # the cosine alone would keep it
    judged = bench.compare_expected(d, {"output0": crushed}, task=YOLO)
    assert not judged["passed"] and "box_f1" in judged["detail"] and judged["task"]["value"] < 0.9
    exact = bench.compare_expected(d, {"output0": head + 1e-5}, task=YOLO)
    assert exact["passed"] and exact["task"]["value"] == 1.0


def test_near_constant_map_passes_by_its_mask_and_a_broken_one_fails(tmp_path):
    rng = np.random.default_rng(2)
    prob = np.full((1, 1, 64, 96), 1e-7, np.float32)
    prob[0, 0, 10:20, 10:50] = 0.9  # one text line
    d = _bundle(tmp_path, maps=prob)
    dense = {"spec": "dense,thresh=0.3", "family": "dense", "head": None, "params": {"thresh": 0.3}}
    noisy = prob + rng.normal(0, 1e-7, prob.shape).astype(np.float32)
    noisy[0, 0, 10:20, 10:50] = 0.9
    background = {"maps": noisy - prob + 1e-7}  # only the ~0 background: a cosine of noise
    assert bench.compare_expected(d, background)["cosine"] < 0.99
    ok = bench.compare_expected(d, {"maps": noisy}, task=dense)
    assert ok["passed"] and ok["task"]["metric"] == "mask_iou" and ok["task"]["value"] == 1.0
    broken = prob.copy()
    broken[0, 0, 10:20, 30:50] = 0.1  # half the line lost
    bad = bench.compare_expected(d, {"maps": broken}, task=dense)
    assert not bad["passed"] and "mask_iou" in bad["detail"]
    nan = bench.compare_expected(d, {"maps": prob * np.nan}, task=dense)
    assert not nan["passed"] and "NaN" in nan["detail"]


def test_sequences_classes_and_unsupported_heads():
    ctc = {"spec": "ctc", "family": "ctc", "head": None, "params": {"blank": 0}}
    steps = np.eye(5, dtype=np.float32)[[1, 1, 0, 2, 3, 0, 4]][None]  # "1 2 3 4" after collapsing
    swapped = steps.copy()
    swapped[0, 3] = np.eye(5)[4]
    assert taskcheck.score(ctc, _pairs(steps), _pairs(steps))[1] == 1.0
    assert taskcheck.score(ctc, _pairs(steps), _pairs(swapped))[1] == 0.75
    cls = {"spec": "classification", "family": "classification", "head": None, "params": {}}
    logits = np.array([[0.1, 0.7, 0.2], [0.9, 0.05, 0.05]], np.float32)
    assert taskcheck.score(cls, _pairs(logits), _pairs(logits[:, ::-1].copy()))[1] == 0.5
    assert not taskcheck.supported({"family": "detection", "head": "yolox"}) and not taskcheck.supported(None)
    assert taskcheck.supported(YOLO) and taskcheck.supported({"family": "dense"})


@pytest.mark.e2e
def test_a_built_detector_bundle_is_checked_by_its_boxes(detector, tmp_path):  # noqa: F811
    """A real YOLOv8n bundle: the manifest carries the task and the agent's bench judges the sample by box F1."""
    import json

    import edgekit

    model, _, val = detector
    r = edgekit.build(model, "host", tmp_path / "b", backend="ort", precision="fp32", val=val, input_shapes=SHAPE)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["task"]["family"] == "detection" and manifest["task"]["head"] == "yolov8"
    report = bench.run_bench(str(tmp_path / "b"), manifest, runs=1, warmup=0, placement=False)
    check = report["device_fidelity"]
    assert check["passed"] and check["task"]["metric"] == "box_f1" and check["task"]["value"] == 1.0, check
    assert r["fidelity"]["passed"]
