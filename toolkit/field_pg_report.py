"""The field report over a PostgreSQL store, computed in SQL from the rollups written at ingest.

Same dict as ``field.report`` over SQLite, with this resolution (``resolution`` in the result says it):

- percentiles and histograms come from latency buckets ``BUCKET_RATIO`` wide: a percentile is the geometric middle
  of the bucket holding the rank numpy's linear interpolation would use (interpolated between the two ranks), within
  ``RESOLUTION`` (1 %) of the exact value; latencies at or below 1 µs count as 1 µs. Means, counts, first/last times
  and throughput are exact.
- ``since`` counts whole hours: records in the hour the cutoff falls into are included.
- timelines have at most 60 points per version (and per model) of whole hours each, located at the middle of the
  time they cover.
"""

from __future__ import annotations

import bisect
import json
import time
from itertools import accumulate
from typing import Any

from .field_pg import BUCKET_FLOOR_MS, BUCKET_RATIO, RESOLUTION, PgFieldStore
from .field_summary import shares_and_regressions

POINTS = 60
HIST_BINS = 40

TIMELINE_SQL = """
WITH k AS (SELECT gid, {key} AS key FROM field_groups g WHERE {gcond}),
x AS (SELECT k.key, min(h.hour) AS h0, GREATEST(1, ceil((max(h.hour) - min(h.hour) + 1) / {points}.0))::int AS w,
        min(h.ok_first_ts) AS lo, max(h.ok_last_ts) AS hi
    FROM field_hours h JOIN k USING (gid) WHERE h.infer_n > 0 {hcond} GROUP BY k.key),
s AS (SELECT k.key, (h.hour - x.h0) / x.w AS slot, h.bucket, sum(h.n_infer) AS n
    FROM field_hist h JOIN k USING (gid) JOIN x USING (key) WHERE h.n_infer > 0 {hcond} GROUP BY 1, 2, 3),
c AS (SELECT key, slot, bucket, sum(n) OVER (PARTITION BY key, slot ORDER BY bucket) AS cum,
        sum(n) OVER (PARTITION BY key, slot) AS tot FROM s),
p AS (SELECT key, slot, max(tot)::bigint AS tot, min(bucket) FILTER (WHERE cum > floor(0.5 * (tot - 1))) AS b50,
        min(bucket) FILTER (WHERE cum > floor(0.99 * (tot - 1))) AS b99 FROM c GROUP BY key, slot)
SELECT p.key, p.slot, p.tot, p.b50, p.b99,
    (GREATEST(x.lo, (x.h0 + p.slot * x.w) * 3600.0) + LEAST(x.hi, (x.h0 + (p.slot + 1) * x.w) * 3600.0)) / 2
FROM p JOIN x USING (key) ORDER BY p.key, p.slot
"""


def _mid(bucket: int) -> float:
    return float(BUCKET_FLOOR_MS * BUCKET_RATIO ** (bucket + 0.5))


def _edge(bucket: int) -> float:
    return float(BUCKET_FLOOR_MS * BUCKET_RATIO**bucket)


def _percentiles(buckets: list[int], counts: list[int], total: float, n: int) -> dict[str, float | None]:
    """p50/p90/p99 as numpy's default (linear) interpolation between ranks, each rank's value its bucket's middle."""
    if n == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    cum = list(accumulate(counts))
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        k = q * (n - 1)
        lo = int(k)
        a = _mid(buckets[bisect.bisect_right(cum, lo)])
        b = _mid(buckets[bisect.bisect_right(cum, min(lo + 1, n - 1))])
        out[name] = a + (k - lo) * (b - a)
    out["mean"] = total / n
    return out


