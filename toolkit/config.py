"""Defaults a user sets once: ``~/.config/edgekit/config.toml`` and environment variables.

The file (``$XDG_CONFIG_HOME/edgekit/config.toml``, or the path in ``EDGEKIT_CONFIG``)::

    [defaults]
    profile = "raspberrypi5"          # used when a command is given no --profile

    [devices]                         # device URLs by name: `--device pi`
    pi = "ssh://pi@raspberrypi.local"
    phone = "adb://R58N12345"
    board = "serial:///dev/ttyUSB0?baud=115200"

    [paths]                           # "~" is expanded; relative paths are relative to the file
    cache = "~/.cache/edgekit"        # builds, agents, device root (EDGEKIT_CACHE_DIR)
    toolenvs = "/data/edgekit-toolenvs"   # converters' tool environments (EDGEKIT_TOOLENV_DIR)
    field_store = "~/field.db"        # field telemetry store on the host (EDGEKIT_FIELD_STORE)
    profiles = ["~/my-profiles"]      # more device profile directories (EDGEKIT_PROFILE_PATH)

An environment variable wins over the file: ``EDGEKIT_PROFILE``, ``EDGEKIT_CACHE_DIR``,
``EDGEKIT_TOOLENV_DIR``, ``EDGEKIT_FIELD_STORE``, ``EDGEKIT_PROFILE_PATH``. A missing file is no
error (everything has a built-in default); a file that is not valid TOML, holds an unknown table or
key, or a value of the wrong type is refused with the file, the key and what to write instead.

    cfg = load_config()
    cfg.profile                 # "raspberrypi5" or None
    cfg.resolve_device("pi")    # "ssh://pi@raspberrypi.local"
    cfg.export(os.environ)      # the paths, as the variables the rest of edgekit reads (unset ones only)
"""

from __future__ import annotations

import difflib
import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import EdgekitError

# [paths] keys and the variables that stand for them
_PATH_KEYS = {
    "cache": "EDGEKIT_CACHE_DIR",
    "toolenvs": "EDGEKIT_TOOLENV_DIR",
    "field_store": "EDGEKIT_FIELD_STORE",
    "profiles": "EDGEKIT_PROFILE_PATH",
}
_TABLES = {"defaults": ("profile",), "devices": None, "paths": tuple(_PATH_KEYS)}  # None: any key


class ConfigError(EdgekitError):
    """The configuration file (or a variable standing for it) is unusable."""


