"""``edgekit profile BUNDLE``: per-layer times of a deployed bundle, from its runtime's own profiler on the device."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import EdgekitError
from .options import device_options, open_device, output_options
from .output import emit, logger, write_html


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "profile", help="per-layer times of a deployed bundle on its device, joined with explain's placement"
    )
    s.add_argument("bundle", help="bundle directory, deployed before with edgekit deploy")
    device_options(s)
    s.add_argument("--runs", type=int, default=20, help="profiled runs, 1 to 200 (default 20; median per node)")
    s.add_argument("--warmup", type=int, default=3, help="warm-up runs, not counted, 0 to 200 (default 3)")
    s.add_argument("--threads", type=int, help="inference threads (default: the profile's performance cores)")
    s.add_argument("--provider", action="append", help="accelerator to request, best first (default: the profile's)")
    s.add_argument("--top", type=int, default=15, help="nodes listed in the text report (default 15)")
    s.add_argument(
        "--html",
        metavar="FILE",
        help="also write the report as one self-contained HTML page (per-layer bars, accelerators, partitions)",
    )
    output_options(s, "print the report as one JSON object (schema edgekit.profile/1)", verbose=False)
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import bundle as bundle_mod
    from ..deployer import bundle_profile
    from ..layer_profile import profile
    from ..layer_profile_text import profile_text

    if args.html and not Path(args.html).resolve().parent.is_dir():
        raise EdgekitError(f"--html {args.html}: its folder does not exist; create it or pick another path")
    manifest = bundle_mod.load(args.bundle)
    with open_device(args, bundle_profile(manifest), manifest["backend"]) as dev:
        report = profile(
            args.bundle,
            dev,
            runs=args.runs,
            warmup=args.warmup,
            threads=args.threads,
            providers=args.provider,
            log=logger(args),
        )
    if args.html:
        from ..layer_profile_html import render

        write_html(args.html, render(report))
    emit(args, report, lambda r: profile_text(r, top=args.top))
    return 0
