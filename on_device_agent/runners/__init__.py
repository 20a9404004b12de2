"""Runners: one per backend, the same ``name`` as the host-side backend.

A runner loads a bundle's model with the device's runtime and runs it. It reports what
really ran (``describe()``): the runtime and version, the accelerator the runtime
actually used (not merely what was requested) and any fallback. Each runner is a module
here with a ``RUNNER`` class; ``RUNNER_MODULES`` lists them.
"""

import importlib
import threading

from .base import Runner, RunnerError, RunnerFault, RuntimeMissing

RUNNER_MODULES = {
    "ort": "ort",
    "openvino": "openvino",
    "mnn": "mnn",
    "tflite": "tflite",
    "paddlelite": "paddlelite",
    "mindspore-lite": "mindspore_lite",
}
_RUNNERS = {}
_LOCK = threading.Lock()


def _load():
    with _LOCK:  # request threads must never see a half-built table
        if not _RUNNERS:
            found = {}
            for backend, module in RUNNER_MODULES.items():
                try:
                    mod = importlib.import_module("." + module, __name__)
                except ImportError as e:
                    if getattr(e, "name", None) == __name__ + "." + module:
                        continue  # this agent ships without that runner
                    raise
                found[backend] = mod.RUNNER
            _RUNNERS.update(found)
    return _RUNNERS


def get(backend):
    runners = _load()
    try:
        return runners[backend]
    except KeyError:
        raise RunnerError(
            "this agent has no runner for backend %r (it has: %s)" % (backend, ", ".join(sorted(runners)))
        )


def runtimes():
    """``{backend: version or None}`` for the runtimes importable on this device."""
    return dict((name, cls.runtime_version()) for name, cls in sorted(_load().items()))


__all__ = ["Runner", "RunnerError", "RunnerFault", "RuntimeMissing", "get", "runtimes"]
