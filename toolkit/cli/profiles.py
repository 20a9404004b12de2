"""``edgekit profiles [list|show NAME]``."""

from __future__ import annotations

import argparse

from ..errors import EdgekitError
from . import render
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("profiles", help="list device profiles, or show one")
    s.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    s.add_argument("name", nargs="?", help="profile to show (show)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import profiles

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
