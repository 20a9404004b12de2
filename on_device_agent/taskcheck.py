"""A cheap form of the bundle's task metric, in pure Python: does the device give the same *answers* for the sample?

The build records its task in the manifest (``task``: family, head, decoder parameters). When a bundle is installed,
the device runs the bundle's sample and compares its outputs with the ones the build machine computed for the same
model file (``expected_outputs.npz``). Raw cosines are a poor judge there: an exact build of a text detector whose
probability map is ~0 almost everywhere can have a cosine of 0.3, and a runtime that crushes a detector's scores
can keep a cosine of 0.998. So both sets of outputs are decoded the way the application would, and the answers are
compared:

- detection (YOLOv8, YOLOv5, SSD-style boxes + scores, graphs with NMS): boxes after per-class NMS, matched by class
  and IoU >= ``match``: box F1;
- dense maps: the mask at ``thresh``: IoU;
- segmentation: the label map (argmax over classes, or ``thresh`` for one channel): pixel agreement;
- CTC: the greedy-decoded index sequences: 1 - character error rate;
- classification: the top-1 class of each row; embeddings: cosine of each row.

Other heads (YOLOX, PicoDet) and families keep the generic check. Inputs are flat sequences of numbers and a shape
(``array.tolist()`` or any iterable); no numpy is needed.
"""

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Outputs = List[Tuple[List[float], List[int]]]  # (flat values, shape) per output, in the model's order
Detection = Tuple[int, float, Tuple[float, ...]]

# the device compares with the build machine's outputs of the same model file: the answers must nearly agree
GATES = {
    "detection": ("box_f1", 0.9),
    "dense": ("mask_iou", 0.95),
    "segmentation": ("pixel_agreement", 0.95),
    "ctc": ("char_accuracy", 0.95),
    "classification": ("top1_agreement", 1.0),
    "embedding": ("cosine_min", 0.99),
}
DETECTION_HEADS = ("yolov8", "yolov5", "ssd", "nms")


def supported(task: Optional[Dict[str, Any]]) -> bool:
    """Whether :func:`score` can judge this task (a manifest's ``task`` dict)."""
    if not task or task.get("family") not in GATES:
        return False
    return task["family"] != "detection" or task.get("head") in DETECTION_HEADS


def _num(task: Dict[str, Any], key: str, default: float) -> float:
    try:
        return float(task.get("params", {}).get(key, default))
    except (TypeError, ValueError):
        return default


def _rows(flat: List[float], shape: Sequence[int]) -> List[List[float]]:
    """The last axis as rows: a list of lists."""
    width = shape[-1] if shape else 1
    return [flat[i : i + width] for i in range(0, len(flat), width)] if width else []


# -- detection --------------------------------------------------------------------------------------------------------
def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0.0) * max(h, 0.0)
    area = max(a[2] - a[0], 0.0) * max(a[3] - a[1], 0.0) + max(b[2] - b[0], 0.0) * max(b[3] - b[1], 0.0)
    return inter / (area - inter + 1e-9)


def _nms(candidates: Sequence[Detection], iou: float) -> List[Detection]:
    """Per-class greedy NMS over (class, score, box); best first."""
    kept: List[Detection] = []
    for det in sorted(candidates, key=lambda d: -d[1]):
        if all(k[0] != det[0] or _iou(k[2], det[2]) <= iou for k in kept):
            kept.append(det)
    return kept


def _xyxy(cx: float, cy: float, w: float, h: float) -> Tuple[float, ...]:
    return (cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0)


def _first(outputs: Outputs, fits: Callable[[List[int]], bool]) -> Optional[Tuple[List[float], List[int]]]:
    return next(((f, s) for f, s in outputs if fits(s)), None)


def detections(task: Dict[str, Any], outputs: Outputs) -> List[Detection]:
    """Decoded detections of one sample: ``outputs`` is a list of (flat values, shape) in the model's output order."""
    head = task.get("head")
    conf, iou = _num(task, "conf", 0.25), _num(task, "iou", 0.45)
    found = []
    if head in ("yolov8", "yolov5"):
        head_out = _first(outputs, lambda s: len(s) == 3)
        if head_out is None:
            raise ValueError("no 3-D output [1, rows, cols]")
        flat, shape = head_out
        rows_, cols = shape[1], shape[2]
        if head == "yolov8" and rows_ < cols:  # [4 + C, A]: one column per anchor
            for a in range(cols):
                scores = flat[4 * cols + a :: cols]
                c = max(range(len(scores)), key=scores.__getitem__)
                if scores[c] >= conf:
                    found.append((c, scores[c], _xyxy(flat[a], flat[cols + a], flat[2 * cols + a], flat[3 * cols + a])))
        else:
            extra = 4 if head == "yolov8" else 5
            for r in _rows(flat, shape):
                scores = r[extra:]
                if head == "yolov5":
                    scores = [r[4] * s for s in scores]
                c = max(range(len(scores)), key=scores.__getitem__)
                if scores[c] >= conf:
                    found.append((c, scores[c], _xyxy(r[0], r[1], r[2], r[3])))
        return _nms(found, iou)
    if head == "ssd":
        boxes = _first(outputs, lambda s: len(s) == 3 and s[-1] == 4)
        score_out = _first(outputs, lambda s: len(s) == 3 and s[-1] != 4)
        if boxes is None or score_out is None:
            raise ValueError("needs boxes [1, A, 4] and scores [1, A, C]")
        layout = str(task.get("params", {}).get("box", "xyxy"))
        for b, row in zip(_rows(boxes[0], [4]), _rows(*score_out)):
            c = max(range(len(row)), key=row.__getitem__)
            if row[c] >= conf:
                box = (b[1], b[0], b[3], b[2]) if layout == "yxyx" else _xyxy(*b) if layout == "cxcywh" else tuple(b)
                found.append((c, row[c], box))
        return _nms(found, iou)
    if head == "nms":
        rows_out = _first(outputs, lambda s: bool(s) and s[-1] == 6)
        if rows_out is None:
            raise ValueError("no [K, 6] output rows")
        flat, shape = rows_out
        return [(int(r[5]), r[4], tuple(r[:4])) for r in _rows(flat, shape) if r[4] >= conf]
    raise ValueError("head %r is not decoded on the device" % head)


