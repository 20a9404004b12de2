"""Percentiles, histograms and timelines from latency-bucket rollups, vectorized: the rollup rows come out of
PostgreSQL as binary arrays straight into numpy (a few million small rows, never the records)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .field_pg import BUCKET_FLOOR_MS
from .field_pg_schema import COUNT_BITS, COUNT_MASK

SHIFT = 1 << 16  # bucket numbers are below this (smallint)


def fetch_ints(db: Any, query: str, ncols: int) -> np.ndarray:
    """Rows of ``query`` (``ncols`` integer columns, no NULLs) as an (n, ncols) int64 array: the server aggregates
    each column into one int4 array sent in binary (a 20-byte header, then a length and a value per element), which
    numpy reads at once (one value per row through the driver, or a COPY row by row, costs seconds per million)."""
    cols = ", ".join(f"array_send(array_agg(c{i}::int4))" for i in range(ncols))
    names = ", ".join(f"c{i}" for i in range(ncols))
    with db.cursor(binary=True) as cur:
        packed = cur.execute(f"SELECT {cols} FROM ({query}) q({names})").fetchone()
    if packed[0] is None:
        return np.zeros((0, ncols), dtype=np.int64)
    out = [np.frombuffer(bytes(col), dtype=">i4", offset=20)[1::2] for col in packed]
    return np.stack(out, axis=1).astype(np.int64)


def fetch_packed(
    db: Any, query: str, nkeys: int, rank: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``query`` (``nkeys`` integer columns, then a packed histogram, see ``field_pg_schema``) as one row per
    bucket: an (n, nkeys) int64 array of keys, and the buckets and counts. The histograms are concatenated on the
    server as they are stored (each array's binary form less its 20-byte header: a length and a value per element),
    so the server does no work per bucket. With ``rank`` (a position per value of the first key, -1: leave the row
    out), the rows are ordered by it, then by the other keys, before they are spread to their buckets."""
    names = ", ".join([f"k{i}" for i in range(nkeys)] + ["p"])
    cols = [f"array_send(array_agg(k{i}::int4))" for i in range(nkeys)] + ["array_send(array_agg(cardinality(p)))"]
    cols.append("string_agg(substring(array_send(p) FROM 21), ''::bytea)")
    with db.cursor(binary=True) as cur:
        packed = cur.execute(f"SELECT {', '.join(cols)} FROM ({query}) q({names}) WHERE cardinality(p) > 0").fetchone()
    empty = np.zeros(0, dtype=np.int64)
    if packed[0] is None:
        return np.zeros((0, nkeys), dtype=np.int64), empty, empty
    ints = [np.frombuffer(bytes(col), dtype=">i4", offset=20)[1::2].astype(np.int64) for col in packed[:-1]]
    keys, sizes = ints[:-1], ints[-1]
    values = np.frombuffer(bytes(packed[-1]), dtype=np.dtype([("len", ">i4"), ("v", ">i8")]))["v"].astype(np.int64)
    if rank is not None:
        at = np.where(keys[0] < len(rank), rank[np.minimum(keys[0], len(rank) - 1)], -1)
        order = np.lexsort([*keys[:0:-1], at])
        order = order[at[order] >= 0]
        starts = (np.cumsum(sizes) - sizes)[order]
        keys, sizes = [k[order] for k in keys], sizes[order]
        offsets = np.cumsum(sizes) - sizes
        values = values[np.repeat(starts - offsets, sizes) + np.arange(int(sizes.sum()))]
    rows = np.stack([np.repeat(k, sizes) for k in keys], axis=1)
    return rows, values >> COUNT_BITS, values & COUNT_MASK


def mid(bucket: np.ndarray, ratio: float) -> np.ndarray:
    return BUCKET_FLOOR_MS * ratio ** (bucket + 0.5)


