"""The ONNX Runtime backend: :mod:`.backend` (the Backend), :mod:`.quantize` (fp16, int8 static and dynamic,
--budget), :mod:`.convert` (ORT format, required operators, mobile usability), :mod:`.placement` (which
execution provider runs each node; the selective-build config)."""

from .backend import BACKEND, OrtBackend

__all__ = ["BACKEND", "OrtBackend"]
