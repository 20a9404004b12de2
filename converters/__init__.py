"""Backends that convert the reference ONNX model for one runtime (see :mod:`.base`).

Which backends exist is the backend table (:mod:`edgekit_agent.runners.table`), shared with the
agent: each row names its host module here (ending with ``BACKEND = MyBackend()``) and its runner.
The modules import their runtime lazily, so every backend is listed (and ``edgekit doctor`` can say
why one is unusable) even where its runtime is not installed.
"""

import importlib
from typing import Dict

from edgekit_agent.runners.table import TABLE, Row

from .base import Backend, BuildContext, BuildResult
from .session import BuildSession


def _backend(row: Row) -> Backend | None:
    """The row's Backend object, or None where this edgekit ships without its module."""
    try:
        mod = importlib.import_module(row.host)
    except ModuleNotFoundError as e:
        if e.name == row.host:
            return None  # this edgekit ships without that backend
        raise
    return mod.BACKEND


def all_backends() -> Dict[str, Backend]:
    """``{name: Backend}`` in the table's order, for every backend whose module this edgekit has."""
    found = {}
    for row in TABLE.rows():
        be = _backend(row)
        if be is not None:
            found[row.name] = be
    return found


def get(name: str) -> Backend:
    from edgekit.errors import BackendUnavailable

    row = TABLE.get(name)
    be = _backend(row) if row is not None else None
    if be is None:
        raise BackendUnavailable(
            f"unknown backend {name!r}; this edgekit builds for: {', '.join(sorted(all_backends()))}"
        )
    return be


def register(row: Row) -> Row:
    """Add a backend that is not part of edgekit (its host module, runner module and table row)."""
    return TABLE.register(row)


__all__ = ["TABLE", "Backend", "BuildContext", "BuildResult", "BuildSession", "Row", "all_backends", "get", "register"]
