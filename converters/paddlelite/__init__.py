"""The Paddle Lite backend: :mod:`.backend` (x2paddle + opt in a tool environment; host runs in a worker),
:mod:`.placement` (the tailoring lists for a reduced build)."""

from .backend import BACKEND, PaddleLiteBackend

__all__ = ["BACKEND", "PaddleLiteBackend"]
