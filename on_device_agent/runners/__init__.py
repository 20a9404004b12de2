"""Runners: one per backend, the same ``name`` as the host-side backend.

A runner loads a bundle's model with the device's runtime and runs it. It reports what
really ran (``describe()``): the runtime and version, the accelerator the runtime
actually used (not merely what was requested) and any fallback.
"""

from .base import Runner, RunnerError, RuntimeMissing

_RUNNERS = {}


def _register():
    from .ort import OrtRunner

    for cls in (OrtRunner,):
        _RUNNERS[cls.backend] = cls


def get(backend):
    if not _RUNNERS:
        _register()
    try:
        return _RUNNERS[backend]
    except KeyError:
        raise RunnerError("this agent has no runner for backend %r (it has: %s)" % (backend, ", ".join(sorted(_RUNNERS))))


def runtimes():
    """``{backend: version or None}`` for the runtimes importable on this device."""
    if not _RUNNERS:
        _register()
    return dict((name, cls.runtime_version()) for name, cls in sorted(_RUNNERS.items()))


__all__ = ["Runner", "RunnerError", "RuntimeMissing", "get", "runtimes"]