def _histogram(buckets: list[int], counts: list[int]) -> dict[str, list[Any]]:
    """At most ``HIST_BINS`` log-spaced bins from the first to the last non-empty bucket."""
    pairs = [(b, c) for b, c in zip(buckets, counts) if c]
    if not pairs:
        return {"edges": [], "counts": []}
    first, last = pairs[0][0], pairs[-1][0]
    step = max(1, -(-(last - first + 1) // HIST_BINS))
    bins = -(-(last - first + 1) // step)
    out = [0] * bins
    for b, c in pairs:
        out[(b - first) // step] += c
    return {"edges": [_edge(first + i * step) for i in range(bins + 1)], "counts": out}


def _timelines(
    store: PgFieldStore, key: str, gcond: str, hcond: str, params: dict[str, Any]
) -> dict[Any, list[dict[str, float]]]:
    sql = TIMELINE_SQL.format(key=key, gcond=gcond, hcond=hcond, points=POINTS)
    out: dict[Any, list[dict[str, float]]] = {}
    for k, _slot, tot, b50, b99, t in store.db.execute(sql, params):
        out.setdefault(k, []).append({"t": float(t), "p50": _mid(b50), "p99": _mid(b99), "count": int(tot)})
    return out


def report_pg(
    store: PgFieldStore, model: str | None = None, since: str | float | None = None, now: float | None = None
) -> dict[str, Any]:
    from .field import _detail, parse_since

    now = now or time.time()
    db = store.db
    since_s = parse_since(since) if isinstance(since, str) else since
    params: dict[str, Any] = {"model": model, "hour0": int((now - since_s) // 3600) if since_s else None}
    gcond = "g.model = %(model)s" if model else "TRUE"
    hcond = "AND h.hour >= %(hour0)s" if since_s else ""
    devices = {
        r[0]: {"name": r[1], "hostname": r[2], "machine": r[3], "transport": r[4]}
        for r in db.execute("SELECT store_id, name, hostname, machine, transport FROM field_devices")
    }
    groups = db.execute(
        "SELECT g.gid, g.store_id, g.model, g.version, sum(requests), sum(ok), min(first_ts), max(last_ts), "
        "sum(infer_sum), sum(infer_n), sum(queue_sum), sum(queue_n) FROM field_hours h JOIN field_groups g "
        f"USING (gid) WHERE {gcond} {hcond} GROUP BY g.gid "
        "ORDER BY g.store_id, g.model NULLS FIRST, g.version NULLS FIRST",
        params,
    ).fetchall()
    hists = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT gid, array_agg(bucket ORDER BY bucket), array_agg(ni ORDER BY bucket), "
            "array_agg(nq ORDER BY bucket) FROM (SELECT h.gid, h.bucket, sum(h.n_infer)::int AS ni, "
            f"sum(h.n_queue)::int AS nq FROM {'field_hist' if since_s else 'field_dist'} h JOIN field_groups g "
            f"USING (gid) WHERE {gcond} {hcond} GROUP BY 1, 2) b GROUP BY gid",
            params,
        )
    }
    labels = {
        r[0]: (sorted(x for x in r[1] if x), sorted(x for x in r[2] if x))
        for r in db.execute(
            "SELECT gid, array_agg(DISTINCT backend), array_agg(DISTINCT accelerator) FROM field_labels GROUP BY gid"
        )
    }
    labs = {
        tuple(r[:3]): r[3:]
        for r in db.execute(
            "SELECT DISTINCT ON (store_id, model, version) store_id, model, version, p50_ms, p99_ms, ts, report "
            "FROM field_lab ORDER BY store_id, model, version, ts DESC"
        )
    }
    per_version = _timelines(store, "g.gid", gcond, hcond, params)
    per_model = _timelines(store, "g.store_id || chr(1) || COALESCE(g.model, chr(2))", gcond, hcond, params)
    entries = []
    total_records = 0
    for gid, sid, mdl, version, requests, ok, first, last, isum, inn, qsum, qn in groups:
        requests, ok = int(requests), int(ok)
        total_records += requests
        buckets, ni, nq = hists.get(gid, ([], [], []))
        field = _percentiles(buckets, ni, isum, int(inn))
        lab = labs.get((sid, mdl, version))
        backends, accelerators = labels.get(gid, ([], []))
        span = float(last - first)
        entries.append(
            {
                "device": devices.get(sid, {}).get("name", sid[:8]),
                "store_id": sid,
                "model": mdl,
                "version": version,
                "backend": ",".join(backends),
                "accelerator": ",".join(accelerators),
                "requests": requests,
                "ok": ok,
                "errors": requests - ok,
                "error_rate": (requests - ok) / requests,
                "first_ts": float(first),
                "last_ts": float(last),
                "throughput_rps": ((requests - 1) / span) if span > 0 else None,
                "latency_ms": field,
                "queue_ms": _percentiles(buckets, nq, qsum, int(qn)),
                "lab": {"p50_ms": lab[0], "p99_ms": lab[1], "ts": lab[2]} if lab else None,
                "drift": (field["p50"] / lab[0] - 1.0) if (lab and field["p50"]) else None,
                "lab_profile": json.loads(lab[3] or "{}").get("layer_profile") if lab else None,
                "timeline": per_version.get(gid, []),
                "histogram": _histogram(buckets, ni),
            }
        )
    all_events = [
        dict(zip(("store_id", "ts", "kind", "model", "version", "detail"), (*e[:5], _detail(e[5]))))
        for e in db.execute(
            "SELECT store_id, ts, kind, model, version, detail FROM field_events "
            "WHERE kind IN ('install', 'rollback', 'split', 'breaker') "
            + ("AND model = %(model)s " if model else "")
            + "ORDER BY ts, store_id, id",
            params,
        )
    ]
    events = [e for e in all_events if not since_s or e["ts"] >= now - since_s]
    regressions = shares_and_regressions(entries, all_events)
    ctx = {
        devices.get(sid, {}).get("name", sid[:8]): {"load1_avg": load1, "mem_available_mb_min": mem, "temp_c_max": temp}
        for sid, load1, mem, temp in db.execute(
            "SELECT store_id, AVG(load1), MIN(mem_available_mb), MAX(temp_c) FROM field_context GROUP BY store_id"
        )
    }
    timelines = [
        {
            "store_id": sid,
            "device": devices.get(sid, {}).get("name", sid[:8]),
            "model": mdl,
            "points": per_model.get(sid + "\x01" + (mdl if mdl is not None else "\x02"), []),
        }
        for sid, mdl in sorted({(g[1], g[2]) for g in groups}, key=lambda k: (k[0], k[1] or ""))
    ]
    return {
        "schema": "edgekit.field-report",
        "schema_version": 1,
        "generated": now,
        "model": model,
        "since": since,
        "records": total_records,
        "store": store.path,
        "resolution": {"latency_relative": RESOLUTION, "since": "1h", "timeline": "1h"},
        "entries": entries,
        "timelines": timelines,
        "regressions": regressions,
        "events": events,
        "device_context": ctx,
    }
