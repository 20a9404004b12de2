"""A fleet of devices: an inventory file, and deploy/bench on every device in parallel.

The inventory is TOML, one ``[[device]]`` table per device (and optional
``[defaults]`` applied to each)::

    [defaults]
    key = "~/.ssh/id_ed25519"

    [[device]]
    name = "pi-kitchen"
    url = "ssh://pi@10.0.0.5:22"        # ssh://, adb://SERIAL, serial:///dev/ttyUSB0?baud=115200, local://
    profile = "raspberrypi5"            # optional: default the bundle's
    tags = ["lab", "pi"]
    python = "/usr/bin/python3"         # optional: the profile's
    root = "/home/pi/.cache/edgekit/device"
    known_hosts = "fleet_known_hosts"   # host paths are relative to the inventory file
    connect_timeout = 10                # seconds to get the connection (ssh:// and serial:// devices)
    device_timeout = 120                # deadline for this device's whole deploy/bench

The inventory is read and validated by :mod:`edgekit.inventory`.

:func:`deploy_fleet` / :func:`bench_fleet` run every device in its own thread with its
own :class:`edgekit.deployer.Device`, at most ``jobs`` at a time. A device that misses
its deadline is abandoned (its connection is closed under it) and reported as
``timeout after N s at STEP``; it never holds up the others. Each device gives one row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import progress
from .errors import EdgekitError, TransportError
from .inventory import (  # noqa: F401  (the inventory's names, as edgekit.fleet has always offered them)
    SCHEMES,
    FleetDevice,
    InventoryError,
    load_inventory,
    parse_inventory,
    select,
)
from .transports import parse_url  # noqa: F401

if TYPE_CHECKING:
    from .device import Device
    from .profiles import Profile

Row = dict[str, Any]  # one device's result (see _row)
DEFAULT_JOBS = 8
DEFAULT_DEVICE_TIMEOUT = 300.0


# -- running -----------------------------------------------------------------------
class _Job:
    """One device's run, in its own thread; ``step`` says what it is doing now."""

    thread: threading.Thread
    deadline: float

    def __init__(self, fd: FleetDevice) -> None:
        self.fd = fd
        self.step = "waiting"
        self.device: Device | None = None
        self.abandoned = False
        self.row: Row | None = None
        self.started: float | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()

    def on_step(self, step: str) -> None:
        """The device's ``step`` hook: record the step; past the deadline, refuse to start it."""
        with self.lock:  # abandon() takes the lock too: past the deadline no new step starts (no commit)
            if self.abandoned:
                raise TransportError(f"given up after its deadline, before {step}")
            self.step = step

    def attach(self, device: Any) -> None:
        """The device this job works on, closed by :meth:`abandon`; an already abandoned job closes it now."""
        with self.lock:
            self.device = device
            abandoned = self.abandoned
        if abandoned:
            device.close()
            raise TransportError("abandoned after its deadline")

    def abandon(self) -> str:
        """Give the device up; return the step it was at. No further step starts on it; its connection is
        closed in a thread of its own (a serial line or an adb forward can take seconds to close)."""
        with self.lock:
            self.abandoned = True
            device = self.device
            step = self.step
        if device is not None:
            threading.Thread(
                target=_close_quietly, args=(device,), daemon=True, name=f"edgekit-fleet-close-{self.fd.name}"
            ).start()
        return step


def _close_quietly(device: Device) -> None:
    try:
        device.close()
    except Exception:  # closing under a running call: whatever it raises, the device is given up
        pass


def _row(
    fd: FleetDevice,
    status: str,
    seconds: float,
    step: str | None = None,
    error: str | None = None,
    report: dict[str, Any] | None = None,
    exit_code: int = 0,
) -> Row:
    r = report or {}
    lat = r.get("latency_ms") or {}
    return {
        "name": fd.name,
        "url": fd.url,
        "status": status,
        "step": step,
        "p50_ms": lat.get("p50"),
        "p90_ms": lat.get("p90"),
        "accelerator": r.get("accelerator"),
        "machine": (r.get("device") or {}).get("machine"),
        "deploy_seconds": r.get("deploy_seconds"),
        "seconds": round(seconds, 3),
        "bundle_id": r.get("bundle_id"),
        "error": error,
        "exit_code": exit_code,
        "warnings": list(r.get("warnings", [])),
    }


