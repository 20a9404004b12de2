"""Connected components and DB-style text-map regions in numpy (no scipy, no cv2).

Components are found on runs of foreground pixels per row, joined across rows with a union-find: the cost grows
with the number of runs, not of pixels, which suits text and mask maps (a few long runs per row).
"""

from __future__ import annotations

import numpy as np

Region = tuple[int, int, int, int, float]  # x0, y0, x1 (exclusive), y1 (exclusive), mean probability


def _runs(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    padded = np.concatenate([[False], row, [False]]).astype(np.int8)
    edges = np.diff(padded)
    return np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]


def label_components(mask: np.ndarray, connectivity: int = 4) -> tuple[np.ndarray, int]:
    """Label the connected components of a 2-D boolean mask (4- or 8-connected), like scipy.ndimage.label:
    labels 1..count in raster order of each component's first pixel, 0 for background."""
    if connectivity not in (4, 8):
        raise ValueError("connectivity is 4 or 8")
    mask = np.asarray(mask, bool)
    if mask.ndim != 2:
        raise ValueError(f"label_components takes a 2-D mask, got shape {mask.shape}")
    reach = 1 if connectivity == 8 else 0
    parent: list[int] = []
    rows: list[tuple[int, np.ndarray, np.ndarray, list[int]]] = []

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    prev: tuple[np.ndarray, np.ndarray, list[int]] | None = None
    for y in range(mask.shape[0]):
        starts, ends = _runs(mask[y])
        ids = list(range(len(parent), len(parent) + len(starts)))
        parent.extend(ids)
        if prev is not None and len(starts) and len(prev[0]):
            ps, pe, pids = prev
            j = 0
            for k in range(len(starts)):
                s, e = starts[k] - reach, ends[k] + reach
                while j < len(ps) and pe[j] <= s:
                    j += 1
                m = j
                while m < len(ps) and ps[m] < e:
                    a, b = find(ids[k]), find(pids[m])
                    if a != b:
                        parent[max(a, b)] = min(a, b)
                    m += 1
        rows.append((y, starts, ends, ids))
        prev = (starts, ends, ids)
    labels = np.zeros(mask.shape, np.int32)
    names: dict[int, int] = {}
    for y, starts, ends, ids in rows:
        for s, e, i in zip(starts, ends, ids, strict=True):
            root = find(i)
            if root not in names:
                names[root] = len(names) + 1
            labels[y, s:e] = names[root]
    return labels, len(names)


def db_regions(prob: np.ndarray, thresh: float = 0.3, box_thresh: float = 0.5, min_size: int = 3) -> list[Region]:
    """Text regions of a DB probability map [H, W]: (x0, y0, x1, y1, mean score), connected components of
    prob > thresh whose mean probability reaches box_thresh (axis-aligned boxes; no unclip)."""
    prob = np.asarray(prob, np.float64)
    labels, count = label_components(prob > thresh)
    if count == 0:
        return []
    flat = labels.ravel()
    fg = flat > 0
    ids = flat[fg]
    ys, xs = np.divmod(np.nonzero(fg)[0], prob.shape[1])
    sums = np.bincount(ids, weights=prob.ravel()[fg], minlength=count + 1)
    sizes = np.bincount(ids, minlength=count + 1)
    x0 = np.full(count + 1, prob.shape[1])
    y0 = np.full(count + 1, prob.shape[0])
    x1 = np.zeros(count + 1, np.int64)
    y1 = np.zeros(count + 1, np.int64)
    np.minimum.at(x0, ids, xs)
    np.minimum.at(y0, ids, ys)
    np.maximum.at(x1, ids, xs + 1)
    np.maximum.at(y1, ids, ys + 1)
    regions: list[Region] = []
    for i in range(1, count + 1):
        if y1[i] - y0[i] < min_size or x1[i] - x0[i] < min_size:
            continue
        score = float(sums[i] / sizes[i])
        if score >= box_thresh:
            regions.append((int(x0[i]), int(y0[i]), int(x1[i]), int(y1[i]), score))
    return sorted(regions, key=lambda r: (r[1], r[0]))
