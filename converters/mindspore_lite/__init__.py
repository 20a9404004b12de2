"""The MindSpore Lite backend: :mod:`.backend` (the converter in a tool environment; host runs in a worker)."""

from .backend import BACKEND, MindSporeLiteBackend

__all__ = ["BACKEND", "MindSporeLiteBackend"]
