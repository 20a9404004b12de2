"""Field latency: pull what devices recorded, store it on the host, report lab against field.

The host store is SQLite (``~/.cache/edgekit/field.db`` or ``--store``). Rows are keyed
by the device store's id and the row id, and each pulled batch is written together with
the cursor that points past it, in one transaction: a pull that is interrupted loses
and duplicates nothing, and pulling twice stores nothing twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .cache import cache_root
from .errors import EdgekitError
from .field_pg import PgFieldStore, is_url
from .field_summary import MIN_SAMPLES, REGRESSION, shares_and_regressions  # noqa: F401
from .field_text import report_text  # noqa: F401  (the report as text, for the CLI)

if TYPE_CHECKING:
    from .device import Device

DDL = """
CREATE TABLE IF NOT EXISTS devices(store_id TEXT PRIMARY KEY, name TEXT, hostname TEXT, machine TEXT,
    transport TEXT, root TEXT, last_pull REAL);
CREATE TABLE IF NOT EXISTS cursors(store_id TEXT PRIMARY KEY, after_id INTEGER, after_event INTEGER,
    after_context REAL, after_annotation INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS records(store_id TEXT, id INTEGER, ts REAL, model TEXT, version TEXT, backend TEXT,
    accelerator TEXT, shape TEXT, queue_ms REAL, infer_ms REAL, pre_ms REAL, post_ms REAL, outcome TEXT, error TEXT,
    PRIMARY KEY(store_id, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_model_ts ON records(model, ts);
CREATE TABLE IF NOT EXISTS events(store_id TEXT, id INTEGER, ts REAL, kind TEXT, model TEXT, version TEXT,
    detail TEXT, PRIMARY KEY(store_id, id));
CREATE TABLE IF NOT EXISTS context(store_id TEXT, ts REAL, load1 REAL, mem_available_mb REAL, temp_c REAL,
    PRIMARY KEY(store_id, ts));
CREATE TABLE IF NOT EXISTS lab(store_id TEXT, model TEXT, version TEXT, ts REAL, p50_ms REAL, p99_ms REAL,
    report TEXT, PRIMARY KEY(store_id, model, version, ts));
"""


class FieldStore:
    """The host-side store of pulled field records (SQLite). ``create=False``: a store that does not exist yet is an
    error instead of a new empty database (reading a mistyped path must not make one)."""

    def __init__(self, path: str | Path | None = None, create: bool = True) -> None:
        default = os.environ.get("EDGEKIT_FIELD_STORE")
        self.path = Path(path) if path else Path(default) if default else cache_root() / "field.db"
        self.created = not self.path.exists()
        if self.created and not create:
            raise EdgekitError(
                f"no field store at {self.path}: `edgekit field pull` creates it (with --store {self.path} "
                "if you meant this path), then `edgekit field report` reads it"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), isolation_level=None)
            if self.db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(DDL)
            columns = [r[1] for r in self.db.execute("PRAGMA table_info(cursors)")]
            if "after_annotation" not in columns:  # a store written by an earlier edgekit
                self.db.execute("ALTER TABLE cursors ADD COLUMN after_annotation INTEGER DEFAULT 0")
        except sqlite3.DatabaseError as e:
            raise EdgekitError(
                f"field store {self.path} is unreadable ({e}); it was left untouched. Move it aside "
                "to start a new one, or pass --store"
            ) from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> FieldStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    # -- writing -------------------------------------------------------------------
    def _device(
        self, store_id: str, name: str | None, info: dict[str, Any], transport: str | None, root: str | None
    ) -> None:
        self.db.execute(
            "INSERT INTO devices VALUES (?,?,?,?,?,?,?) ON CONFLICT(store_id) DO UPDATE SET name=excluded.name, "
            "hostname=excluded.hostname, machine=excluded.machine, transport=excluded.transport, root=excluded.root, "
            "last_pull=excluded.last_pull",
            (store_id, name, info.get("hostname"), info.get("machine"), transport, root, time.time()),
        )

    def cursor(self, store_id: str) -> tuple[int, int, float, int]:
        row = self.db.execute(
            "SELECT after_id, after_event, after_context, after_annotation FROM cursors WHERE store_id=?", (store_id,)
        ).fetchone()
        return row or (0, 0, 0.0, 0)

    def store_batch(self, batch: dict[str, Any], name: str | None, transport: str | None, root: str | None) -> int:
        """Write one pulled batch and move the cursor past it, atomically. Returns rows added."""
        sid = batch["store_id"]
        after_id, after_event, after_context, after_annotation = self.cursor(sid)
        recs, events, ctx = batch["records"], batch["events"], batch["context"]
        notes = batch.get("annotations", [])
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            self._device(sid, name, batch.get("device", {}), transport, root)
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [(sid, *r) for r in recs]
            )
            added = db.total_changes - before
            db.executemany("INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?,?)", [(sid, *e) for e in events])
            db.executemany("INSERT OR IGNORE INTO context VALUES (?,?,?,?,?)", [(sid, *c) for c in ctx])
            # Pre/post times an app reported later: applied to rows pulled before (or in this batch).
            db.executemany(
                "UPDATE records SET pre_ms=COALESCE(?, pre_ms), post_ms=COALESCE(?, post_ms) WHERE store_id=? AND id=?",
                [(n[2], n[3], sid, n[1]) for n in notes],
            )
            new = (
                recs[-1][0] if recs else after_id,
                events[-1][0] if events else after_event,
                ctx[-1][0] if ctx else after_context,
                notes[-1][0] if notes else after_annotation,
            )
            db.execute("INSERT OR REPLACE INTO cursors VALUES (?,?,?,?,?)", (sid, *new))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return added

    def record_lab(self, store_id: str, report: dict[str, Any]) -> None:
        lat = report["latency_ms"]
        self.db.execute(
            "INSERT OR REPLACE INTO lab VALUES (?,?,?,?,?,?,?)",
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


def open_store(spec: str | Path | None = None, create: bool = True) -> FieldStore | PgFieldStore:
    """The field store ``spec`` names: a ``postgresql://`` URL (the fleet's shared store) or a SQLite path;
    ``None``: ``EDGEKIT_FIELD_STORE``, else ``~/.cache/edgekit/field.db``."""
    spec = spec or os.environ.get("EDGEKIT_FIELD_STORE") or None
    if is_url(spec):
        return PgFieldStore(str(spec), create=create)
    return FieldStore(spec, create=create)


def pull(
    device: Device,
    store: FieldStore | PgFieldStore,
    name: str | None = None,
    batch_size: int = 5000,
    on_batch: Callable[[str, int], None] | None = None,
) -> dict[str, Any]:
    """Fetch everything ``device`` recorded since the last pull into ``store``."""
    if device.client is None:
        device.ensure_agent()
    health = device.call("reading the agent's state", device.client.health)
    tele = health.get("telemetry", {})
    if not tele.get("ok"):
        raise EdgekitError(
            f"{device.transport.description}: the device's telemetry store is not usable: {tele.get('error')}"
        )
    sid = tele["store_id"]
    name = name or health["device"]["hostname"]
    total = batches = 0
    t0 = time.perf_counter()
    while True:
        after_id, after_event, after_context, after_annotation = store.cursor(sid)
        path = (
            f"/v1/telemetry?after_id={after_id}&after_event={after_event}&after_context={after_context!r}"
            f"&after_annotation={after_annotation}&limit={batch_size}"
        )
        batch = device.call("pulling records", device.client.request, "GET", path)
        if batch["store_id"] != sid:
            raise EdgekitError(
                f"{device.transport.description}: the telemetry store changed during the pull; pull again"
            )
        if batch.get("oldest_id") and after_id and batch["oldest_id"] > after_id + 1:
            lost = batch["oldest_id"] - after_id - 1
            (on_batch or (lambda *a: None))("gap", lost)
        total += store.store_batch(batch, name, device.transport.description, device.root)
        batches += 1
        if on_batch:
            on_batch("batch", total)
        if not batch["more"]:
            break
    seconds = time.perf_counter() - t0
    return {
        "device": name,
        "store_id": sid,
        "added": total,
        "batches": batches,
        "seconds": round(seconds, 3),
        "records_per_s": round(total / seconds, 1) if seconds > 0 else None,
        "stored_total": store.count(),
    }


# -- reporting -------------------------------------------------------------------------
def parse_since(text: str | None) -> float | None:
    """``7d``, ``12h``, ``30m``, ``90s`` -> seconds."""
    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        return float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError):
        raise EdgekitError(f"bad --since {text!r}: use a number with s, m, h, d or w (e.g. 7d)") from None


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    if len(values) == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(values.mean())}


def _timeline(ts: np.ndarray, ms: np.ndarray, points: int = 60) -> list[dict[str, float]]:
    """p50/p99 in equal time buckets (at most ``points``)."""
    if len(ts) == 0:
        return []
    lo, hi = float(ts.min()), float(ts.max())
    width = max((hi - lo) / points, 0.05)
    idx = ((ts - lo) // width).astype(int)
    out = []
    order = np.argsort(idx, kind="stable")
    idx, ms_sorted = idx[order], ms[order]
    bounds = np.flatnonzero(np.diff(idx)) + 1
    for chunk_i, chunk_ms in zip(np.split(idx, bounds), np.split(ms_sorted, bounds)):
        p50, p99 = np.percentile(chunk_ms, [50, 99])
        out.append(
            {
                "t": lo + (int(chunk_i[0]) + 0.5) * width,
                "p50": float(p50),
                "p99": float(p99),
                "count": int(len(chunk_ms)),
            }
        )
    return out


def _histogram(ms: np.ndarray, bins: int = 40) -> dict[str, list[Any]]:
    if len(ms) == 0:
        return {"edges": [], "counts": []}
    lo, hi = max(float(ms.min()), 1e-3), max(float(ms.max()), 1e-3)
    edges = np.geomspace(lo * 0.999, hi * 1.001 if hi > lo else lo * 1.5, bins + 1)
    counts, _ = np.histogram(ms, edges)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def report(
    store: FieldStore | PgFieldStore,
    model: str | None = None,
    since: str | float | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Per device, model version and backend: field latency, throughput, errors, lab beside field, regressions.
    On PostgreSQL it is read from the store's rollups (see ``field_pg_report``)."""
    now = now or time.time()
    if isinstance(store, PgFieldStore):
        from .field_pg_report import report_pg

        return report_pg(store, model, since, now)
    where: list[str] = []
    args: list[Any] = []
    if model:
        where.append("model = ?")
        args.append(model)
    since_s = parse_since(since) if isinstance(since, str) else since
    if since_s:
        where.append("ts >= ?")
        args.append(now - since_s)
    sql = (
        "SELECT store_id, model, version, backend, accelerator, ts, infer_ms, queue_ms, outcome FROM records"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY store_id, model, version, ts"
    )
    rows = store.db.execute(sql, args).fetchall()
    devices = {
        r[0]: {"name": r[1], "hostname": r[2], "machine": r[3], "transport": r[4]}
        for r in store.db.execute("SELECT store_id, name, hostname, machine, transport FROM devices")
    }
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for r in rows:
        groups.setdefault(r[:3], []).append(r)
    entries = []
    per_model: dict[tuple[str, str], list[Any]] = {}
    for (sid, mdl, version), grp in groups.items():
        per_model.setdefault((sid, mdl), []).extend(g for g in grp if g[8] == "ok" and g[6] is not None)
        ts = np.array([g[5] for g in grp], dtype=np.float64)
        ok = np.array([g[8] == "ok" for g in grp])
        infer = np.array([g[6] if g[6] is not None else np.nan for g in grp], dtype=np.float64)
        queue = np.array([g[7] if g[7] is not None else np.nan for g in grp], dtype=np.float64)
        ok_ms = infer[ok & ~np.isnan(infer)]
        span = float(ts.max() - ts.min()) if len(ts) > 1 else 0.0
        backends = sorted({g[3] for g in grp if g[3]})
        accelerators = sorted({g[4] for g in grp if g[4]})
        lab = store.db.execute(
            "SELECT p50_ms, p99_ms, ts, report FROM lab WHERE store_id=? AND model=? AND version=? "
            "ORDER BY ts DESC LIMIT 1",
            (sid, mdl, version),
        ).fetchone()
        field = _percentiles(ok_ms)
        entry = {
            "device": devices.get(sid, {}).get("name", sid[:8]),
            "store_id": sid,
            "model": mdl,
            "version": version,
            "backend": ",".join(backends),
            "accelerator": ",".join(accelerators),
            "requests": len(grp),
            "ok": int(ok.sum()),
            "errors": int((~ok).sum()),
            "error_rate": float((~ok).mean()),
            "first_ts": float(ts.min()),
            "last_ts": float(ts.max()),
            "throughput_rps": ((len(grp) - 1) / span) if span > 0 else None,
            "latency_ms": field,
            "queue_ms": _percentiles(queue[ok & ~np.isnan(queue)]),
            "lab": {"p50_ms": lab[0], "p99_ms": lab[1], "ts": lab[2]} if lab else None,
            "drift": (field["p50"] / lab[0] - 1.0) if (lab and field["p50"]) else None,
            "lab_profile": json.loads(lab[3] or "{}").get("layer_profile") if lab else None,  # deploy --profile-layers
            "timeline": _timeline(ts[ok & ~np.isnan(infer)], ok_ms),
            "histogram": _histogram(ok_ms),
        }
        entries.append(entry)
    all_events = [
        dict(zip(("store_id", "ts", "kind", "model", "version", "detail"), e[:5] + (_detail(e[5]),)))
        for e in store.db.execute(
            "SELECT store_id, ts, kind, model, version, detail FROM events"
            " WHERE kind IN ('install', 'rollback', 'split', 'breaker') ORDER BY ts"
        )
        if not model or e[3] == model
    ]
    events = [e for e in all_events if not since_s or e["ts"] >= now - since_s]
    regressions = shares_and_regressions(entries, all_events)
    ctx = {}
    for sid, load1, mem, temp in store.db.execute(
        "SELECT store_id, AVG(load1), MIN(mem_available_mb), MAX(temp_c) FROM context GROUP BY store_id"
    ):
        ctx[devices.get(sid, {}).get("name", sid[:8])] = {
            "load1_avg": load1,
            "mem_available_mb_min": mem,
            "temp_c_max": temp,
        }
    timelines = []
    for (sid, mdl), grp in sorted(per_model.items()):
        ts = np.array([g[5] for g in grp], dtype=np.float64)
        ms = np.array([g[6] for g in grp], dtype=np.float64)
        timelines.append(
            {
                "store_id": sid,
                "device": devices.get(sid, {}).get("name", sid[:8]),
                "model": mdl,
                "points": _timeline(ts, ms),
            }
        )
    return {
        "schema": "edgekit.field-report",
        "schema_version": 1,
        "generated": now,
        "model": model,
        "since": since,
        "records": len(rows),
        "store": str(store.path),
        "entries": entries,
        "timelines": timelines,
        "regressions": regressions,
        "events": events,
        "device_context": ctx,
    }


def _detail(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None
