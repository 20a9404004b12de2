"""What real traffic costs, recorded on the device (standard library only, Python 3.7+).

Every inference served by the local API becomes one row; the request path only appends
a tuple to an in-memory queue, and a writer thread stores the queue in SQLite (WAL mode)
every ``flush_interval`` seconds, in one transaction, together with per-minute
histograms. A ``kill -9`` loses at most the requests of the last interval; a reboot loses
nothing that was written. Raw rows are bounded by count and age; minute histograms are
kept longer. The store has a random ``store_id`` so a host that pulls can tell a new
store (a reinstall) from the one it knew.

A store that SQLite finds corrupt is never emptied or replaced: recording is switched
off, the agent keeps serving inferences, and every telemetry endpoint answers with the
error and what to do.

The tables, limits and histogram buckets are in ``telemetry_schema.py``.
"""

import collections
import itertools
import json
import os
import sqlite3
import threading
import time
import uuid
from typing import Any, Deque, Dict, List, Optional, Tuple

from . import retention
from .devicectx import device_context
from .telemetry_schema import (  # noqa: F401  (every name stays importable from here)
    ANNOTATION_COLUMNS,
    BUCKET_BASE_MS,
    BUCKETS_PER_DOUBLING,
    COLUMNS,
    CONTEXT_COLUMNS,
    DDL,
    EVENT_COLUMNS,
    MAX_BYTES,
    MAX_ID,
    MAX_QUEUE,
    MAX_TEXT,
    SCHEMA_VERSION,
    TelemetryError,
    _cut,
    bucket_of,
    bucket_upper_ms,
)


