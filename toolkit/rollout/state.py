"""A rollout's state, in SQLite (``~/.cache/edgekit/rollouts.db``, ``EDGEKIT_ROLLOUT_STORE`` or ``--state``).

Every transition is written (and committed) before it is acted on: a device is marked ``installing`` with the
version it served before the install is sent, ``rolling-back`` before the rollback is sent, a wave's decision is
written before the next wave starts or the rollback begins. A host side killed at any point resumes from here;
each action it may repeat (an install of the version already served, a rollback to the version already served)
changes nothing on the device.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import cache_root
from ..errors import EdgekitError

DDL = """
CREATE TABLE IF NOT EXISTS rollouts(id TEXT PRIMARY KEY, bundle_id TEXT, bundle_dir TEXT, model TEXT,
    inventory TEXT, grp TEXT, waves TEXT, wave_specs TEXT, thresholds TEXT, status TEXT, wave INTEGER,
    reason TEXT, created REAL, updated REAL);
CREATE TABLE IF NOT EXISTS devices(rollout_id TEXT, name TEXT, wave INTEGER, state TEXT, old_version TEXT,
    installed_at REAL, error TEXT, updated REAL, PRIMARY KEY(rollout_id, name));
CREATE TABLE IF NOT EXISTS waves(rollout_id TEXT, idx INTEGER, started REAL, decision TEXT, reason TEXT,
    numbers TEXT, decided REAL, PRIMARY KEY(rollout_id, idx));
CREATE TABLE IF NOT EXISTS log(rollout_id TEXT, ts REAL, message TEXT);
"""
# rollout status
RUNNING, PAUSED, STOPPED, ABORTED, DONE = "running", "paused", "stopped", "aborted", "done"
# device states
PENDING, INSTALLING, INSTALLED, FAILED = "pending", "installing", "installed", "failed"
ROLLBACK, ROLLING_BACK, ROLLED_BACK = "rollback-pending", "rolling-back", "rolled-back"


@dataclass
class Rollout:
    """One rollout as stored: ``waves`` lists each wave's device names; ``wave`` is the wave being judged."""

    id: str
    bundle_id: str
    bundle_dir: str
    model: str
    inventory: str
    group: str | None
    waves: list[list[str]]
    wave_specs: str
    thresholds: dict[str, Any]
    status: str
    wave: int
    reason: str | None
    created: float
    updated: float
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """Nothing left to do: done, or stopped/aborted with every rollback delivered."""
        if self.status == DONE:
            return not any(d["state"] in (PENDING, INSTALLING) for d in self.devices.values())
        if self.status in (STOPPED, ABORTED):
            return not any(d["state"] in (ROLLBACK, ROLLING_BACK, INSTALLING) for d in self.devices.values())
        return False

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["finished"] = self.finished
        return d


