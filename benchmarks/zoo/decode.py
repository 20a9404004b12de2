"""Numpy decoders for the zoo's heads, written from the parameters in catalogue.toml (no cv2, no torch).

The product's decoders (CTC greedy, DB-style text-map regions, YOLOv8/YOLOX/PicoDet box decoding, NMS) live in
`edgekit.tasks` and are re-exported here; this file adds what only the zoo needs: PP-OCR's charset, a CRF's
Viterbi path and MTCNN P-Net proposals. They give the smoke test a human-checkable answer.
"""

from __future__ import annotations

import numpy as np

from edgekit.tasks.boxes import (  # noqa: F401  (re-exported for smoke.py)
    class_nms,
    nms,
    picodet_decode,
    sigmoid,
    softmax,
    yolov8_decode,
    yolox_decode,
)
from edgekit.tasks.regions import db_regions  # noqa: F401
from edgekit.tasks.sequence import ctc_greedy  # noqa: F401


def ppocr_charset(metadata_character: str) -> list[str]:
    """PP-OCR rec classes: blank, the characters of the model's 'character' metadata, then a space."""
    return ["<blank>"] + metadata_character.splitlines() + [" "]


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
