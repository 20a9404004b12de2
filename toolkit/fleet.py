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

:func:`deploy_fleet` / :func:`bench_fleet` run every device in its own thread with its
own :class:`edgekit.deployer.Device`, at most ``jobs`` at a time. A device that misses
its deadline is abandoned (its connection is closed under it) and reported as
``timeout after N s at STEP``; it never holds up the others. Each device gives one row.
"""

import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import EdgekitError, TransportError
from .transports import MODULES, all_transports, parse_url, transport_class

SCHEMES = {kind: kind for kind in MODULES}  # the URL schemes: one per transport kind (edgekit.transports.parse_url)
FIELDS = {
    "name": str,
    "url": str,
    "profile": str,
    "tags": list,
    "python": str,
    "root": str,
    # a transport's options a device entry carries (host paths: key, known_hosts, ssh_config), from its Flags
    **{f.inventory: str for cls in all_transports().values() for f in cls.flags if f.inventory},
    "connect_timeout": (int, float),
    "device_timeout": (int, float),
}
DEFAULTS_FIELDS = set(FIELDS) - {"name", "url"}
HOST_PATHS = tuple(f.inventory for cls in all_transports().values() for f in cls.flags if f.inventory)
Row = dict[str, Any]  # one device's result (see _row)
DEFAULT_JOBS = 8
DEFAULT_DEVICE_TIMEOUT = 300.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class InventoryError(EdgekitError):
    """The fleet inventory file is missing, not TOML, or has a bad entry."""


class FleetDevice:
    """One inventory entry, validated: where the device is and how to reach it."""

    def __init__(
        self,
        name: str,
        url: str,
        kind: str,
        target: str | None,
        options: dict[str, Any],
        profile: str | None = None,
        tags: Iterable[str] = (),
        python: str | None = None,
        root: str | None = None,
        device_timeout: float | None = None,
    ) -> None:
        self.name, self.url, self.kind, self.target, self.options = name, url, kind, target, dict(options)
        self.profile, self.tags, self.python, self.root = profile, list(tags), python, root
        self.device_timeout = device_timeout

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "kind": self.kind,
            "target": self.target,
            "profile": self.profile,
            "tags": self.tags,
            "python": self.python,
            "root": self.root,
            "device_timeout": self.device_timeout,
        }

    def __repr__(self):
        return f"<FleetDevice {self.name} {self.url}>"


# -- inventory ----------------------------------------------------------------------
def _check_fields(where, entry, allowed, path):
    for key, value in entry.items():
        if key not in allowed:
            raise InventoryError(f"{path}: {where}: unknown field {key!r}; allowed: {', '.join(sorted(allowed))}")
        want = FIELDS[key]
        if isinstance(value, bool) or not isinstance(value, want):
            kind = {str: "a string", list: "a list of strings"}.get(want, "a number of seconds")
            raise InventoryError(f"{path}: {where}: field {key!r} must be {kind}, not {value!r}")
        if key == "tags" and not all(isinstance(t, str) and t for t in value):
            raise InventoryError(f"{path}: {where}: field 'tags' must be a list of non-empty strings, not {value!r}")
        if key in ("connect_timeout", "device_timeout") and value <= 0:
            raise InventoryError(f"{path}: {where}: field {key!r} must be positive, not {value!r}")


def parse_inventory(
    data: dict[str, Any], path: str = "inventory", base_dir: str | Path | None = None
) -> list[FleetDevice]:
    """Validate an already-parsed inventory (a dict); return a list of :class:`FleetDevice`."""
    from . import profiles

    unknown = set(data) - {"device", "defaults"}
    if unknown:
        raise InventoryError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
            "an inventory has [[device]] entries and an optional [defaults] table"
        )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise InventoryError(f"{path}: [defaults] must be a table")
    _check_fields("[defaults]", defaults, DEFAULTS_FIELDS, path)
    entries = data.get("device")
    if not entries:
        raise InventoryError(f"{path}: no devices; add [[device]] entries with name and url")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InventoryError(f"{path}: 'device' must be an array of tables: write each as [[device]]")
    base_dir = Path(base_dir) if base_dir else Path(".")
    devices: list[FleetDevice] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        where = f"device #{i}" + (f" ({entry['name']!r})" if isinstance(entry.get("name"), str) else "")
        _check_fields(where, entry, set(FIELDS), path)
        for required in ("name", "url"):
            if required not in entry:
                raise InventoryError(f"{path}: {where}: missing field {required!r}")
        name = entry["name"]
        if not _NAME.match(name):
            raise InventoryError(
                f"{path}: {where}: field 'name' must be letters, digits, '.', '_' or '-' "
                f"(starting with a letter or digit), not {name!r}"
            )
        if name in seen:
            raise InventoryError(f"{path}: {where}: name {name!r} is already used by device #{seen[name]}")
        seen[name] = i
        e = dict(defaults)
        e.update(entry)
        try:
            kind, target, options = parse_url(e["url"])
        except ValueError as err:
            raise InventoryError(f"{path}: {where}: field 'url': {err}") from None
        if e.get("profile"):
            prof = e["profile"]
            if not (prof in profiles.names() or (prof.endswith(".toml") and (base_dir / prof).is_file())):
                raise InventoryError(
                    f"{path}: {where}: field 'profile': unknown profile {prof!r}; "
                    f"known: {', '.join(sorted(profiles.names()))}"
                )
            if prof.endswith(".toml"):
                e["profile"] = str(base_dir / prof)
        for key in HOST_PATHS:
            if key in e:
                p = Path(os.path.expanduser(e[key]))
                p = p if p.is_absolute() else base_dir / p
                if not (p.exists() if key == "ssh_config" else p.is_file()):  # ssh_config may be /dev/null
                    raise InventoryError(f"{path}: {where}: field {key!r}: no such file {p}")
                e[key] = str(p)
        cls = transport_class(kind)
        own = {f.inventory: f.key for f in cls.flags if f.inventory}
        foreign = [k for k in HOST_PATHS if k in entry and k not in own]
        if foreign:
            owners = [
                f"{c.name}://" for c in all_transports().values() if any(f.inventory == foreign[0] for f in c.flags)
            ]
            raise InventoryError(
                f"{path}: {where}: field {foreign[0]!r} applies to {' and '.join(owners)} devices only"
            )
        if "connect_timeout" in entry and not cls.connect_timeout:  # from [defaults] it applies where it can
            timed = [f"{c.name}://" for c in all_transports().values() if c.connect_timeout]
            raise InventoryError(
                f"{path}: {where}: field 'connect_timeout' applies to {' and '.join(timed)} devices "
                f"only ({cls.no_connect_timeout}); use device_timeout to bound the whole run"
            )
        options.update({key: e.get(field) for field, key in own.items()})
        if cls.connect_timeout and "connect_timeout" in e:
            options[cls.connect_timeout] = float(e["connect_timeout"])
        devices.append(
            FleetDevice(
                name,
                e["url"],
                kind,
                target,
                options,
                profile=e.get("profile"),
                tags=e.get("tags", []),
                python=e.get("python"),
                root=e.get("root"),
                device_timeout=e.get("device_timeout"),
            )
        )
    return devices


def load_inventory(path: str | Path, tag: str | None = None) -> list[FleetDevice]:
    """Read and validate a TOML inventory; keep only devices tagged ``tag`` (all if None)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise InventoryError(f"fleet inventory {path} does not exist") from None
    except OSError as e:
        raise InventoryError(f"cannot read fleet inventory {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InventoryError(f"{path} is not valid TOML: {e}") from None
    devices = parse_inventory(data, str(path), path.resolve().parent)
    return select(devices, tag, str(path))


def select(devices: list[FleetDevice], tag: str | None = None, where: str = "inventory") -> list[FleetDevice]:
    if tag is None:
        return devices
    chosen = [d for d in devices if tag in d.tags]
    if not chosen:
        tags = sorted({t for d in devices for t in d.tags})
        raise InventoryError(f"{where}: no device is tagged {tag!r}; tags in use: {', '.join(tags) or 'none'}")
    return chosen


# -- running -----------------------------------------------------------------------
class _Job:
    """One device's run, in its own thread; ``step`` says what it is doing now."""

    def __init__(self, fd):
        self.fd = fd
        self.step = "waiting"
        self.device = None
        self.abandoned = False
        self.row = None
        self.started = None
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


def _close_quietly(device):
    try:
        device.close()
    except Exception:  # closing under a running call: whatever it raises, the device is given up
        pass


def _row(fd, status, seconds, step=None, error=None, report=None, exit_code=0):
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


def _work(job, action, bundle_dir, profile, backend, kwargs):
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
    **kwargs: Any,
) -> list[Row]:
    """Deploy (``action="deploy"``) or bench a bundle on ``devices``; return one row per device, in order."""
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
        from .field import FieldStore

        FieldStore().close()
    except EdgekitError:
        pass

    pending = [_Job(fd) for fd in devices]
    running = []
    all_jobs = list(pending)
    cv = threading.Condition()

    def start(job):
        def target():
            _work(job, action, bundle_dir, profile, manifest["backend"], kwargs)
            with cv:
                cv.notify_all()

        job.thread = threading.Thread(target=target, daemon=True, name=f"edgekit-fleet-{job.fd.name}")
        job.deadline = time.monotonic() + (job.fd.device_timeout or device_timeout or float("inf"))
        job.thread.start()
        running.append(job)

    def emit(job):
        if on_row:
            on_row(job.row)

    with cv:
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
    return [j.row for j in all_jobs]


def deploy_fleet(
    bundle_dir: str | Path,
    devices: list[FleetDevice],
    jobs: int = DEFAULT_JOBS,
    device_timeout: float | None = DEFAULT_DEVICE_TIMEOUT,
    on_row: Callable[[Row], None] | None = None,
    **kwargs: Any,
) -> list[Row]:
    """Install and benchmark ``bundle_dir`` on every device (see :func:`edgekit.deployer.deploy` for kwargs)."""
    return run_fleet("deploy", bundle_dir, devices, jobs=jobs, device_timeout=device_timeout, on_row=on_row, **kwargs)


def bench_fleet(
    bundle_dir: str | Path,
    devices: list[FleetDevice],
    jobs: int = DEFAULT_JOBS,
    device_timeout: float | None = DEFAULT_DEVICE_TIMEOUT,
    on_row: Callable[[Row], None] | None = None,
    **kwargs: Any,
) -> list[Row]:
    """Benchmark ``bundle_dir`` where it is already deployed, on every device."""
    return run_fleet("bench", bundle_dir, devices, jobs=jobs, device_timeout=device_timeout, on_row=on_row, **kwargs)


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


def _fmt(v, spec):
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
