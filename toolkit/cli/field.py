"""``edgekit field pull`` (records from a device into the host store) and ``edgekit field report``."""

from __future__ import annotations

import argparse

from . import render
from .options import backend_agent_option, device_options, open_device, output_options
from .output import emit, err, write_html


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("field", help="pull what devices recorded of real traffic, and report lab against field")
    fsub = s.add_subparsers(dest="action", metavar="ACTION", required=True)
    fp = fsub.add_parser("pull", help="fetch records since the last pull into the local store (idempotent)")
    device_options(fp)
    backend_agent_option(fp)
    fp.add_argument("--name", help="name for this device in reports (default: its hostname)")
    fr = fsub.add_parser("report", help="per device, model version and backend: p50/p90/p99, errors, lab vs field")
    fr.add_argument("--model", help="only this model")
    fr.add_argument("--since", help="only records newer than this, e.g. 7d, 12h, 30m")
    fr.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with charts")
    for fx in (fp, fr):
        fx.add_argument(
            "--store",
            help="host-side store: a SQLite file (default ~/.cache/edgekit/field.db) or a postgresql:// URL "
            "(the fleet's shared store; needs edgekit[postgres])",
        )
        output_options(fx, verbose=False)
    fp.set_defaults(func=run_pull)
    fr.set_defaults(func=run_report)


def run_pull(args: argparse.Namespace) -> int:
    from ..field import open_store, pull

    def progress(kind: str, value: int) -> None:
        if kind == "gap":
            err(f"warning: {value} records were pruned on the device before they were pulled")
        elif not args.json and not args.quiet:
            err(f"  pulled {value} new records")

    with open_store(args.store) as store:
        if store.created and not args.quiet:
            err(f"new field store {store.path}")
        with open_device(args, backend=args.backend) as dev:
            result = pull(dev, store, name=args.name, on_batch=progress)
        result.setdefault("store", str(store.path))
    emit(args, result, render.field_pull)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from ..field import open_store, report, report_text

    with open_store(args.store, create=args.store is None) as store:
        r = report(store, model=args.model, since=args.since)
    if args.html:
        from ..field_html import render as html

        write_html(args.html, html(r))
    if args.json:
        for e in r["entries"]:
            e.pop("histogram", None)
    emit(args, r, report_text)
    return 0
