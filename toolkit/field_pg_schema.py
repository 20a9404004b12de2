"""The all-time rollup of the PostgreSQL field store and the schema version that says whether a store has it.

``field_totals`` holds one row per (device, model, version) group over all time: the counters of ``field_hours``
summed, and the latency and queueing histograms of ``field_dist`` and ``field_queue_dist`` packed into one array each
(``bucket << 40 | count`` per non-empty bucket, buckets ascending), so an unfiltered report reads one row per group
instead of every bucket row of every group. Ingest updates it in the statement that updates the other rollups
(``field_pg.ROLLUP_SQL``); a store written before it existed (schema version 1) gets it filled from the other rollups
the first time it is opened (``upgrade``), under the same lock that serialises creating the tables.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 2
COUNT_BITS = 40
COUNT_MASK = (1 << COUNT_BITS) - 1

TOTALS_DDL = f"""
CREATE TABLE IF NOT EXISTS field_schema(version INT NOT NULL);
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
    """SQL aggregate packing (bucket, count) rows into one ``field_totals`` histogram array."""
    return f"array_agg(({bucket}::bigint << {COUNT_BITS}) | {count} ORDER BY {bucket})"


# The counters and histograms of field_totals from the other rollups (a store of schema version 1).
FILL_SQL = f"""
INSERT INTO field_totals SELECT h.gid, sum(h.requests), sum(h.ok), min(h.first_ts), max(h.last_ts),
    min(h.ok_first_ts), max(h.ok_last_ts), sum(h.infer_sum), sum(h.infer_n), sum(h.queue_sum), sum(h.queue_n),
    (SELECT {pack_sql("d.bucket", "d.n")} FROM field_dist d WHERE d.gid = h.gid AND d.n > 0),
    (SELECT {pack_sql("d.bucket", "d.n")} FROM field_queue_dist d WHERE d.gid = h.gid AND d.n > 0)
FROM field_hours h GROUP BY h.gid
"""


def version(db: Any) -> int:
    """The schema version of the store ``db`` holds (1: tables from before ``field_schema`` existed)."""
    if not db.execute("SELECT to_regclass('field_schema') IS NOT NULL").fetchone()[0]:
        return 1
    row = db.execute("SELECT max(version) FROM field_schema").fetchone()
    return int(row[0] or 1)


def upgrade(db: Any, created: bool) -> None:
    """Bring the store up to ``SCHEMA_VERSION`` in one transaction (inside the caller's lock): the all-time rollup's
    table, filled from the other rollups unless the store was just ``created`` (then it is empty)."""
    if version(db) >= SCHEMA_VERSION:
        return
    db.execute(TOTALS_DDL)
    if not created:
        db.execute("TRUNCATE field_totals")
        db.execute(FILL_SQL)
    db.execute("DELETE FROM field_schema")
    db.execute("INSERT INTO field_schema VALUES (%s)", (SCHEMA_VERSION,))
