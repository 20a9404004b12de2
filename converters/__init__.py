"""Backends that convert the reference ONNX model for one runtime (see :mod:`.base`).

Each backend is a module here with one :class:`~.base.Backend` subclass; ``BACKEND_MODULES``
lists them. The modules import their runtime lazily, so every backend is listed (and
``edgekit doctor`` can say why one is unusable) even where its runtime is not installed.
"""

import importlib

from .base import Backend, BuildContext, BuildResult

BACKEND_MODULES = {
    "ort": "ort",
    "openvino": "openvino",
    "mnn": "mnn",
    "tflite": "tflite",
    "paddlelite": "paddlelite",
    "mindspore-lite": "mindspore_lite",
}
_BACKENDS = {}


def _load():
    if not _BACKENDS:
        for name, module in BACKEND_MODULES.items():
            try:
                mod = importlib.import_module(f".{module}", __name__)
            except ModuleNotFoundError as e:
                if e.name == f"{__name__}.{module}":
                    continue  # this edgekit ships without that backend
                raise
            _BACKENDS[name] = mod.BACKEND
    return _BACKENDS


def all_backends():
    return dict(_load())


def get(name):
    from edgekit.errors import BackendUnavailable

    backends = _load()
    try:
        return backends[name]
    except KeyError:
        raise BackendUnavailable(
            f"unknown backend {name!r}; this edgekit builds for: {', '.join(sorted(backends))}"
        ) from None


__all__ = ["BACKEND_MODULES", "Backend", "BuildContext", "BuildResult", "all_backends", "get"]
