"""Ground truth beside a folder of images (``--val DIR`` / ``--calib DIR``) for the real task score and its drop.

Read by :func:`folder_labels`, first match wins:

- ``instances.json`` or ``labels.json`` in COCO format (``images``, ``annotations`` with ``bbox`` = x, y, w, h in the
  image's own pixels, ``categories``): boxes per image, scaled to the model's input size (the images are resized
  to it, not letterboxed), classes numbered by the sorted category ids (COCO's 80 ids -> 0..79, as YOLO models
  number them) -> real mAP@0.5 of the reference and of the build;
- ``masks/STEM.png`` for every image ``STEM.*``: a class index per pixel (8-bit grey or palette PNG; a dense map's
  mask is any value > 0), resized to the output map with nearest neighbour -> real mIoU (segmentation) or mask IoU
  (dense maps);
- ``labels.txt`` with ``NAME<TAB>TEXT`` lines (PaddleOCR's format; NAME a file name or a path below the folder),
  or ``STEM.txt`` beside each image: a transcript -> character accuracy (needs ``charset=FILE`` in the CTC task).

The labels are one entry per image, in the order the images are read: :class:`BoxLabels`, an integer array, or a
string. Anything that does not fit (an image without its mask, a JSON that is not COCO) is refused with a clear error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError

COCO_FILES = ("instances.json", "labels.json")
MASKS_DIR = "masks"
TRANSCRIPTS = "labels.txt"


@dataclass
class BoxLabels:
    """Ground-truth boxes of one image in the model's input pixels: xyxy ``boxes`` and their ``classes``."""

    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    classes: list[int] = field(default_factory=list)

    def detections(self) -> list[tuple[int, float, tuple[float, ...]]]:
        """As (class, score 1, box) detections, the form :mod:`edgekit.tasks.metrics` matches."""
        return [(c, 1.0, b) for c, b in zip(self.classes, self.boxes, strict=True)]


def is_label_file(path: Path, folder: Path) -> bool:
    """Whether an image under ``folder`` is ground truth (a mask), not an input."""
    rel = path.relative_to(folder).parts
    return len(rel) > 1 and rel[0] == MASKS_DIR


def folder_labels(folder: Path, files: list[Path], size: tuple[int, int]) -> list[Any] | None:
    """Labels for ``files`` (the images of ``folder``, in reading order) resized to ``size`` = (width, height)."""
    folder = Path(folder)
    for name in COCO_FILES:
        if (folder / name).is_file():
            return _coco(folder / name, folder, files, size)
    if (folder / MASKS_DIR).is_dir():
        return _masks(folder / MASKS_DIR, files)
    if (folder / TRANSCRIPTS).is_file():
        return _transcripts(folder / TRANSCRIPTS, folder, files)
    if files and all(p.with_suffix(".txt").is_file() for p in files):
        return [p.with_suffix(".txt").read_text(encoding="utf-8").strip("\n") for p in files]
    return None


def _coco(path: Path, folder: Path, files: list[Path], size: tuple[int, int]) -> list[BoxLabels]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        images = {str(im["file_name"]): im for im in doc["images"]}
        annotations = doc["annotations"]
        categories = sorted(int(c["id"]) for c in doc.get("categories", [])) or sorted(
            {int(a["category_id"]) for a in annotations}
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"{path} is not a COCO detection file ({type(e).__name__}: {e}): it needs 'images' (id, file_name, "
            "width, height), 'annotations' (image_id, category_id, bbox = [x, y, w, h]) and 'categories' (id, name)"
        ) from None
    index = {c: k for k, c in enumerate(categories)}
    by_image: dict[Any, list[dict[str, Any]]] = {}
    for a in annotations:
        by_image.setdefault(a.get("image_id"), []).append(a)
    out = []
    for p in files:
        im = images.get(p.relative_to(folder).as_posix()) or images.get(p.name)
        if im is None:
            raise DataError(
                f"{path}: no entry in 'images' for {p.name}; every image of {folder} needs one (file_name = its name)"
            )
        w0, h0 = im.get("width"), im.get("height")
        if not w0 or not h0:
            from PIL import Image

            with Image.open(p) as img:
                w0, h0 = img.size
        sx, sy = size[0] / float(w0), size[1] / float(h0)
        lab = BoxLabels()
        for a in by_image.get(im.get("id"), []):
            if a.get("iscrowd"):
                continue
            x, y, w, h = (float(v) for v in a["bbox"])
            lab.boxes.append((x * sx, y * sy, (x + w) * sx, (y + h) * sy))
            lab.classes.append(index[int(a["category_id"])])
        out.append(lab)
    return out


