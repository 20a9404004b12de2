"""Transports: how the host reaches a device (see :mod:`.base`).

``connect("local")``, ``connect("ssh", "pi@raspberrypi.local")``, ``connect("adb", "SERIAL")``,
``connect("serial", "/dev/ttyUSB0", baud=115200)``. Each kind is a module here with a
``TRANSPORT`` class; ``MODULES`` lists them (one row per kind: adding a transport is a module
and a row). :func:`parse_url` is the one parser of device addresses: fleet inventories,
``--auto --target`` and the CLI's ``--ssh``/``--adb``/``--serial`` flags all go through it, and
each kind parses its own part (:meth:`Transport.parse_address`).
"""

import importlib
from typing import Any
from urllib.parse import parse_qs

from ..errors import TransportError
from .base import Address, AddressError, CommandResult, Flag, Transport
from .local import LocalTransport

#: kind (= URL scheme) -> module in this package
MODULES = {"local": "local", "ssh": "ssh", "adb": "adb", "serial": "serial_line"}
KINDS = tuple(MODULES)  # the kinds this edgekit ships (read MODULES for the live registry)


def transport_class(kind: str) -> type[Transport]:
    """The Transport subclass for ``kind`` (its module is imported only when used)."""
    if kind not in MODULES:
        raise TransportError(f"unknown transport {kind!r}; this edgekit has: {', '.join(MODULES)}")
    try:
        mod = importlib.import_module(f".{MODULES[kind]}", __name__)
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{MODULES[kind]}":
            raise TransportError(f"this edgekit was installed without the {kind} transport") from None
        raise
    return mod.TRANSPORT


def all_transports() -> dict[str, type[Transport]]:
    """Every kind's class, in registry order (the modules import no third-party package at module level)."""
    return {kind: transport_class(kind) for kind in MODULES}


def url_forms() -> str:
    return ", ".join(cls.url_form for cls in all_transports().values())


def parse_url(url: str) -> Address:
    """``ssh://user@host[:port]`` | ``adb://[SERIAL]`` | ``serial:///dev/tty?baud=N`` | ``local://``
    -> ``Address(kind, target, options)`` for :func:`connect`; raises :class:`AddressError` (a ValueError)."""
    if not isinstance(url, str) or "://" not in url:
        raise AddressError(f"{url!r} is not a device URL; use {url_forms()}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme not in MODULES:
        raise AddressError(f"unknown scheme {scheme!r} in {url!r}; use one of: {', '.join(k + '://' for k in MODULES)}")
    address, _, query_text = rest.partition("?")
    query = {k: v[-1] for k, v in parse_qs(query_text, keep_blank_values=True).items()}
    target, options = transport_class(scheme).parse_address(address, query, url)
    return Address(scheme, target, options)


def address_of(kind: str, value: str | None) -> Address:
    """The address a CLI flag names (``--ssh pi@host`` is ``ssh://pi@host``), through :func:`parse_url`."""
    return parse_url(f"{kind}://{value or ''}")


def connect(kind: str, target: str | None = None, **options: Any) -> Transport:
    if kind == "local":
        return LocalTransport()
    return transport_class(kind).open(target, **options)


__all__ = [
    "KINDS",
    "MODULES",
    "Address",
    "AddressError",
    "CommandResult",
    "Flag",
    "LocalTransport",
    "Transport",
    "address_of",
    "all_transports",
    "connect",
    "parse_url",
    "transport_class",
]
