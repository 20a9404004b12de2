"""``edgekit device probe``: what a device is, read from the device (no agent or runtime needed there)."""

from __future__ import annotations

import argparse
from typing import Any

from .options import device_options, open_device
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("device", help="read what a device is (OS, CPU features and clusters, memory, accelerators)")
    s.add_argument("action", choices=["probe"])
    device_options(s)
    s.add_argument("--json", action="store_true", help="print the probe as one JSON object")
    s.set_defaults(func=run_device)


def probe_device(args: argparse.Namespace) -> dict[str, Any]:
    """Probe the device the flags name (``--local`` when none)."""
    from ..probe import device_probe

    with open_device(args) as dev:
        return device_probe(dev)


def run_device(args: argparse.Namespace) -> int:
    from ..probe_text import probe_text

    emit(args, probe_device(args), probe_text)
    return 0
