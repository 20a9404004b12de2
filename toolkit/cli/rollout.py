"""``edgekit rollout start|status|pause|resume|abort``: staged rollouts judged on field data."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import EdgekitError
from .options import output_options
from .output import emit, err


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("rollout", help="roll a bundle out to a fleet in waves, judged on field data, with rollback")
    rsub = s.add_subparsers(dest="action", metavar="ACTION", required=True)
    st = rsub.add_parser("start", help="start (or continue) the rollout of a bundle to a group, in the foreground")
    st.add_argument("bundle", help="bundle directory (edgekit build ... -o DIR)")
    st.add_argument(
        "--fleet", default="devices.toml", metavar="INVENTORY.toml", help="fleet inventory (default %(default)s)"
    )
    st.add_argument("--group", metavar="TAG", help="only the inventory's devices with this tag (default: all)")
    st.add_argument(
        "--waves",
        default="1%,10%,50%,100%",
        help="cumulative wave sizes, %% of the group or device counts (default %(default)s)",
    )
    st.add_argument("--min-soak", default="30m", help="time each wave runs before it is judged (default %(default)s)")
    st.add_argument(
        "--min-samples",
        type=int,
        help="successful requests per device and version before a wave is judged (default: the field report's, 20)",
    )
    st.add_argument(
        "--max-p99-regression",
        default="10%",
        help="stop when field p99 grows more than this on a "
        "wave's device, new against old version (default %(default)s; 'off': not checked)",
    )
    st.add_argument("--max-p50-regression", default="off", help="the same for p50 (default: not checked)")
    st.add_argument(
        "--max-error-rate",
        default="0.5%",
        help="stop when the new version's error rate on the wave is "
        "above this (default %(default)s; 'off': not checked)",
    )
    st.add_argument(
        "--no-wait",
        action="store_true",
        help="create the rollout and take one step, then return (`edgekit rollout resume ID` continues)",
    )
    st.add_argument(
        "--broker",
        metavar="mqtt://HOST[:PORT]",
        help="deliver over pull (MQTT): the devices are those whose retained state lists --group (docs/ROLLOUTS.md)",
    )
    st.add_argument("--fleet-name", default="default", help="with --broker: the fleet's topics edgekit/NAME/...")
    st.add_argument("--store-url", help="with --broker: the bundle store's http(s) URL as the devices reach it")
    st.add_argument("--publish-to", metavar="DIR|s3://...", help="with --broker: where the bundle is published")
    run_options(st)
    for name, what in (
        ("status", "show a rollout's waves, decisions and field numbers"),
        ("pause", "stop taking steps (a running `start`/`resume` returns); resume continues"),
        ("resume", "continue a rollout (after pause, a restart, or devices that were offline)"),
        ("abort", "stop a rollout and roll back every device that got the bundle"),
    ):
        p = rsub.add_parser(name, help=what)
        p.add_argument("id", nargs="?" if name == "status" else None, help="rollout id (status: all when omitted)")
        if name in ("resume", "abort"):
            run_options(p)
        else:
            p.add_argument("--state", help="rollout state file (default ~/.cache/edgekit/rollouts.db)")
            output_options(p, verbose=False)
        p.set_defaults(func=globals()[f"run_{name}"])
    st.set_defaults(func=run_start)


def run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", default="10s", help="time between steps (default %(default)s)")
    p.add_argument("--jobs", type=int, default=8, help="devices worked on at once (default %(default)s)")
    p.add_argument("--state", help="rollout state file (default ~/.cache/edgekit/rollouts.db)")
    p.add_argument(
        "--store", help="field store (a path or postgresql:// URL) the numbers are read from (default field.db)"
    )
    p.add_argument("--username", help="with a rollout over MQTT: the broker's user name")
    p.add_argument("--password-file", help="with a rollout over MQTT: the broker password (or EDGEKIT_MQTT_PASSWORD)")
    p.add_argument("--ca", help="with a rollout over MQTT: CA certificate file for the broker's TLS")
    output_options(p, verbose=False)


def _fraction(text: str, flag: str) -> float | None:
    from ..rollout import parse_fraction

    return None if text.strip().lower() in ("off", "none") else parse_fraction(text, flag)


def _thresholds(args: argparse.Namespace) -> Any:
    from ..field import MIN_SAMPLES
    from ..rollout import Thresholds, parse_duration

    samples = MIN_SAMPLES if args.min_samples is None else args.min_samples
    if samples < 1:
        raise EdgekitError(f"--min-samples must be at least 1, not {samples}")
    return Thresholds(
        min_soak_s=parse_duration(args.min_soak, "--min-soak"),
        min_samples=samples,
        max_p99_regression=_fraction(args.max_p99_regression, "--max-p99-regression"),
        max_p50_regression=_fraction(args.max_p50_regression, "--max-p50-regression"),
        max_error_rate=_fraction(args.max_error_rate, "--max-error-rate"),
    )


def _password_of(args: argparse.Namespace) -> str | None:
    from .pull import _password

    return _password(args)


def _log(args: argparse.Namespace) -> Any:
    return (lambda m: None) if args.json or args.quiet else (lambda m: err(f"  {m}"))


def _drive(args: argparse.Namespace, state: Any, rollout_id: str, how: str = "run") -> int:
    from ..rollout import Controller, parse_duration
    from ..rollout.text import rollout_text

    c = Controller(state, rollout_id, _delivery(args, state.get(rollout_id)), args.store, _log(args), jobs=args.jobs)
    if how == "abort":
        r = c.abort()
    else:
        if how == "resume":
            c.resume()
        once = getattr(args, "no_wait", False)
        r = c.run(parse_duration(args.interval, "--interval"), timeout=0 if once else None)
    data = {**r.to_dict(), "log": state.log(rollout_id)}
    emit(args, data, rollout_text)
    if r.status == "stopped":
        err(f"rollout {r.id} stopped and rolled back: {r.reason}")
        return 1
    return 0


def _delivery(args: argparse.Namespace, r: Any) -> Any:
    """An :class:`MqttDelivery` with the broker credentials given, for a rollout over MQTT; else None."""
    from ..rollout.mqtt import MqttDelivery, parse_source

    src = parse_source(r.inventory)
    if src is None:
        return None
    user, password = args.username, _password_of(args)
    return MqttDelivery(src["broker"], src["store"], src["store_url"], src["fleet"], user, password, args.ca)


def run_start(args: argparse.Namespace) -> int:
    from ..rollout import RolloutState, start

    thresholds = _thresholds(args)
    source, broker = args.fleet, None
    if args.broker:
        from ..fleet_pull.broker import Broker
        from ..rollout.mqtt import source_url

        if not (args.store_url and args.publish_to):
            raise EdgekitError("--broker needs --store-url URL (as devices reach the store) and --publish-to DIR|s3://")
        publish_to = args.publish_to if "://" in args.publish_to else os.path.abspath(args.publish_to)
        source = source_url(args.broker, args.fleet_name, args.store_url, publish_to)
        broker = Broker(args.broker, args.fleet_name, args.username, _password_of(args), args.ca)
    with RolloutState(args.state) as state:
        try:
            r, created = start(state, args.bundle, source, args.group, args.waves, thresholds, broker=broker)
        finally:
            if broker is not None:
                broker.close()
        if not args.json and not args.quiet:
            err(f"rollout {r.id}: " + ("started" if created else f"already exists ({r.status}); continuing it"))
        return _drive(args, state, r.id)


def run_resume(args: argparse.Namespace) -> int:
    from ..rollout import RolloutState

    with RolloutState(args.state) as state:
        return _drive(args, state, state.get(args.id).id, "resume")


def run_abort(args: argparse.Namespace) -> int:
    from ..rollout import RolloutState

    with RolloutState(args.state) as state:
        return _drive(args, state, state.get(args.id).id, "abort")


def run_pause(args: argparse.Namespace) -> int:
    from ..rollout import Controller, RolloutState
    from ..rollout.text import rollout_text

    with RolloutState(args.state) as state:
        r = Controller(state, args.id).pause()
        emit(args, r.to_dict(), rollout_text)
    return 0


def run_status(args: argparse.Namespace) -> int:
    from ..rollout import RolloutState
    from ..rollout.text import rollout_text

    with RolloutState(args.state) as state:
        ids = [args.id] if args.id else state.ids()
        rollouts = [{**state.get(i).to_dict(), "log": state.log(i)} for i in ids]
    if args.id:
        emit(args, rollouts[0], rollout_text)
    else:
        emit(
            args,
            {"rollouts": rollouts},
            lambda d: "".join(rollout_text(r) + "\n" for r in d["rollouts"]) or "no rollouts\n",
        )
    return 0
