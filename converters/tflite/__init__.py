"""The TFLite (LiteRT) backend: :mod:`.backend` (the Backend: onnx2tf in a tool environment, host runs with
the agent's runner), :mod:`.quantize` (--budget), :mod:`.common` (the tool environment), :mod:`.placement`
(the GPU delegate's op list; the ops for a reduced build)."""

from .backend import BACKEND, TFLiteBackend
from .common import TOOLENV

__all__ = ["BACKEND", "TOOLENV", "TFLiteBackend"]
