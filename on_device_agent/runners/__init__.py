"""Runners: one per backend, the same ``name`` as the host-side backend.

A runner loads a bundle's model with the device's runtime and runs it. It reports what
really ran (``describe()``): the runtime and version, the accelerator the runtime
actually used (not merely what was requested) and any fallback. Each runner is a module
here with a ``RUNNER`` class; the backend table (:mod:`.table`, shared with the host) lists them.
"""

import importlib
import threading
from typing import Dict, Optional, Type

from .base import Runner, RunnerError, RunnerFault, RuntimeMissing
from .table import TABLE, Row

_RUNNERS = {}  # type: Dict[str, Type[Runner]]
_LOCK = threading.Lock()


def _runner(row: Row) -> Optional[Type[Runner]]:
    """The row's runner class, or None where this agent ships without that runner module."""
    with _LOCK:  # request threads must never see a half-built table
        if row.name not in _RUNNERS:
            try:
                mod = importlib.import_module(row.runner)
            except ImportError as e:
                if getattr(e, "name", None) == row.runner:
                    return None  # this agent ships without that runner
                raise
            _RUNNERS[row.name] = mod.RUNNER
        return _RUNNERS[row.name]


def _load() -> Dict[str, Type[Runner]]:
    found = {}
    for row in TABLE.rows():
        cls = _runner(row)
        if cls is not None:
            found[row.name] = cls
    return found


def get(backend: str) -> Type[Runner]:
    row = TABLE.get(backend)
    cls = _runner(row) if row is not None else None
    if cls is None:
        runners = _load()
        raise RunnerError(
            "this agent has no runner for backend %r (it has: %s)" % (backend, ", ".join(sorted(runners)))
        )
    return cls


def runtimes() -> Dict[str, Optional[str]]:
    """``{backend: version or None}`` for the runtimes importable on this device."""
    return dict((name, cls.runtime_version()) for name, cls in sorted(_load().items()))


__all__ = ["TABLE", "Runner", "RunnerError", "RunnerFault", "RuntimeMissing", "get", "runtimes"]
