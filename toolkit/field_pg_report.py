"""The field report over a PostgreSQL store, computed in SQL from the rollups written at ingest.

Same dict as ``field.report`` over SQLite, with this resolution (``resolution`` in the result says it):

- percentiles and histograms come from latency buckets ``BUCKET_RATIO`` wide: a percentile is the geometric middle
  of the bucket holding the rank numpy's linear interpolation would use (interpolated between the two ranks), within
  ``RESOLUTION`` (1 %) of the exact value (queueing times: ``COARSE_RATIO`` buckets, within 12 %); times at or
  below 1 µs count as 1 µs. Means, counts, first/last times
  and throughput are exact.
- without ``since`` the entries come from the all-time rollup (one row per device, model and version: with
  ``model``, that model's rows only); with it, from the records after the cutoff (exact in time).
- timelines have at most 60 points per version (and per model) of whole hours each (with ``since``, from the hour
  the cutoff falls into), located at the middle of the time they cover, their p50/p99 from hourly histograms
  ``COARSE_RATIO`` wide (within ``COARSE_RESOLUTION``, 12 %).
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import numpy as np
from psycopg import sql as psycopg_sql

from . import field_pg_quantiles as Q
from .field_pg import (
    BUCKET_RATIO,
    BUCKET_SQL,
    COARSE_RATIO,
    COARSE_RESOLUTION,
    COARSE_SQL,
    RESOLUTION,
    PgFieldStore,
)
from .field_summary import shares_and_regressions

POINTS = 60
HIST_BINS = 40


def report_pg(
    store: PgFieldStore, model: str | None = None, since: str | float | None = None, now: float | None = None
) -> dict[str, Any]:
    # The report is a few million small objects and holds no cycles: a cyclic collection every few hundred
    # thousand allocations would walk all of them again, over and over (seconds at fleet scale).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _report(store, model, since, now)
    finally:
        if enabled:
            gc.enable()


def _report(store: PgFieldStore, model: str | None, since: str | float | None, now: float | None) -> dict[str, Any]:
    from .field import _detail, parse_since

    now = now or time.time()
    db = store.db
    since_s = parse_since(since) if isinstance(since, str) else since
    params: dict[str, Any] = {"model": model}
    # inlined, so that queries can be wrapped in others (fetch_ints); the queries below run without parameters
    gcond = "g.model = " + psycopg_sql.Literal(model).as_string(db) if model else "TRUE"
    # the rollups of the model's groups (all of them without one: no join)
    of_groups = f"JOIN field_groups g USING (gid) WHERE {gcond}" if model else "WHERE TRUE"
    hcond = f"AND h.hour >= {int((now - since_s) // 3600)}" if since_s else ""
    devices = {
        r[0]: {"name": r[1], "hostname": r[2], "machine": r[3], "transport": r[4]}
        for r in db.execute("SELECT store_id, name, hostname, machine, transport FROM field_devices")
    }
    if since_s:  # the records after the cutoff, from the partitions that hold them
        cutoff = repr(float(now - since_s))
        src = (
            "(SELECT g.gid, g.store_id, g.model, g.version, r.ts, r.outcome = 'ok' AS ok, r.infer_ms, r.queue_ms "
            "FROM field_records r JOIN field_groups g ON g.store_id = r.store_id AND g.model IS NOT DISTINCT FROM "
            f"r.model AND g.version IS NOT DISTINCT FROM r.version WHERE r.ts >= {cutoff} AND {gcond})"
        )
        stats = (
            "count(*), count(*) FILTER (WHERE ok), min(ts), max(ts), COALESCE(sum(infer_ms) FILTER (WHERE ok), 0), "
            "count(infer_ms) FILTER (WHERE ok), COALESCE(sum(queue_ms) FILTER (WHERE ok), 0), "
            "count(queue_ms) FILTER (WHERE ok)"
        )
        per_group = f"(SELECT gid, {stats} FROM {src} s GROUP BY gid)"
        # both histograms in one pass over the records: GROUPING(b) tells the latency rows (0) from the queueing ones
        buckets = (
            f"SELECT GROUPING(b), gid, COALESCE(b, qb), count(*) FROM (SELECT gid, CASE WHEN ok AND infer_ms IS NOT "
            f"NULL THEN {BUCKET_SQL.format('infer_ms')} END AS b, CASE WHEN ok AND queue_ms IS NOT NULL THEN "
            f"{COARSE_SQL.format('queue_ms')} END AS qb FROM {src} s) s GROUP BY GROUPING SETS ((gid, b), (gid, qb)) "
            "HAVING COALESCE(b, qb) IS NOT NULL"
        )
    else:  # one row per group over all time, its histograms packed (field_pg_schema)
        per_group = (
            "(SELECT h.gid, h.requests, h.ok, h.first_ts, h.last_ts, h.infer_sum, h.infer_n, h.queue_sum, h.queue_n "
            f"FROM field_totals h {of_groups})"
        )
        packed = f"SELECT h.gid, h.dist FROM field_totals h {of_groups}"
    # summed per group id first, then labelled with its device, model and version (grouping by the text is slower)
    groups = db.execute(
        f"SELECT g.gid, g.store_id, g.model, g.version, s.a, s.b, s.c, s.d, s.e, s.f, s.h, s.i FROM "
        f"{per_group} s(gid, a, b, c, d, e, f, h, i) JOIN field_groups g "
        "USING (gid) ORDER BY g.store_id, g.model NULLS FIRST, g.version NULLS FIRST"
    ).fetchall()
    seen: dict[int, tuple[set[str], set[str]]] = {}
    for gid, backend, accelerator in db.execute("SELECT gid, backend, accelerator FROM field_labels"):
        pair = seen.setdefault(gid, (set(), set()))
        pair[0].add(backend)
        pair[1].add(accelerator)
    labels = {gid: (sorted(x for x in b if x), sorted(x for x in a if x)) for gid, (b, a) in seen.items()}
    labs = {
        tuple(r[:3]): r[3:]
        for r in db.execute(
            "SELECT DISTINCT ON (store_id, model, version) store_id, model, version, p50_ms, p99_ms, ts, report "
            "FROM field_lab ORDER BY store_id, model, version, ts DESC"
        )
    }
    index = {g[0]: i for i, g in enumerate(groups)}
    lookup = np.full(max(index, default=0) + 1, -1, dtype=np.int64)
    lookup[list(index)] = list(index.values())
    dists: list[dict[str, Any]] = [{} for _ in groups]
    if since_s:
        both = Q.fetch_ints(db, buckets, 4)
        of_part = [both[both[:, 0] == k, 1:] for k in (0, 1)]
    else:
        of_part = []
        for column in ("dist", "qdist"):
            keys, bucket, count = Q.fetch_packed(db, packed.replace("h.dist", f"h.{column}"), 1, lookup)
            of_part.append(np.stack([keys[:, 0], bucket, count], axis=1))
    for rows, part, ratio in zip(of_part, ("latency_ms", "queue_ms"), (BUCKET_RATIO, COARSE_RATIO)):
        rows = rows[rows[:, 0] < len(lookup)]
        seg = lookup[rows[:, 0]]
        rows, seg = rows[seg >= 0], seg[seg >= 0]
        sg, b, c = Q.combine(seg, rows[:, 1], rows[:, 2])
        useg, start, total, (p50, p90, p99) = Q.quantiles(sg, b, c, [0.5, 0.9, 0.99], ratio, interpolate=True)
        hists = Q.histograms(start, b, c, ratio, HIST_BINS) if part == "latency_ms" else []
        for j, (i, a, m, z) in enumerate(zip(useg.tolist(), p50.tolist(), p90.tolist(), p99.tolist())):
            dists[i][part] = {"p50": a, "p90": m, "p99": z}
            if hists:
                dists[i]["histogram"] = hists[j]
    model_keys = {k: i for i, k in enumerate(sorted({(g[1], g[2]) for g in groups}, key=lambda k: (k[0], k[1] or "")))}
    of_model = np.array([model_keys[(g[1], g[2])] for g in groups] or [0], dtype=np.int64)
    spans = db.execute(
        f"SELECT gid, min(ok_first_ts), max(ok_last_ts) FROM field_hours h WHERE infer_n > 0 {hcond} GROUP BY gid"
        if since_s
        else f"SELECT h.gid, h.ok_first_ts, h.ok_last_ts FROM field_totals h {of_groups} AND h.infer_n > 0"
    ).fetchall()
    lo = np.full(len(groups), np.inf)
    hi = np.full(len(groups), -np.inf)
    for gid, a, z in spans:
        if gid in index:
            lo[index[gid]], hi[index[gid]] = a, z
    keys, bucket, count = Q.fetch_packed(
        db, f"SELECT h.gid, h.hour, h.hist FROM field_hours h {of_groups} {hcond}", 2, lookup
    )
    hours = np.concatenate([keys, bucket[:, None], count[:, None]], axis=1)
    hours = hours[hours[:, 0] < len(lookup)]
    key = lookup[hours[:, 0]]
    hours, key = hours[key >= 0], key[key >= 0]
    per_version = Q.timelines(key, hours[:, 1], hours[:, 2], hours[:, 3], lo, hi, POINTS, COARSE_RATIO)
    mlo = np.full(len(model_keys), np.inf)
    mhi = np.full(len(model_keys), -np.inf)
    np.minimum.at(mlo, of_model[: len(groups)], lo)
    np.maximum.at(mhi, of_model[: len(groups)], hi)
    mkey = of_model[key] if len(key) else key
    per_model = Q.timelines(mkey, hours[:, 1], hours[:, 2], hours[:, 3], mlo, mhi, POINTS, COARSE_RATIO)
    entries = []
    total_records = 0
    empty = {"p50": None, "p90": None, "p99": None}
    for i, (gid, sid, mdl, version, requests, ok, first, last, isum, inn, qsum, qn) in enumerate(groups):
        requests, ok, inn, qn = int(requests), int(ok), int(inn), int(qn)
        total_records += requests
        field = dict(dists[i].get("latency_ms", empty), mean=isum / inn if inn else None)
        queue = dict(dists[i].get("queue_ms", empty), mean=qsum / qn if qn else None)
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
                "queue_ms": queue,
                "lab": {"p50_ms": lab[0], "p99_ms": lab[1], "ts": lab[2]} if lab else None,
                "drift": (field["p50"] / lab[0] - 1.0) if (lab and field["p50"]) else None,
                "lab_profile": json.loads(lab[3] or "{}").get("layer_profile") if lab else None,
                "timeline": per_version.get(i, []),
                "histogram": dists[i].get("histogram", {"edges": [], "counts": []}),
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
            "points": per_model.get(k, []),
        }
        for (sid, mdl), k in model_keys.items()
    ]
    return {
        "schema": "edgekit.field-report",
        "schema_version": 1,
        "generated": now,
        "model": model,
        "since": since,
        "records": total_records,
        "store": store.path,
        "resolution": {
            "latency_relative": RESOLUTION,
            "timeline_latency_relative": COARSE_RESOLUTION,
            "timeline": "1h",
        },
        "entries": entries,
        "timelines": timelines,
        "regressions": regressions,
        "events": events,
        "device_context": ctx,
    }
