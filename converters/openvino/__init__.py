"""The OpenVINO backend: :mod:`.backend` (the Backend: IR conversion, host runs), :mod:`.quantize` (NNCF int8,
int8 weights, --budget), :mod:`.common` (the runtime, device lists), :mod:`.placement` (Core.query_model per
device; the conditional-compilation steps)."""

from .backend import BACKEND, OpenVINOBackend

__all__ = ["BACKEND", "OpenVINOBackend"]
