"""``edgekit agent start|stop|status``, ``edgekit rollback NAME``, ``edgekit models [--remove NAME]``."""

from __future__ import annotations

import argparse

from edgekit_agent import pull_config
from edgekit_agent.pull_layout import PayloadError

from ..errors import EdgekitError
from . import render
from .options import backend_agent_option, device_options, device_target, encrypt_key_option, open_device
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("agent", help="start, stop or show the agent on a device")
    s.add_argument("action", choices=["start", "stop", "status"])
    device_options(s)
    backend_agent_option(s)
    encrypt_key_option(s)
    pull_config.add_arguments(s)  # start: the agent learns what to run from an MQTT broker (docs/FLEET.md)
    s.add_argument(
        "--trusted-signers",
        metavar="FILE",
        help="start: install this OpenSSH allowed_signers file (here) as the keys the device trusts; from then on "
        "it installs only bundles they signed (edgekit sign)",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_agent)

    s = sub.add_parser("rollback", help="serve the previous kept version of a model on a device again")
    s.add_argument("name", help="model name on the device (see `edgekit models`)")
    s.add_argument("--to", metavar="VERSION", help="a specific kept version instead of the previous one")
    device_options(s)
    backend_agent_option(s)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_rollback)

    s = sub.add_parser("models", help="list the models a device serves, with the versions it keeps")
    s.add_argument("--remove", metavar="NAME", help="unload NAME and delete every version the device keeps of it")
    device_options(s)
    backend_agent_option(s)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_models)


def run_agent(args: argparse.Namespace) -> int:
    if args.encrypt_key and args.action != "start":
        raise EdgekitError("--encrypt-key is given to `edgekit agent start` (or deploy), not to " + args.action)
    if args.trusted_signers and args.action != "start":
        raise EdgekitError("--trusted-signers is given to `edgekit agent start`, not to " + args.action)
    pull = _pull_args(args)
    with open_device(args, backend=args.backend) as dev:
        dev.agent_args = pull
        trusted = None
        if args.trusted_signers:
            from ..trust import install_signers

            trusted = install_signers(dev, args.trusted_signers)
        action = {"start": dev.start_agent, "stop": dev.stop_agent, "status": dev.agent_status}[args.action]
        result = action()
        if trusted is not None:
            result["trust"] = trusted
    emit(args, result, render.agent_state)
    return 0


def _pull_args(args: argparse.Namespace) -> list[str]:
    """``agent start --pull ...``: the flags the device's agent starts with (paths are on the device)."""
    flags = ("device_id", "group", "pull_username", "pull_password_file", "pull_ca", "pull_cert", "pull_key")
    given = args.pull or any(getattr(args, f) for f in flags)
    if given and args.action != "start":
        raise EdgekitError("--pull and its options are given to `edgekit agent start`, not to " + args.action)
    if not args.pull:
        if given:
            raise EdgekitError("--device-id, --group and the --pull-* options go with --pull mqtt://BROKER")
        return []
    if not args.device_id:
        raise EdgekitError("--pull needs --device-id ID (the device's name in the fleet)")
    try:
        pull_config.parse_broker(args.pull)
        pull_config.PullConfig(
            args.pull, args.device_id, args.group, args.pull_fleet, field_interval=args.field_interval
        )
    except PayloadError as e:
        raise EdgekitError(str(e)) from None
    return pull_config.start_args(args, absolute=False)


def run_rollback(args: argparse.Namespace) -> int:
    with open_device(args, backend=args.backend) as dev:
        dev.ensure_agent()
        result = dev.rollback(args.name, args.to)
    emit(args, result, render.rollback)
    return 0


def run_models(args: argparse.Namespace) -> int:
    from ..device import other_local_agents

    with open_device(args, backend=args.backend) as dev:
        dev.ensure_agent()
        if args.remove:
            emit(args, dev.remove(args.remove), render.removed)
            return 0
        models = dev.models()
        where = dev.transport.description
        local = device_target(args)[0] == "local" and not args.backend and not args.device_root
        others = other_local_agents(dev.root) if local else []
    keys = ("name", "version", "versions", "backend", "precision", "profile", "loaded")
    data = {
        "device": where,
        "models": [{k: m.get(k) for k in keys} for m in models],
        **({"other_agents": others} if others else {}),
    }
    emit(args, data, render.models)
    return 0
