"""Sequence decoding and distances: CTC greedy decode, edit distance, character error rate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ctc_collapse(indices: np.ndarray, blank: int = 0) -> list[int]:
    """CTC greedy decode of per-step class indices: collapse repeats, drop blanks."""
    out: list[int] = []
    prev = -1
    for idx in np.asarray(indices).astype(np.int64).ravel().tolist():
        if idx != prev and idx != blank:
            out.append(idx)
        prev = idx
    return out


def ctc_greedy(indices: np.ndarray, charset: Sequence[str], blank: int = 0) -> str:
    """Collapse repeats, drop blanks, map the remaining class indices to characters (unknown indices dropped)."""
    return "".join(charset[i] for i in ctc_collapse(indices, blank) if 0 <= i < len(charset))


def edit_distance(a: Sequence[object], b: Sequence[object]) -> int:
    """Levenshtein distance (insertions, deletions, substitutions) between two sequences."""
    if len(a) < len(b):
        a, b = b, a
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def char_error_rate(reference: Sequence[object], hypothesis: Sequence[object]) -> float:
    """Edit distance over the reference's length (0 when both are empty, 1 per extra token when it is empty)."""
    if not reference:
        return float(len(hypothesis))
    return edit_distance(reference, hypothesis) / len(reference)
