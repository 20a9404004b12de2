"""The field store in PostgreSQL, for a fleet (``--store postgresql://...`` or ``EDGEKIT_FIELD_STORE``).

Records are range-partitioned by time (one partition per UTC day, created when a batch first needs it) and keyed by
(store_id, id, ts), so a re-sent batch adds nothing. A batch is copied into a temporary table and inserted with
``ON CONFLICT DO NOTHING``; the rows that were really inserted update, in the same statement, the rollups the report
reads: per (device, model, version) and hour, request counts and sums and a coarse latency histogram for the
timelines (``field_hours``, buckets ``COARSE_RATIO`` wide); per group over all time the same counters, a histogram of
latencies in fixed log-spaced buckets ``BUCKET_RATIO`` wide (a percentile read from it is within ``RESOLUTION`` of
the exact one) and one of queueing times in ``COARSE_RATIO`` buckets (``field_totals``); histograms are packed into
one array per row (``field_pg_schema``). At fleet density (a few records per device and hour) an hourly histogram as
fine as the all-time one would hold about as many buckets as there are records, so a report with ``since`` reads the
records in the partitions after the cutoff instead.
The batch, its rollups and the cursor past it are one transaction, as in the SQLite store.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import EdgekitError
from .field_pg_schema import SCHEMA_VERSION, V2_DDL, pack_sql, upgrade, version

BUCKET_RATIO = 1.02  # each latency bucket is 2 % wide: its geometric midpoint is within 1 % of any value in it
RESOLUTION = math.sqrt(BUCKET_RATIO) - 1.0
COARSE_RATIO = 1.25  # the hourly histograms timelines are drawn from: within 12 %
COARSE_RESOLUTION = math.sqrt(COARSE_RATIO) - 1.0
BUCKET_FLOOR_MS = 0.001  # latencies at or below 1 µs land in bucket 0
PARTITION_S = 86400

BASE_DDL = """
CREATE TABLE IF NOT EXISTS field_devices(store_id TEXT PRIMARY KEY, name TEXT, hostname TEXT, machine TEXT,
    transport TEXT, root TEXT, last_pull DOUBLE PRECISION);
CREATE TABLE IF NOT EXISTS field_cursors(store_id TEXT PRIMARY KEY, after_id BIGINT, after_event BIGINT,
    after_context DOUBLE PRECISION, after_annotation BIGINT DEFAULT 0);
CREATE TABLE IF NOT EXISTS field_records(store_id TEXT NOT NULL, id BIGINT NOT NULL, ts DOUBLE PRECISION NOT NULL,
    model TEXT, version TEXT, backend TEXT, accelerator TEXT, shape TEXT, queue_ms DOUBLE PRECISION, infer_ms DOUBLE
    PRECISION, pre_ms DOUBLE PRECISION, post_ms DOUBLE PRECISION, outcome TEXT, error TEXT, PRIMARY KEY(store_id,
    id, ts)) PARTITION BY RANGE (ts);
CREATE TABLE IF NOT EXISTS field_events(store_id TEXT, id BIGINT, ts DOUBLE PRECISION, kind TEXT, model TEXT,
    version TEXT, detail TEXT, PRIMARY KEY(store_id, id));
CREATE TABLE IF NOT EXISTS field_context(store_id TEXT, ts DOUBLE PRECISION, load1 DOUBLE PRECISION,
    mem_available_mb DOUBLE PRECISION, temp_c DOUBLE PRECISION, PRIMARY KEY(store_id, ts));
CREATE TABLE IF NOT EXISTS field_lab(store_id TEXT, model TEXT, version TEXT, ts DOUBLE PRECISION, p50_ms DOUBLE
    PRECISION, p99_ms DOUBLE PRECISION, report TEXT, PRIMARY KEY(store_id, model, version, ts));
CREATE TABLE IF NOT EXISTS field_groups(gid SERIAL PRIMARY KEY, store_id TEXT NOT NULL, model TEXT, version TEXT,
    UNIQUE NULLS NOT DISTINCT (store_id, model, version));
CREATE TABLE IF NOT EXISTS field_labels(gid INT, backend TEXT, accelerator TEXT, PRIMARY KEY(gid, backend,
    accelerator));
CREATE TABLE IF NOT EXISTS field_hours(gid INT, hour INT, requests BIGINT, ok BIGINT, first_ts DOUBLE PRECISION,
    last_ts DOUBLE PRECISION, ok_first_ts DOUBLE PRECISION, ok_last_ts DOUBLE PRECISION, infer_sum DOUBLE PRECISION,
    infer_n BIGINT, queue_sum DOUBLE PRECISION, queue_n BIGINT, PRIMARY KEY(gid, hour));
