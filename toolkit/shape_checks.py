"""A build's checks at each declared shape: fidelity data fitted to the min and max points, the fidelity records
there, host timings per shape and the bundle's ``shape_samples.npz`` the agent benchmarks each shape with.

The fidelity data (the user's, else synthetic) is at the typical point; the samples at another point are the same
samples cropped or wrapped (``numpy.pad(mode="wrap")``) to that shape, so their values stay real data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import ModelError
from .model import SourceModel, TensorSpec

POINT_SAMPLES = 8  # samples per extra shape point (the typical point uses every fidelity sample)
SHAPE_SAMPLES = "shape_samples.npz"

Feed = Dict[str, np.ndarray]


def data_specs(src: SourceModel) -> List[TensorSpec]:
    """The inputs as data files are read: a dynamic batch is the typical batch (data has samples along axis 0),
    other dynamic dimensions take the data's sizes."""
    plan = src.shapes
    if plan is None or not plan.dynamic:
        return src.inputs
    out = []
    for s in src.inputs:
        shape = list(s.shape)
        if shape and not isinstance(shape[0], int) and len(shape) >= 2:
            shape[0] = plan.typical[s.name][0]
        out.append(TensorSpec(s.name, shape, s.dtype, s.layout))
    return out


def typical_specs(src: SourceModel) -> List[TensorSpec]:
    """The inputs at the typical point (for synthetic data)."""
    plan = src.shapes
    if plan is None:
        return src.inputs
    return [TensorSpec(s.name, list(plan.typical[s.name]), s.dtype, s.layout) for s in src.inputs]


def fit(array: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``array`` cropped or wrapped to ``shape`` (same rank)."""
    grow = [(0, max(0, want - have)) for have, want in zip(array.shape, shape)]
    if any(after for _, after in grow):
        array = np.pad(array, grow, mode="wrap")
    return np.ascontiguousarray(array[tuple(slice(0, w) for w in shape)])


def shape_text(point: Dict[str, List[int]]) -> str:
    return " ".join(f"{k}=[{','.join(str(d) for d in v)}]" for k, v in point.items())


class PointChecks:
    """The points other than the fidelity data's own, their samples and reference outputs."""

    def __init__(self, src: Optional[SourceModel], samples: Sequence[Feed]) -> None:
        plan = src.shapes if src is not None else None
        base = {k: list(v.shape) for k, v in samples[0].items()}
        self.points: List[Tuple[str, Dict[str, List[int]]]] = [] if plan is None else plan.points()
        self.extra = [(label, p) for label, p in self.points if p != base]
        self.samples = {label: [{k: fit(v, p[k]) for k, v in s.items()} for s in samples[:POINT_SAMPLES]]
                        for label, p in self.extra}  # fmt: skip
        self.base = base
        self.references: Dict[str, list] = {}

    def reference(self, be: Any, reference_path: Path, session: Any) -> None:
        """Run the reference at each extra point; a model that cannot run there is refused with the shape."""
        for label, point in self.extra:
            try:
                self.references[label] = be.reference_outputs(reference_path, self.samples[label], session=session)
            except Exception as e:  # the runtime's own exception types
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ModelError(
                    f"the reference model cannot run at the {label} declared shape {shape_text(point)}: {first}; "
                    "declare the sizes it takes with --input-shape (a range [MIN:MAX] or a set [A,B,C])"
                ) from None

    def check(
        self,
        step: str,
        model_path: Path,
        record: Dict[str, Any],
        predict: Callable[[Path, list], list],
        judge: Callable[[str, list, list], Dict[str, Any]],
        log: Callable[[str], None],
    ) -> Dict[str, Any]:
        """Check ``step``'s model at each extra point; the records go in ``record["at_shapes"]``."""
        if not self.extra:
            return record
        own = [label for label, p in self.points if p == self.base]
        done = [{"label": own[0] if own else "data", "shapes": self.base, "passed": record["passed"]}]
        for label, point in self.extra:
            sub = judge(f"{step} @ {label}", self.references[label], predict(model_path, self.samples[label]))
            done.append({"label": label, "shapes": point, **sub})
            log(f"    @ {label} {shape_text(point)}: {'ok' if sub['passed'] else 'DEGRADED'}")
        record["at_shapes"] = done
        record["passed"] = all(d["passed"] for d in done)
        return record

    def time(self, timer: Callable[[Feed], Dict[str, Any]]) -> List[Dict[str, Any]]:
        """Host timings at each extra point (``timer(feed)`` -> the timing dict)."""
        return [{"label": label, "shapes": point, **timer(self.samples[label][0])} for label, point in self.extra]

    def save(self, path: Path) -> Optional[Path]:
        """One sample per extra point, keys ``LABEL.INPUT``, for the agent's per-shape benchmark; None if none."""
        if not self.extra:
            return None
        arrays: Dict[str, Any] = {
            f"{label}.{k}": v for label, _ in self.extra for k, v in self.samples[label][0].items()
        }
        np.savez(path, **arrays)
        return Path(path)


def manifest_inputs(src: SourceModel) -> List[Dict[str, Any]]:
    """The manifest's inputs; those with declared or dynamic dimensions carry ``allowed`` (the agent checks it)."""
    plan = src.shapes
    out = []
    for s in src.inputs:
        entry = s.to_dict()
        if plan is not None and any(not isinstance(d, int) for d in plan.declared.get(s.name, ())):
            entry["allowed"] = plan.allowed(s.name)
        out.append(entry)
    return out
