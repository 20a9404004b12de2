"""The field store in PostgreSQL at fleet scale: ingest rate and `field report` over 10^7 records from 10^4 devices.

A throwaway PostgreSQL server (the distribution's binaries, durable settings: fsync on) in a temp dir:

1. Bulk load: 10^7 records from 10^4 devices over ``--hours`` hours (each device a model with two versions, the
   second installed half-way; 1 % errors), generated in numpy, sent with COPY into the partitioned records table,
   then rolled up in one pass (``PgFieldStore.rebuild_rollups``: the ingest statement's rollups over all records).
2. Ingest rate through the real path (``PgFieldStore.store_batch``, one device's pulled batch of ``--batch``
   records per transaction) into that full store: staging with COPY against pipelined executemany.
3. ``field report`` over all of it: cold (first report after a server restart: empty shared buffers, warm OS page
   cache) and warm, from the all-time rollup (one row per device and version) and the hourly one (the timelines);
   with ``--since`` and ``--model``; and, for scale, exact percentiles with ``percentile_cont``
   over the raw records (what the rollups avoid).

The data directory (~2-3 GB) is removed at the end.
"""

import argparse
import os
import sys
import time

import _common as C
import numpy as np

NAME = "field_pg"
SETTINGS = [
    "shared_buffers=1GB",
    "work_mem=64MB",
    "maintenance_work_mem=256MB",
    "max_wal_size=8GB",
    "checkpoint_timeout=30min",
]


def device_rows(first, count, per_device, t0, span, rng):
    """Rows (store_id first) for devices first..first+count-1, per_device records each."""
    n = count * per_device
    dev = np.repeat(np.arange(first, first + count), per_device)
    ids = np.tile(np.arange(1, per_device + 1), count)
    ts = np.sort(rng.uniform(0, span, (count, per_device)), axis=1).ravel() + t0
    switch = t0 + span * rng.uniform(0.4, 0.6, count)
    v2 = ts >= np.repeat(switch, per_device)
    scale = np.repeat(rng.uniform(0.5, 3.0, count), per_device) * np.where(v2, 1.15, 1.0)
    infer = scale * rng.lognormal(0.0, 0.3, n)
    queue = rng.uniform(0.0, 0.3, n)
    ok = rng.random(n) >= 0.01
    sids = [f"dev{d:05d}" for d in range(first, first + count)]
    return [
        (sids[d - first], i, t, "ppocr", "v2" if late else "v1", "ort", "CPUExecutionProvider", "1x3x48x192", q,
         m if good else None, None, None, "ok" if good else "bad_request", None if good else "bad shape")
        for d, i, t, late, q, m, good in zip(
            dev.tolist(), ids.tolist(), ts.tolist(), v2.tolist(), queue.tolist(), infer.tolist(), ok.tolist()
        )
    ]  # fmt: skip