class RolloutState:
    """The rollouts of this host. ``path``: the SQLite file (default under the cache root)."""

    def __init__(self, path: str | Path | None = None) -> None:
        default = os.environ.get("EDGEKIT_ROLLOUT_STORE")
        self.path = Path(path) if path else Path(default) if default else cache_root() / "rollouts.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(DDL)
        except sqlite3.DatabaseError as e:
            raise EdgekitError(
                f"rollout state {self.path} is unreadable ({e}); it was left untouched. Move it aside or pass --state"
            ) from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RolloutState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rollouts ------------------------------------------------------------------
    def create(self, r: Rollout) -> bool:
        """Store a new rollout with its devices pending; False (nothing written) if one with its id exists."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM rollouts WHERE id=?", (r.id,)).fetchone():
                db.execute("ROLLBACK")
                return False
            now = time.time()
            db.execute(
                "INSERT INTO rollouts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    r.id,
                    r.bundle_id,
                    r.bundle_dir,
                    r.model,
                    r.inventory,
                    r.group,
                    json.dumps(r.waves),
                    r.wave_specs,
                    json.dumps(r.thresholds),
                    r.status,
                    r.wave,
                    r.reason,
                    now,
                    now,
                ),
            )
            db.executemany(
                "INSERT INTO devices VALUES (?,?,?,?,?,?,?,?)",
                [(r.id, n, i, PENDING, None, None, None, now) for i, names in enumerate(r.waves) for n in names],
            )
            db.execute("INSERT INTO log VALUES (?,?,?)", (r.id, now, f"started: {len(r.waves)} wave(s)"))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return True

    def ids(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT id FROM rollouts ORDER BY created")]

    def get(self, rollout_id: str) -> Rollout:
        row = self.db.execute("SELECT * FROM rollouts WHERE id=?", (rollout_id,)).fetchone()
        if row is None:
            known = self.ids()
            raise EdgekitError(
                f"no rollout {rollout_id!r} in {self.path}"
                + (f"; known: {', '.join(known)}" if known else "; `edgekit rollout start` makes one")
            )
        r = Rollout(
            id=row[0],
            bundle_id=row[1],
            bundle_dir=row[2],
            model=row[3],
            inventory=row[4],
            group=row[5],
            waves=json.loads(row[6]),
            wave_specs=row[7],
            thresholds=json.loads(row[8]),
            status=row[9],
            wave=row[10],
            reason=row[11],
            created=row[12],
            updated=row[13],
        )
        for name, wave, state, old, at, error, updated in self.db.execute(
            "SELECT name, wave, state, old_version, installed_at, error, updated FROM devices WHERE rollout_id=? "
            "ORDER BY wave, name",
            (rollout_id,),
        ):
            r.devices[name] = {
                "wave": wave,
                "state": state,
                "old_version": old,
                "installed_at": at,
                "error": error,
                "updated": updated,
            }
        for idx, started, decision, reason, numbers, decided in self.db.execute(
            "SELECT idx, started, decision, reason, numbers, decided FROM waves WHERE rollout_id=? ORDER BY idx",
            (rollout_id,),
        ):
            r.decisions.append(
                {
                    "wave": idx,
                    "started": started,
                    "decision": decision,
                    "reason": reason,
                    "numbers": json.loads(numbers) if numbers else None,
                    "decided": decided,
                }
            )
        return r

    def log(self, rollout_id: str, limit: int = 50) -> list[tuple[float, str]]:
        rows = self.db.execute(
            "SELECT ts, message FROM log WHERE rollout_id=? ORDER BY ts DESC, rowid DESC LIMIT ?", (rollout_id, limit)
        ).fetchall()
        return list(reversed(rows))

    # -- transitions (each one committed before it is acted on) ---------------------
    def _write(self, rollout_id: str, message: str | None, sql: str, args: tuple[Any, ...]) -> bool:
        """Run one change with its log line in one transaction; False (nothing written) if it changed no row."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            if db.execute(sql, args).rowcount == 0:
                db.execute("ROLLBACK")
                return False
            db.execute("UPDATE rollouts SET updated=? WHERE id=?", (now, rollout_id))
            if message:
                db.execute("INSERT INTO log VALUES (?,?,?)", (rollout_id, now, message))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return True

    def set_status(self, rollout_id: str, status: str, reason: str | None = None, expect: str | None = None) -> bool:
        """``expect``: only if the rollout is in that status (a pause or an abort given meanwhile wins)."""
        return self._write(
            rollout_id,
            f"{status}" + (f": {reason}" if reason else ""),
            "UPDATE rollouts SET status=?, reason=COALESCE(?, reason) WHERE id=? AND status=COALESCE(?, status)",
            (status, reason, rollout_id, expect),
        )

    def set_wave(self, rollout_id: str, wave: int, expect: str | None = None) -> bool:
        return self._write(
            rollout_id,
            f"wave {wave + 1} begins",
            "UPDATE rollouts SET wave=? WHERE id=? AND status=COALESCE(?, status)",
            (wave, rollout_id, expect),
        )

    def set_device(
        self,
        rollout_id: str,
        name: str,
        state: str,
        old_version: str | None = None,
        installed_at: float | None = None,
        error: str | None = None,
    ) -> None:
        """A device's new state; ``old_version``/``installed_at`` are kept when not given, ``error`` is replaced."""
        self._write(
            rollout_id,
            f"{name}: {state}" + (f" ({error})" if error else ""),
            "UPDATE devices SET state=?, old_version=COALESCE(?, old_version), "
            "installed_at=COALESCE(?, installed_at), error=?, updated=? WHERE rollout_id=? AND name=?",
            (state, old_version, installed_at, error, time.time(), rollout_id, name),
        )

    def start_wave(self, rollout_id: str, wave: int, started: float) -> None:
        """The wave's soak starts at ``started`` (its first install); kept if already set."""
        self._write(
            rollout_id,
            None,
            "INSERT INTO waves(rollout_id, idx, started) VALUES (?,?,?) ON CONFLICT(rollout_id, idx) DO UPDATE SET "
            "started=COALESCE(waves.started, excluded.started)",
            (rollout_id, wave, started),
        )

    def decide(self, rollout_id: str, wave: int, decision: str, reason: str, numbers: dict[str, Any]) -> None:
        """The wave's latest gate result (``wait`` is overwritten by the next check; the log keeps the final ones)."""
        self._write(
            rollout_id,
            f"wave {wave + 1}: {decision}: {reason}" if decision != "wait" else None,
            "INSERT INTO waves VALUES (?,?,?,?,?,?,?) ON CONFLICT(rollout_id, idx) DO UPDATE SET "
            "decision=excluded.decision, reason=excluded.reason, numbers=excluded.numbers, decided=excluded.decided",
            (rollout_id, wave, None, decision, reason, json.dumps(numbers), time.time()),
        )


__all__ = [
    "ABORTED",
    "DONE",
    "FAILED",
    "INSTALLED",
    "INSTALLING",
    "PAUSED",
    "PENDING",
    "ROLLBACK",
    "ROLLED_BACK",
    "ROLLING_BACK",
    "RUNNING",
    "STOPPED",
    "Rollout",
    "RolloutState",
]
