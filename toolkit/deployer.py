"""``edgekit deploy`` and ``edgekit bench``: install the agent and a bundle on a device,
benchmark it there, and bring the report back.

    transport -> probe the device's Python -> install/upgrade the agent zipapp (sha256
    checked) -> start it (or reuse the running one) -> forward its loopback port ->
    upload the bundle file by file (the agent verifies each against the manifest) ->
    commit (atomic switch) -> benchmark in a fresh process on the device

The device and its agent's lifecycle are :mod:`edgekit.device`; the upload is :mod:`edgekit.upload`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import bundle as bundle_mod
from . import execution, profiles, runtime_match
from .device import Device, device_paths, open_device
from .errors import AgentError, EdgekitError
from .transports import Transport

Report = dict[str, Any]
PROFILE_RUNS_MAX = 200  # what the agent accepts for one profile


@contextlib.contextmanager
def _device_for(device: Device | Transport | str, prof: profiles.Profile | None, backend: str) -> Iterator[Device]:
    """A :class:`Device` for what the caller passed: a Device (used as it is), a connected transport (the agent's
    Python and root from the profile, as :func:`open_device` picks them; the caller keeps closing the transport),
    or a transport kind (opened here and closed afterwards)."""
    if isinstance(device, Device):
        yield device
    elif isinstance(device, Transport):
        python, root = device_paths(type(device), prof, None, None, backend)
        dev = Device(device, python=python, root=root)
        try:
            yield dev
        finally:
            if dev.client is not None:
                dev.client.close()
    else:
        with open_device(device, profile=prof, backend=backend) as dev:
            yield dev


def _annotate(report: Report, manifest: dict[str, Any], device: Device, prof: profiles.Profile | None) -> Report:
    report["profile"] = manifest["profile"]
    report["transport"] = device.transport.description
    state = device.state or {}
    report["agent"] = {
        "version": state.get("version"),
        "pid": state.get("pid"),
        "port": state.get("port"),
        "root": device.root,
    }
    warnings = list(report.get("warnings", []))
    machine = report.get("device", {}).get("machine", "")
    norm = profiles._normalise_arch(machine) if machine else ""
    if prof and prof.name != profiles.HOST and norm and norm != prof.arch:
        warnings.append(
            f"built for {prof.name} ({prof.arch}) but measured on a {machine} device: these timings "
            f"describe that device, not a {prof.name}"
        )
    requested = report.get("accelerators_requested") or []
    placement = report.get("placement") or {}
    if requested and placement and requested[0] not in placement:
        warnings.append(f"{requested[0]} was requested first but ran no node: everything ran on {', '.join(placement)}")
    report["warnings"] = warnings
    return report


def _threads(prof: profiles.Profile | None, device: Device, threads: int | None) -> int:
    if threads:
        return threads
    cores = (device.info or {}).get("cpu_count") or 1
    return min(prof.threads, cores) if prof else cores


def bundle_profile(manifest: dict[str, Any]) -> profiles.Profile | None:
    """The profile a bundle was built for, as recorded in its manifest (no profile file needed)."""
    if manifest.get("profile_spec"):
        return profiles.Profile(manifest["profile"], manifest["profile_spec"], "bundle manifest")
    return profiles.load(manifest["profile"]) if manifest["profile"] in profiles.names() else None


def check_profile_layers(runs: int, bench: bool = True) -> None:
    """EdgekitError unless ``runs`` (``deploy --profile-layers``) is 0 (no profile) or a profile the agent takes."""
    if runs and not bench:
        raise EdgekitError("a layer profile is kept with the lab benchmark: deploy with the benchmark to profile")
    if runs and not 1 <= runs <= PROFILE_RUNS_MAX:
        raise EdgekitError(f"--profile-layers takes 1 to {PROFILE_RUNS_MAX} profiled runs (got {runs})")


def deploy(
    bundle_dir: str | Path,
    device: Device | Transport | str,
    runs: int = 100,
    warmup: int = 10,
    threads: int | None = None,
    providers: list[str] | None = None,
    progress: Any = None,
    log: Any = None,
    bench: bool = True,
    profile_layers: int = 0,
    setup: bool = False,
) -> Report:
    """Install ``bundle_dir`` on ``device`` and benchmark it there (``bench=False``: install only).
    ``setup``: first install the bundle's runtime on the device when it lacks it (:mod:`edgekit.device_setup`).

    ``device``: a :class:`Device` (:func:`edgekit.open_device`), a connected transport
    (:func:`edgekit.connect`), or a transport kind such as ``"local"``. ``profile_layers``: also profile it layer
    by layer over that many runs (:func:`edgekit.profile`) and keep the summary with the lab benchmark
    (``layer_profile``), where ``edgekit field report`` shows it."""
    check_profile_layers(profile_layers, bench)
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    with _device_for(device, prof, manifest["backend"]) as dev:
        if setup:
            from .device_setup import ensure_runtime

            ensure_runtime(dev, manifest, log=log)
        report = _deploy(dev, bundle_dir, manifest, prof, runs, warmup, threads, providers, progress, log, bench)
        if bench:
            try:
                if profile_layers:
                    from .layer_profile import profile_deployed, summary

                    full = profile_deployed(
                        dev, bundle_dir, manifest, profile_layers, 3, _threads(prof, dev, threads), providers
                    )
                    report["layer_profile"] = summary(full)
            finally:  # the benchmark is kept even when the profile fails
                _record_lab(dev, report)
        return report


def _deploy(
    device: Device,
    bundle_dir: str | Path,
    manifest: dict[str, Any],
    prof: profiles.Profile | None,
    runs: int,
    warmup: int,
    threads: int | None,
    providers: list[str] | None,
    progress: Any,
    log: Any,
    bench: bool,
) -> Report:
    t0 = time.perf_counter()
    device.ensure_agent(log=log)
    health = (device.state or {}).get("health") or {}
    mismatch = runtime_match.check(manifest, health.get("runtimes"), device.transport.description)
    for w in mismatch:
        (log or (lambda m: None))(f"warning: {w}")
    install = device.install(bundle_dir, manifest, progress=progress, log=log)
    deploy_s = time.perf_counter() - t0
    if not bench:
        out: Report = {"name": manifest["name"], "bundle_id": manifest["id"], "installed": install}
        return {**out, "warnings": mismatch} if mismatch else out
    t = _threads(prof, device, threads)
    report = execution.on_device(device, manifest["name"], t).bench(runs=runs, warmup=warmup, providers=providers)
    report["deploy_seconds"] = round(deploy_s, 3)
    report["installed"] = install
    # Serve it warm: apps' first request must not pay the load.
    device.call(f"loading {manifest['name']}", device.client.load, manifest["name"], threads=t, providers=providers)
    report = _annotate(report, manifest, device, prof)
    report["warnings"] = mismatch + report["warnings"]
    return report


def _record_lab(device: Device, report: Report) -> None:
    """Keep the lab benchmark beside the field data of the same device, for `edgekit field report`."""
    store_id = (device.state or {}).get("health", {}).get("telemetry", {}).get("store_id")
    if not store_id:
        return
    from .field import open_store

    with open_store() as store:
        store.record_lab(store_id, report)


def bench(
    bundle_dir: str | Path,
    device: Device | Transport | str,
    runs: int = 100,
    warmup: int = 10,
    threads: int | None = None,
    providers: list[str] | None = None,
    log: Any = None,
) -> Report:
    """Benchmark a bundle that is already deployed on ``device`` (as for :func:`deploy`; no upload)."""
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    with _device_for(device, prof, manifest["backend"]) as dev:
        return _bench(dev, bundle_dir, manifest, prof, runs, warmup, threads, providers, log)


def require_deployed(device: Device, bundle_dir: str | Path, manifest: dict[str, Any], log: Any = None) -> None:
    """Start the device's agent if it is not running; AgentError unless it serves this very bundle."""
    device.ensure_agent(log=log)
    models = {m["name"]: m for m in device.call("listing models", device.client.models)}
    deployed = models.get(manifest["name"])
    if deployed is None or deployed["version"] != manifest["id"]:
        have = deployed["version"] if deployed else "nothing"
        raise AgentError(
            f"{device.transport.description} serves {have} for {manifest['name']}, not this bundle "
            f"({manifest['id']}); run `edgekit deploy {bundle_dir}` first"
        )


def _bench(
    device: Device,
    bundle_dir: str | Path,
    manifest: dict[str, Any],
    prof: profiles.Profile | None,
    runs: int,
    warmup: int,
    threads: int | None,
    providers: list[str] | None,
    log: Any,
) -> Report:
    require_deployed(device, bundle_dir, manifest, log)
    on_device = execution.on_device(device, manifest["name"], _threads(prof, device, threads))
    report = on_device.bench(runs=runs, warmup=warmup, providers=providers)
    report = _annotate(report, manifest, device, prof)
    _record_lab(device, report)
    return report


__all__ = ["Device", "bench", "bundle_profile", "deploy", "open_device", "require_deployed"]
