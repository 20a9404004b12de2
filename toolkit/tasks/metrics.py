"""Task metrics of a candidate's decoded answers against the reference model's (higher is better, 1 = identical).

Each function takes per-sample answers of the reference and of the candidate and returns a dict of floats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .boxes import Detection, box_iou
from .sequence import char_error_rate


def _match(ref: list[Detection], cand: list[Detection], thr: float) -> list[bool]:
    """For each candidate detection (best first): does it match a not yet matched reference box of its class?"""
    used = np.zeros(len(ref), bool)
    hits = []
    ious = box_iou(np.array([c[2] for c in cand]), np.array([r[2] for r in ref])) if ref and cand else None
    for i, c in enumerate(cand):
        ok = False
        if ious is not None:
            row = np.where(np.array([r[0] == c[0] for r in ref]) & ~used, ious[i], -1.0)
            j = int(row.argmax())
            if row[j] >= thr:
                used[j] = ok = True
        hits.append(ok)
    return hits


def _average_precision(hits: np.ndarray, scores: np.ndarray, positives: int) -> float:
    """All-point interpolated AP (VOC 2010+) of scored hits against `positives` ground-truth boxes."""
    if positives == 0:
        return 1.0 if len(hits) == 0 else 0.0
    order = np.argsort(-scores, kind="stable")
    tp = np.cumsum(hits[order])
    fp = np.cumsum(~hits[order])
    recall = np.concatenate([[0.0], tp / positives, [1.0]])
    precision = np.concatenate([[1.0], tp / np.maximum(tp + fp, 1e-9), [0.0]])
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    return float(np.sum((recall[1:] - recall[:-1]) * precision[1:]))


def detection_agreement(
    reference: Sequence[list[Detection]], candidate: Sequence[list[Detection]], match: float = 0.5
) -> dict[str, float]:
    """Box F1 (class + IoU >= match) and mAP@match of the candidate's detections, the reference's as ground truth."""
    tp = n_ref = n_cand = 0
    per_class: dict[int, tuple[list[bool], list[float], int]] = {}
    for ref, cand in zip(reference, candidate, strict=True):
        hits = _match(ref, cand, match)
        tp += sum(hits)
        n_ref += len(ref)
        n_cand += len(cand)
        for c, h in zip(cand, hits, strict=True):
            per_class.setdefault(c[0], ([], [], 0))[0].append(h)
            per_class[c[0]][1].append(c[1])
        for r in ref:
            h_, s_, n = per_class.setdefault(r[0], ([], [], 0))
            per_class[r[0]] = (h_, s_, n + 1)
    if n_ref == 0 and n_cand == 0:
        f1 = 1.0
    else:
        f1 = 2 * tp / (n_ref + n_cand)
    aps = [_average_precision(np.array(h, bool), np.array(s), n) for h, s, n in per_class.values()]
    return {
        "box_f1": float(f1),
        "map50": float(np.mean(aps)) if aps else 1.0,
        "boxes_reference": float(n_ref),
        "boxes_candidate": float(n_cand),
    }


def mask_iou(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
    """IoU of the union of boolean masks over all samples (1 when both are empty everywhere)."""
    inter = sum(int(np.logical_and(r, c).sum()) for r, c in zip(reference, candidate, strict=True))
    union = sum(int(np.logical_or(r, c).sum()) for r, c in zip(reference, candidate, strict=True))
    return 1.0 if union == 0 else inter / union


def segmentation_agreement(
    reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], classes: int
) -> dict[str, float]:
    """mIoU and mean Dice over the classes present in either label map (integer maps of equal shape)."""
    ious, dices = [], []
    for k in range(classes):
        r = [x == k for x in reference]
        c = [x == k for x in candidate]
        inter = sum(int(np.logical_and(a, b).sum()) for a, b in zip(r, c, strict=True))
        sizes = sum(int(a.sum()) + int(b.sum()) for a, b in zip(r, c, strict=True))
        if sizes == 0:
            continue
        ious.append(inter / (sizes - inter))
        dices.append(2 * inter / sizes)
    return {"miou": float(np.mean(ious)) if ious else 1.0, "dice": float(np.mean(dices)) if dices else 1.0}


def psnr(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
    """Peak signal-to-noise ratio in dB over all samples, the peak being the reference's range (inf if equal)."""
    ref = np.concatenate([np.asarray(r, np.float64).ravel() for r in reference])
    cand = np.concatenate([np.asarray(c, np.float64).ravel() for c in candidate])
    mse = float(np.mean((ref - cand) ** 2))
    peak = float(ref.max() - ref.min()) or 1.0
    return float("inf") if mse == 0 else 10 * float(np.log10(peak**2 / mse))