class Recorder(object):
    def __init__(
        self,
        root: str,
        flush_interval: float = 0.2,
        max_rows: int = 1000000,
        max_age_days: float = 30.0,
        minute_days: float = 90.0,
        context_interval: float = 30.0,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.dir = os.path.join(os.path.abspath(os.path.expanduser(root)), "telemetry")
        self.path = os.path.join(self.dir, "records.db")
        self.flush_interval = flush_interval
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._rows_since_size_check = 0
        self.max_age_s = max_age_days * 86400.0
        self.minute_age_s = minute_days * 86400.0
        self.context_interval = context_interval
        self.queue: Deque[Tuple[Any, ...]] = collections.deque()
        self.annotations: Deque[Tuple[Any, ...]] = collections.deque()
        self.events: Deque[Tuple[Any, ...]] = collections.deque()
        self.error: Optional[str] = None
        self.store_id: Optional[str] = None
        self.dropped = 0
        self.persisted = 0
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._last_context = 0.0
        self._last_prune = 0.0
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as e:
            self._db = None  # type: ignore[assignment]
            self.error = (
                "telemetry store %s is unreadable (%s). It was left as it is; the agent serves inferences "
                "without recording them. Move the file aside (or restore it) and restart the agent to "
                "record again." % (self.path, e)
            )
            self._ids = itertools.count(1)
            return
        self._ids = itertools.count(self._next_id("requests"))
        self._event_ids = itertools.count(self._next_id("events"))
        self._annotation_ids = itertools.count(self._next_id("annotations"))
        self._queue_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="telemetry-writer")
        self._thread.daemon = True
        self._thread.start()

    # -- storage ---------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        exists = os.path.exists(self.path)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        try:
            if exists:
                check = db.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise sqlite3.DatabaseError("integrity check failed: %s" % check)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(DDL)
            row = db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
            if row is None:
                self.store_id = uuid.uuid4().hex
                db.execute("INSERT INTO meta VALUES('store_id', ?)", (self.store_id,))
                db.execute("INSERT INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
            else:
                self.store_id = row[0]
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _next_id(self, table: str) -> int:
        """Ids are never reused, even after pruning emptied a table: a host's cursor stays valid."""
        row = self._db.execute("SELECT MAX(id) FROM %s" % table).fetchone()
        kept = self._db.execute("SELECT value FROM meta WHERE key=?", ("last_id_" + table,)).fetchone()
        return max(row[0] or 0, int(kept[0]) if kept else 0) + 1

    def check(self) -> None:
        if self.error:
            raise TelemetryError(self.error)

    # -- request path ------------------------------------------------------------
    def record(
        self,
        model: str,
        version: Optional[str],
        backend: Optional[str],
        accelerator: Optional[str],
        shape: Optional[str],
        queue_ms: Optional[float],
        infer_ms: Optional[float],
        outcome: str,
        error: Optional[str] = None,
        pre_ms: Optional[float] = None,
        post_ms: Optional[float] = None,
    ) -> Optional[int]:
        """Queue one request's record; returns its id (for a later ``annotate``). Costs an append."""
        if self._db is None or self.error or len(self.queue) >= MAX_QUEUE:
            self.dropped += 1
            return None
        # Every text is bounded, so a row is too (the store is bounded by bytes as well as rows).
        model, version, backend = _cut(model, "model"), _cut(version, "version"), _cut(backend, "backend")
        accelerator, shape, error = _cut(accelerator, "accelerator"), _cut(shape, "shape"), _cut(error, "error")
        with self._queue_lock:  # ids reach the queue in order, so a pull never skips a lower id
            rid = next(self._ids)
            self.queue.append(
                (
                    rid,
                    time.time(),
                    model,
                    version,
                    backend,
                    accelerator,
                    shape,
                    queue_ms,
                    infer_ms,
                    pre_ms,
                    post_ms,
                    outcome,
                    error,
                )
            )
        return rid

    def annotate(self, rid: int, pre_ms: Optional[float] = None, post_ms: Optional[float] = None) -> None:
        """Pre/post-processing times an app measured around a request it made (its own pull stream)."""
        self.check()
        if not (isinstance(rid, int) and 1 <= rid <= MAX_ID):
            raise ValueError("request_id must be an id returned by infer")
        with self._queue_lock:
            self.annotations.append((next(self._annotation_ids), rid, pre_ms, post_ms))

    def event(
        self, kind: str, model: Optional[str] = None, version: Optional[str] = None, detail: Optional[Any] = None
    ) -> None:
        """Loads, installs, rollbacks: marks on the timeline."""
        if self._db is not None:
            with self._queue_lock:
                self.events.append(
                    (
                        next(self._event_ids),
                        time.time(),
                        kind,
                        model,
                        version,
                        json.dumps(detail) if detail is not None else None,
                    )
                )

    # -- writer ------------------------------------------------------------------
    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(min(self.flush_interval * (2**failures), 30.0)):
            try:
                self.flush()
                failures = 0
                if self.error and self.error.startswith("writing"):
                    self.error = None
            except sqlite3.OperationalError as e:  # locked, busy, disk full: keep the rows and try again
                failures = min(failures + 1, 8)
                self.error = "writing to telemetry store %s keeps failing (%s); records wait in memory" % (self.path, e)
            except sqlite3.DatabaseError as e:
                self.error = "telemetry store %s failed while writing: %s" % (self.path, e)
                return

    def flush(self) -> None:
        """Write everything queued, in one transaction (also called before a pull)."""
        if self._db is None:
            return
        with self._flush_lock:
            rows = []
            while self.queue:
                rows.append(self.queue.popleft())
            notes = []
            while self.annotations:
                notes.append(self.annotations.popleft())
            events = []
            while self.events:
                events.append(self.events.popleft())
            now = time.time()
            ctx = None
            if now - self._last_context >= self.context_interval:
                self._last_context = now
                c = device_context()
                ctx = (now, c["load1"], c["mem_available_mb"], c["temp_c"])
            if not (rows or notes or events or ctx):
                return
            db = self._db
            try:
                db.execute("BEGIN")
                if rows:
                    db.executemany("INSERT OR IGNORE INTO requests VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
                    self._aggregate(db, rows)
                for aid, rid, pre, post in notes:
                    db.execute("INSERT OR IGNORE INTO annotations VALUES (?,?,?,?)", (aid, rid, pre, post))
                    db.execute(
                        "UPDATE requests SET pre_ms=COALESCE(?, pre_ms), post_ms=COALESCE(?, post_ms) WHERE id=?",
                        (pre, post, rid),
                    )
                if events:
                    db.executemany("INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?)", events)
                if ctx:
                    db.execute("INSERT OR REPLACE INTO context VALUES (?,?,?,?)", ctx)
                for table, batch in (("requests", rows), ("events", events), ("annotations", notes)):
                    if batch:
                        db.execute(
                            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                            ("last_id_" + table, str(max(r[0] for r in batch))),
                        )
                self._rows_since_size_check += len(rows) + len(notes) + len(events)
                if now - self._last_prune > 60:
                    self._last_prune = now
                    retention.prune(db, now, self.max_age_s, self.max_rows, self.minute_age_s)
                if self._rows_since_size_check >= 1000:
                    self._rows_since_size_check = 0
                    retention.bound_bytes(db, self.max_bytes)
                db.execute("COMMIT")
            except BaseException:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                # Nothing is lost: the rows go back to the front of their queues for the next attempt.
                self.queue.extendleft(reversed(rows))
                self.annotations.extendleft(reversed(notes))
                self.events.extendleft(reversed(events))
                raise
            self.persisted += len(rows)

    @staticmethod
    def _aggregate(db: sqlite3.Connection, rows: List[Tuple[Any, ...]]) -> None:
        groups: Dict[Tuple[Any, ...], List[Any]] = {}
        for r in rows:
            key = (int(r[1] // 60) * 60, r[2], r[3], r[4], r[5], r[11])
            g = groups.setdefault(key, [0, 0.0, {}])
            g[0] += 1
            if r[8] is not None:
                g[1] += r[8]
                b = str(bucket_of(r[8]))
                g[2][b] = g[2].get(b, 0) + 1
        for key, (count, total, buckets) in groups.items():
            old = db.execute(
                "SELECT count, sum_ms, buckets FROM minutes WHERE minute=? AND model IS ? AND version IS ? "
                "AND backend IS ? AND accelerator IS ? AND outcome IS ?",
                key,
            ).fetchone()
            if old:
                merged = json.loads(old[2])
                for b, n in buckets.items():
                    merged[b] = merged.get(b, 0) + n
                db.execute(
                    "UPDATE minutes SET count=?, sum_ms=?, buckets=? WHERE minute=? AND model IS ? AND "
                    "version IS ? AND backend IS ? AND accelerator IS ? AND outcome IS ?",
                    (old[0] + count, old[1] + total, json.dumps(merged)) + key,
                )
            else:
                db.execute("INSERT INTO minutes VALUES (?,?,?,?,?,?,?,?,?)", key + (count, total, json.dumps(buckets)))

    def prune_now(self) -> None:
        with self._flush_lock:
            retention.prune(self._db, time.time(), self.max_age_s, self.max_rows, self.minute_age_s)

    def used_bytes(self) -> int:
        return retention.used_bytes(self._db)

    # -- reading -----------------------------------------------------------------
    def pull(
        self,
        after_id: int = 0,
        after_event: int = 0,
        after_context: float = 0.0,
        limit: int = 5000,
        after_annotation: int = 0,
    ) -> Dict[str, Any]:
        """Rows after the caller's cursors, oldest first; ``more`` says whether to ask again."""
        self.check()
        self.flush()
        limit = max(1, min(int(limit), 50000))
        with self._flush_lock:
            rows = self._db.execute(
                "SELECT * FROM requests WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit + 1)
            ).fetchall()
            events = self._db.execute(
                "SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?", (after_event, limit)
            ).fetchall()
            ctx = self._db.execute(
                "SELECT * FROM context WHERE ts > ? ORDER BY ts LIMIT ?", (after_context, limit)
            ).fetchall()
            notes = self._db.execute(
                "SELECT * FROM annotations WHERE id > ? ORDER BY id LIMIT ?", (after_annotation, limit)
            ).fetchall()
            oldest = self._db.execute("SELECT MIN(id) FROM requests").fetchone()[0]
        more = len(rows) > limit or len(events) == limit or len(ctx) == limit or len(notes) == limit
        rows = rows[:limit]
        return {
            "store_id": self.store_id,
            "columns": list(COLUMNS),
            "records": [list(r) for r in rows],
            "event_columns": list(EVENT_COLUMNS),
            "events": [list(e) for e in events],
            "context_columns": list(CONTEXT_COLUMNS),
            "context": [list(c) for c in ctx],
            "annotation_columns": list(ANNOTATION_COLUMNS),
            "annotations": [list(a) for a in notes],
            "oldest_id": oldest,
            "more": more,
        }

    def stats(self) -> Dict[str, Any]:
        return {
            "store_id": self.store_id,
            "path": self.path,
            "ok": self.error is None,
            "error": self.error,
            "queued": len(self.queue),
            "persisted": self.persisted,
            "dropped": self.dropped,
            "flush_interval_s": self.flush_interval,
        }

    def close(self) -> None:
        self._stop.set()
        if self._db is not None:
            try:
                self.flush()
            finally:
                self._db.close()
