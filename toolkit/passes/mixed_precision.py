"""INT8 under an accuracy budget: keep the most sensitive layers in float (mixed precision).

``--budget`` says how much quality an INT8 build may lose against the FP32 reference:

- ``1pt`` / ``0.5pt``: accuracy points (needs ``labels`` in the validation data);
- ``cos=0.999``: mean cosine similarity of the outputs to the reference's (no labels needed);
- ``top1=0.99``: top-1 agreement with the reference (class-like outputs, no labels needed).

How the float layers are chosen:

1. **Candidates** are the reference model's weighted layers: Conv, ConvTranspose, Gemm and
   MatMul with a constant weight, the layers whose weights and inputs every INT8 scheme
   quantizes. Each is named by its ONNX node name and carries the tensor names its output is
   known by once a following BatchNormalization or bias Add is folded into it, so that every
   backend can find it in its own graph (:meth:`edgekit.converters.base.Backend.quantize`).
2. **Sensitivity, one cheap pass, no backend quantization**: "this layer alone quantized".
   For each candidate, a copy of the FP32 reference in which only that layer is fake-quantized
   (weights int8 symmetric per output channel, its input activation uint8 per tensor with the
   min/max range seen on the calibration samples: the scheme the backends use) runs on up to
   ``SENSITIVITY_SAMPLES`` calibration samples. The layer's sensitivity is the noise-to-signal
   ratio it causes at the model's outputs, ``||y_q - y||^2 / ||y||^2`` (mean over samples,
   summed over outputs). Quantizing one layer at a time isolates that layer's own error,
   which comparing activations of a fully quantized model (SNR per layer) does not: there
   every layer inherits the error of all layers before it. It costs one short run per layer.
3. **Greedy search with the real backend**: quantize everything (the plain INT8 build); if
   the budget does not hold on the evaluation data, keep layers in float in order of
   sensitivity, one at a time for the first two steps, then in doubling groups, each
   candidate quantized by the backend itself and measured with :func:`edgekit.fidelity.compare`
   on the evaluation data (``--val``; the calibration data itself only when no ``--val`` is
   given, with a warning). When a group made the budget hold, its layers are tried back in
   INT8 one by one (least sensitive first) while evaluations are left. Full evaluations are
   capped (``Budget.max_evaluations``).

If the budget does not hold within the cap, or with every candidate in float, the build
fails with the best value reached (:class:`~edgekit.errors.FidelityError`), unless degraded
builds are allowed: then the best candidate is kept and marked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .. import progress
from ..errors import FidelityError
from .mixed_precision_budget import MAX_EVALUATIONS, SENSITIVITY_SAMPLES, Budget, BudgetError, prepare
from .mixed_precision_layers import WEIGHTED_OPS, Layer, candidate_layers, sensitivity

if TYPE_CHECKING:
    from edgekit.converters.base import Backend, BuildContext

__all__ = [
    "MAX_EVALUATIONS",
    "SENSITIVITY_SAMPLES",
    "WEIGHTED_OPS",
    "Budget",
    "BudgetError",
    "Layer",
    "candidate_layers",
    "prepare",
    "search",
    "sensitivity",
]


# -- the search -------------------------------------------------------------------------------
@dataclass
class _Eval:
    exclude: tuple
    path: Path
    value: float | None
    score: float
    holds: bool
    detail: dict
    size_bytes: int = 0
    metrics: dict = field(default_factory=dict)


def _size(path: str | Path) -> int:
    from pathlib import Path

    p = Path(path)
    total = p.stat().st_size
    if p.suffix == ".xml" and p.with_suffix(".bin").is_file():
        total += p.with_suffix(".bin").stat().st_size
    return total


def _fmt(budget: Budget, value: float | None) -> str:
    if value is None:
        return "n/a"
    if budget.kind == "accuracy":
        return f"{value:.2f} pt drop"
    if budget.kind == "task":
        return f"{budget.metric or 'score'} {value:.4f}"
    return f"{'cos' if budget.kind == 'cosine' else 'top-1'} {value:.6f}"


def search(be: Backend, ctx: BuildContext, plain: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """INT8 ``ctx.reference_path`` with as few float layers as keep ``ctx.budget``; returns (model file, section).

    ``plain``: the all-INT8 model when the backend has already built it (saves one quantization).
    """
    budget = Budget.parse(ctx.budget)
    with progress.of(ctx.log).step(f"--budget {budget}: evaluating candidates", total=budget.max_evaluations) as step:
        return _search(be, ctx, plain, step)


def _search(be: Backend, ctx: BuildContext, plain: Path | None, step: progress.Step) -> tuple[Path, dict[str, Any]]:
    import onnx

    from .. import fidelity

    t0 = time.perf_counter()
    budget = Budget.parse(ctx.budget)
    data = ctx.evaluation if ctx.evaluation is not None else ctx.calib
    budget.check_data(data)
    task, metric = getattr(ctx, "task", None), getattr(ctx, "metric", None)
    budget.check_task(task, metric)
    in_sample = data is ctx.calib or (ctx.calib is not None and data.source == ctx.calib.source)
    # the user's model is the reference, also when an earlier pass (pruning) replaced ctx.reference_path
    original = ctx.source.save(ctx.workdir / "budget.reference.onnx")
    reference = be.reference_outputs(original, data.samples, session=ctx.session)
    evals = []

    def evaluate(exclude: Sequence[Layer]) -> _Eval:
        path = plain if (plain is not None and not exclude) else be.quantize(ctx, list(exclude))
        outputs = be.predict(path, data.samples, session=ctx.session)
        metrics = fidelity.compare(reference, outputs, data.labels, task=task, metric=metric)
        value, score, holds, detail = budget.measure(metrics)
        e = _Eval(tuple(layer.name for layer in exclude), path, value, score, holds, detail, _size(path), metrics)
        evals.append(e)
        step.advance()
        ctx.log(
            f"  budget {budget}: {len(exclude)} layer(s) float -> {_fmt(budget, value)} "
            f"({'holds' if holds else 'over budget'})"
        )
        return e

    model = onnx.load(str(ctx.reference_path))
    layers = candidate_layers(model)
    section = {
        **budget.to_dict(),
        "measured_on": {**data.describe(), "held_out": not in_sample},
        "method": (
            "sensitivity: output noise-to-signal ratio with only that layer fake-quantized (int8 per-channel "
            "weights, uint8 per-tensor input), on calibration samples; then layers kept float greedily in "
            "that order, each candidate quantized by the backend and measured on the evaluation data"
        ),
        "candidates": len(layers),
        "max_evaluations": budget.max_evaluations,
        "warnings": [],
    }
    if in_sample:
        section["warnings"].append(
            f"the budget {budget} was measured on the calibration data itself: pass --val with "
            "held-out data, or the float layers are chosen for the samples they were calibrated on"
        )
    first = evaluate([])
    section["all_int8"] = {"value": first.value, **first.detail, "size_bytes": first.size_bytes}
    steps: list[dict[str, Any]]
    trimmed: list[dict[str, Any]]
    steps, trimmed, chosen = [], [], first
    sens = {}
    if not first.holds and layers:
        names = (
            be.layer_names(ctx, layers) if hasattr(be, "layer_names") else {layer.name: layer.name for layer in layers}
        )
        missing = [layer.name for layer in layers if not names.get(layer.name)]
        usable = [layer for layer in layers if names.get(layer.name)]
        if missing:
            section["not_in_backend_graph"] = missing
        k = min(budget.sensitivity_samples, len(ctx.calib))
        ts = time.perf_counter()
        sens = sensitivity(be, model, usable, ctx.calib.samples[:k], ctx.workdir)
        ctx.log(
            f"  budget {budget}: sensitivity of {len(usable)} layer(s) on {k} calibration samples in "
            f"{time.perf_counter() - ts:.1f} s"
        )
        section["sensitivity"] = {
            "samples": k,
            "seconds": round(time.perf_counter() - ts, 2),
            "ranking": [
                {"layer": layer.name, "op": layer.op, "nsr": round(sens[layer.name], 8)}
                for layer in sorted(usable, key=lambda layer: -sens[layer.name])
            ],
        }
        order = sorted(usable, key=lambda layer: -sens[layer.name])
        floats: list[Layer]
        floats, pos, group, best = [], 0, 1, first
        while pos < len(order) and len(evals) < budget.max_evaluations:
            added = order[pos : pos + group]
            pos += len(added)
            before = chosen
            chosen = evaluate(floats + added)
            floats = floats + added
            steps.append(
                {
                    "added": [layer.name for layer in added],
                    "float_layers": len(floats),
                    "value_before": before.value,
                    "value_after": chosen.value,
                    "holds": chosen.holds,
                    "size_bytes": chosen.size_bytes,
                }
            )
            if chosen.score > best.score:
                best = chosen
            if chosen.holds:
                break
            if len(steps) >= 2:
                group *= 2
        if chosen.holds and len(steps[-1]["added"]) > 1:
            # the last group made it hold: try its layers back in int8, least sensitive first
            for layer in sorted(order[pos - len(steps[-1]["added"]) : pos], key=lambda candidate: sens[candidate.name]):
                if len(evals) >= budget.max_evaluations:
                    break
                trial = evaluate([kept for kept in floats if kept.name != layer.name])
                ok = trial.holds
                trimmed.append({"layer": layer.name, "value_without": trial.value, "back_in_int8": ok})
                if ok:
                    floats = [kept for kept in floats if kept.name != layer.name]
                    chosen = trial
        if not chosen.holds:
            chosen = best
    by_name = {layer.name: layer for layer in layers}
    float_layers = []
    for name in chosen.exclude:
        entry = {**by_name[name].to_dict(), "sensitivity_nsr": round(sens.get(name, 0.0), 8)}
        for s in steps:
            if name in s["added"]:
                entry.update(
                    {
                        "value_before": s["value_before"],
                        "value_after": s["value_after"],
                        "added_with": len(s["added"]) - 1,
                    }
                )
        float_layers.append(entry)
    section.update(
        {
            "steps": steps,
            "trimmed": trimmed,
            "float_layers": float_layers,
            "float_layer_names": list(chosen.exclude),
            "evaluations": len(evals),
            "final": {
                "value": chosen.value,
                **chosen.detail,
                "budget": budget.value,
                "met": chosen.holds,
                "size_bytes": chosen.size_bytes,
            },
            "seconds": round(time.perf_counter() - t0, 2),
        }
    )
    if not section["warnings"]:
        del section["warnings"]
    ctx.log(
        f"  budget {budget}: {'met' if chosen.holds else 'NOT met'} with {len(chosen.exclude)} of {len(layers)} "
        f"layer(s) float ({_fmt(budget, chosen.value)}, {len(evals)} evaluations)"
    )
    if not chosen.holds and not ctx.allow_degraded:
        tried = len(chosen.exclude)
        raise FidelityError(
            f"INT8 cannot meet --budget {budget} on {data.describe()['source']} ({len(data)} samples): the best "
            f"reached is {_fmt(budget, chosen.value)} with {tried} of {len(layers)} layer(s) kept in float "
            f"(all-int8: {_fmt(budget, first.value)}; {len(evals)} evaluations). Try --precision fp16, more or more "
            "representative calibration data (--calib, ~100-300 samples), a looser budget, or --allow-degraded to "
            "write the best candidate anyway. The build was not written.",
            report=section,
        )
    return chosen.path, section
