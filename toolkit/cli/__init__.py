"""The ``edgekit`` command: a thin layer over the Python API.

Each command group is a module here with ``register(subparsers)`` (its flags) and a function per
command that makes one library call and renders the result (:mod:`.render`, :mod:`.output`).
Library errors (:class:`edgekit.errors.EdgekitError`) become one ``error:`` line on stderr and an exit
code here, and nowhere else (:data:`EXIT_CODES`). ``--json`` prints exactly one JSON object on
stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import EdgekitError
from . import agent, backends, build, deploy, device, explain, field, profile, profiles, pull, rollout, sign
from .output import error
from .parsing import Parser, subparser_for

#: every exit code the command gives (also in ``edgekit --help`` and docs/CLI.md)
EXIT_CODES = {
    0: "success",
    1: "bad input, or a build that failed (the message says what to change)",
    2: "usage error: an unknown command, flag or choice (the message suggests the closest)",
    3: "fidelity below the gate: the built model drifted too far from the original",
    4: "transport: the device could not be reached, or the connection was lost",
    5: "agent: the device's agent refused or failed a request",
    130: "interrupted (Ctrl-C)",
}
#: command modules, in the order ``edgekit --help`` lists them
COMMANDS = (profiles, build, sign, deploy, pull, profile, agent, device, field, rollout, explain, backends)


def exit_codes_text() -> str:
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items())


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="edgekit",
        description="Build, shrink, deploy and benchmark models on your own edge devices.",
        epilog=exit_codes_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"edgekit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return p


def _apply_config(args: argparse.Namespace) -> None:
    """Defaults the user set once (``~/.config/edgekit/config.toml`` and EDGEKIT_* variables): paths become the
    variables edgekit's modules read (a variable already set wins), and a command's missing ``--profile`` takes the
    configured default profile (``build``)."""
    import os

    from ..config import load_config

    config = load_config()
    config.export(os.environ)
    if getattr(args, "command", None) == "build" and args.profile is None:
        if not config.profile:
            raise EdgekitError(
                "no --profile given and no default profile configured: pass --profile NAME (see `edgekit profiles`) or "
                f'set profile = "NAME" under [defaults] in {config.path or "~/.config/edgekit/config.toml"}'
            )
        args.profile = config.profile


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args, extras = p.parse_known_args(argv)
    if extras:
        subparser_for(p, args).unknown_flags(extras)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    try:
        _apply_config(args)
        return args.func(args)
    except EdgekitError as e:
        error(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        error("interrupted")
        return 130


__all__ = ["EXIT_CODES", "main", "parser"]


if __name__ == "__main__":
    sys.exit(main())
