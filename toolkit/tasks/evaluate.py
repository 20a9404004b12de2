"""Decode the reference's and the candidate's raw outputs for a task and measure how far the answers agree.

:func:`evaluate` is what the fidelity gate calls: outputs are lists (one per sample) of ``{name: array}`` dicts in
the model's output order; the batch axis, when there is one, is split into samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import boxes as B
from . import labels as L
from . import metrics as M
from .regions import db_regions
from .sequence import char_error_rate, ctc_collapse, ctc_greedy
from .spec import TaskError, TaskSpec

Outputs = Sequence[dict[str, np.ndarray]]
PRIMARY = {
    "classification": "top1_agreement",
    "detection": "box_f1",
    "segmentation": "miou",
    "dense": "mask_iou",
    "keypoints": "pck",
    "ctc": "char_accuracy",
    "embedding": "cosine_mean",
    "vad": "frame_agreement",
}


def _floats(sample: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    return [(k, np.asarray(v)) for k, v in sample.items() if np.asarray(v).dtype.kind in "fiu"]


def _batched(outputs: Outputs, pick: Any) -> list[Any]:
    """Apply pick(sample_dict) -> list of per-batch-item answers; flatten over samples."""
    return [answer for sample in outputs for answer in pick(sample)]


# ------------------------------------------------------------------------------------------------ detection
def _detections(spec: TaskSpec, sample: dict[str, np.ndarray]) -> list[list[B.Detection]]:
    outs = [a for _, a in _floats(sample)]
    conf, iou = spec.num("conf"), spec.num("iou")
    head = spec.head
    if head in ("yolov8", "yolov5", "yolox"):
        arr = next((a for a in outs if a.ndim == 3), None)
        if arr is None:
            raise TaskError(f"task {spec}: no 3-D output [batch, rows, cols] among {[a.shape for a in outs]}")
        answers = []
        for item in arr:
            if head == "yolov8":
                item = item if item.shape[0] < item.shape[1] else item.T
                bx, sc = B.yolov8_decode(item)
            elif head == "yolov5":
                bx, sc = B.yolov5_decode(item)
            else:
                bx, sc = B.yolox_decode(
                    item, _hw(spec), spec.ints("strides") if "strides" in spec.params else (8, 16, 32)
                )
            answers.append(B.class_nms(bx, sc, conf, iou))
        return answers
    if head == "picodet":
        reg = int(spec.num("reg_max")) if "reg_max" in spec.params else 7
        dists = [a for a in outs if a.shape[-1] == 4 * (reg + 1)]
        scores = [a for a in outs if a.shape[-1] != 4 * (reg + 1)]
        strides = spec.ints("strides") if "strides" in spec.params else (8, 16, 32, 64)
        answers = []
        for b in range(outs[0].shape[0]):
            bx, sc = B.picodet_decode([s[b] for s in scores], [d[b] for d in dists], _hw(spec), strides, reg)
            answers.append(B.class_nms(bx, sc, conf, iou))
        return answers
    if head == "ssd":
        bxs = next((a for a in outs if a.ndim == 3 and a.shape[-1] == 4), None)
        scs = next((a for a in outs if a.ndim == 3 and a.shape[-1] != 4), None)
        if bxs is None or scs is None:
            raise TaskError(
                f"task {spec}: needs boxes [batch, A, 4] and scores [batch, A, C]; got {[a.shape for a in outs]}"
            )
        box = str(spec.params.get("box", "xyxy"))
        return [B.class_nms(*B.ssd_decode(bb, ss, box), conf, iou) for bb, ss in zip(bxs, scs, strict=True)]
    if head == "nms":
        return [_nms_rows(spec, outs, conf)]
    raise TaskError(f"task {spec}: unknown detection head {head!r}")


def _nms_rows(spec: TaskSpec, outs: list[np.ndarray], conf: float) -> list[B.Detection]:
    """Outputs of a graph that already ran NMS: [K, 6] rows (x0, y0, x1, y1, score, class), or boxes [.., K, 4] with
    scores [.., K] and classes [.., K]."""
    rows = next((a.reshape(-1, a.shape[-1]) for a in outs if a.shape[-1] == 6), None)
    if rows is not None:
        return [(int(r[5]), float(r[4]), tuple(float(v) for v in r[:4])) for r in rows if r[4] >= conf]
    bxs = next((a.reshape(-1, 4) for a in outs if a.shape[-1] == 4), None)
    if bxs is None:
        raise TaskError(f"task {spec}: no [K, 6] rows nor [K, 4] boxes among outputs {[a.shape for a in outs]}")
    rest = [a.ravel() for a in outs if a.size == len(bxs) and a.shape[-1] != 4]
    floats = [a for a in rest if a.dtype.kind == "f" and not np.allclose(a, np.round(a))]
    scores = floats[0] if floats else np.ones(len(bxs))
    ints = [a for a in rest if a is not scores]
    classes = ints[0].astype(np.int64) if ints else np.zeros(len(bxs), np.int64)
    return [
        (int(c), float(s), tuple(float(v) for v in b))
        for b, s, c in zip(bxs, scores, classes, strict=True)
        if s >= conf
    ]


def _hw(spec: TaskSpec) -> tuple[int, int]:
    size = spec.ints("size")
    return (size[0], size[0]) if len(size) == 1 else (size[0], size[1])


# ------------------------------------------------------------------------------------------------ maps and sequences
def _maps(sample: dict[str, np.ndarray], name: str | None) -> list[np.ndarray]:
    """The first (or named) float output as one [C, H, W] map per batch item."""
    arr = np.asarray(sample[name]) if name else _floats(sample)[0][1]
    if arr.ndim == 2:
        return [arr[None]]
    if arr.ndim == 3:
        return [arr]
    return [item.reshape((-1, *item.shape[-2:])) for item in arr]


def _indices(spec: TaskSpec, sample: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Per batch item, the class index at each time step (argmax over the class axis unless already indices)."""
    arr = _floats(sample)[0][1]
    if arr.ndim <= 2 and (arr.dtype.kind in "iu" or np.allclose(arr, np.round(arr))):
        return [row for row in arr.reshape(-1, arr.shape[-1]).astype(np.int64)]
    if arr.ndim == 2:
        arr = arr[None]
    if str(spec.params.get("layout", "NTC")).upper() == "TNC":
        arr = arr.transpose(1, 0, 2)
    return [item.argmax(-1) for item in arr.reshape(-1, *arr.shape[-2:])]


