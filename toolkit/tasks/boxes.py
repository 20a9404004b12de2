"""Box decoders and non-maximum suppression in numpy (no cv2, no torch).

Heads: YOLOv8 (anchor-free, ``[4 + C, A]``), YOLOv5 (decoded boxes with objectness, ``[A, 5 + C]``), YOLOX (raw grid
outputs with objectness), PicoDet/GFL (per-level scores and box distributions) and SSD/RetinaNet-style
(decoded boxes ``[A, 4]`` + scores ``[A, C]``). Every decoder returns xyxy boxes ``[A, 4]`` and scores ``[A, C]``.
"""

from __future__ import annotations

import numpy as np

Detection = tuple[int, float, tuple[float, ...]]  # (class, score, xyxy box)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    cx, cy, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix [len(a), len(b)] of xyxy boxes."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = (x1 - x0).clip(0) * (y1 - y0).clip(0)
    area_a = ((a[:, 2] - a[:, 0]).clip(0) * (a[:, 3] - a[:, 1]).clip(0))[:, None]
    area_b = ((b[:, 2] - b[:, 0]).clip(0) * (b[:, 3] - b[:, 1]).clip(0))[None, :]
    return inter / (area_a + area_b - inter + 1e-9)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy non-maximum suppression over [N, 4] xyxy boxes; the kept indices, best first."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        order = rest[box_iou(boxes[i : i + 1], boxes[rest])[0] <= iou]
    return keep


def class_nms(boxes: np.ndarray, scores: np.ndarray, conf: float, iou: float) -> list[Detection]:
    """Per-class NMS over scores [A, C] (each anchor votes for its best class); (class, score, box), best first."""
    if len(scores) == 0:
        return []
    cls = scores.argmax(axis=1)
    best = scores[np.arange(len(scores)), cls]
    picked: list[Detection] = []
    for c in np.unique(cls[best >= conf]):
        idx = np.where((cls == c) & (best >= conf))[0]
        for k in nms(boxes[idx], best[idx], iou):
            j = idx[k]
            picked.append((int(c), float(best[j]), tuple(float(v) for v in boxes[j])))
    return sorted(picked, key=lambda p: -p[1])


def grid_cells(size_hw: tuple[int, int], strides: tuple[int, ...], ceil: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Cell (x, y) indices [A, 2] and their stride [A, 1] for every level, row-major."""
    grids, mults = [], []
    h, w = size_hw
    for s in strides:
        nh, nw = (int(np.ceil(h / s)), int(np.ceil(w / s))) if ceil else (h // s, w // s)
        yv, xv = np.meshgrid(np.arange(nh), np.arange(nw), indexing="ij")
        grids.append(np.stack([xv, yv], -1).reshape(-1, 2))
        mults.append(np.full((nh * nw, 1), s))
    return np.concatenate(grids).astype(np.float64), np.concatenate(mults).astype(np.float64)


def yolov8_decode(out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """YOLOv8 head [4 + C, A] (cx, cy, w, h in input pixels, then class scores) -> xyxy boxes [A, 4], scores [A, C]."""
    return cxcywh_to_xyxy(out[:4].T), out[4:].T


def yolov5_decode(out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """YOLOv5-style head [A, 5 + C] (cx, cy, w, h in pixels, objectness, class scores) -> boxes, obj x class."""
    return cxcywh_to_xyxy(out[:, :4]), out[:, 4:5] * out[:, 5:]


def yolox_decode(
    out: np.ndarray, size: int | tuple[int, int], strides: tuple[int, ...] = (8, 16, 32)
) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX raw head [A, 5 + C] (cx, cy, log w, log h in grid units, objectness, class scores) -> xyxy boxes in
    input pixels and per-class scores (objectness x class)."""
    hw = (size, size) if isinstance(size, int) else size
    grid, stride = grid_cells(hw, strides)
    xy = (out[:, :2] + grid) * stride
    wh = np.exp(np.clip(out[:, 2:4], -20, 20)) * stride
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], axis=1)
    return boxes, out[:, 4:5] * out[:, 5:]


def picodet_decode(
    scores: list[np.ndarray], dists: list[np.ndarray], size_hw: tuple[int, int], strides: tuple[int, ...], reg_max: int
) -> tuple[np.ndarray, np.ndarray]:
    """PicoDet/GFL head: per level class scores [A, C] (already sigmoid) and box distributions [A, 4 * (reg_max+1)]
    (softmax per side, expectation = distance in strides) -> xyxy boxes in input pixels and scores [A, C]."""
    all_boxes, all_scores = [], []
    h, w = size_hw
    for s, sc, dist in zip(strides, scores, dists, strict=True):
        nh, nw = int(np.ceil(h / s)), int(np.ceil(w / s))
        yv, xv = np.meshgrid(np.arange(nh), np.arange(nw), indexing="ij")
        cx, cy = (xv.ravel() + 0.5) * s, (yv.ravel() + 0.5) * s
        prob = softmax(dist.reshape(-1, 4, reg_max + 1), axis=2)
        d = (prob * np.arange(reg_max + 1)).sum(axis=2) * s
        n = min(len(cx), len(d))
        all_boxes.append(np.stack([cx[:n] - d[:n, 0], cy[:n] - d[:n, 1], cx[:n] + d[:n, 2], cy[:n] + d[:n, 3]], 1))
        all_scores.append(sc[:n])
    return np.concatenate(all_boxes), np.concatenate(all_scores)


def ssd_decode(boxes: np.ndarray, scores: np.ndarray, box: str = "xyxy") -> tuple[np.ndarray, np.ndarray]:
    """SSD/RetinaNet-style decoded outputs: boxes [A, 4] (xyxy, yxyx or cxcywh) and scores [A, C]."""
    if box == "yxyx":
        boxes = boxes[:, [1, 0, 3, 2]]
    elif box == "cxcywh":
        boxes = cxcywh_to_xyxy(boxes)
    return boxes, scores


def anchors_per_cell(count: int, size_hw: tuple[int, int], strides: tuple[int, ...] = (8, 16, 32)) -> int | None:
    """How many predictions per grid cell explain `count` rows at this input size (1: anchor-free, 3: YOLOv5)."""
    cells = sum((size_hw[0] // s) * (size_hw[1] // s) for s in strides)
    for k in (1, 3):
        if cells and count == k * cells:
            return k
    return None