def _masks(masks: Path, files: list[Path]) -> list[np.ndarray]:
    from PIL import Image

    out = []
    for p in files:
        mask = masks / f"{p.stem}.png"
        if not mask.is_file():
            raise DataError(f"{p.name} has no mask: {masks} needs {mask.name} (a class index per pixel, PNG)")
        with Image.open(mask) as img:
            arr = np.asarray(img if img.mode in ("L", "P", "I", "I;16") else img.convert("L"))
        out.append(arr.astype(np.int64))
    return out


def _transcripts(path: Path, folder: Path, files: list[Path]) -> list[str]:
    table = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        name, sep, text = line.partition("\t")
        if not sep:
            raise DataError(f"{path}:{n}: expected NAME<TAB>TEXT (the image's file name, a tab, its transcript)")
        table[Path(name).as_posix()] = text
    out = []
    for p in files:
        found = table.get(p.relative_to(folder).as_posix(), table.get(p.name))
        if found is None:
            raise DataError(f"{path}: no transcript for {p.name}")
        out.append(found)
    return out


def resize_mask(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of a label map to ``shape`` = (height, width)."""
    h, w = mask.shape[:2]
    if (h, w) == tuple(shape):
        return mask
    rows = (np.arange(shape[0]) * h // shape[0]).clip(0, h - 1)
    cols = (np.arange(shape[1]) * w // shape[1]).clip(0, w - 1)
    return mask[rows][:, cols]


# -- real scores against the labels (the ``labels`` entry of a task section) -------------------------------------
def detection_score(labels: Any, reference: list[Any], candidate: list[Any]) -> dict[str, Any] | None:
    """Real mAP@0.5 (in points) of the reference's and the candidate's detections against :class:`BoxLabels`."""
    from .metrics import detection_agreement

    if labels is None or len(labels) != len(reference) or not all(isinstance(x, BoxLabels) for x in labels):
        return None
    truth = [x.detections() for x in labels]
    score = {
        k: 100 * detection_agreement(truth, dets, 0.5)["map50"]
        for k, dets in (("reference", reference), ("candidate", candidate))
    }
    return {"metric": "map50_pct", **score, "drop": score["reference"] - score["candidate"]}


def map_score(
    family: str, labels: Any, reference: list[np.ndarray], candidate: list[np.ndarray], thresh: float
) -> dict[str, Any] | None:
    """Real mIoU (segmentation) or mask IoU (dense maps), in points, of both models' maps against mask labels.

    ``reference``/``candidate``: one [C, H, W] map per image. Mask values >= C (e.g. 255, "ignore") are left out of
    a segmentation's score."""
    from .metrics import mask_iou, segmentation_agreement

    if (
        labels is None
        or len(labels) != len(reference)
        or not all(isinstance(x, np.ndarray) and x.ndim == 2 for x in labels)
    ):
        return None
    truth = [resize_mask(m, r.shape[-2:]) for m, r in zip(labels, reference, strict=True)]
    if family == "dense":
        score = {
            k: 100 * mask_iou([t > 0 for t in truth], [x[0] > thresh for x in maps])
            for k, maps in (("reference", reference), ("candidate", candidate))
        }
        return {"metric": "mask_iou_pct", **score, "drop": score["reference"] - score["candidate"]}
    classes = max(reference[0].shape[0], 2)
    kept = [np.where(t < classes, t, -1) for t in truth]  # values >= C (e.g. 255) are "ignore": in no class

    def predicted(maps: list[np.ndarray]) -> list[np.ndarray]:
        labels_ = [x.argmax(0) if x.shape[0] > 1 else (x[0] > thresh).astype(np.int64) for x in maps]
        return [np.where(t >= 0, p, -1) for p, t in zip(labels_, kept, strict=True)]

    score = {
        k: 100 * segmentation_agreement(kept, predicted(maps), classes)["miou"]
        for k, maps in (("reference", reference), ("candidate", candidate))
    }
    return {"metric": "miou_pct", **score, "drop": score["reference"] - score["candidate"]}
