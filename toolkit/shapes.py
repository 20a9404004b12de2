"""Declared input shapes: ranges and sets in ``--input-shape``, which dimensions a build keeps dynamic, the shapes
fidelity and benchmarks run at (min, typical, max), and the allowed shapes the manifest records.

``--input-shape x=1,3,[32:960],[32:960]`` declares a range per dimension (both ends included),
``--input-shape len=[8,16,32]`` a set. A dimension the model leaves dynamic and nobody declares is "free": its
typical size comes from the data (else batch 1, else the model's metadata), it runs at half, the typical size and
double, and any size is allowed. A backend or accelerator that needs static shapes gets every dimension fixed at
the typical point (see docs/SHAPES.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import ModelError

# ONNX Runtime execution providers that need static shapes (ORT's NNAPI/Core ML partition checkers refuse a node
# with a dynamic input; QNN's HTP compiles a fixed graph).
STATIC_PROVIDERS = ("NNAPIExecutionProvider", "QNNExecutionProvider", "CoreMLExecutionProvider")
# OpenVINO devices that need static shapes ("Dynamic shapes: CPU Yes, GPU Partial, NPU No",
# device_profiles/support/openvino.toml)
STATIC_OPENVINO_DEVICES = ("NPU",)
# MNN backends that need static shapes (MNN's NNAPI backend compiles a fixed graph)
STATIC_MNN_BACKENDS = ("NN",)
LABELS = ("min", "typical", "max")


@dataclass(frozen=True)
class Range:
    """A dimension allowed anywhere in ``[lo, hi]``."""

    lo: int
    hi: int

    def values(self) -> List[int]:
        common = math.gcd(self.lo, self.hi)
        # the middle on a stride both ends share: their common divisor, else (when that lands on an end) their
        # power-of-two factor, at most 32
        for step in (common, min(32, common & -common)):
            mid = self.lo + ((self.hi - self.lo) // 2 // step) * step
            if self.lo < mid < self.hi:
                return [self.lo, mid, self.hi]
        return [self.lo, self.lo + (self.hi - self.lo) // 2, self.hi]

    def allows(self, size: int) -> bool:
        return self.lo <= size <= self.hi

    def to_json(self) -> Dict[str, int]:
        return {"min": self.lo, "max": self.hi}

    def __str__(self) -> str:
        return f"[{self.lo}:{self.hi}]"


@dataclass(frozen=True)
class Choice:
    """A dimension allowed at one of a few sizes."""

    sizes: Tuple[int, ...]

    def values(self) -> List[int]:
        s = sorted(self.sizes)
        return [s[0], s[(len(s) - 1) // 2], s[-1]]

    def allows(self, size: int) -> bool:
        return size in self.sizes

    def to_json(self) -> Dict[str, List[int]]:
        return {"values": sorted(self.sizes)}

    def __str__(self) -> str:
        return "[" + ",".join(str(v) for v in sorted(self.sizes)) + "]"


Decl = Union[int, Range, Choice, None]  # None: dynamic in the model, not declared (free)


def _split(text: str) -> List[str]:
    """``1,3,[32:960],[8,16]`` -> ``["1", "3", "[32:960]", "[8,16]"]`` (commas inside brackets kept)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise ValueError
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise ValueError
    return parts + [cur]