def bulk_load(store, devices, per_device, t0, span, chunk_devices):
    """COPY straight into the partitioned records table, then the rollups in one pass (``rebuild_rollups``)."""
    from edgekit.field_pg import COLUMNS, PARTITION_S

    rng = np.random.default_rng(0)
    store._partitions_for(set(range(int(t0 // PARTITION_S), int((t0 + span) // PARTITION_S) + 1)))
    t_gen = t_copy = 0.0
    for first in range(0, devices, chunk_devices):
        a = time.perf_counter()
        rows = device_rows(first, min(chunk_devices, devices - first), per_device, t0, span, rng)
        b = time.perf_counter()
        with store.db.cursor().copy(f"COPY field_records ({COLUMNS}) FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)
        t_copy += time.perf_counter() - b
        t_gen += b - a
        C.log(f"  copied devices < {first + chunk_devices}: {t_copy:.0f} s copying, {t_gen:.0f} s generating")
    a = time.perf_counter()
    rolled = store.rebuild_rollups()
    t_roll = time.perf_counter() - a
    C.log(f"  rollups: {t_roll:.0f} s")
    store.db.execute("VACUUM ANALYZE")
    return {
        "records": rolled,
        "devices": devices,
        "copy_s": t_copy,
        "rollup_s": t_roll,
        "generate_s": t_gen,
    }


def ingest_rate(store, stage, first_device, devices, batch, t0, span):
    rng = np.random.default_rng(first_device)
    rows = device_rows(first_device, devices, batch, t0, span, rng)
    batches = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    t = 0.0
    for b in batches:
        payload = {
            "store_id": b[0][0],
            "records": [r[1:] for r in b],
            "events": [],
            "context": [],
            "device": {"hostname": b[0][0]},
        }
        a = time.perf_counter()
        added = store.store_batch(payload, payload["store_id"], "bench", None, stage=stage)
        t += time.perf_counter() - a
        assert added == len(b), (added, len(b))
    return {"stage": stage, "records": len(rows), "batch": batch, "seconds": t, "records_per_s": len(rows) / t}


def timed(fn, runs):
    out = []
    for _ in range(runs):
        a = time.perf_counter()
        r = fn()
        out.append(time.perf_counter() - a)
    return out, r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--devices", type=int, default=10_000)
    ap.add_argument("--hours", type=float, default=24.0, help="time the records span")
    ap.add_argument("--batch", type=int, default=5000, help="records per ingested batch (a pull's default)")
    ap.add_argument("--ingest-devices", type=int, default=20, help="devices (one batch each) per ingest run")
    ap.add_argument("--no-exact", action="store_true", help="skip the percentile_cont comparison")
    args = ap.parse_args(argv)
    from harness.postgres import ThrowawayPostgres

    from edgekit.field import open_store, report

    C.workspace(NAME)
    env = C.environment()
    per_device = args.records // args.devices
    span = args.hours * 3600
    t0 = 1_750_000_000.0
    now = t0 + span
    results = {"benchmark": NAME, "environment": env, "settings": SETTINGS, "hours": args.hours}
    with ThrowawayPostgres(port=55432, durable=True, settings=SETTINGS) as pg:
        url = pg.database("field")
        with open_store(url) as store:
            C.log(f"bulk load: {args.records:,} records from {args.devices:,} devices")
            results["load"] = bulk_load(store, args.devices, per_device, t0, span, max(1, 1_000_000 // per_device))
            for stage in ("copy", "executemany"):
                C.log(f"ingest through store_batch, {stage}")
                first = args.devices + (0 if stage == "copy" else args.ingest_devices)
                results[f"ingest_{stage}"] = ingest_rate(store, stage, first, args.ingest_devices, args.batch, t0, span)
            sizes = store.db.execute(
                "SELECT pg_size_pretty(pg_database_size(current_database())), "
                "(SELECT count(*) FROM field_totals), (SELECT sum(cardinality(dist)) FROM field_totals), "
                "(SELECT count(*) FROM field_hours), (SELECT sum(cardinality(hist)) FROM field_hours)"
            ).fetchone()
            results["database"] = {
                "size": sizes[0],
                "totals_rows": sizes[1],
                "totals_buckets": int(sizes[2] or 0),
                "hour_rows": sizes[3],
                "hour_buckets": int(sizes[4] or 0),
            }
            results["partitions"] = len(store.partitions())
        pg.restart()
        with open_store(url, create=False) as store:
            C.log("report, cold")
            cold, r = timed(lambda: report(store, now=now), 1)
            C.log("report, warm")
            warm, r = timed(lambda: report(store, now=now), 3)
            since, rs = timed(lambda: report(store, since=f"{int(args.hours // 4)}h", now=now), 2)
            model, _ = timed(lambda: report(store, model="ppocr", now=now), 2)
            since_model, _ = timed(lambda: report(store, model="ppocr", since=f"{int(args.hours // 4)}h", now=now), 1)
            results["report"] = {
                "records": r["records"],
                "entries": len(r["entries"]),
                "cold_s": cold[0],
                "warm_s": C.summary(warm),
                "since_s": C.summary(since),
                "since_records": rs["records"],
                "model_s": C.summary(model),
                "since_model_s": since_model[0],
            }
            if not args.no_exact:
                C.log("exact percentile_cont over the raw records")
                exact, rows = timed(
                    lambda: store.db.execute(
                        "SELECT store_id, model, version, percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP "
                        "(ORDER BY infer_ms) FROM field_records WHERE outcome = 'ok' GROUP BY 1, 2, 3"
                    ).fetchall(),
                    1,
                )
                results["exact_percentile_cont_s"] = exact[0]
    results["loadavg_at_end"] = list(os.getloadavg())
    C.write_results(NAME, results)
    rep, load = results["report"], results["load"]
    cp, em = results["ingest_copy"], results["ingest_executemany"]
    print(f"### Field store in PostgreSQL ({env['cpu_count']}-core {env['machine']}, PostgreSQL 15, fsync on)\n")
    rows = [
        [
            f"bulk load, {load['records']:,} records / {load['devices']:,} devices over {args.hours:g} h",
            f"{load['records'] / load['copy_s']:,.0f} records/s",
            f"COPY into the partitions {load['copy_s']:.0f} s, then rollups in one pass {load['rollup_s']:.0f} s",
        ],
        [
            f"ingest via store_batch, batches of {args.batch:,} (COPY staging)",
            f"**{cp['records_per_s']:,.0f} records/s**",
            f"{cp['records']:,} records into the full store",
        ],
        [
            "the same, executemany (pipelined) staging",
            f"{em['records_per_s']:,.0f} records/s",
            f"{em['records']:,} records",
        ],
        [
            f"field report, all {rep['records']:,} records ({rep['entries']:,} entries), cold",
            f"**{rep['cold_s']:.2f} s**",
            "first report after a server restart",
        ],
        [
            "field report, warm",
            f"**{rep['warm_s']['p50']:.2f} s**",
            f"{rep['warm_s']['min']:.2f}-{rep['warm_s']['max']:.2f} s, 3 runs",
        ],
        [
            f"field report --since {int(args.hours // 4)}h ({rep['since_records']:,} records)",
            f"{rep['since_s']['p50']:.2f} s",
            "the records after the cutoff (partition pruning)",
        ],
        [
            "field report --model ppocr (every device runs it)",
            f"{rep['model_s']['p50']:.2f} s",
            "the model's all-time rows (index on the model)",
        ],
    ]
    if "exact_percentile_cont_s" in results:
        rows.append(
            ["exact percentile_cont per version over the raw records", f"{results['exact_percentile_cont_s']:.1f} s",
             "for scale: what the rollups avoid"]
        )  # fmt: skip
    print(C.table(["what", "result", "notes"], rows))
    print(f"\nDatabase {results['database']}, {results['partitions']} partitions.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