"""

DDL = BASE_DDL + V2_DDL


def _bucket_sql(ratio: float) -> str:
    """SQL for the latency bucket (``ratio`` wide) of the column named ``{0}``."""
    return (
        f"LEAST(GREATEST(floor(ln(GREATEST({{0}}, {BUCKET_FLOOR_MS}) / {BUCKET_FLOOR_MS}) / ln({ratio})), 0), "
        "32767)::smallint"
    )


BUCKET_SQL = _bucket_sql(BUCKET_RATIO)
COARSE_SQL = _bucket_sql(COARSE_RATIO)
COLUMNS = (
    "store_id, id, ts, model, version, backend, accelerator, shape, queue_ms, infer_ms, pre_ms, post_ms, outcome, error"
)
ROLLED = "store_id, model, version, ts, backend, accelerator, outcome, infer_ms, queue_ms"
# The rollups of the records ``ins`` yields (RECORDS is replaced by a statement that yields ROLLED).
ROLLUP_SQL = f"""
WITH ins AS (RECORDS), j AS MATERIALIZED (
    SELECT g.gid, floor(i.ts / 3600)::int AS hour, i.ts, i.backend, i.accelerator, i.outcome = 'ok' AS ok,
        i.infer_ms, i.queue_ms FROM ins i JOIN field_groups g ON g.store_id = i.store_id
        AND g.model IS NOT DISTINCT FROM i.model AND g.version IS NOT DISTINCT FROM i.version
), hours AS (
    INSERT INTO field_hours AS r SELECT c.*, p.hist FROM (
        SELECT gid, hour, count(*), count(*) FILTER (WHERE ok), min(ts), max(ts),
            min(ts) FILTER (WHERE ok AND infer_ms IS NOT NULL), max(ts) FILTER (WHERE ok AND infer_ms IS NOT NULL),
            COALESCE(sum(infer_ms) FILTER (WHERE ok), 0), count(infer_ms) FILTER (WHERE ok),
            COALESCE(sum(queue_ms) FILTER (WHERE ok), 0), count(queue_ms) FILTER (WHERE ok)
        FROM j GROUP BY gid, hour) c
    LEFT JOIN (SELECT gid, hour, {pack_sql("b", "n")} AS hist FROM (SELECT gid, hour,
        {COARSE_SQL.format("infer_ms")} AS b, count(*) AS n FROM j WHERE ok AND infer_ms IS NOT NULL GROUP BY 1, 2, 3) x
        GROUP BY gid, hour) p USING (gid, hour)
    ON CONFLICT (gid, hour) DO UPDATE SET requests = r.requests + excluded.requests, ok = r.ok + excluded.ok,
        first_ts = LEAST(r.first_ts, excluded.first_ts), last_ts = GREATEST(r.last_ts, excluded.last_ts),
        ok_first_ts = LEAST(r.ok_first_ts, excluded.ok_first_ts),
        ok_last_ts = GREATEST(r.ok_last_ts, excluded.ok_last_ts), infer_sum = r.infer_sum + excluded.infer_sum,
        infer_n = r.infer_n + excluded.infer_n, queue_sum = r.queue_sum + excluded.queue_sum,
        queue_n = r.queue_n + excluded.queue_n, hist = field_hist_add(r.hist, excluded.hist)
    RETURNING 1
), totals AS (
    INSERT INTO field_totals AS r SELECT c.*, d.dist, q.qdist FROM (
        SELECT gid, count(*), count(*) FILTER (WHERE ok), min(ts), max(ts),
            min(ts) FILTER (WHERE ok AND infer_ms IS NOT NULL), max(ts) FILTER (WHERE ok AND infer_ms IS NOT NULL),
            COALESCE(sum(infer_ms) FILTER (WHERE ok), 0), count(infer_ms) FILTER (WHERE ok),
            COALESCE(sum(queue_ms) FILTER (WHERE ok), 0), count(queue_ms) FILTER (WHERE ok)
        FROM j GROUP BY gid) c
    LEFT JOIN (SELECT gid, {pack_sql("b", "n")} AS dist FROM (SELECT gid, {BUCKET_SQL.format("infer_ms")} AS b,
        count(*) AS n FROM j WHERE ok AND infer_ms IS NOT NULL GROUP BY 1, 2) x GROUP BY gid) d USING (gid)
    LEFT JOIN (SELECT gid, {pack_sql("b", "n")} AS qdist FROM (SELECT gid, {COARSE_SQL.format("queue_ms")} AS b,
        count(*) AS n FROM j WHERE ok AND queue_ms IS NOT NULL GROUP BY 1, 2) x GROUP BY gid) q USING (gid)
    ON CONFLICT (gid) DO UPDATE SET requests = r.requests + excluded.requests, ok = r.ok + excluded.ok,
        first_ts = LEAST(r.first_ts, excluded.first_ts), last_ts = GREATEST(r.last_ts, excluded.last_ts),
        ok_first_ts = LEAST(r.ok_first_ts, excluded.ok_first_ts),
        ok_last_ts = GREATEST(r.ok_last_ts, excluded.ok_last_ts), infer_sum = r.infer_sum + excluded.infer_sum,
        infer_n = r.infer_n + excluded.infer_n, queue_sum = r.queue_sum + excluded.queue_sum,
        queue_n = r.queue_n + excluded.queue_n, dist = field_hist_add(r.dist, excluded.dist),
        qdist = field_hist_add(r.qdist, excluded.qdist)
    RETURNING 1
), labels AS (
    INSERT INTO field_labels SELECT DISTINCT gid, COALESCE(backend, ''), COALESCE(accelerator, '') FROM j
    ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM hours), (SELECT count(*) FROM totals),
    (SELECT count(*) FROM labels)
