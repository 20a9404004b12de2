"""argparse with "did you mean": a mistyped command, choice or flag names the close ones."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from ..suggest import did_you_mean


class Parser(argparse.ArgumentParser):
    """Usage errors exit 2 (as argparse does) and suggest what was probably meant."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            shown = ", ".join(map(repr, choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{did_you_mean(value, choices)} (choose from {shown})"
            )

    def unknown_flags(self, extras: list[str]) -> NoReturn:
        """Arguments no option took: name the options close to the first flag-like one."""
        known = [s for a in self._actions for s in a.option_strings]
        for word in extras:
            if word.startswith("-"):
                flag = word.split("=", 1)[0]
                self.error(f"unrecognized argument: {word}{did_you_mean(flag, known)}")
        self.error(f"unrecognized arguments: {' '.join(extras)}")


def subparser_for(p: argparse.ArgumentParser, args: argparse.Namespace) -> Parser:
    """The parser of the (sub)command ``args`` was parsed for (``field pull`` -> its own parser)."""
    node: argparse.ArgumentParser = p
    for dest in ("command", "action"):
        sub = next((a for a in node._actions if isinstance(a, argparse._SubParsersAction) and a.dest == dest), None)
        name = getattr(args, dest, None)
        if sub is None or name not in sub.choices:
            break
        node = sub.choices[name]
    return node  # type: ignore[return-value]