def combine(seg: np.ndarray, bucket: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts summed per (segment, bucket), sorted by segment then bucket; empty ones dropped."""
    keep = n > 0
    code = seg[keep] * SHIFT + bucket[keep]
    if len(code) and bool(np.all(code[1:] > code[:-1])):  # already sorted and unique (rows in report order)
        return code // SHIFT, code % SHIFT, n[keep].astype(np.int64)
    uniq, inverse = np.unique(code, return_inverse=True)
    counts = np.bincount(inverse, weights=n[keep]).astype(np.int64)
    return uniq // SHIFT, uniq % SHIFT, counts


def quantiles(
    seg: np.ndarray, bucket: np.ndarray, counts: np.ndarray, qs: list[float], ratio: float, interpolate: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Per segment (input from ``combine``): segment ids, first row, total, and one array of values per quantile:
    the value at rank floor(q (n - 1)) (with ``interpolate``, linearly towards the next rank, as numpy's
    default), each rank's value its bucket's geometric middle."""
    if len(seg) == 0:
        empty = np.zeros(0)
        return seg, seg, seg, [empty for _ in qs]
    useg, start = np.unique(seg, return_index=True)
    cum = np.cumsum(counts)
    before = np.concatenate(([0], cum[:-1]))[start]
    total = np.add.reduceat(counts, start)
    out = []
    for q in qs:
        rank = q * (total - 1)
        k = np.floor(rank).astype(np.int64)
        lo = mid(bucket[np.searchsorted(cum, before + k, side="right")], ratio)
        if interpolate:
            hi = mid(bucket[np.searchsorted(cum, before + np.minimum(k + 1, total - 1), side="right")], ratio)
            lo = lo + (rank - k) * (hi - lo)
        out.append(lo)
    return useg, start, total, out


def histograms(
    start: np.ndarray, bucket: np.ndarray, counts: np.ndarray, ratio: float, bins: int
) -> list[dict[str, list[Any]]]:
    """Per segment (rows from ``start[i]`` to the next start, buckets ascending, as ``combine`` sorts them): at most
    ``bins`` log-spaced bins from its first to its last non-empty bucket; all segments in one pass."""
    if len(start) == 0:
        return []
    end = np.append(start[1:], len(bucket))
    first, last = bucket[start], bucket[end - 1]
    step = np.maximum(1, -(-(last - first + 1) // bins))
    nbins = -(-(last - first + 1) // step)
    offset = np.concatenate(([0], np.cumsum(nbins)[:-1]))
    seg = np.repeat(np.arange(len(start)), end - start)
    slot = offset[seg] + (bucket - first[seg]) // step[seg]
    flat = np.bincount(slot, weights=counts, minlength=int(nbins.sum())).astype(np.int64).tolist()
    eseg = np.repeat(np.arange(len(start)), nbins + 1)
    eoff = np.concatenate(([0], np.cumsum(nbins + 1)[:-1]))
    k = np.arange(len(eseg)) - eoff[eseg]
    edges = (BUCKET_FLOOR_MS * ratio ** (first[eseg] + step[eseg] * k)).tolist()
    return [
        {"edges": edges[e : e + n + 1], "counts": flat[o : o + n]}
        for o, e, n in zip(offset.tolist(), eoff.tolist(), nbins.tolist())
    ]


def timelines(
    key: np.ndarray, hour: np.ndarray, bucket: np.ndarray, n: np.ndarray, lo: np.ndarray, hi: np.ndarray,
    points: int, ratio: float,
) -> dict[int, list[dict[str, float]]]:  # fmt: skip
    """Per key (row ids into ``lo``/``hi``, each key's first and last successful request): at most ``points``
    points of whole hours each, at the middle of the time they cover, p50/p99 from the hourly buckets."""
    if len(key) == 0:
        return {}
    nkeys = len(lo)
    h0 = np.full(nkeys, np.iinfo(np.int64).max)
    h1 = np.full(nkeys, np.iinfo(np.int64).min)
    np.minimum.at(h0, key, hour)
    np.maximum.at(h1, key, hour)
    width = np.maximum(1, -(-(h1 - h0 + 1) // points))
    slot = (hour - h0[key]) // width[key]
    seg, b, c = combine(key * (points + 1) + slot, bucket, n)
    useg, _, total, (p50, p99) = quantiles(seg, b, c, [0.5, 0.99], ratio, interpolate=False)
    k, s = useg // (points + 1), useg % (points + 1)
    start = np.maximum(lo[k], (h0[k] + s * width[k]) * 3600.0)
    end = np.minimum(hi[k], (h0[k] + (s + 1) * width[k]) * 3600.0)
    out: dict[int, list[dict[str, float]]] = {}
    for kk, t, a, z, cnt in zip(k.tolist(), ((start + end) / 2).tolist(), p50.tolist(), p99.tolist(), total.tolist()):
        out.setdefault(kk, []).append({"t": t, "p50": a, "p99": z, "count": cnt})
    return out
