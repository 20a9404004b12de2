"""The rollups of the PostgreSQL field store that hold histograms packed, and the schema version that says which a
store has.

A histogram is one ``BIGINT[]``: ``bucket << 40 | count`` per non-empty bucket, buckets ascending; ``field_hist_add``
adds two. ``field_totals`` holds one row per (device, model, version) group over all time: the counters of
``field_hours`` summed and the latency (``BUCKET_RATIO``) and queueing (``COARSE_RATIO``) histograms, so an
unfiltered report reads one row per group; each ``field_hours`` row holds its hour's coarse latency histogram
(``hist``, for the timelines). Ingest updates them in the statement that inserts the records (``field_pg.ROLLUP_SQL``).

Schema version 1 (no ``field_schema`` table) kept the same histograms one row per bucket (``field_dist``,
``field_queue_dist``, ``field_hour_hist``); ``upgrade`` packs them into the version 2 tables the first time such a
store is opened, in one transaction under the lock that serialises creating the tables, and drops them.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 2
COUNT_BITS = 40
COUNT_MASK = (1 << COUNT_BITS) - 1

V2_DDL = f"""
CREATE TABLE IF NOT EXISTS field_schema(version INT NOT NULL);
ALTER TABLE field_hours ADD COLUMN IF NOT EXISTS hist BIGINT[];
CREATE TABLE IF NOT EXISTS field_totals(gid INT PRIMARY KEY, requests BIGINT, ok BIGINT, first_ts DOUBLE PRECISION,
    last_ts DOUBLE PRECISION, ok_first_ts DOUBLE PRECISION, ok_last_ts DOUBLE PRECISION, infer_sum DOUBLE PRECISION,
    infer_n BIGINT, queue_sum DOUBLE PRECISION, queue_n BIGINT, dist BIGINT[], qdist BIGINT[]);
CREATE INDEX IF NOT EXISTS field_groups_model ON field_groups(model);
CREATE OR REPLACE FUNCTION field_hist_add(a BIGINT[], b BIGINT[]) RETURNS BIGINT[] LANGUAGE sql IMMUTABLE
    PARALLEL SAFE AS $$
    SELECT array_agg((k << {COUNT_BITS}) | n ORDER BY k) FROM (
        SELECT x >> {COUNT_BITS} AS k, sum(x & {COUNT_MASK})::bigint AS n FROM unnest(a || b) x GROUP BY 1) s
$$;
"""


def pack_sql(bucket: str, count: str) -> str:
    """SQL aggregate packing (bucket, count) rows into one histogram array."""
    return f"array_agg(({bucket}::bigint << {COUNT_BITS}) | {count} ORDER BY {bucket})"


# Version 1 to 2: the per-bucket rows packed, the all-time rows summed from the hourly ones.
UPGRADE_SQL = f"""
UPDATE field_hours h SET hist = p.hist FROM (SELECT gid, hour, {pack_sql("bucket", "n")} AS hist FROM field_hour_hist
    WHERE n > 0 GROUP BY gid, hour) p WHERE h.gid = p.gid AND h.hour = p.hour;
TRUNCATE field_totals;
INSERT INTO field_totals SELECT h.gid, sum(h.requests), sum(h.ok), min(h.first_ts), max(h.last_ts),
    min(h.ok_first_ts), max(h.ok_last_ts), sum(h.infer_sum), sum(h.infer_n), sum(h.queue_sum), sum(h.queue_n),
    (SELECT {pack_sql("d.bucket", "d.n")} FROM field_dist d WHERE d.gid = h.gid AND d.n > 0),
    (SELECT {pack_sql("d.bucket", "d.n")} FROM field_queue_dist d WHERE d.gid = h.gid AND d.n > 0)
FROM field_hours h GROUP BY h.gid;
DROP TABLE field_dist, field_queue_dist, field_hour_hist;
"""


def version(db: Any) -> int:
    """The schema version of the store ``db`` holds (1: tables from before ``field_schema`` existed)."""
    if not db.execute("SELECT to_regclass('field_schema') IS NOT NULL").fetchone()[0]:
        return 1
    row = db.execute("SELECT max(version) FROM field_schema").fetchone()
    return int(row[0] or 1)


def upgrade(db: Any, created: bool) -> None:
    """Bring the store up to ``SCHEMA_VERSION``, inside the caller's transaction and lock, after its tables were
    created (``created``: just now, empty) or found."""
    found = version(db)
    if found > SCHEMA_VERSION:
        from .errors import EdgekitError

        raise EdgekitError(
            f"this PostgreSQL field store has schema version {found}, written by a newer edgekit (this one knows "
            f"{SCHEMA_VERSION}): upgrade edgekit on this host (pip install -U edgekit) before it reads or writes "
            "the store"
        )
    if found == SCHEMA_VERSION:
        return
    db.execute(V2_DDL)
    if not created:
        db.execute(UPGRADE_SQL)
    db.execute("DELETE FROM field_schema")
    db.execute("INSERT INTO field_schema VALUES (%s)", (SCHEMA_VERSION,))
