"""A fleet inventory: one ``[[device]]`` table per device in a TOML file (and optional ``[defaults]`` applied to
each), validated into :class:`FleetDevice` entries. See :mod:`edgekit.fleet` for the format and for running them.

A device's ``url`` is parsed by :func:`edgekit.transports.parse_url`; the fields that carry a transport's options
(``key``, ``known_hosts``, ``ssh_config``) and ``connect_timeout`` come from the transports' declarations.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import EdgekitError
from .transports import MODULES, all_transports, parse_url, transport_class

SCHEMES = {kind: kind for kind in MODULES}  # the URL schemes: one per transport kind (edgekit.transports.parse_url)
FIELDS: dict[str, Any] = {
    "name": str,
    "url": str,
    "profile": str,
    "tags": list,
    "python": str,
    "root": str,
    # a transport's options a device entry carries (host paths: key, known_hosts, ssh_config), from its Flags
    **{f.inventory: str for cls in all_transports().values() for f in cls.flags if f.inventory},
    "connect_timeout": (int, float),
    "device_timeout": (int, float),
}
DEFAULTS_FIELDS = set(FIELDS) - {"name", "url"}
HOST_PATHS = tuple(f.inventory for cls in all_transports().values() for f in cls.flags if f.inventory)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class InventoryError(EdgekitError):
    """The fleet inventory file is missing, not TOML, or has a bad entry."""


class FleetDevice:
    """One inventory entry, validated: where the device is and how to reach it."""

    def __init__(
        self,
        name: str,
        url: str,
        kind: str,
        target: str | None,
        options: dict[str, Any],
        profile: str | None = None,
        tags: Iterable[str] = (),
        python: str | None = None,
        root: str | None = None,
        device_timeout: float | None = None,
    ) -> None:
        self.name, self.url, self.kind, self.target, self.options = name, url, kind, target, dict(options)
        self.profile, self.tags, self.python, self.root = profile, list(tags), python, root
        self.device_timeout = device_timeout

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "kind": self.kind,
            "target": self.target,
            "profile": self.profile,
            "tags": self.tags,
            "python": self.python,
            "root": self.root,
            "device_timeout": self.device_timeout,
        }

    def __repr__(self) -> str:
        return f"<FleetDevice {self.name} {self.url}>"


# -- inventory ----------------------------------------------------------------------
def _check_fields(where: str, entry: dict[str, Any], allowed: Iterable[str], path: str | Path) -> None:
    for key, value in entry.items():
        if key not in allowed:
            raise InventoryError(f"{path}: {where}: unknown field {key!r}; allowed: {', '.join(sorted(allowed))}")
        want = FIELDS[key]
        if isinstance(value, bool) or not isinstance(value, want):
            kind = {str: "a string", list: "a list of strings"}.get(want, "a number of seconds")
            raise InventoryError(f"{path}: {where}: field {key!r} must be {kind}, not {value!r}")
        if key == "tags" and not all(isinstance(t, str) and t for t in value):
            raise InventoryError(f"{path}: {where}: field 'tags' must be a list of non-empty strings, not {value!r}")
        if key in ("connect_timeout", "device_timeout") and value <= 0:
            raise InventoryError(f"{path}: {where}: field {key!r} must be positive, not {value!r}")


def parse_inventory(
    data: dict[str, Any], path: str = "inventory", base_dir: str | Path | None = None
) -> list[FleetDevice]:
    """Validate an already-parsed inventory (a dict); return a list of :class:`FleetDevice`."""
    from . import profiles

    unknown = set(data) - {"device", "defaults"}
    if unknown:
        raise InventoryError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
            "an inventory has [[device]] entries and an optional [defaults] table"
        )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise InventoryError(f"{path}: [defaults] must be a table")
    _check_fields("[defaults]", defaults, DEFAULTS_FIELDS, path)
    entries = data.get("device")
    if not entries:
        raise InventoryError(f"{path}: no devices; add [[device]] entries with name and url")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InventoryError(f"{path}: 'device' must be an array of tables: write each as [[device]]")
    base_dir = Path(base_dir) if base_dir else Path(".")
    devices: list[FleetDevice] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        where = f"device #{i}" + (f" ({entry['name']!r})" if isinstance(entry.get("name"), str) else "")
        _check_fields(where, entry, set(FIELDS), path)
        for required in ("name", "url"):
            if required not in entry:
                raise InventoryError(f"{path}: {where}: missing field {required!r}")
        name = entry["name"]
        if not _NAME.match(name):
            raise InventoryError(
                f"{path}: {where}: field 'name' must be letters, digits, '.', '_' or '-' "
                f"(starting with a letter or digit), not {name!r}"
            )
        if name in seen:
            raise InventoryError(f"{path}: {where}: name {name!r} is already used by device #{seen[name]}")
        seen[name] = i
        e = dict(defaults)
        e.update(entry)
        try:
            kind, target, options = parse_url(e["url"])
        except ValueError as err:
            raise InventoryError(f"{path}: {where}: field 'url': {err}") from None
        if e.get("profile"):
            prof = e["profile"]
            if not (prof in profiles.names() or (prof.endswith(".toml") and (base_dir / prof).is_file())):
                raise InventoryError(
                    f"{path}: {where}: field 'profile': unknown profile {prof!r}; "
                    f"known: {', '.join(sorted(profiles.names()))}"
                )
            if prof.endswith(".toml"):
                e["profile"] = str(base_dir / prof)
        for key in HOST_PATHS:
            if key in e:
                p = Path(os.path.expanduser(e[key]))
                p = p if p.is_absolute() else base_dir / p
                if not (p.exists() if key == "ssh_config" else p.is_file()):  # ssh_config may be /dev/null
                    raise InventoryError(f"{path}: {where}: field {key!r}: no such file {p}")
                e[key] = str(p)
        cls = transport_class(kind)
        own = {f.inventory: f.key for f in cls.flags if f.inventory}
        foreign = [k for k in HOST_PATHS if k in entry and k not in own]
        if foreign:
            owners = [
                f"{c.name}://" for c in all_transports().values() if any(f.inventory == foreign[0] for f in c.flags)
            ]
            raise InventoryError(
                f"{path}: {where}: field {foreign[0]!r} applies to {' and '.join(owners)} devices only"
            )
        if "connect_timeout" in entry and not cls.connect_timeout:  # from [defaults] it applies where it can
            timed = [f"{c.name}://" for c in all_transports().values() if c.connect_timeout]
            raise InventoryError(
                f"{path}: {where}: field 'connect_timeout' applies to {' and '.join(timed)} devices "
                f"only ({cls.no_connect_timeout}); use device_timeout to bound the whole run"
            )
        options.update({key: e.get(field) for field, key in own.items()})
        if cls.connect_timeout and "connect_timeout" in e:
            options[cls.connect_timeout] = float(e["connect_timeout"])
        devices.append(
            FleetDevice(
                name,
                e["url"],
                kind,
                target,
                options,
                profile=e.get("profile"),
                tags=e.get("tags", []),
                python=e.get("python"),
                root=e.get("root"),
                device_timeout=e.get("device_timeout"),
            )
        )
    return devices


def load_inventory(path: str | Path, tag: str | None = None) -> list[FleetDevice]:
    """Read and validate a TOML inventory; keep only devices tagged ``tag`` (all if None)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise InventoryError(f"fleet inventory {path} does not exist") from None
    except OSError as e:
        raise InventoryError(f"cannot read fleet inventory {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InventoryError(f"{path} is not valid TOML: {e}") from None
    devices = parse_inventory(data, str(path), path.resolve().parent)
    return select(devices, tag, str(path))


def select(devices: list[FleetDevice], tag: str | None = None, where: str = "inventory") -> list[FleetDevice]:
    if tag is None:
        return devices
    chosen = [d for d in devices if tag in d.tags]
    if not chosen:
        tags = sorted({t for d in devices for t in d.tags})
        raise InventoryError(f"{where}: no device is tagged {tag!r}; tags in use: {', '.join(tags) or 'none'}")
    return chosen


__all__ = ["FleetDevice", "InventoryError", "load_inventory", "parse_inventory", "select"]
