"""The shrinking-pass interface: model file in, smaller model file out, checked.

A pass declares its settings as data (:class:`Option`: name, type, default,
description), so the CLI, recipes and reports can list and validate them without
knowing the pass. ``run(ctx, model_path)`` reads ``model_path``, writes a new model in
``ctx.workdir``, calls ``ctx.check(step_name, new_path)`` (fidelity against the
original reference, never against the previous step) and returns a
:class:`PassResult` with the new path and the pass's report section. Passes run
before the backend's conversion, so every backend gets their output.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EdgekitError

if TYPE_CHECKING:
    import onnx

    from edgekit.converters.base import BuildContext


class PassConfigError(EdgekitError):
    """A shrinking pass was given settings it cannot use (bad ratio, unknown layer, bad recipe)."""


@dataclass(frozen=True)
class Option:
    name: str
    type: type
    default: object
    description: str
    choices: tuple = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type.__name__,
            "default": self.default,
            "description": self.description,
            "choices": list(self.choices),
        }


@dataclass
class PassResult:
    model_path: Path
    section: dict = field(default_factory=dict)


class Pass:
    """Base class: subclasses set ``name`` and ``options`` and implement ``run``."""

    name = ""
    options: tuple[Option, ...] = ()

    def __init__(self, **settings: Any) -> None:
        known = {o.name: o for o in self.options}
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise PassConfigError(
                f"{self.name}: unknown setting(s) {', '.join(unknown)}; settings are: {', '.join(known)}"
            )
        self.settings: dict[str, Any] = {}
        for o in self.options:
            value = settings.get(o.name, o.default)
            if value is not None and o.type is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if value is not None and not isinstance(value, o.type):
                raise PassConfigError(f"{self.name}: setting {o.name} must be a {o.type.__name__}, got {value!r}")
            if o.choices and value not in o.choices:
                raise PassConfigError(
                    f"{self.name}: setting {o.name} must be one of {', '.join(map(str, o.choices))}, got {value!r}"
                )
            self.settings[o.name] = value
        self.validate()

    def validate(self) -> None:
        """Refuse settings that make no sense (raise PassConfigError)."""

    def run(self, ctx: BuildContext, model_path: Path) -> PassResult:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {"name": cls.name, "options": [o.to_dict() for o in cls.options]}


def param_count(model: onnx.ModelProto) -> int:
    """Scalars in the model's float initializers (weights, biases, BatchNorm vectors)."""
    from onnx import TensorProto

    return sum(
        int(np.prod(t.dims))
        for t in model.graph.initializer
        if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)
    )


def file_sizes(path: str | Path) -> dict[str, int]:
    """Size on disk and zlib-compressed size (what zero weights save in a compressed download)."""
    raw = Path(path).read_bytes()
    return {"bytes": len(raw), "compressed_bytes": len(zlib.compress(raw, 6))}
