"""Inputs that hold one value for every sample, fixed in the graph the backend converts.

Silero VAD switches on its 0-d ``sr`` with an ``If`` that most converters refuse. When the data give such an input
one value (``--input-value sr=16000``, or a stream's ``.npz`` holding it once with the same value in every
sequence), a backend that needs it (``Backend.specialises_inputs``) converts the graph with the input replaced by
that value, constants folded and each ``If`` whose condition became constant replaced by the branch it takes
(:mod:`edgekit.converters.onnx_specialise`). Only a graph whose control flow changes is specialised. Fidelity is
still measured against the original model fed the value; the bundle's manifest lists the input under
``fixed_inputs`` and the agent accepts a request that sends that value or leaves it out (docs/INPUTS.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .build_prepare import Prepared
from .data import Dataset
from .data_formats import parse_input_values


def _one_value(name: str, datasets: list[Dataset | None]) -> np.ndarray | None:
    """The value ``name`` holds in every sample of ``datasets``, or None where it varies or is missing."""
    first = None
    for ds in datasets:
        for s in ds.samples if ds is not None else []:
            if name not in s:
                return None
            if first is None:
                first = np.asarray(s[name])
            elif s[name].shape != first.shape or not np.array_equal(s[name], first):
                return None
    return first


def fixed_values(p: Prepared) -> dict[str, np.ndarray]:
    """The inputs the data give one value, and that value (in the input's dtype)."""
    if p.fid_ds.synthetic:
        return {}
    if p.plan is not None:
        names = [n for n in p.fid_ds.meta["stream"].get("held_once", []) if n not in p.plan.spec.pairs]
    else:
        names = list(parse_input_values(p.opts.input_values) or {})
    values = {n: _one_value(n, [p.fid_ds, p.calib_ds, p.val_ds]) for n in names}
    return {n: v for n, v in values.items() if v is not None}


def _strip(ds: Dataset, names: set[str]) -> Dataset:
    """``ds`` without the inputs ``names`` in its samples."""
    samples = [{k: v for k, v in s.items() if k not in names} for s in ds.samples]
    return dataclasses.replace(ds, samples=samples, meta=dict(ds.meta))


def apply(p: Prepared, work: Path) -> tuple[Prepared, Path | None]:
    """``p`` for the specialised graph (its source, data without the fixed inputs) and the graph's path; ``p`` and
    None where the backend runs the graph as it is, no input holds one value, or fixing it changes no ``If``."""
    from edgekit.converters.onnx_specialise import specialise

    wants = getattr(p.be, "specialises_for", None)
    if not (wants(p.prof) if callable(wants) else getattr(p.be, "specialises_inputs", False)):
        return p, None
    fixed = fixed_values(p)
    if not fixed:
        return p, None
    result = specialise(p.src.proto, fixed)
    if not result.changed_control_flow:
        return p, None
    names = set(fixed)
    src = dataclasses.replace(p.src, proto=result.model, inputs=[s for s in p.src.inputs if s.name not in names])
    path = src.save(Path(work) / "specialised.onnx")
    fid_ds = _strip(p.fid_ds, names)
    points = p.points
    points.samples = {label: [{k: v for k, v in s.items() if k not in names} for s in ss]
                      for label, ss in points.samples.items()}  # fmt: skip
    points.base = {k: v for k, v in points.base.items() if k not in names}
    specs = {s.name: s for s in p.src.inputs}
    section = {
        "fixed_inputs": [
            {"name": n, "dtype": str(v.dtype), "shape": list(v.shape), "value": v.tolist()} for n, v in fixed.items()
        ],
        "if_inlined": dict(result.inlined),
        "nodes": {"before": result.nodes[0], "after": result.nodes[1]},
        "notes": result.notes(),
        "original_inputs": [specs[n].to_dict() for n in fixed],
    }
    p.log(f"specialised for {p.opts.backend}: {'; '.join(result.notes())}")
    new = dataclasses.replace(
        p,
        src=src,
        fid_ds=fid_ds,
        calib_ds=_strip(p.calib_ds, names) if p.calib_ds is not None else None,
        val_ds=_strip(p.val_ds, names) if p.val_ds is not None else None,
        runs=p.plan.runner(p.be, fid_ds) if p.plan else p.be,
        points=points,
        specialised=section,
    )
    return new, path