def parse_dim(text: str) -> Decl:
    """``"48"`` -> 48, ``"[32:960]"`` -> Range(32, 960), ``"[8,16,32]"`` -> Choice((8, 16, 32))."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        if ":" in inner:
            lo, hi = (int(v) for v in inner.split(":"))
            if not 0 < lo <= hi:
                raise ValueError
            return Range(lo, hi) if lo < hi else lo
        sizes = tuple(sorted({int(v) for v in inner.split(",")}))
        if not sizes or sizes[0] <= 0:
            raise ValueError
        return Choice(sizes) if len(sizes) > 1 else sizes[0]
    value = int(text)
    if value <= 0:
        raise ValueError
    return value


def parse_input_shapes(items: Optional[Sequence[str]]) -> Dict[str, List[Decl]]:
    """``["x=1,3,[32:960],[32:960]", "len=[8,16,32]"]`` -> ``{"x": [1, 3, Range(32, 960), ...], ...}``."""
    shapes: Dict[str, List[Decl]] = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [parse_dim(d) for d in _split(dims)]
        except ValueError:
            raise ModelError(
                f"bad --input-shape {item!r}: expected NAME=D1,D2,... where each D is a positive integer, a range "
                "[MIN:MAX] or a set [A,B,C], e.g. x=1,3,224,224 or x=1,3,[32:960],[32:960] or len=[8,16,32]"
            ) from None
    return shapes


def as_decl(value: Any) -> Decl:
    """One dimension as given in a Python ``input_shapes`` dict: an int, a Range/Choice, a ``"[a:b]"`` string,
    a list/tuple of sizes (a set) or a symbolic name (free)."""
    if isinstance(value, (Range, Choice)) or value is None:
        return value
    if isinstance(value, bool):
        raise ModelError(f"bad input shape dimension {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ModelError(f"bad input shape dimension {value}: sizes are positive integers")
        return value
    if isinstance(value, (list, tuple)):
        return parse_dim("[" + ",".join(str(v) for v in value) + "]")
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            return parse_dim(value)
        except ValueError:
            raise ModelError(f"bad input shape dimension {value!r}: expected [MIN:MAX] or [A,B,C]") from None
    return None  # a symbolic name: dynamic, undeclared


def fmt(dims: Sequence[Decl]) -> str:
    return ",".join("?" if d is None else str(d) for d in dims)


@dataclass
class ShapePlan:
    """What a build does with its inputs' shapes."""

    declared: Dict[str, List[Decl]]  # per input, per dimension (the model's fixed sizes as ints)
    typical: Dict[str, List[int]]  # per input: the shape fidelity data and the first benchmark use
    dynamic: bool  # the built model keeps its dynamic dimensions
    note: Optional[str] = None  # why the shapes were fixed, when they were
    free: Dict[str, List[int]] = field(default_factory=dict)  # per input: positions dynamic and undeclared

    def kept(self, name: str) -> List[int]:
        """Positions of ``name`` that stay dynamic in the built model."""
        if not self.dynamic:
            return []
        return [i for i, d in enumerate(self.declared[name]) if not isinstance(d, int)]

    def points(self) -> List[Tuple[str, Dict[str, List[int]]]]:
        """``[(label, {input: shape})]`` fidelity and benchmarks run at: min, typical, max (identical ones once)."""
        if not self.dynamic:
            return [("typical", self.typical)]
        out: List[Tuple[str, Dict[str, List[int]]]] = []
        for k, label in enumerate(LABELS):
            point = {}
            for name, dims in self.declared.items():
                shape = list(self.typical[name])
                for i, d in enumerate(dims):
                    if isinstance(d, (Range, Choice)):
                        shape[i] = shape[i] if label == "typical" and d.allows(shape[i]) else d.values()[k]
                    elif d is None and i in self.free.get(name, ()) and not _batch_like(i, dims):
                        shape[i] = _free_values(shape[i])[k]
                point[name] = shape
            if all(point != p for _, p in out):
                out.append((label, point))
        return out

    def allowed(self, name: str) -> List[Any]:
        """The manifest's allowed sizes of ``name``: per dimension an int, {"min", "max"}, {"values"} or None."""
        if not self.dynamic:
            return list(self.typical[name])
        return [d.to_json() if isinstance(d, (Range, Choice)) else d for d in self.declared[name]]

    def section(self) -> Dict[str, Any]:
        """The report's and manifest's ``shapes`` section."""
        return {
            "dynamic": self.dynamic,
            "allowed": {name: self.allowed(name) for name in self.declared},
            "points": [{"label": label, "shapes": point} for label, point in self.points()],
            **({"fixed_because": self.note} if self.note else {}),
        }


def _batch_like(i: int, dims: Sequence[Decl]) -> bool:
    return i == 0 and len(dims) >= 2


def _free_values(size: int) -> List[int]:
    """Half, the size, double: rounded to the size's largest power-of-two factor (at most 32), so a model that
    needs multiples of a stride still gets them."""
    step = min(32, size & -size)
    return [max(step, (size // 2) // step * step), size, size * 2]


def static_reason(backend: str, dynamic_shapes: bool, settings: Dict[str, Any]) -> Optional[str]:
    """Why a build for this backend and profile settings needs static shapes, or None when it runs dynamic ones.

    ``dynamic_shapes``: the backend table's answer (``Row.dynamic_shapes``); ``settings``: the profile's section
    for the backend (``providers`` for ONNX Runtime, ``device`` for OpenVINO)."""
    if not dynamic_shapes:
        return f"{backend} runs static shapes only in this release"
    providers = [p for p in settings.get("providers") or () if p in STATIC_PROVIDERS]
    if providers:
        return f"the profile's {providers[0]} needs static shapes"
    if backend == "mnn" and str(settings.get("backend") or "").upper() in STATIC_MNN_BACKENDS:
        return f"the profile's MNN backend {settings['backend']} needs static shapes"
    device = str(settings.get("device") or "")
    for d in STATIC_OPENVINO_DEVICES:
        if d in device.replace(",", ":").split(":"):
            return f"the profile's OpenVINO device {device} includes the {d}, which needs static shapes"
    return None