def _charset(spec: TaskSpec) -> list[str]:
    path = spec.params.get("charset")
    if not path:
        raise TaskError(
            f"task {spec}: transcripts as labels need the class-index -> character table: "
            "add charset=FILE (one character per line, in class-index order, blank included)"
        )
    return Path(str(path)).read_text(encoding="utf-8").split("\n")


def _regions(prob: np.ndarray, thresh: float, box_thresh: float) -> list[B.Detection]:
    """DB regions of a map as class-0 detections, so that regions are matched like boxes."""
    return [(0, r[4], tuple(float(v) for v in r[:4])) for r in db_regions(prob, thresh, box_thresh)]


# ------------------------------------------------------------------------------------------------ entry point
def evaluate(spec: TaskSpec, reference: Outputs, candidate: Outputs, labels: Any = None) -> dict[str, Any]:
    """The task section of a fidelity record: decoded metrics, the primary metric and its score, label scores."""
    fam = spec.family
    name = str(spec.params["output"]) if "output" in spec.params else None
    result: dict[str, Any] = {"task": str(spec), "family": fam}
    scored = None  # the real score against ground truth (labels beside the images: edgekit.tasks.labels)
    if fam == "detection":
        ref = _batched(reference, lambda s: _detections(spec, s))
        cand = _batched(candidate, lambda s: _detections(spec, s))
        m = M.detection_agreement(ref, cand, spec.num("match"))
        scored = L.detection_score(labels, ref, cand)
    elif fam in ("dense", "segmentation"):
        ref_maps = _batched(reference, lambda s: _maps(s, name))
        cand_maps = _batched(candidate, lambda s: _maps(s, name))
        scored = L.map_score(fam, labels, ref_maps, cand_maps, spec.num("thresh"))
        if fam == "dense":
            t = spec.num("thresh")
            m = {"mask_iou": M.mask_iou([r > t for r in ref_maps], [c > t for c in cand_maps])}
            m["psnr_db"] = M.psnr(ref_maps, cand_maps)
            m["region_f1"] = M.detection_agreement(
                [_regions(x[0], t, spec.num("box_thresh")) for x in ref_maps],
                [_regions(x[0], t, spec.num("box_thresh")) for x in cand_maps],
                0.5,
            )["box_f1"]
        else:
            classes = ref_maps[0].shape[0]
            t = spec.num("thresh")

            def to_labels(x: np.ndarray) -> np.ndarray:
                return x.argmax(0) if x.shape[0] > 1 else (x[0] > t).astype(np.int64)

            m = M.segmentation_agreement(
                [to_labels(x) for x in ref_maps], [to_labels(x) for x in cand_maps], max(classes, 2)
            )
    elif fam == "ctc":
        blank = int(spec.num("blank"))
        ref_idx = _batched(reference, lambda s: _indices(spec, s))
        cand_idx = _batched(candidate, lambda s: _indices(spec, s))
        m = M.sequence_agreement([ctc_collapse(i, blank) for i in ref_idx], [ctc_collapse(i, blank) for i in cand_idx])
        if labels is not None and len(labels) == len(ref_idx) and all(isinstance(x, str) for x in labels):
            charset = _charset(spec)
            score = {
                k: 100
                * (
                    1
                    - float(
                        np.mean(
                            [
                                char_error_rate(t, ctc_greedy(i, charset, blank))
                                for t, i in zip(labels, idx, strict=True)
                            ]
                        )
                    )
                )
                for k, idx in (("reference", ref_idx), ("candidate", cand_idx))
            }
            result["labels"] = {"metric": "char_accuracy_pct", **score, "drop": score["reference"] - score["candidate"]}
    elif fam == "vad":  # speech probability per frame (each sample one frame, or a stream's step)

        def probs(outputs: Outputs) -> np.ndarray:
            return np.concatenate([(np.asarray(s[name]) if name else _floats(s)[0][1]).ravel() for s in outputs])

        m = M.vad_agreement(probs(reference), probs(candidate), spec.num("thresh"))
    elif fam in ("embedding", "classification", "keypoints"):

        def rows(outputs: Outputs) -> np.ndarray:
            arrs = [np.asarray(s[name]) if name else _floats(s)[0][1] for s in outputs]
            return np.concatenate([a.reshape(a.shape[0], -1) if a.ndim > 1 else a[None] for a in arrs]).astype(
                np.float64
            )

        ref_rows, cand_rows = rows(reference), rows(candidate)
        if fam == "embedding":
            m = M.embedding_agreement(ref_rows, cand_rows)
        elif fam == "keypoints":
            m = M.keypoint_agreement(ref_rows, cand_rows, spec.num("tol"))
        else:
            m = M.classification_agreement(ref_rows, cand_rows)
            lab = np.asarray(labels) if labels is not None else None
            if lab is not None and lab.dtype.kind in "iu" and len(lab) == len(ref_rows):
                score = {
                    "reference": float(np.mean(ref_rows.argmax(1) == lab) * 100),
                    "candidate": float(np.mean(cand_rows.argmax(1) == lab) * 100),
                }
                result["labels"] = {"metric": "accuracy_pct", **score, "drop": score["reference"] - score["candidate"]}
    else:
        raise TaskError(f"task {spec}: the generic task has no task metric")
    if scored is not None:
        result["labels"] = scored
    result["metrics"] = m
    result["primary"] = PRIMARY[fam]
    result["score"] = m[PRIMARY[fam]]
    return result
