"""Transports: how the host reaches a device (see :mod:`.base`).

``connect("local")``, ``connect("ssh", "pi@raspberrypi.local")``, ``connect("adb", "SERIAL")``,
``connect("serial", "/dev/ttyUSB0", baud=115200)``. Each kind is a module here with a
``TRANSPORT`` class; ``MODULES`` lists them.
"""

import importlib

from ..errors import TransportError
from .base import CommandResult, Transport
from .local import LocalTransport

MODULES = {"local": "local", "ssh": "ssh", "adb": "adb", "serial": "serial_line"}
KINDS = tuple(MODULES)


def transport_class(kind):
    """The Transport subclass for ``kind`` (its module is imported only when used)."""
    if kind not in MODULES:
        raise TransportError(f"unknown transport {kind!r}; this edgekit has: {', '.join(KINDS)}")
    try:
        mod = importlib.import_module(f".{MODULES[kind]}", __name__)
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{MODULES[kind]}":
            raise TransportError(f"this edgekit was installed without the {kind} transport") from None
        raise
    return mod.TRANSPORT


def connect(kind, target=None, **options):
    if kind == "local":
        return LocalTransport()
    return transport_class(kind).open(target, **options)


__all__ = ["CommandResult", "KINDS", "LocalTransport", "Transport", "connect"]
