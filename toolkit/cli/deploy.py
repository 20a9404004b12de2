"""``edgekit deploy BUNDLE`` and ``edgekit bench BUNDLE``: one device, or many at once (``--fleet``, ``--adb all``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..errors import EdgekitError
from .options import (
    bench_options,
    check_transport_flags,
    device_options,
    encrypt_key_option,
    fleet_options,
    open_device,
    per_device_flags_in_fleet,
)
from .output import emit, logger, upload_progress


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("deploy", help="install a bundle (and the agent) on a device, benchmark it there")
    s.add_argument("bundle", help="bundle directory (edgekit build ... -o DIR)")
    fleet_options(s, device_options(s))
    bench_options(s)
    s.add_argument(
        "--profile-layers",
        type=int,
        nargs="?",
        const=20,
        default=0,
        metavar="RUNS",
        help="also profile the bundle layer by layer (RUNS profiled runs, default 20) and keep the summary with the "
        "lab benchmark, for `edgekit field report`",
    )
    encrypt_key_option(s)
    s.add_argument(
        "--setup",
        action="store_true",
        help="first install the bundle's runtime on the device (wheels downloaded here, pushed over the transport; "
        "no network needed there) when it lacks it or has another version: see `edgekit device setup`",
    )
    s.set_defaults(func=run_deploy)

    s = sub.add_parser("bench", help="benchmark a bundle already deployed on a device")
    s.add_argument("bundle", help="bundle directory, deployed before with edgekit deploy")
    fleet_options(s, device_options(s))
    bench_options(s)
    s.set_defaults(func=run_bench)


def many_devices(args: argparse.Namespace) -> list[Any] | None:
    """The devices of ``--fleet INVENTORY`` or ``deploy --adb all``; None for a command on one device."""
    from .. import fleet

    check_transport_flags(args)
    if getattr(args, "fleet", None):
        per_device_flags_in_fleet(args)
        return fleet.load_inventory(args.fleet, tag=args.tag)
    if args.tag is not None:
        raise EdgekitError("--tag picks devices of a --fleet inventory: add --fleet INVENTORY.toml, or drop --tag")
    if not (args.command == "deploy" and getattr(args, "adb", None) == "all"):
        for flag, value in (("--jobs", args.jobs), ("--device-timeout", args.device_timeout)):
            if value is not None:
                also = " (or --adb all)" if args.command == "deploy" else ""
                raise EdgekitError(
                    f"{flag} applies to many devices at once: add --fleet INVENTORY.toml{also}, or drop {flag}"
                )
        return None
    from ..transports.adb import ADBTransport

    return [
        fleet.FleetDevice(s, f"adb://{s}", "adb", s, {}, python=args.device_python, root=args.device_root)
        for s in ADBTransport.serials()
    ]


def run_fleet(args: argparse.Namespace, action: str, devices: list[Any]) -> int:
    """``--fleet`` / ``deploy --adb all``: every device in parallel, one row per device."""
    from .. import fleet

    log = logger(args)  # "deploying to N device(s)" advancing per device; nothing with --json/-q

    def on_row(r: dict[str, Any]) -> None:
        log(f"  {r['name']}: {r['status']}" + (f" ({r['error']})" if r["error"] else ""))

    t0 = time.perf_counter()
    extra = {"profile_layers": args.profile_layers} if getattr(args, "profile_layers", 0) else {}
    rows = fleet.run_fleet(
        action,
        args.bundle,
        devices,
        jobs=fleet.DEFAULT_JOBS if args.jobs is None else args.jobs,
        device_timeout=fleet.DEFAULT_DEVICE_TIMEOUT if args.device_timeout is None else args.device_timeout,
        on_row=None if args.json or args.quiet else on_row,
        log=log,
        runs=args.runs,
        warmup=args.warmup,
        threads=args.threads,
        providers=args.provider,
        **extra,
    )
    seconds = time.perf_counter() - t0
    emit(args, {"devices": rows, "summary": fleet.summary(rows, seconds)}, lambda d: fleet.fleet_text(rows, seconds))
    return fleet.exit_code(rows)


def run_deploy(args: argparse.Namespace) -> int:
    from ..deployer import check_profile_layers

    check_profile_layers(args.profile_layers)
    devices = many_devices(args)
    if devices is not None and args.encrypt_key:
        raise EdgekitError(
            "--encrypt-key applies to one device: run `edgekit agent start --encrypt-key FILE` on each device "
            "(the agent remembers it), then deploy to the fleet"
        )
    if devices is not None and args.setup:
        raise EdgekitError("--setup applies to one device: run `edgekit deploy --setup` per device, then the fleet")
    if devices is not None:
        return run_fleet(args, "deploy", devices)
    from .. import bundle as bundle_mod
    from ..deployer import bundle_profile, deploy

    manifest = bundle_mod.load(args.bundle)
    with open_device(args, bundle_profile(manifest), manifest["backend"]) as dev:
        report = deploy(
            args.bundle,
            dev,
            runs=args.runs,
            warmup=args.warmup,
            threads=args.threads,
            providers=args.provider,
            progress=upload_progress(args),
            log=logger(args),
            profile_layers=args.profile_layers,
            setup=args.setup,
        )
    emit(args, report, _deploy_text)
    return 0


def _deploy_text(report: dict[str, Any]) -> str:
    from ..layer_profile_text import lab_profile_lines
    from ..report import bench_text

    lines = lab_profile_lines(report.get("layer_profile"))
    return bench_text(report) + "".join(line + "\n" for line in lines)


def run_bench(args: argparse.Namespace) -> int:
    devices = many_devices(args)
    if devices is not None:
        return run_fleet(args, "bench", devices)
    from .. import bundle as bundle_mod
    from ..deployer import bench, bundle_profile
    from ..report import bench_text

    manifest = bundle_mod.load(args.bundle)
    with open_device(args, bundle_profile(manifest), manifest["backend"]) as dev:
        report = bench(
            args.bundle, dev, runs=args.runs, warmup=args.warmup, threads=args.threads, providers=args.provider
        )
    emit(args, report, bench_text)
    return 0