"""
# Everything a batch staged in _batch adds: the records (new ones only) and their rollups.
INGEST_SQL = ROLLUP_SQL.replace(
    "RECORDS", f"INSERT INTO field_records SELECT {COLUMNS} FROM _batch ON CONFLICT DO NOTHING RETURNING {ROLLED}"
)


def is_url(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(("postgresql://", "postgres://"))


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise EdgekitError(
            "a PostgreSQL field store needs the psycopg driver: pip install 'edgekit[postgres]' "
            "(or use a SQLite path for --store)"
        ) from None
    return psycopg


class PgFieldStore:
    """The host-side field store in PostgreSQL; the same methods as the SQLite ``FieldStore``."""

    backend = "postgresql"

    def __init__(self, url: str, create: bool = True) -> None:
        psycopg = _driver()
        self.url = url
        self.path = _redact(url)  # what reports and messages show
        try:
            self.db = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as e:
            raise EdgekitError(
                f"cannot connect to the field store {self.path}: {str(e).strip()}; check the URL and that the "
                "server is running and reachable"
            ) from None
        exists = self.db.execute("SELECT to_regclass('field_records') IS NOT NULL").fetchone()[0]
        self.created = not exists
        if self.created and not create:
            self.db.close()
            raise EdgekitError(
                f"no field store in {self.path}: `edgekit field pull --store URL` creates its tables, then "
                "`edgekit field report --store URL` reads them"
            )
        if self.created or version(self.db) != SCHEMA_VERSION:  # a newer one is refused by upgrade()
            try:
                with self.db.transaction():
                    self.db.execute("SELECT pg_advisory_xact_lock(81807)")  # two hosts creating or upgrading it
                    self.db.execute(DDL)
                    upgrade(self.db, self.created)
            except BaseException:
                self.db.close()
                raise
        self._days: set[int] = set()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> PgFieldStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self) -> int:
        return int(self.db.execute("SELECT COALESCE(sum(requests), 0) FROM field_hours").fetchone()[0])

    def partitions(self) -> list[str]:
        rows = self.db.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'field_records'::regclass ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def _partitions_for(self, days: set[int]) -> None:
        for day in sorted(days - self._days):
            name = "field_records_" + time.strftime("%Y%m%d", time.gmtime(day * PARTITION_S))
            with self.db.transaction():
                self.db.execute("SELECT pg_advisory_xact_lock(81808)")  # writers racing to create the same day
                self.db.execute(
                    f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF field_records "
                    f"FOR VALUES FROM ({day * PARTITION_S}) TO ({(day + 1) * PARTITION_S})"
                )
            self._days.add(day)

    # -- writing -------------------------------------------------------------------
    def cursor(self, store_id: str) -> tuple[int, int, float, int]:
        row = self.db.execute(
            "SELECT after_id, after_event, after_context, after_annotation FROM field_cursors WHERE store_id=%s",
            (store_id,),
        ).fetchone()
        return tuple(row) if row else (0, 0, 0.0, 0)  # type: ignore[return-value]

    def ingest_records(self, store_id: str, records: list[Any] | list[tuple[Any, ...]], stage: str = "copy") -> int:
        """Insert one device's records (tuples in the agent's column order, without store_id); see ``ingest_rows``."""
        return self.ingest_rows([(store_id, *r) for r in records], stage)

    def ingest_rows(self, rows: list[tuple[Any, ...]], stage: str = "copy") -> int:
        """Insert records of any devices (tuples of ``COLUMNS``, store_id first) and update the rollups, in one
        transaction (a savepoint inside the caller's). Returns rows added: records already stored are skipped.
        ``stage``: how the rows reach the server, ``copy`` (COPY into a temporary table) or ``executemany``
        (pipelined inserts into it; slower, kept to measure against)."""
        if not rows:
            return 0
        self._partitions_for({int(r[2] // PARTITION_S) for r in rows})
        db = self.db
        with db.transaction():
            db.execute("CREATE TEMP TABLE IF NOT EXISTS _batch (LIKE field_records)")
            if stage == "executemany":
                with db.cursor() as cur:
                    cur.executemany(f"INSERT INTO _batch ({COLUMNS}) VALUES ({', '.join(['%s'] * 14)})", rows)
            else:
                with db.cursor().copy(f"COPY _batch ({COLUMNS}) FROM STDIN") as cp:
                    for r in rows:
                        cp.write_row(r)
            db.execute(
                "INSERT INTO field_groups(store_id, model, version) SELECT DISTINCT store_id, model, version "
                "FROM _batch ON CONFLICT DO NOTHING"
            )
            added = db.execute(INGEST_SQL).fetchone()[0]
            db.execute("TRUNCATE _batch")
        return int(added)

    def rebuild_rollups(self) -> int:
        """Recompute every rollup from the records (after records were loaded around the ingest path, e.g. by a
        bulk COPY into field_records). Returns the records rolled up."""
        db = self.db
        with db.transaction():
            db.execute("TRUNCATE field_hours, field_labels, field_totals")
            db.execute(
                "INSERT INTO field_groups(store_id, model, version) SELECT DISTINCT store_id, model, version "
                "FROM field_records ON CONFLICT DO NOTHING"
            )
            return int(db.execute(ROLLUP_SQL.replace("RECORDS", f"SELECT {ROLLED} FROM field_records")).fetchone()[0])

    def store_batch(
        self,
        batch: dict[str, Any],
        name: str | None,
        transport: str | None,
        root: str | None,
        stage: str = "copy",
    ) -> int:
        """Write one pulled batch and move the cursor past it, atomically. Returns rows added."""
        sid = batch["store_id"]
        after_id, after_event, after_context, after_annotation = self.cursor(sid)
        recs, events, ctx = batch["records"], batch["events"], batch["context"]
        notes = batch.get("annotations", [])
        info = batch.get("device", {})
        db = self.db
        self._partitions_for({int(r[1] // PARTITION_S) for r in recs})
        with db.transaction():
            db.execute(
                "INSERT INTO field_devices VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT(store_id) DO UPDATE SET "
                "name=excluded.name, hostname=excluded.hostname, machine=excluded.machine, "
                "transport=excluded.transport, root=excluded.root, last_pull=excluded.last_pull",
                (sid, name, info.get("hostname"), info.get("machine"), transport, root, time.time()),
            )
            added = self.ingest_records(sid, recs, stage)
            with db.cursor() as cur:
                cur.executemany(
                    "INSERT INTO field_events VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                    [(sid, *e) for e in events],
                )
                cur.executemany(
                    "INSERT INTO field_context VALUES (%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                    [(sid, *c) for c in ctx],
                )
                cur.executemany(
                    "UPDATE field_records SET pre_ms=COALESCE(%s, pre_ms), post_ms=COALESCE(%s, post_ms) "
                    "WHERE store_id=%s AND id=%s",
                    [(n[2], n[3], sid, n[1]) for n in notes],
                )
            new = (
                recs[-1][0] if recs else after_id,
                events[-1][0] if events else after_event,
                ctx[-1][0] if ctx else after_context,
                notes[-1][0] if notes else after_annotation,
            )
            db.execute(
                "INSERT INTO field_cursors VALUES (%s,%s,%s,%s,%s) ON CONFLICT(store_id) DO UPDATE SET "
                "after_id=excluded.after_id, after_event=excluded.after_event, "
                "after_context=excluded.after_context, after_annotation=excluded.after_annotation",
                (sid, *new),
            )
        return added

    def record_lab(self, store_id: str, report: dict[str, Any]) -> None:
        lat = report["latency_ms"]
        self.db.execute(
            "INSERT INTO field_lab VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
            (
                store_id,
                report.get("name"),
                report.get("bundle_id"),
                time.time(),
                lat["p50"],
                lat["p99"],
                json.dumps(report),
            ),
        )


def ingest(url: str, batch: dict[str, Any], name: str | None = None, transport: str | None = None) -> int:
    """Write one batch in the agent's ``/v1/telemetry`` shape (a device pushing, or a host on its behalf) into the
    PostgreSQL store at ``url``; idempotent on the device's record ids. Returns rows added."""
    with PgFieldStore(url) as store:
        return store.store_batch(batch, name, transport, None)
