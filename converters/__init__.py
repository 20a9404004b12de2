"""Backends that convert the reference ONNX model for one runtime (see :mod:`.base`)."""

from .base import Backend, BuildContext, BuildResult
from .ort import OrtBackend

BACKENDS = {b.name: b for b in (OrtBackend(),)}


def get(name):
    from edgekit.errors import BackendUnavailable

    try:
        return BACKENDS[name]
    except KeyError:
        raise BackendUnavailable(
            f"unknown backend {name!r}; this edgekit builds for: {', '.join(sorted(BACKENDS))}"
        ) from None


__all__ = ["BACKENDS", "Backend", "BuildContext", "BuildResult", "OrtBackend", "get"]