def _work(
    job: _Job, action: str, bundle_dir: str | Path, profile: Profile | None, backend: str, kwargs: dict[str, Any]
) -> None:
    from .deployer import bench, deploy, open_device

    fd = job.fd
    job.started = time.perf_counter()
    try:
        job.on_step("connecting")
        # local:// runs a tool-environment backend under its Python
        dev = open_device(
            fd.kind,
            fd.target,
            profile=fd.profile or profile,
            device_python=fd.python,
            device_root=fd.root,
            backend=backend if fd.kind == "local" else None,
            hooks={"step": [job.on_step]},
            **fd.options,
        )
        try:
            job.attach(dev)
            fn = deploy if action == "deploy" else bench
            report = fn(bundle_dir, dev, **kwargs)
        finally:
            dev.close()
        row = _row(fd, "ok", time.perf_counter() - job.started, report=report)
    except EdgekitError as e:
        row = _row(fd, "failed", time.perf_counter() - job.started, step=job.step, error=str(e), exit_code=e.exit_code)
    except Exception as e:  # a bug or an unexpected library error on one device must not take the fleet down
        row = _row(
            fd,
            "failed",
            time.perf_counter() - job.started,
            step=job.step,
            error=f"{type(e).__name__}: {e}",
            exit_code=1,
        )
    with job.lock:
        if not job.abandoned:
            job.row = row
    job.done.set()


def run_fleet(
    action: str,
    bundle_dir: str | Path,
    devices: list[FleetDevice],
    jobs: int = DEFAULT_JOBS,
    device_timeout: float | None = DEFAULT_DEVICE_TIMEOUT,
    on_row: Callable[[Row], None] | None = None,
    log: Callable[[str], Any] | None = None,
    **kwargs: Any,
) -> list[Row]:
    """Deploy (``action="deploy"``) or bench a bundle on ``devices``; return one row per device, in order.

    ``log``: a :class:`edgekit.progress.Progress` (or a plain ``log(message)``) that shows ``deploying to N
    devices`` advancing as each device finishes (``on_row`` sees the device's row first)."""
    from . import agent_package
    from . import bundle as bundle_mod
    from .cache import cache_root
    from .deployer import bundle_profile

    if action not in ("deploy", "bench"):
        raise ValueError(action)
    if jobs < 1:
        raise EdgekitError(f"--jobs must be at least 1, not {jobs}")
    if device_timeout is not None and device_timeout <= 0:
        raise EdgekitError(f"--device-timeout must be positive, not {device_timeout}")
    manifest = bundle_mod.load(bundle_dir)
    profile = bundle_profile(manifest)
    # Shared host-side state is prepared once, before the threads race for it.
    agent_package.build(cache_root() / "agent")
    try:  # each device records its lab benchmark in the field store: create it before they race to
        from .field import open_store

        open_store().close()
    except EdgekitError:
        pass

    pending = [_Job(fd) for fd in devices]
    running = []
    all_jobs = list(pending)
    cv = threading.Condition()

    def start(job: _Job) -> None:
        def target() -> None:
            _work(job, action, bundle_dir, profile, manifest["backend"], kwargs)
            with cv:
                cv.notify_all()

        job.thread = threading.Thread(target=target, daemon=True, name=f"edgekit-fleet-{job.fd.name}")
        job.deadline = time.monotonic() + (job.fd.device_timeout or device_timeout or float("inf"))
        job.thread.start()
        running.append(job)

    def emit(job: _Job) -> None:
        if on_row:
            on_row(job.row)  # type: ignore[arg-type]  # set before the job is emitted
        shown.advance()

    prog = progress.of(log)
    what = f"{'deploying to' if action == 'deploy' else 'benchmarking on'} {len(devices)} device(s)"
    with prog.step(what, total=len(devices)) as shown, cv:
        while pending or running:
            while pending and len(running) < jobs:
                start(pending.pop(0))
            now = time.monotonic()
            for job in list(running):
                if job.done.is_set() and job.row is not None:
                    running.remove(job)
                    emit(job)
                elif now >= job.deadline:
                    limit = job.fd.device_timeout or device_timeout
                    step = job.abandon()
                    error = f"timeout after {limit:g} s at step: {step}"
                    if "commit" in step:  # the request was sent before the deadline: it may have been carried out
                        error += " (the device may have switched to the new version: check with `edgekit models`)"
                    job.row = _row(
                        job.fd,
                        "timeout",
                        time.perf_counter() - (job.started or time.perf_counter()),
                        step=step,
                        error=error,
                        exit_code=4,
                    )
                    running.remove(job)
                    emit(job)
            if running:
                wait = min(j.deadline for j in running) - time.monotonic()
                cv.wait(timeout=max(0.01, min(wait, 0.5)))
    return [j.row for j in all_jobs]  # type: ignore[misc]  # every job has its row by now


