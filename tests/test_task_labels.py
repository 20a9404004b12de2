"""Labels beside a folder of real photos (COCO boxes, mask PNGs, transcripts) give the real task score and its drop.

The photos are scikit-image's (benchmarks/zoo data); the label files are tiny ones written by each test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_tasks_build import SHAPE, detector  # noqa: F401  (the module-scoped fixture)

from edgekit.data import load_dataset
from edgekit.errors import DataError
from edgekit.model import TensorSpec
from edgekit.passes.mixed_precision import Budget
from edgekit.tasks import evaluate, parse_task
from edgekit.tasks.labels import BoxLabels

PHOTOS = Path(__file__).resolve().parents[1] / ".cache" / "zoo" / "data"
SPEC = [TensorSpec("images", [1, 3, 320, 320], "float32")]
PRE = "resize=320x320 scale=1/255"


@pytest.fixture
def photos(tmp_path):
    names = ["astronaut.png", "chelsea.png", "coffee.png"]
    if not all((PHOTOS / n).is_file() for n in names):
        pytest.fail(f"the zoo photos are missing under {PHOTOS}: run python benchmarks/zoo/fetch.py")
    d = tmp_path / "val"
    d.mkdir()
    for n in names:
        shutil.copy(PHOTOS / n, d / n)
    return d


def _size(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        return im.size


def _yolo(dets: list[tuple[int, float, tuple[float, float, float, float]]], classes: int = 2) -> np.ndarray:
    """A [1, 4 + C, A] YOLOv8 head whose decoded answers are exactly ``dets``."""
    head = np.zeros((1, 4 + classes, 50), np.float32)
    for a, (c, s, (x0, y0, x1, y1)) in enumerate(dets):
        head[0, :4, a] = [(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0]
        head[0, 4 + c, a] = s
    return head


def test_coco_boxes_give_the_real_map50_and_its_drop(photos):
    sizes = {p.name: _size(p) for p in sorted(photos.iterdir())}
    coco = {
        "images": [{"id": k, "file_name": n, "width": sizes[n][0], "height": sizes[n][1]} for k, n in enumerate(sizes)],
        "annotations": [  # one person (category 1) on the astronaut, one cat (category 17) on chelsea, none on coffee
            {"image_id": 0, "category_id": 1, "bbox": [100, 20, 300, 480], "iscrowd": 0},
            {"image_id": 1, "category_id": 17, "bbox": [50, 30, 200, 150], "iscrowd": 0},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 17, "name": "cat"}],
    }
    (photos / "instances.json").write_text(json.dumps(coco))
    ds = load_dataset(photos, SPEC, PRE)
    assert len(ds) == 3 and all(isinstance(x, BoxLabels) for x in ds.labels)
    astronaut, chelsea, coffee = ds.labels  # sorted by file name; boxes scaled from 512x512 / 451x300 to 320x320
    assert astronaut.classes == [0] and np.allclose(astronaut.boxes[0], (62.5, 12.5, 250.0, 312.5))
    w, h = sizes["chelsea.png"]
    assert chelsea.classes == [1] and np.allclose(
        chelsea.boxes[0], (50 * 320 / w, 30 * 320 / h, 250 * 320 / w, 180 * 320 / h)
    )
    assert coffee.boxes == []
    found = [[(c, 0.9, b) for c, b in zip(x.classes, x.boxes)] for x in ds.labels]
    reference = [{"output0": _yolo(d)} for d in found]
    candidate = [{"output0": _yolo(d if k != 1 else [])} for k, d in enumerate(found)]  # loses the cat
    section = evaluate(parse_task("detection:yolov8"), reference, candidate, ds.labels)
    lab = section["labels"]
    assert lab["metric"] == "map50_pct" and lab["reference"] == 100.0 and lab["candidate"] == 50.0
    assert lab["drop"] == 50.0
    # an accuracy-points budget is measured on that real score
    value, _, holds, detail = Budget.parse("1pt").measure(
        {"outputs": {"output0": {"cosine_mean": 1.0}}, "task": section}
    )
    assert value == 50.0 and not holds and detail["label_metric"] == "map50_pct"


def test_mask_pngs_give_the_real_miou_and_mask_iou(photos):
    (photos / "masks").mkdir()
    truth = {}
    for p in sorted(photos.glob("*.png")):
        w, h = _size(p)
        mask = np.zeros((h, w), np.uint8)
        mask[: h // 2, : w // 2] = 1  # class 1 in the top-left quarter
        mask[-5:, :] = 255  # a strip of "ignore"
        Image.fromarray(mask).save(photos / "masks" / p.name)
        truth[p.name] = mask
    ds = load_dataset(photos, SPEC, PRE)
    assert len(ds) == 3 and ds.labels[0].shape == (512, 512)  # the masks are not read as input images
    exact = np.zeros((1, 2, 80, 80), np.float32)
    exact[0, 1, :40, :40] = exact[0, 0, 40:, :] = exact[0, 0, :40, 40:] = 1
    half = exact.copy()
    half[0, 1, :40, 20:40], half[0, 0, :40, 20:40] = 0, 1  # half of the class-1 region lost
    seg = parse_task("segmentation")
    lab = evaluate(seg, [{"y": exact}] * 3, [{"y": half}] * 3, ds.labels)["labels"]
    assert lab["metric"] == "miou_pct" and lab["reference"] > 99 and 50 < lab["candidate"] < 85
    dense = parse_task("dense,thresh=0.3")
    lab = evaluate(dense, [{"y": exact[:, 1:]}] * 3, [{"y": half[:, 1:]}] * 3, ds.labels)["labels"]
    assert lab["metric"] == "mask_iou_pct" and lab["reference"] > 95 and abs(lab["candidate"] - 50) < 3


def test_transcripts_and_refusals(photos):
    (photos / "labels.txt").write_text("astronaut.png\tab\nchelsea.png\tba\ncoffee.png\taab\n")
    ds = load_dataset(photos, SPEC, PRE)
    assert ds.labels == ["ab", "ba", "aab"]
    (photos / "labels.txt").unlink()
    for p in photos.glob("*.png"):
        p.with_suffix(".txt").write_text(p.stem + "\n")
    assert load_dataset(photos, SPEC, PRE).labels == ["astronaut", "chelsea", "coffee"]
    (photos / "instances.json").write_text(json.dumps({"images": []}))
    with pytest.raises(DataError, match="COCO"):
        load_dataset(photos, SPEC, PRE)
    (photos / "instances.json").unlink()
    (photos / "masks").mkdir()
    with pytest.raises(DataError, match="has no mask"):
        load_dataset(photos, SPEC, PRE)


@pytest.mark.e2e
def test_a_build_reports_the_real_map50_from_a_coco_file(detector, photos, tmp_path):  # noqa: F811
    """NudeNet's YOLOv8n built for ONNX Runtime with --val a folder of photos + instances.json: the report carries the
    real mAP@0.5 of the reference and of the build (FP32: no drop)."""
    import edgekit

    model, _, _ = detector
    sizes = {p.name: _size(p) for p in sorted(photos.iterdir())}
    coco = {
        "images": [{"id": k, "file_name": n, "width": w, "height": h} for k, (n, (w, h)) in enumerate(sizes.items())],
        "annotations": [{"image_id": 0, "category_id": 3, "bbox": [150, 40, 200, 200], "iscrowd": 0}],
        "categories": [{"id": k, "name": f"class{k}"} for k in range(18)],
    }
    (photos / "instances.json").write_text(json.dumps(coco))
    r = edgekit.build(
        model, "host", tmp_path / "b", backend="ort", precision="fp32", val=photos, preprocess=PRE, input_shapes=SHAPE
    )
    lab = r["fidelity"]["steps"][-1]["task"]["labels"]
    assert lab["metric"] == "map50_pct" and lab["drop"] == 0.0 and 0.0 <= lab["reference"] <= 100.0
    assert r["fidelity"]["passed"] and r["fidelity"]["data"]["labels"]
