"""``edgekit explain BUNDLE``: which accelerator runs each node, why not, and what would fix it."""

from __future__ import annotations

import argparse

from .output import emit, err, write_html


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("explain", help="which accelerator runs each node of a bundle, why not, and what would fix it")
    s.add_argument("bundle", help="bundle directory (edgekit build ... -o DIR)")
    s.add_argument("--profile", help="ask about another profile (default: the bundle's)")
    s.add_argument("--model", help="the source ONNX model, for bundles whose model file is not a readable graph (.ort)")
    s.add_argument("--selective-build", metavar="DIR", help="write the runtime's reduced-build inputs into DIR")
    s.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    s.add_argument("--json", action="store_true", help="print the report as one JSON object")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..placement import explain, selective_build, text

    report = explain(args.bundle, profile=args.profile, model=args.model)
    if args.selective_build:
        report["selective_build_written"] = selective_build(args.bundle, args.selective_build)
        err(f"wrote {', '.join(report['selective_build_written']['files'])}")
    if args.html:
        from ..placement_html import render

        write_html(args.html, render(report))
    emit(args, report, text)
    return 0
