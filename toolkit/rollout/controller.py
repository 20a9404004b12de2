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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import EdgekitError, TransportError
from ..inventory import FleetDevice, load_inventory
from . import gate, plan
from . import state as st
from .delivery import Delivery, DirectDelivery
from .mqtt import MqttDelivery, devices_in, fleet_device, parse_source

NO_VERSION = ""  # stored as a device's old version when it served no version of the model


def rollout_id(bundle_id: str, inventory: str | Path, group: str | None) -> str:
    """The same bundle to the same group of the same inventory is the same rollout."""
    where = inventory if parse_source(str(inventory)) else Path(inventory).resolve()
    key = f"{bundle_id}\0{where}\0{group or ''}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def start(
    state: st.RolloutState,
    bundle_dir: str | Path,
    inventory: str | Path,
    group: str | None = None,
    waves: str | Sequence[plan.WaveSpec] = "1%,10%,50%,100%",
    thresholds: gate.Thresholds | None = None,
    broker: Any = None,
) -> tuple[st.Rollout, bool]:
    """Create the rollout of ``bundle_dir`` to the devices of ``inventory`` tagged ``group`` (all if None), or
    find the one already made for them. Returns ``(rollout, created)``; nothing is sent to a device here.
    ``inventory`` may be an MQTT source (:func:`edgekit.rollout.mqtt.source_url`): the devices are then those whose
    retained state lists ``group`` (``broker``: the open :class:`edgekit.fleet_pull.broker.Broker` to ask)."""
    from .. import bundle as bundle_mod

    specs = plan.parse_waves(waves) if isinstance(waves, str) else list(waves)
    manifest = bundle_mod.load(bundle_dir)
    source = parse_source(str(inventory))
    if source is not None:
        if broker is None:
            raise EdgekitError("a rollout over MQTT needs the broker to list its devices")
        devices = [fleet_device(n, source["broker"]) for n in devices_in(broker, group)]
    else:
        devices = load_inventory(inventory, tag=group)
    rid = rollout_id(manifest["id"], inventory, group)
    r = st.Rollout(
        id=rid,
        bundle_id=manifest["id"],
        bundle_dir=str(Path(bundle_dir).resolve()),
        model=manifest["name"],
        inventory=str(inventory) if source else str(Path(inventory).resolve()),
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
    field store's path (default: the usual one); ``now``: the clock (tests); ``jobs``: devices worked on at once."""

    def __init__(
        self,
        state: st.RolloutState,
        rollout_id: str,
        delivery: Delivery | None = None,
        field_store: str | Path | None = None,
        log: Callable[[str], Any] | None = None,
        now: Callable[[], float] = time.time,
        jobs: int = 8,
    ) -> None:
        self.state, self.id = state, rollout_id
        self.rollout = state.get(rollout_id)
        self._delivery = delivery
        self.field_store = field_store
        self.log = log or (lambda message: None)
        self.now = now
        self.thresholds = gate.Thresholds(**self.rollout.thresholds)
        self._lock: int | None = None
        if jobs < 1:
            raise EdgekitError(f"--jobs must be at least 1, not {jobs}")
        self.jobs = jobs  # devices worked on at once
        self._progress = False  # whether the last step changed anything on a device or decided a wave

    @property
    def delivery(self) -> Delivery:
        """The delivery, made on first use (pausing reaches no device)."""
        if self._delivery is None:
            source = parse_source(self.rollout.inventory)
            if source is not None:
                self._delivery = MqttDelivery(source["broker"], source["store"], source["store_url"], source["fleet"])
            else:
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
        source = parse_source(r.inventory)
        if source is not None:  # devices named by their broker ids, fixed at the start
            return {n: fleet_device(n, source["broker"]) for n in r.devices}
        return {d.name: d for d in load_inventory(r.inventory, tag=r.group)}

    def _each(self, names: Sequence[str], fn: Callable[[str], Any]) -> dict[str, Any]:
        """``fn(name)`` for each name, ``jobs`` at a time; the result, or the exception it raised, per name. Only
        device work runs in the threads: the state is written by the caller, in this thread."""

        def call(name: str) -> Any:
            try:
                return fn(name)
            except Exception as e:  # handed back to the caller, which records it against the device
                return e

        if len(names) <= 1 or self.jobs <= 1:
            return {n: call(n) for n in names}
        with ThreadPoolExecutor(max_workers=min(self.jobs, len(names)), thread_name_prefix="edgekit-rollout") as ex:
            return dict(zip(names, ex.map(call, names)))

    def _reach(
        self, r: st.Rollout, names: Sequence[str], fleet: dict[str, FleetDevice], owed: str | None = None
    ) -> dict[str, FleetDevice]:
        """The devices that can be worked on now; the others keep their state (or get ``owed``), with why."""
        scope = f"{r.inventory}" + (f" with tag {r.group!r}" if r.group else "")
        seen = self._each(names, lambda n: self.delivery.reachable(fleet[n]))  # KeyError: not in the inventory
        out = {}
        for name in names:
            if seen[name] is True:
                out[name] = fleet[name]
                continue
            if isinstance(seen[name], KeyError):
                why = f"no longer in {scope}"
            elif isinstance(seen[name], Exception):
                why = f"unreachable: {type(seen[name]).__name__}: {seen[name]}"
            else:
                why = f"unreachable: {self.delivery.why(fleet[name])}"
            d = r.devices[name]
            if d["error"] != why or (owed and d["state"] != owed):
                self.state.set_device(self.id, name, owed or d["state"], error=why)
                self.log(f"{name}: {why}")
        return out

    def _record_failure(self, name: str, e: Exception, retry_state: str, what: str) -> None:
        """A transport error is tried again at the next step (state ``retry_state``); anything else fails it."""
        if isinstance(e, TransportError):
            self.state.set_device(self.id, name, retry_state, error=str(e))
        else:
            text = str(e) if isinstance(e, EdgekitError) else f"{type(e).__name__}: {e}"
            self.state.set_device(self.id, name, st.FAILED if what == "install" else retry_state, error=text)
            self.log(f"{name}: {what} failed: {text}")

    def _install_due(self, r: st.Rollout) -> None:
        due = [n for n, d in r.devices.items() if d["wave"] <= r.wave and d["state"] in (st.PENDING, st.INSTALLING)]
        if not due:
            return
        reached = self._reach(r, due, self._inventory(r))
        fresh = [n for n in reached if r.devices[n]["state"] == st.PENDING]
        served = self._each(fresh, lambda n: self.delivery.current(reached[n], r.model))
        ready = [n for n in reached if n not in served]
        for name in fresh:  # what it served before, written before the install
            if isinstance(served[name], Exception):
                self._record_failure(name, served[name], st.PENDING, "install")
                continue
            self.state.set_device(self.id, name, st.INSTALLING, old_version=served[name] or NO_VERSION)
            ready.append(name)
        for name in ready:
            self.log(f"{name}: installing {r.bundle_id}")
        done = self._each(ready, lambda n: self.delivery.install(reached[n], r.bundle_dir))
        for name in ready:
            if isinstance(done[name], Exception):
                self._record_failure(name, done[name], st.INSTALLING, "install")
                continue
            now = self.now()
            self.state.set_device(self.id, name, st.INSTALLED, installed_at=now)
            self._progress = True
            if r.devices[name]["wave"] == r.wave:
                self.state.start_wave(self.id, r.wave, now)

    # -- judging -------------------------------------------------------------------------
    def _judge(self, r: st.Rollout) -> None:
        from ..field import FieldStore, open_store, report
        from ..field_pg import is_url

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
        reached = self._reach(r, installed, self._inventory(r))
        fs = self.field_store
        with open_store(str(fs)) if fs and is_url(str(fs)) else FieldStore(fs) as store:
            for name, fd in reached.items():
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
        reached = self._reach(r, owed, self._inventory(r), owed=st.ROLLBACK)
        for name in reached:  # written before the rollbacks are sent
            to = r.devices[name]["old_version"] or None
            self.state.set_device(self.id, name, st.ROLLING_BACK)
            self.log(f"{name}: rolling back to {to or 'no version'}")
        done = self._each(
            list(reached), lambda n: self.delivery.rollback(reached[n], r.model, r.devices[n]["old_version"] or None)
        )
        for name in reached:
            if isinstance(done[name], Exception):
                self._record_failure(name, done[name], st.ROLLBACK, "rollback")
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
