"""Options several commands share, and what they select: the device flags come from the transports
(each kind declares its selector flag and its own options, :class:`edgekit.transports.Flag`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import EdgekitError
from ..suggest import did_you_mean
from ..transports import Flag, address_of, all_transports

#: options every device command has besides the transports' own
DEVICE_FLAGS = (
    Flag("--device-python", "device_python", "Python on the device that runs the agent (default: the profile's)"),
    Flag("--device-root", "device_root", "agent directory on the device (default: the profile's)"),
)
PER_DEVICE = ("device_python", "device_root")  # given per entry in a fleet inventory


def _dest(flag: Flag) -> str:
    return flag.flag.lstrip("-").replace("-", "_")


def _add(p: argparse._ActionsContainer, flag: Flag, **extra: Any) -> None:
    kw: dict[str, Any] = {"help": flag.help, **extra}
    if flag.metavar:
        kw["metavar"] = flag.metavar
    if flag.type is not str:
        kw["type"] = flag.type
    p.add_argument(flag.flag, **kw)


def device_options(p: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """``--local | --ssh | --adb | --serial`` (one per transport) and every transport's options."""
    where = p.add_mutually_exclusive_group()
    kinds = all_transports()
    for cls in kinds.values():
        sel = cls.selector
        if sel is None:
            continue
        if cls.is_host:
            where.add_argument(sel.flag, action="store_true", help=sel.help)
        elif cls.selector_optional:
            _add(where, sel, nargs="?", const="")
        else:
            _add(where, sel)
    for cls in kinds.values():
        for flag in cls.flags:
            _add(p, flag)
    where.add_argument(
        "--device",
        metavar="NAME",
        help="a device by name from [devices] in the configuration file (~/.config/edgekit/config.toml), or a URL "
        "(ssh://USER@HOST, adb://SERIAL, serial:///dev/ttyUSB0, local://)",
    )
    for flag in DEVICE_FLAGS:
        _add(p, flag)
    return where


def check_backend(name: str | None) -> None:
    """A ``--backend`` this edgekit does not have: the error names the close ones (exit 1, as the library's)."""
    from edgekit_agent.runners.table import TABLE

    from ..errors import BackendUnavailable

    names = TABLE.names()
    if name is not None and name not in names:
        raise BackendUnavailable(
            f"unknown backend {name!r}{did_you_mean(name, names)}; this edgekit builds for: {', '.join(sorted(names))}"
        )


def backend_agent_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        metavar="B",
        help="--local: the agent that runs bundles of backend B (paddlelite, "
        "mindspore-lite: under their tool environment's Python, in <device root>-B)",
    )


def encrypt_key_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--encrypt-key",
        metavar="FILE|keyring:NAME",
        help="encrypt model files at rest on the device with the 32-byte key in FILE there (mode 600, owned by the "
        "agent's user) or its kernel keyring's user key NAME; the agent needs the 'cryptography' package and "
        "remembers the key",
    )


def fleet_options(p: argparse.ArgumentParser, where: argparse._MutuallyExclusiveGroup) -> None:
    where.add_argument("--fleet", metavar="INVENTORY.toml", help="every device in a fleet inventory, in parallel")
    p.add_argument("--tag", help="with --fleet: only the devices with this tag")
    p.add_argument("--jobs", type=int, help="with --fleet: devices worked on at once (default 8)")
    p.add_argument(
        "--device-timeout",
        type=float,
        help="with --fleet: seconds one device may take before it is given up (default 300)",
    )


def bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=100, help="timed runs (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up runs, not counted (default 10)")
    p.add_argument("--threads", type=int, help="inference threads (default: the profile's performance cores)")
    p.add_argument("--provider", action="append", help="accelerator to request, best first (default: the profile's)")
    output_options(p, "print the report as one JSON object")


def output_options(
    p: argparse.ArgumentParser, json_help: str = "print one JSON object", quiet: bool = True, verbose: bool = True
) -> None:
    """``--json``; ``-q`` and, for long work, ``-v`` (one or the other: ``-v`` shows what ``-q`` hides)."""
    p.add_argument("--json", action="store_true", help=json_help)
    talk = p.add_mutually_exclusive_group() if quiet and verbose else p
    if quiet:
        talk.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    if verbose:
        talk.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="also show the underlying tools' output (converters, tool environments) on stderr; "
            "with --json too, stdout keeps the one JSON object",
        )


# -- what the flags select ----------------------------------------------------------
def check_transport_flags(args: argparse.Namespace) -> None:
    """A transport's option without its transport (``--baud`` without ``--serial``), or with ``--fleet``."""
    fleet = getattr(args, "fleet", None)
    for cls in all_transports().values():
        chosen = cls.selector is not None and getattr(args, _dest(cls.selector), None) not in (None, False)
        for flag in cls.flags:
            if getattr(args, _dest(flag), None) is None:
                continue
            if fleet and flag.alone:
                raise EdgekitError(f"{flag.flag} cannot be combined with --fleet: {flag.in_fleet}")
            if flag.alone and not chosen and cls.selector is not None:
                raise EdgekitError(f"{flag.flag} {flag.alone}: add {cls.selector.flag}, or drop {flag.flag}")


def device_target(args: argparse.Namespace) -> tuple[str, str | None, dict[str, Any]]:
    """``(kind, target, options)`` from the device flags of a command (``--local`` when none is given)."""
    check_transport_flags(args)
    named = getattr(args, "device", None)
    if named:
        from ..config import load_config
        from ..transports import parse_url

        address = parse_url(load_config().resolve_device(named))
        return address.kind, address.target, dict(address.options)
    for kind, cls in all_transports().items():
        if cls.is_host or cls.selector is None:
            continue
        value = getattr(args, _dest(cls.selector), None)
        if value is None or value is False:
            continue
        _, target, options = address_of(kind, value)
        for flag in cls.flags:
            given = getattr(args, _dest(flag), None)
            if given is not None or flag.alone is None:  # unset options are passed as None where the kind takes them
                options[flag.key] = given
        return kind, target, options
    return "local", None, {}


def open_device(args: argparse.Namespace, profile: Any = None, backend: str | None = None) -> Any:
    from ..device import open_device as _open

    kind, target, opts = device_target(args)
    check_backend(backend)
    return _open(
        kind,
        target,
        profile=profile,
        device_python=args.device_python,
        device_root=args.device_root,
        backend=backend,
        encrypt_key=getattr(args, "encrypt_key", None),
        **opts,
    )


def per_device_flags_in_fleet(args: argparse.Namespace) -> None:
    """Options an inventory gives per device cannot also be given once for the whole fleet."""
    keys = [_dest(f) for cls in all_transports().values() for f in cls.flags if not f.alone] + list(PER_DEVICE)
    given = [k for k in keys if getattr(args, k, None)]
    if given:
        raise EdgekitError(
            f"--{given[0].replace('_', '-')} cannot be combined with --fleet: "
            "put it in the inventory's [[device]] entries (or its [defaults])"
        )