def deploy_fleet(
    bundle_dir: str | Path,
    devices: list[FleetDevice],
    jobs: int = DEFAULT_JOBS,
    device_timeout: float | None = DEFAULT_DEVICE_TIMEOUT,
    on_row: Callable[[Row], None] | None = None,
    log: Callable[[str], Any] | None = None,
    **kwargs: Any,
) -> list[Row]:
    """Install and benchmark ``bundle_dir`` on every device (see :func:`edgekit.deployer.deploy` for kwargs)."""
    return run_fleet(
        "deploy", bundle_dir, devices, jobs=jobs, device_timeout=device_timeout, on_row=on_row, log=log, **kwargs
    )


def bench_fleet(
    bundle_dir: str | Path,
    devices: list[FleetDevice],
    jobs: int = DEFAULT_JOBS,
    device_timeout: float | None = DEFAULT_DEVICE_TIMEOUT,
    on_row: Callable[[Row], None] | None = None,
    log: Callable[[str], Any] | None = None,
    **kwargs: Any,
) -> list[Row]:
    """Benchmark ``bundle_dir`` where it is already deployed, on every device."""
    return run_fleet(
        "bench", bundle_dir, devices, jobs=jobs, device_timeout=device_timeout, on_row=on_row, log=log, **kwargs
    )


# -- results -----------------------------------------------------------------------
def summary(rows: list[Row], seconds: float | None = None) -> dict[str, Any]:
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "failed", "timeout")}
    out: dict[str, Any] = {"devices": len(rows), **counts}
    if seconds is not None:
        out["seconds"] = round(seconds, 3)
    return out


def exit_code(rows: list[Row]) -> int:
    """0 if every device is ok; else the code a single-device run gives for the first failed device."""
    for r in rows:
        if r["status"] != "ok":
            return r["exit_code"] or 1
    return 0


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def fleet_text(rows: list[Row], seconds: float | None = None) -> str:
    head = ("device", "url", "status", "p50 ms", "p90 ms", "accelerator", "deploy s", "total s", "step / error")
    table = []
    for r in rows:
        problem = (
            "" if r["status"] == "ok" else (r["error"] if r["status"] == "timeout" else f"at {r['step']}: {r['error']}")
        )
        table.append(
            (
                r["name"],
                r["url"],
                r["status"],
                _fmt(r["p50_ms"], ".3f"),
                _fmt(r["p90_ms"], ".3f"),
                r["accelerator"] or "-",
                _fmt(r["deploy_seconds"], ".2f"),
                _fmt(r["seconds"], ".2f"),
                problem.replace("\n", " "),
            )
        )
    widths = [max(len(str(x[i])) for x in [head] + table) for i in range(len(head) - 1)]
    lines = []
    for row in [head] + table:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    s = summary(rows, seconds)
    tail = f"{s['ok']}/{s['devices']} ok, {s['failed']} failed, {s['timeout']} timed out"
    if seconds is not None:
        tail += f" in {seconds:.1f} s"
    lines.append(tail)
    return "\n".join(line.rstrip() for line in lines) + "\n"


__all__ = [
    "FleetDevice",
    "InventoryError",
    "bench_fleet",
    "deploy_fleet",
    "exit_code",
    "fleet_text",
    "load_inventory",
    "parse_inventory",
    "parse_url",
    "run_fleet",
    "select",
    "summary",
]
