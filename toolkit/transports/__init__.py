"""Transports: how the host reaches a device (see :mod:`.base`).

``connect("local")`` or ``connect("ssh", "pi@raspberrypi.local")``.
"""

from ..errors import TransportError
from .base import CommandResult, Transport
from .local import LocalTransport

KINDS = ("local", "ssh")


def connect(kind, target=None, **options):
    if kind == "local":
        return LocalTransport()
    if kind == "ssh":
        from .ssh import SSHTransport

        if not target:
            raise TransportError("ssh needs a target: [USER@]HOST[:PORT]")
        return SSHTransport(target, **options)
    raise TransportError(f"unknown transport {kind!r}; this edgekit has: {', '.join(KINDS)}")


__all__ = ["CommandResult", "KINDS", "LocalTransport", "Transport", "connect"]