def config_path(environ: MutableMapping[str, str] | None = None) -> Path:
    """Where the configuration file is read from: ``$EDGEKIT_CONFIG``, else ``$XDG_CONFIG_HOME/edgekit/config.toml``
    (``~/.config/edgekit/config.toml``)."""
    env = os.environ if environ is None else environ
    if env.get("EDGEKIT_CONFIG"):
        return Path(env["EDGEKIT_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "edgekit" / "config.toml"


@dataclass(frozen=True)
class Config:
    """The user's defaults; every field is None (or empty) where neither the file nor a variable sets it."""

    path: Path | None = None  # the file that was read, None when there is none
    profile: str | None = None
    devices: dict[str, str] = field(default_factory=dict)  # name -> device URL
    cache_dir: Path | None = None
    toolenv_dir: Path | None = None
    field_store: Path | str | None = None  # a SQLite path, or a postgresql:// URL kept as written
    profile_path: tuple[Path, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)  # field -> where its value came from (file or variable)

    def resolve_device(self, name_or_url: str) -> str:
        """A device URL for ``name_or_url``: a name from ``[devices]``, or a URL given as such."""
        if "://" in name_or_url:
            return name_or_url
        if name_or_url in self.devices:
            return self.devices[name_or_url]
        where = f" in {self.path}" if self.path else f" (no configuration file at {config_path()})"
        hint = difflib.get_close_matches(name_or_url, list(self.devices), n=1)
        known = ", ".join(sorted(self.devices)) or "none"
        raise ConfigError(
            f"no device named {name_or_url!r}{where}"
            + (f"; did you mean {hint[0]!r}?" if hint else "")
            + f" Known devices: {known}. Give a URL (ssh://USER@HOST, adb://SERIAL, serial:///dev/ttyUSB0, local://)"
            + " or add the name under [devices]."
        )

    def export(self, environ: MutableMapping[str, str]) -> dict[str, str]:
        """Set the environment variables edgekit's modules read for the configured paths, where ``environ`` does
        not set them already (a variable wins over the file). Returns what was set."""
        values = {
            "EDGEKIT_CACHE_DIR": self.cache_dir,
            "EDGEKIT_TOOLENV_DIR": self.toolenv_dir,
            "EDGEKIT_FIELD_STORE": self.field_store,
            "EDGEKIT_PROFILE_PATH": os.pathsep.join(map(str, self.profile_path)) if self.profile_path else None,
        }
        done = {}
        for var, value in values.items():
            if value is not None and not environ.get(var):
                environ[var] = done[var] = str(value)
        return done


def _fail(path: Path, where: str, what: str) -> ConfigError:
    return ConfigError(f"{path}: {where}: {what} (edit the file, or point EDGEKIT_CONFIG at another one)")


def _unknown(path: Path, where: str, key: str, allowed: list[str]) -> ConfigError:
    hint = difflib.get_close_matches(key, allowed, n=1)
    return _fail(
        path,
        where,
        f"unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; known: {', '.join(allowed)}",
    )


def _path(path: Path, where: str, value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, where, f"must be a path as a string, not {value!r}")
    p = Path(value).expanduser()
    return p if p.is_absolute() else (path.parent / p)


def parse(data: dict[str, Any], path: Path) -> Config:
    """A :class:`Config` from the parsed TOML ``data`` of ``path``; raises :class:`ConfigError` naming the key."""
    for table, value in data.items():
        if table not in _TABLES:
            raise _unknown(path, "top level", table, list(_TABLES))
        if not isinstance(value, dict):
            raise _fail(path, table, f"must be a table ([{table}]), not {type(value).__name__}")
        allowed = _TABLES[table]
        for key in value:
            if allowed is not None and key not in allowed:
                raise _unknown(path, f"[{table}]", key, list(allowed))
    kw: dict[str, Any] = {"path": path, "sources": {}}
    profile = data.get("defaults", {}).get("profile")
    if profile is not None:
        if not isinstance(profile, str) or not profile:
            raise _fail(path, "[defaults] profile", f"must be a profile name as a string, not {profile!r}")
        kw["profile"] = profile
        kw["sources"]["profile"] = str(path)
    devices = {}
    for name, url in data.get("devices", {}).items():
        where = f"[devices] {name}"
        if not isinstance(url, str):
            raise _fail(
                path, where, f'must be a device URL as a string (e.g. "ssh://pi@raspberrypi.local"), not {url!r}'
            )
        from .fleet import parse_url

        try:
            parse_url(url)
        except ValueError as e:
            raise _fail(path, where, str(e)) from None
        devices[name] = url
    kw["devices"] = devices
    paths = data.get("paths", {})
    for key, attr in (("cache", "cache_dir"), ("toolenvs", "toolenv_dir"), ("field_store", "field_store")):
        if key in paths:
            url = key == "field_store" and str(paths[key]).startswith(("postgresql://", "postgres://"))
            kw[attr] = paths[key] if url else _path(path, f"[paths] {key}", paths[key])
            kw["sources"][attr] = str(path)
    if "profiles" in paths:
        dirs = paths["profiles"]
        if isinstance(dirs, str):
            dirs = [dirs]
        if not isinstance(dirs, list):
            raise _fail(path, "[paths] profiles", f"must be a list of directories, not {dirs!r}")
        kw["profile_path"] = tuple(_path(path, "[paths] profiles", d) for d in dirs)
        kw["sources"]["profile_path"] = str(path)
    return Config(**kw)


def load_config(environ: MutableMapping[str, str] | None = None) -> Config:
    """The user's configuration: the file (if any) with the environment variables on top.

    ``EDGEKIT_CONFIG`` naming a file that does not exist is an error (a typo should not silently drop the settings);
    the default location may be absent.
    """
    env = os.environ if environ is None else environ
    path = config_path(env)
    if path.is_file():
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        except OSError as e:
            raise ConfigError(f"{path}: cannot be read: {e.strerror}") from None
        cfg = parse(data, path)
    elif env.get("EDGEKIT_CONFIG"):
        raise ConfigError(f"EDGEKIT_CONFIG names {path}, which does not exist; create it or unset EDGEKIT_CONFIG")
    else:
        cfg = Config()
    over: dict[str, Any] = {}
    sources = dict(cfg.sources)
    for var, attr in (
        ("EDGEKIT_CACHE_DIR", "cache_dir"),
        ("EDGEKIT_TOOLENV_DIR", "toolenv_dir"),
        ("EDGEKIT_FIELD_STORE", "field_store"),
    ):
        if env.get(var):
            url = env[var].startswith(("postgresql://", "postgres://"))
            over[attr] = env[var] if url else Path(env[var]).expanduser()
            sources[attr] = var
    if env.get("EDGEKIT_PROFILE_PATH"):
        over["profile_path"] = tuple(Path(p).expanduser() for p in env["EDGEKIT_PROFILE_PATH"].split(os.pathsep) if p)
        sources["profile_path"] = "EDGEKIT_PROFILE_PATH"
    if env.get("EDGEKIT_PROFILE"):
        over["profile"] = env["EDGEKIT_PROFILE"]
        sources["profile"] = "EDGEKIT_PROFILE"
    return Config(
        path=cfg.path,
        profile=over.get("profile", cfg.profile),
        devices=cfg.devices,
        cache_dir=over.get("cache_dir", cfg.cache_dir),
        toolenv_dir=over.get("toolenv_dir", cfg.toolenv_dir),
        field_store=over.get("field_store", cfg.field_store),
        profile_path=over.get("profile_path", cfg.profile_path),
        sources=sources,
    )
