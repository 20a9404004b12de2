"""``edgekit deploy`` and ``edgekit bench``: install the agent and a bundle on a device,
benchmark it there, and bring the report back.

    transport -> probe the device's Python -> install/upgrade the agent zipapp (sha256
    checked) -> start it (or reuse the running one) -> forward its loopback port ->
    upload the bundle file by file (the agent verifies each against the manifest) ->
    commit (atomic switch) -> benchmark in a fresh process on the device

The device and its agent's lifecycle are :mod:`edgekit.device`; the upload is :mod:`edgekit.upload`.
"""

import time

from . import bundle as bundle_mod
from . import profiles
from .device import Device, open_device
from .errors import AgentError


def _annotate(report, manifest, device, prof):
    report["profile"] = manifest["profile"]
    report["transport"] = device.transport.description
    report["agent"] = {
        "version": device.state.get("version"),
        "pid": device.state.get("pid"),
        "port": device.state.get("port"),
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


def _threads(prof, device, threads):
    if threads:
        return threads
    cores = device.info.get("cpu_count") or 1
    return min(prof.threads, cores) if prof else cores


def bundle_profile(manifest):
    """The profile a bundle was built for, as recorded in its manifest (no profile file needed)."""
    if manifest.get("profile_spec"):
        return profiles.Profile(manifest["profile"], manifest["profile_spec"], "bundle manifest")
    return profiles.load(manifest["profile"]) if manifest["profile"] in profiles.names() else None


def deploy(bundle_dir, device, runs=100, warmup=10, threads=None, providers=None, progress=None, log=None, bench=True):
    """Install ``bundle_dir`` on ``device`` (a :class:`Device` or a transport kind) and benchmark it there."""
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    if isinstance(device, str):
        with open_device(device, profile=prof, backend=manifest["backend"]) as opened:
            return deploy(
                bundle_dir,
                opened,
                runs=runs,
                warmup=warmup,
                threads=threads,
                providers=providers,
                progress=progress,
                log=log,
                bench=bench,
            )
    t0 = time.perf_counter()
    device.ensure_agent(log=log)
    install = device.install(bundle_dir, manifest, progress=progress, log=log)
    deploy_s = time.perf_counter() - t0
    if not bench:
        return {"name": manifest["name"], "bundle_id": manifest["id"], "installed": install}
    t = _threads(prof, device, threads)
    report = device.bench(manifest["name"], runs=runs, warmup=warmup, threads=t, providers=providers)
    report["deploy_seconds"] = round(deploy_s, 3)
    report["installed"] = install
    # Serve it warm: apps' first request must not pay the load.
    device.call(f"loading {manifest['name']}", device.client.load, manifest["name"], threads=t, providers=providers)
    report = _annotate(report, manifest, device, prof)
    _record_lab(device, report)
    return report


def _record_lab(device, report):
    """Keep the lab benchmark beside the field data of the same device, for `edgekit field report`."""
    store_id = (device.state or {}).get("health", {}).get("telemetry", {}).get("store_id")
    if not store_id:
        return
    from .field import FieldStore

    with FieldStore() as store:
        store.record_lab(store_id, report)


def bench(bundle_dir, device, runs=100, warmup=10, threads=None, providers=None, log=None):
    """Benchmark a bundle that is already deployed on ``device`` (no upload)."""
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    device.ensure_agent(log=log)
    models = {m["name"]: m for m in device.call("listing models", device.client.models)}
    deployed = models.get(manifest["name"])
    if deployed is None or deployed["version"] != manifest["id"]:
        have = deployed["version"] if deployed else "nothing"
        raise AgentError(
            f"{device.transport.description} serves {have} for {manifest['name']}, not this bundle "
            f"({manifest['id']}); run `edgekit deploy {bundle_dir}` first"
        )
    report = device.bench(
        manifest["name"], runs=runs, warmup=warmup, threads=_threads(prof, device, threads), providers=providers
    )
    report = _annotate(report, manifest, device, prof)
    _record_lab(device, report)
    return report


__all__ = ["Device", "bench", "bundle_profile", "deploy", "open_device"]
