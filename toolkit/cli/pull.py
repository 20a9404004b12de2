"""``edgekit publish BUNDLE --store DIR|s3://...`` and ``edgekit fleet desire|undesire|state|ingest``: pull delivery."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import EdgekitError
from .output import emit, table


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("publish", help="write a bundle to a content-addressed store devices pull from")
    s.add_argument("bundle", help="bundle directory (edgekit build ... -o DIR)")
    s.add_argument(
        "--store", required=True, help="a directory any static server serves, or s3://BUCKET/PREFIX (edgekit[fleet])"
    )
    s.add_argument("--endpoint", help="the S3-compatible server's URL (with an s3:// store)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_publish)

    f = sub.add_parser("fleet", help="set what devices run (desired state over MQTT) and read what they report")
    fsub = f.add_subparsers(dest="fleet_command", metavar="ACTION")
    d = fsub.add_parser("desire", help="tell a group or a device to run a published bundle")
    d.add_argument("model", help="the model's name on the devices")
    d.add_argument("digest", help="the bundle's digest, sha256:HEX (edgekit publish prints it)")
    d.add_argument("--store-url", required=True, help="the store's http(s) URL as the devices reach it")
    _target(d)
    _broker(d)
    d.set_defaults(func=run_desire)
    u = fsub.add_parser("undesire", help="take a model out of a group's or a device's desired state")
    u.add_argument("model", help="the model's name on the devices")
    u.add_argument(
        "--remove", action="store_true", help="tell the devices to stop serving it and delete its versions instead"
    )
    _target(u)
    _broker(u)
    u.set_defaults(func=run_undesire)
    st = fsub.add_parser("state", help="what each device of the fleet reported it runs (retained state)")
    _broker(st)
    st.set_defaults(func=run_state)
    ig = fsub.add_parser("ingest", help="write the field records pull-mode devices send into the field store")
    _broker(ig)
    ig.add_argument("--store", help="field store: a SQLite path or postgresql:// URL (default: EDGEKIT_FIELD_STORE)")
    ig.add_argument("--client-id", help="the persistent session's client id (default edgekit-ingest-FLEET)")
    ig.add_argument("--seconds", type=float, help="stop after this many seconds (default: run until interrupted)")
    ig.set_defaults(func=run_ingest)
    f.set_defaults(func=lambda args: (f.print_help(), 2)[1])


def _target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--group", help="every device following this group")
    g.add_argument("--device", help="one device (its entries override its groups')")


def _broker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker", required=True, help="mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS)")
    p.add_argument("--fleet", default="default", help="the fleet's name (topics edgekit/FLEET/...)")
    p.add_argument("--username", help="the broker's user name")
    p.add_argument("--password-file", help="file holding the broker password (or set EDGEKIT_MQTT_PASSWORD)")
    p.add_argument("--ca", help="CA certificate file for the broker's TLS")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _password(args: argparse.Namespace) -> str | None:
    password = os.environ.get("EDGEKIT_MQTT_PASSWORD") or None
    if args.password_file:
        try:
            with open(args.password_file) as f:
                password = f.read().strip()
        except OSError as e:
            raise EdgekitError(f"--password-file: {e}") from None
    return password


def _open(args: argparse.Namespace) -> Any:
    from ..fleet_pull.broker import Broker

    return Broker(args.broker, fleet=args.fleet, username=args.username, password=_password(args), ca=args.ca)


def run_publish(args: argparse.Namespace) -> int:
    from ..fleet_pull import publish

    result = publish(args.bundle, args.store, endpoint=args.endpoint)
    emit(
        args,
        result,
        lambda r: (
            f"published {r['name']} {r['id']} to {r['store']}: {r['blobs_written']} blob(s) written "
            f"({r['bytes_written']} bytes), {r['blobs_present']} already there\ndigest {r['digest']}"
        ),
    )
    return 0


def run_desire(args: argparse.Namespace) -> int:
    with _open(args) as broker:
        result = broker.desire(args.model, args.digest, args.store_url, group=args.group, device=args.device)
    emit(args, result, lambda r: f"{r['topic']}: " + _entries(r["models"]))
    return 0


def _entries(models: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{m} {'removed' if w.get('remove') else w['digest']}" for m, w in sorted(models.items()))


def run_undesire(args: argparse.Namespace) -> int:
    with _open(args) as broker:
        result = broker.undesire(args.model, group=args.group, device=args.device, remove=args.remove)
    emit(args, result, lambda r: f"{r['topic']}: " + (_entries(r["models"]) or "nothing desired"))
    return 0


def run_state(args: argparse.Namespace) -> int:
    with _open(args) as broker:
        states = broker.states()

    def text(data: dict[str, Any]) -> str:
        rows = []
        for device, st in data["devices"].items():
            failed = st.get("failed") or {}
            for name, m in sorted((st.get("models") or {}).items()):
                rows.append(
                    [device, name, m.get("version"), m.get("digest") or "-", failed.get(name, {}).get("error", "")]
                )
            for name, f in sorted(failed.items()):
                if name not in (st.get("models") or {}):
                    rows.append([device, name, "-", "-", f.get("error", "")])
            if not st.get("models") and not failed:
                rows.append([device, "-", "-", "-", ""])
        if not rows:
            return f"no device of fleet {args.fleet} has reported a state"
        return table(["device", "model", "version", "digest", "failed"], rows)

    emit(args, {"fleet": args.fleet, "devices": states}, text)
    return 0


def run_ingest(args: argparse.Namespace) -> int:
    import sys

    from ..fleet_pull.ingest import Ingest

    def log(event: dict[str, Any]) -> None:
        if not args.json:
            if "error" in event:
                print(f"{event['topic']}: ignored: {event['error']}", file=sys.stderr)
            else:
                print(f"{event['device']}: {event['records']} record(s), {event['added']} new", file=sys.stderr)

    ingest = Ingest(
        args.broker,
        store=args.store,
        fleet=args.fleet,
        client_id=args.client_id,
        username=args.username,
        password=_password(args),
        ca=args.ca,
        on_batch=log,
    )
    try:
        stats = ingest.run(seconds=args.seconds)
    except KeyboardInterrupt:
        stats = dict(ingest.stats)
    finally:
        ingest.close()
    emit(args, stats, lambda r: f"{r['batches']} batch(es), {r['added']} record(s) added, {r['rejected']} ignored")
    return 0