def sequence_agreement(
    reference: Sequence[Sequence[object]], candidate: Sequence[Sequence[object]]
) -> dict[str, float]:
    """Decoded sequences: fraction exactly equal, mean character error rate and char accuracy (1 - CER, >= 0)."""
    equal = [list(r) == list(c) for r, c in zip(reference, candidate, strict=True)]
    cer = [char_error_rate(list(r), list(c)) for r, c in zip(reference, candidate, strict=True)]
    mean_cer = float(np.mean(cer)) if cer else 0.0
    return {
        "sequence_equal": float(np.mean(equal)) if equal else 1.0,
        "cer": mean_cer,
        "char_accuracy": max(0.0, 1 - mean_cer),
    }


def embedding_agreement(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Per-sample cosine ([N, D] each) and nearest-neighbour agreement (needs 3+ samples, else absent)."""
    r = reference.astype(np.float64)
    c = candidate.astype(np.float64)
    rn = r / np.maximum(np.linalg.norm(r, axis=1, keepdims=True), 1e-12)
    cn = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    cos = (rn * cn).sum(axis=1)
    out = {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}
    if len(r) >= 3:
        sr, sc = rn @ rn.T, cn @ cn.T
        np.fill_diagonal(sr, -np.inf)
        np.fill_diagonal(sc, -np.inf)
        out["nn_agreement"] = float(np.mean(sr.argmax(1) == sc.argmax(1)))
    return out


def classification_agreement(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Scores [N, C]: top-1 agreement and top-5 agreement (the reference's top-1 among the candidate's top 5)."""
    rt = reference.argmax(1)
    k = min(5, candidate.shape[1])
    top5 = np.argsort(-candidate, axis=1)[:, :k]
    return {
        "top1_agreement": float(np.mean(rt == candidate.argmax(1))),
        "top5_agreement": float(np.mean([t in row for t, row in zip(rt, top5, strict=True)])),
    }


def vad_agreement(reference: np.ndarray, candidate: np.ndarray, thresh: float) -> dict[str, float]:
    """Speech probabilities per frame: the fraction of frames where both say speech (or both no speech) at the
    decoder's threshold, the speech fractions of each, and the largest probability difference."""
    r, c = reference.astype(np.float64) > thresh, candidate.astype(np.float64) > thresh
    return {
        "frame_agreement": float(np.mean(r == c)) if r.size else 1.0,
        "speech_frames_reference": float(np.mean(r)) if r.size else 0.0,
        "speech_frames_candidate": float(np.mean(c)) if c.size else 0.0,
        "max_probability_error": float(np.max(np.abs(reference - candidate))) if r.size else 0.0,
    }


def keypoint_agreement(reference: np.ndarray, candidate: np.ndarray, tol: float) -> dict[str, float]:
    """Fraction of coordinates within tol x the reference's coordinate range (PCK-like) and the worst error."""
    span = float(reference.max() - reference.min()) or 1.0
    err = np.abs(candidate.astype(np.float64) - reference) / span
    return {"pck": float(np.mean(err <= tol)), "max_error_of_range": float(err.max()) if err.size else 0.0}
