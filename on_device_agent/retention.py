"""How much the telemetry store keeps: raw rows bounded by age, count and bytes; histograms longer."""

import sqlite3


def prune(db: sqlite3.Connection, now: float, max_age_s: float, max_rows: int, minute_age_s: float) -> None:
    """Drop raw rows older than ``max_age_s`` or beyond the newest ``max_rows``; histograms after ``minute_age_s``."""
    db.execute("DELETE FROM requests WHERE ts < ?", (now - max_age_s,))
    db.execute("DELETE FROM requests WHERE id <= (SELECT MAX(id) FROM requests) - ?", (max_rows,))
    db.execute("DELETE FROM minutes WHERE minute < ?", (now - minute_age_s,))
    db.execute("DELETE FROM context WHERE ts < ?", (now - minute_age_s,))
    db.execute("DELETE FROM events WHERE ts < ?", (now - minute_age_s,))
    db.execute("DELETE FROM annotations WHERE id <= (SELECT MAX(id) FROM annotations) - ?", (max_rows,))


def used_bytes(db: sqlite3.Connection) -> int:
    """Bytes the store's pages hold (free pages, reused by later writes, not counted)."""
    page = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
    return page * pages


def bound_bytes(db: sqlite3.Connection, max_bytes: int) -> None:
    """Over ``max_bytes``: drop the oldest quarter of the raw rows until under it (histograms stay)."""
    for _ in range(8):
        if used_bytes(db) <= max_bytes:
            return
        for table in ("requests", "annotations", "events"):
            db.execute("DELETE FROM %s WHERE id <= (SELECT MIN(id) + (MAX(id) - MIN(id)) / 4 FROM %s)" % (table, table))
        db.execute("DELETE FROM context WHERE ts <= (SELECT MIN(ts) + (MAX(ts) - MIN(ts)) / 4 FROM context)")
