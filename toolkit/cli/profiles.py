"""``edgekit profiles [list|show NAME]``, ``edgekit profiles create NAME --from-device (--local|--ssh HOST|...)``."""

from __future__ import annotations

import argparse

from ..errors import EdgekitError
from . import render
from .options import device_options
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("profiles", help="list device profiles, show one, or create one from a device")
    s.add_argument("action", nargs="?", choices=["list", "show", "create"], default="list")
    s.add_argument("name", nargs="?", help="profile to show (show) or to write (create)")
    s.add_argument(
        "--from-device",
        action="store_true",
        help="create: read the device the device flags name (--local, --ssh HOST, --adb [SERIAL], --serial PORT)",
    )
    s.add_argument("-o", "--output", metavar="DIR", default=".", help="create: directory to write NAME.toml in (.)")
    s.add_argument("--force", action="store_true", help="create: replace an existing NAME.toml")
    device_options(s)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run)


def run_create(args: argparse.Namespace) -> int:
    from ..profile_create import DEFAULT_ROOT, create_profile
    from .device import probe_device

    if not args.name:
        raise EdgekitError(
            "usage: edgekit profiles create NAME --from-device (--local | --ssh HOST | --adb | --serial)"
        )
    if not args.from_device:
        raise EdgekitError(
            "profiles create reads a device: add --from-device with --local, --ssh HOST, --adb or --serial"
        )
    info = probe_device(args)
    path = create_profile(
        args.name,
        info,
        args.output,
        force=args.force,
        python=args.device_python or "python3",
        root=args.device_root or DEFAULT_ROOT,
    )
    emit(args, {"profile": args.name, "path": str(path)}, lambda d: f"wrote {d['path']}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    from .. import profiles

    if args.action == "create":
        return run_create(args)
    for given, flag in ((args.from_device, "--from-device"), (args.force, "--force"), (args.output != ".", "-o")):
        if given:
            raise EdgekitError(f"{flag} applies to `edgekit profiles create NAME --from-device`, not to {args.action}")
    if args.action == "show":
        if not args.name:
            raise EdgekitError("usage: edgekit profiles show NAME")
        emit(args, profiles.load(args.name).to_dict(), render.profile_show)
        return 0
    rows = [
        {
            "name": p.name,
            "description": p.data["description"],
            "arch": p.arch,
            "os": p.os_family,
            "runtimes": p.data["runtimes"]["ranked"],
            "transport": p.data["agent"]["transport"],
            "accelerators": [a["name"] for a in p.data["accelerators"]],
        }
        for p in profiles.load_all()
    ]
    emit(args, {"profiles": rows}, render.profiles_list)
    return 0
