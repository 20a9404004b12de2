"""How the CLI writes: one JSON object on stdout with ``--json``, text otherwise; messages on stderr.

Colour only on a terminal, never when ``NO_COLOR`` is set (https://no-color.org) or ``TERM=dumb``.
"""

from __future__ import annotations

import json
import os
import sys
from argparse import Namespace
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

_CODES = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "dim": "2"}


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def paint(text: str, style: str, stream: TextIO | None = None) -> str:
    """``text`` in ``style`` (bold, red, green, yellow, dim) where ``stream`` shows colour, else as it is."""
    if style not in _CODES or not use_colour(stream or sys.stdout):
        return text
    return f"\033[{_CODES[style]}m{text}\033[0m"


def err(msg: str) -> None:
    sys.stderr.write(msg.rstrip() + "\n")


def error(msg: str) -> None:
    err(f"{paint('error:', 'red', sys.stderr)} {msg}")


def emit(args: Namespace, data: Any, text_fn: Callable[[Any], str] | None) -> None:
    """``data`` as one JSON object with ``--json``, else ``text_fn(data)``."""
    if getattr(args, "json", False) or text_fn is None:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(text_fn(data))


def logger(args: Namespace) -> Callable[[str], None]:
    """Progress on stderr (live on a terminal, plain lines otherwise); nothing with ``-q`` or ``--json``."""
    from ..progress import Progress

    return Progress.for_command(
        json=getattr(args, "json", False), quiet=getattr(args, "quiet", False), verbose=getattr(args, "verbose", False)
    )


def write_html(path: str | Path, html: str) -> None:
    """Write a report page whole (temporary file, then rename) and say where."""
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    err(f"wrote {out}")


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: columns as wide as their widest cell, the last column left free."""
    cells = [[("-" if c is None else str(c)) for c in r] for r in [head, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head) - 1)]
    lines = []
    for n, r in enumerate(cells):
        line = "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
        lines.append(paint(line.rstrip(), "bold") if n == 0 else line.rstrip())
    return "\n".join(lines) + "\n"


def upload_progress(args: Namespace) -> Callable[[str, int, int], None] | None:
    """A one-line upload meter on a terminal; nothing with --json/-q or when stderr is not a terminal."""
    if getattr(args, "json", False) or getattr(args, "quiet", False) or not sys.stderr.isatty():
        return None

    def show(name: str, done: int, total: int) -> None:
        pct = 100 * done // max(total, 1)
        sys.stderr.write(f"\r  uploading {name}: {pct:3d}% ({done}/{total} bytes)")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show
