"""Numpy decoders for the zoo's heads, written from the parameters in catalogue.toml (no cv2, no torch).

CTC greedy decode, DB-style text-map thresholding, YOLOX and PicoDet box decoding, non-maximum suppression and
MTCNN P-Net proposals. They give the smoke test a human-checkable answer; they are not tuned for speed.
"""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def ctc_greedy(indices: np.ndarray, charset: list[str], blank: int = 0) -> str:
    """Collapse repeats, drop blanks, map the remaining class indices to characters."""
    out, prev = [], -1
    for idx in np.asarray(indices).astype(np.int64).ravel().tolist():
        if idx != prev and idx != blank and 0 <= idx < len(charset):
            out.append(charset[idx])
        prev = idx
    return "".join(out)


def ppocr_charset(metadata_character: str) -> list[str]:
    """PP-OCR rec classes: blank, the characters of the model's 'character' metadata, then a space."""
    return ["<blank>"] + metadata_character.splitlines() + [" "]


def db_regions(prob: np.ndarray, thresh: float = 0.3, box_thresh: float = 0.5, min_size: int = 3) -> list[tuple]:
    """Text regions of a DB probability map [H, W]: (x0, y0, x1, y1, mean score), connected components of
    prob > thresh whose mean probability reaches box_thresh (axis-aligned boxes; no unclip)."""
    from scipy import ndimage

    labels, count = ndimage.label(prob > thresh)
    regions = []
    for i, sl in enumerate(ndimage.find_objects(labels), start=1):
        if sl is None:
            continue
        ys, xs = sl
        if ys.stop - ys.start < min_size or xs.stop - xs.start < min_size:
            continue
        score = float(prob[sl][labels[sl] == i].mean())
        if score >= box_thresh:
            regions.append((xs.start, ys.start, xs.stop, ys.stop, score))
    return sorted(regions, key=lambda r: (r[1], r[0]))


def viterbi(emissions: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
    """Best tag path through a linear-chain CRF: emissions [T, C], transitions [C, C], start/end [C]."""
    score = start + emissions[0]
    back = []
    for t in range(1, len(emissions)):
        total = score[:, None] + transitions
        back.append(total.argmax(axis=0))
        score = total.max(axis=0) + emissions[t]
    best = [int((score + end).argmax())]
    for pointers in reversed(back):
        best.append(int(pointers[best[-1]]))
    return best[::-1]


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy non-maximum suppression over [N, 4] xyxy boxes; the kept indices, best first."""
    order = np.argsort(-scores)
    keep: list[int] = []
    area = (boxes[:, 2] - boxes[:, 0]).clip(0) * (boxes[:, 3] - boxes[:, 1]).clip(0)
    while order.size:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        xx0 = np.maximum(boxes[i, 0], boxes[rest, 0])
        yy0 = np.maximum(boxes[i, 1], boxes[rest, 1])
        xx1 = np.minimum(boxes[i, 2], boxes[rest, 2])
        yy1 = np.minimum(boxes[i, 3], boxes[rest, 3])
        inter = (xx1 - xx0).clip(0) * (yy1 - yy0).clip(0)
        overlap = inter / (area[i] + area[rest] - inter + 1e-9)
        order = rest[overlap <= iou]
    return keep


def yolox_decode(out: np.ndarray, size: int, strides: tuple[int, ...] = (8, 16, 32)) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX raw head [A, 5 + C] (cx, cy, log w, log h in grid units, objectness, class scores) -> xyxy boxes in
    input pixels and per-class scores (objectness x class)."""
    grids, mults = [], []
    for s in strides:
        n = size // s
        yv, xv = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack([xv, yv], -1).reshape(-1, 2))
        mults.append(np.full((n * n, 1), s))
    grid, stride = np.concatenate(grids).astype(np.float32), np.concatenate(mults).astype(np.float32)
    xy = (out[:, :2] + grid) * stride
    wh = np.exp(out[:, 2:4]) * stride
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], axis=1)
    return boxes, out[:, 4:5] * out[:, 5:]


def yolov8_decode(out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """YOLOv8 head [4 + C, A] (cx, cy, w, h in input pixels, then class scores) -> xyxy boxes [A, 4], scores [A, C]."""
    cx, cy, w, h = out[0], out[1], out[2], out[3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return boxes, out[4:].T


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


def class_nms(
    boxes: np.ndarray, scores: np.ndarray, conf: float, iou: float
) -> list[tuple[int, float, tuple[float, ...]]]:
    """Per-class NMS over scores [A, C]; (class, score, box) kept, best first."""
    cls = scores.argmax(axis=1)
    best = scores[np.arange(len(scores)), cls]
    picked = []
    for c in np.unique(cls[best >= conf]):
        idx = np.where((cls == c) & (best >= conf))[0]
        for k in nms(boxes[idx], best[idx], iou):
            j = idx[k]
            picked.append((int(c), float(best[j]), tuple(float(v) for v in boxes[j])))
    return sorted(picked, key=lambda p: -p[1])


def mtcnn_proposals(
    prob: np.ndarray, reg: np.ndarray, scale: float, threshold: float = 0.6, stride: int = 2, cell: int = 12
) -> np.ndarray:
    """P-Net face map [W', H'] (H/W swapped like its input) and box offsets [W', H', 4] -> rows of
    (x0, y0, x1, y1, score) in original-image pixels, offsets applied."""
    xs, ys = np.where(prob >= threshold)
    if xs.size == 0:
        return np.zeros((0, 5), np.float32)
    x0 = np.fix((stride * xs + 1) / scale)
    y0 = np.fix((stride * ys + 1) / scale)
    x1 = np.fix((stride * xs + cell) / scale)
    y1 = np.fix((stride * ys + cell) / scale)
    off = reg[xs, ys]
    w, h = x1 - x0 + 1, y1 - y0 + 1
    boxes = np.stack([x0 + off[:, 0] * w, y0 + off[:, 1] * h, x1 + off[:, 2] * w, y1 + off[:, 3] * h, prob[xs, ys]], 1)
    return boxes.astype(np.float32)


def square(box: tuple[float, ...]) -> tuple[float, float, float, float]:
    """The square around a box's centre with its longer side (MTCNN's rerec)."""
    x0, y0, x1, y1 = box[:4]
    side = max(x1 - x0, y1 - y0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2