def box_f1(reference: Sequence[Detection], candidate: Sequence[Detection], match: float) -> float:
    """F1 of candidate detections matching a reference detection of the same class at IoU >= match."""
    if not reference and not candidate:
        return 1.0
    used, hits = set(), 0
    for c in candidate:
        best, best_iou = None, match
        for j, r in enumerate(reference):
            if j not in used and r[0] == c[0]:
                v = _iou(r[2], c[2])
                if v >= best_iou:
                    best, best_iou = j, v
        if best is not None:
            used.add(best)
            hits += 1
    return 2.0 * hits / (len(reference) + len(candidate))


# -- maps, sequences, rows ---------------------------------------------------------------------------------------------
def _labels(flat: Sequence[float], shape: Sequence[int], thresh: float) -> List[int]:
    """Per pixel: the argmax over the channel axis of [.., C, H, W], or value > thresh for one channel."""
    hw = shape[-1] * shape[-2] if len(shape) >= 2 else len(flat)
    channels = len(flat) // hw if hw else 1
    if channels <= 1:
        return [1 if v > thresh else 0 for v in flat]
    out = []
    for p in range(hw):
        column = flat[p::hw]
        out.append(max(range(channels), key=column.__getitem__))
    return out


def _edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _ctc(flat: List[float], shape: Sequence[int], blank: int, layout: str) -> Optional[List[int]]:
    rows = _rows(flat, shape)
    if len(shape) >= 3 and layout == "TNC" and shape[1] > 1:
        return None  # several sequences interleaved: not checked cheaply
    seq, last = [], None
    for r in rows:
        k = max(range(len(r)), key=r.__getitem__)
        if k != last and k != blank:
            seq.append(k)
        last = k
    return seq


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return sum(x * y for x, y in zip(a, b)) / (na * nb)


def score(task: Dict[str, Any], expected: Outputs, got: Outputs) -> Tuple[str, float, float]:
    """``(metric name, value, minimum)`` of the device's outputs ``got`` against the build machine's ``expected``.

    Both are lists of (flat values, shape) in the model's output order (only float outputs matter); raises
    ValueError when the outputs do not fit the task.
    """
    family = task["family"]
    name, minimum = GATES[family]
    params = task.get("params", {})
    if family == "detection":
        value = box_f1(detections(task, expected), detections(task, got), _num(task, "match", 0.5))
        return name, value, minimum
    (want, shape), (have, _) = expected[0], got[0]  # the decoded output (the caller puts output=NAME first)
    if family in ("dense", "segmentation"):
        thresh = _num(task, "thresh", 0.3 if family == "dense" else 0.5)
        a, b = _labels(want, shape, thresh), _labels(have, shape, thresh)
        if family == "dense":
            inter = sum(1 for x, y in zip(a, b) if x and y)
            union = sum(1 for x, y in zip(a, b) if x or y)
            return name, (inter / union if union else 1.0), minimum
        return name, (sum(1 for x, y in zip(a, b) if x == y) / len(a) if a else 1.0), minimum
    if family == "ctc":
        blank, layout = int(_num(task, "blank", 0)), str(params.get("layout", "NTC")).upper()
        ra, rb = _ctc(want, shape, blank, layout), _ctc(have, shape, blank, layout)
        if ra is None or rb is None:
            raise ValueError("a TNC output with several sequences")
        errors = _edit_distance(ra, rb)
        return name, (1.0 - errors / len(ra) if ra else (1.0 if not rb else 0.0)), minimum
    rows_a, rows_b = _rows(want, shape), _rows(have, shape)
    if family == "classification":
        same = [
            max(range(len(x)), key=x.__getitem__) == max(range(len(y)), key=y.__getitem__)
            for x, y in zip(rows_a, rows_b)
        ]
        return name, (sum(same) / len(same) if same else 1.0), minimum
    width = int(len(want) // shape[0]) if shape and shape[0] else len(want)  # embedding: one vector per batch row
    vectors = [(want[i : i + width], have[i : i + width]) for i in range(0, len(want), width or 1)]
    return name, min(_cosine(x, y) for x, y in vectors) if vectors else 1.0, minimum
