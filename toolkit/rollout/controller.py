"""The rollout controller: :meth:`Controller.step` is one idempotent pass (install the current wave's pending
devices, pull their field data, judge the wave, proceed or roll back with the reason); :meth:`Controller.run`
loops it until the rollout is decided. Everything it knows is in :class:`edgekit.rollout.state.RolloutState`, so a
new controller on the same state file (a restarted host) continues where the last one was.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import EdgekitError, TransportError
from ..inventory import FleetDevice, load_inventory
from . import gate, plan
from . import state as st
from .delivery import Delivery, DirectDelivery

NO_VERSION = ""  # stored as a device's old version when it served no version of the model


def rollout_id(bundle_id: str, inventory: str | Path, group: str | None) -> str:
    """The same bundle to the same group of the same inventory is the same rollout."""
    key = f"{bundle_id}\0{Path(inventory).resolve()}\0{group or ''}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def start(
    state: st.RolloutState,
    bundle_dir: str | Path,
    inventory: str | Path,
    group: str | None = None,
    waves: str | Sequence[plan.WaveSpec] = "1%,10%,50%,100%",
    thresholds: gate.Thresholds | None = None,
) -> tuple[st.Rollout, bool]:
    """Create the rollout of ``bundle_dir`` to the devices of ``inventory`` tagged ``group`` (all if None), or
    find the one already made for them. Returns ``(rollout, created)``; nothing is sent to a device here."""
    from .. import bundle as bundle_mod

    specs = plan.parse_waves(waves) if isinstance(waves, str) else list(waves)
    manifest = bundle_mod.load(bundle_dir)
    devices = load_inventory(inventory, tag=group)
    rid = rollout_id(manifest["id"], inventory, group)
    r = st.Rollout(
        id=rid,
        bundle_id=manifest["id"],
        bundle_dir=str(Path(bundle_dir).resolve()),
        model=manifest["name"],
        inventory=str(Path(inventory).resolve()),
        group=group,
        waves=plan.effective_waves([d.name for d in devices], rid, specs),
        wave_specs=",".join(str(s) for s in specs),
        thresholds=(thresholds or gate.Thresholds()).to_dict(),
        status=st.RUNNING,
        wave=0,
        reason=None,
        created=time.time(),
        updated=time.time(),
    )
    created = state.create(r)
    return state.get(rid), created


class Controller:
    """Drives one rollout. ``delivery``: how devices are reached (default: the direct path); ``field_store``: the
    field store's path (default: the usual one); ``now``: the clock (tests)."""

    def __init__(
        self,
        state: st.RolloutState,
        rollout_id: str,
        delivery: Delivery | None = None,
        field_store: str | Path | None = None,
        log: Callable[[str], Any] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.state, self.id = state, rollout_id
        self.rollout = state.get(rollout_id)
        self._delivery = delivery
        self.field_store = field_store
        self.log = log or (lambda message: None)
        self.now = now
        self.thresholds = gate.Thresholds(**self.rollout.thresholds)
        self._lock: int | None = None
        self._progress = False  # whether the last step changed anything on a device or decided a wave

    @property
    def delivery(self) -> Delivery:
        """The delivery, made on first use (pausing reaches no device)."""
        if self._delivery is None:
            self._delivery = DirectDelivery(self.rollout.bundle_dir)
        return self._delivery

    # -- commands --------------------------------------------------------------------
    def pause(self) -> st.Rollout:
        if not self.state.set_status(self.id, st.PAUSED, "paused by the user", expect=st.RUNNING):
            status = self.state.get(self.id).status
            raise EdgekitError(f"rollout {self.id} is {status}, not running: nothing to pause")
        return self.state.get(self.id)

    def resume(self) -> st.Rollout:
        """A paused rollout runs again; any other keeps its status (``run`` then delivers what is still owed)."""
        self.state.set_status(self.id, st.RUNNING, "resumed", expect=st.PAUSED)
        return self.state.get(self.id)

    def abort(self) -> st.Rollout:
        """Stop the rollout and roll back every device that got the bundle (now, or when it is back)."""
        aborted = any(
            self.state.set_status(self.id, st.ABORTED, "aborted by the user", expect=s) for s in (st.RUNNING, st.PAUSED)
        )
        if not aborted:
            raise EdgekitError(f"rollout {self.id} is already {self.state.get(self.id).status}: nothing to abort")
        try:
            self._hold()
        except EdgekitError:  # a running controller rolls back at its next step
            return self.state.get(self.id)
        try:
            return self.step()
        finally:
            self._release()

    # -- the loop ----------------------------------------------------------------------
    def run(self, interval: float = 10.0, timeout: float | None = None) -> st.Rollout:
        """Step until the rollout is decided (done, stopped or aborted) and no reachable device is owed an action,
        or it is paused, or ``timeout`` seconds passed. Devices still offline are served by a later ``run``."""
        self._hold()
        try:
            end = None if timeout is None else time.monotonic() + timeout
            while True:
                r = self.step()
                if r.finished or r.status == st.PAUSED or (r.status != st.RUNNING and not self._progress):
                    return r
                if end is not None and time.monotonic() >= end:
                    return r
                time.sleep(interval)
        finally:
            self._release()

    def step(self) -> st.Rollout:
        """One pass; returns the rollout as it is afterwards."""
        self._progress = False
        try:
            r = self.state.get(self.id)
            if r.status == st.RUNNING:
                self._install_due(r)
                self._judge(self.state.get(self.id))
            r = self.state.get(self.id)
            if r.status in (st.STOPPED, st.ABORTED):
                self._roll_back(r)
            elif r.status == st.DONE:
                self._install_due(r)  # devices that were offline during their wave
        finally:
            if self._delivery is not None:
                self._delivery.close()
        self.rollout = self.state.get(self.id)
        return self.rollout

    # -- installing ----------------------------------------------------------------------
    def _inventory(self, r: st.Rollout) -> dict[str, FleetDevice]:
        return {d.name: d for d in load_inventory(r.inventory, tag=r.group)}

    def _reach(
        self, r: st.Rollout, name: str, fleet: dict[str, FleetDevice], owed: str | None = None
    ) -> FleetDevice | None:
        """The device if it can be worked on now; else None, its state set to ``owed`` (default: kept) with why."""
        fd = fleet.get(name)
        why = None
        if fd is None:
            why = f"no longer in {r.inventory}" + (f" with tag {r.group!r}" if r.group else "")
        elif not self.delivery.reachable(fd):
            why = f"unreachable: {self.delivery.why(fd)}"
        if why is None:
            return fd
        d = r.devices[name]
        if d["error"] != why or (owed and d["state"] != owed):
            self.state.set_device(self.id, name, owed or d["state"], error=why)
            self.log(f"{name}: {why}")
        return None

    def _install_due(self, r: st.Rollout) -> None:
        due = [n for n, d in r.devices.items() if d["wave"] <= r.wave and d["state"] in (st.PENDING, st.INSTALLING)]
        if not due:
            return
        fleet = self._inventory(r)
        for name in due:
            fd = self._reach(r, name, fleet)
            if fd is None:
                continue
            try:
                if r.devices[name]["state"] == st.PENDING:  # what it served before, written before the install
                    old = self.delivery.current(fd, r.model)
                    self.state.set_device(self.id, name, st.INSTALLING, old_version=old or NO_VERSION)
                self.log(f"{name}: installing {r.bundle_id}")
                self.delivery.install(fd, r.bundle_dir)
            except TransportError as e:  # tried again on the next step
                self.state.set_device(self.id, name, st.INSTALLING, error=str(e))
                continue
            except EdgekitError as e:
                self.state.set_device(self.id, name, st.FAILED, error=str(e))
                self.log(f"{name}: install failed: {e}")
                continue
            now = self.now()
            self.state.set_device(self.id, name, st.INSTALLED, installed_at=now)
            self._progress = True
            if r.devices[name]["wave"] == r.wave:
                self.state.start_wave(self.id, r.wave, now)

    # -- judging -------------------------------------------------------------------------
    def _judge(self, r: st.Rollout) -> None:
        from ..field import FieldStore, report

        wave = [n for n in r.waves[r.wave]]
        failed = [n for n in wave if r.devices[n]["state"] == st.FAILED]
        if failed:
            reason = "; ".join(f"install failed on {n}: {r.devices[n]['error']}" for n in failed)
            return self._stop(r, reason, {"failed": failed})
        installed = [n for n in wave if r.devices[n]["state"] == st.INSTALLED]
        if not installed:
            self.state.decide(self.id, r.wave, gate.WAIT, "no device of this wave has the bundle yet", {})
            return None
        # the soak runs from the wave's first install (kept with the wave; else the devices' own times)
        started = next((d["started"] for d in r.decisions if d["wave"] == r.wave and d["started"]), None)
        if started is None:
            started = min(r.devices[n]["installed_at"] or self.now() for n in installed)
            self.state.start_wave(self.id, r.wave, started)
        fleet = self._inventory(r)
        with FieldStore(self.field_store) as store:
            for name in installed:
                fd = self._reach(r, name, fleet)
                if fd is not None:
                    try:
                        self.delivery.collect(fd, store)
                    except EdgekitError as e:  # judged on what was pulled before
                        self.log(f"{name}: field data not pulled: {e}")
            rep = report(store, model=r.model)
        olds = {n: (r.devices[n]["old_version"] or None) for n in installed}
        per = gate.wave_numbers(rep, r.model, r.bundle_id, olds)
        verdict = gate.judge(per, self.now() - started, self.thresholds)
        if verdict.decision == gate.STOP:
            return self._stop(r, verdict.reason, verdict.numbers)
        self.state.decide(self.id, r.wave, verdict.decision, verdict.reason, verdict.numbers)
        if verdict.decision == gate.PROCEED:
            self._progress = True
            self.log(f"wave {r.wave + 1}/{len(r.waves)}: proceed: {verdict.reason}")
            if r.wave + 1 < len(r.waves):
                self.state.set_wave(self.id, r.wave + 1, expect=st.RUNNING)
            else:
                self.state.set_status(self.id, st.DONE, f"all {len(r.waves)} waves passed", expect=st.RUNNING)
        return None

    def _stop(self, r: st.Rollout, reason: str, numbers: dict[str, Any]) -> None:
        self.state.decide(self.id, r.wave, gate.STOP, reason, numbers)
        self.log(f"wave {r.wave + 1}/{len(r.waves)}: stop: {reason}")
        self.state.set_status(self.id, st.STOPPED, f"wave {r.wave + 1}: {reason}", expect=st.RUNNING)

    # -- rolling back ----------------------------------------------------------------------
    def _roll_back(self, r: st.Rollout) -> None:
        """Every device that got (or may have got) the bundle goes back to what it served before; devices never
        reached are left alone."""
        owed = [
            n for n, d in r.devices.items() if d["state"] in (st.INSTALLED, st.INSTALLING, st.ROLLBACK, st.ROLLING_BACK)
        ]
        if not owed:
            return
        fleet = self._inventory(r)
        for name in owed:
            fd = self._reach(r, name, fleet, owed=st.ROLLBACK)
            if fd is None:
                continue
            to = r.devices[name]["old_version"] or None
            self.state.set_device(self.id, name, st.ROLLING_BACK)
            self.log(f"{name}: rolling back to {to or 'no version'}")
            try:
                self.delivery.rollback(fd, r.model, to)
            except EdgekitError as e:
                self.state.set_device(self.id, name, st.ROLLBACK, error=str(e))
                continue
            self.state.set_device(self.id, name, st.ROLLED_BACK)
            self._progress = True

    # -- one controller per rollout at a time -------------------------------------------------
    def _hold(self) -> None:
        path = f"{self.state.path}.{self.id}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise EdgekitError(
                f"rollout {self.id} is being run by process {holder}: stop it, or use `edgekit rollout status`"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock = fd

    def _release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


__all__ = ["Controller", "rollout_id", "start"]
