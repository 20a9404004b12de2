"""Shrinking passes: model file in, smaller model file out, fidelity-checked (see :mod:`.base`).

Passes run on the reference ONNX model before a backend converts it, so every backend
gets their output. ``PASSES`` maps a pass name to its class.
"""

from .base import Option, Pass, PassConfigError, PassResult
from .prune import PrunePass

PASSES = {PrunePass.name: PrunePass}

__all__ = ["Option", "Pass", "PassConfigError", "PassResult", "PrunePass", "PASSES"]
