"""The transport interface: how the host reaches a device.

A transport runs commands, copies files and makes a device-side TCP port (the agent's
API on the device's loopback) reachable from the host. Deploy logic uses only these
methods, so ADB and serial transports plug in without touching it. A command that
fails is a result (``CommandResult.returncode``), not an exception; losing or not
getting the connection raises :class:`edgekit.errors.TransportError`.
"""

import abc
from dataclasses import dataclass


@dataclass
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self):
        return self.returncode == 0


class Transport(abc.ABC):
    name = ""

    #: how the device is named in messages, e.g. "ssh pi@10.0.0.5:22" or "local"
    description = ""

    @classmethod
    def open(cls, target, **options):
        """Connect to ``target`` (the kind's own address form); raise TransportError if unreachable."""
        return cls(target, **options)

    @abc.abstractmethod
    def run(self, argv, timeout=120):
        """Run ``argv`` (a list) on the device; return a CommandResult."""

    @abc.abstractmethod
    def put_file(self, local, remote, progress=None):
        """Copy a host file to a device path (written to ``remote`` + '.part', then renamed)."""

    @abc.abstractmethod
    def forward(self, remote_port):
        """Make the device's 127.0.0.1:``remote_port`` reachable; return the host-side port."""

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
