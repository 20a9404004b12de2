"""``edgekit backends [list|install NAME|remove NAME]`` and ``edgekit doctor``."""

from __future__ import annotations

import argparse

from ..errors import EdgekitError
from . import render
from .options import output_options
from .output import emit, logger


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "backends",
        help="list backends (usable here, precisions, tool environment); install or "
        "remove a backend's tool environment",
    )
    s.add_argument("action", nargs="?", choices=["list", "install", "remove"], default="list")
    s.add_argument(
        "name",
        nargs="?",
        help="backend (install, remove), or tensorflow / torch / paddle3: the environments of TensorFlow, "
        "PyTorch-file and Paddle 3 JSON model intake",
    )
    output_options(s)
    s.set_defaults(func=run_backends)

    s = sub.add_parser("doctor", help="which backends and transports work here, and why not")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_doctor)


def run_backends(args: argparse.Namespace) -> int:
    from .. import toolenvs

    if args.action == "list":
        emit(args, {"backends": toolenvs.backends()}, render.backends)
        return 0
    if not args.name:
        raise EdgekitError(f"usage: edgekit backends {args.action} NAME")
    if args.action == "install":
        st = toolenvs.install_backend(args.name, log=logger(args))
        emit(args, st, lambda d: f"{args.name}: {d['detail']}\n")
        return 0
    removed = toolenvs.remove_backend(args.name)
    emit(
        args,
        {"name": args.name, "removed": removed},
        lambda d: "".join(f"removed {r}\n" for r in d["removed"]) or f"{args.name}: no tool environment to remove\n",
    )
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from ..diagnostics import doctor, doctor_text

    emit(args, doctor(), doctor_text)
    return 0
