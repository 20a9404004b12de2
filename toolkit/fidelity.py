"""Fidelity: how far a built model is from the reference, measured on real inputs.

Every conversion or shrinking step is compared with the *reference* (the user's model,
shapes fixed, FP32) on the same samples: max and mean absolute error, cosine similarity
(per sample, then min and mean), the error relative to the output's range, top-1 agreement
on outputs with a real class axis, and accuracy when labels exist. Non-finite outputs and
shape changes always fail: they are how a runtime that computes garbage (an ARM-only kernel
run on x86, say) shows itself.

When the task is known (``task=``, see :mod:`edgekit.tasks`), both models' outputs are also
decoded (boxes after NMS, text regions, CTC strings, ...) and the gate judges the task metric
(box F1, mask IoU, character accuracy, ...) instead of cosines: a detector is good when its
boxes are, whatever the cosine of its raw head says. A user metric (``metric=``) joins the gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import FidelityError
from .tasks import Inference, TaskSpec, UserMetric, evaluate, judge, load_metric, parse_task


@dataclass(frozen=True)
class Thresholds:
    min_cosine: float = 0.999  # mean over samples of the per-sample cosine similarity
    min_top1: float = 0.98
    max_accuracy_drop: float = 1.0  # in accuracy points
    max_range_error: float = 1e-3  # max |error| / output range, used where cosine is ill-conditioned
    precision: str | None = None  # picks the task gates (edgekit.tasks.GATES)
    min_score: float | None = None  # replaces the task's primary gate (or the user metric's)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "min_cosine": self.min_cosine,
            "min_top1": self.min_top1,
            "max_accuracy_drop": self.max_accuracy_drop,
            "max_range_error": self.max_range_error,
        }
        if self.precision is not None:
            d["precision"] = self.precision
        if self.min_score is not None:
            d["min_score"] = self.min_score
        return d


DEFAULT_THRESHOLDS = {
    "fp32": Thresholds(min_cosine=0.99999, min_top1=0.99, max_accuracy_drop=0.5, max_range_error=1e-4),
    "fp16": Thresholds(min_cosine=0.999, min_top1=0.98, max_accuracy_drop=0.5, max_range_error=1e-2),
    "int8": Thresholds(min_cosine=0.98, min_top1=0.9, max_accuracy_drop=2.0, max_range_error=5e-2),
    "int8-dynamic": Thresholds(min_cosine=0.98, min_top1=0.9, max_accuracy_drop=2.0, max_range_error=5e-2),
}
# an output is near-constant (its cosine ill-conditioned) when its spread is below this share of its range
ILL_CONDITIONED_SPREAD = 1e-2


def thresholds_for(
    precision: str,
    min_cosine: float | None = None,
    min_top1: float | None = None,
    max_accuracy_drop: float | None = None,
    min_score: float | None = None,
) -> Thresholds:
    base = DEFAULT_THRESHOLDS.get(precision, Thresholds())
    return Thresholds(
        min_cosine=base.min_cosine if min_cosine is None else min_cosine,
        min_top1=base.min_top1 if min_top1 is None else min_top1,
        max_accuracy_drop=base.max_accuracy_drop if max_accuracy_drop is None else max_accuracy_drop,
        max_range_error=base.max_range_error,
        precision=precision,
        min_score=min_score,
    )


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _is_class_like(arr: np.ndarray) -> bool:
    """A real class axis: [N, C] scores, or scores whose last axis is a probability distribution (softmax per
    step, as in sequence recognisers). Not the anchors of a detection head nor the pixels of a map row."""
    if not np.issubdtype(arr.dtype, np.floating) or arr.ndim < 2 or arr.shape[-1] < 2:
        return False
    if arr.ndim == 2:
        return True
    return bool(arr.min() >= 0 and np.allclose(arr.sum(-1), 1.0, atol=1e-3))


def _scale(refs: list[np.ndarray]) -> float:
    """The output's range: 1 for values inside [0, 1] (probabilities), else the reference's observed range."""
    lo = min(float(r.min()) for r in refs)
    hi = max(float(r.max()) for r in refs)
    if lo >= 0 and hi <= 1:
        return 1.0
    return hi - lo if hi > lo else max(abs(hi), 1e-12)


def _class_labels(labels: Any) -> np.ndarray | None:
    """Labels as class ids (a 1-D integer array), or None for boxes, masks or transcripts (the task scores those)."""
    if labels is None:
        return None
    try:
        arr = np.asarray(labels)
    except ValueError:  # masks of different sizes
        return None
    return arr if arr.ndim == 1 and arr.dtype.kind in "iu" else None


def _as_task(task: TaskSpec | Inference | str | None) -> tuple[TaskSpec | None, str | None]:
    if task is None:
        return None, None
    if isinstance(task, Inference):
        return task.spec, task.reason
    return parse_task(task), None


def compare(
    reference: list[dict[str, np.ndarray]],
    candidate: list[dict[str, np.ndarray]],
    labels: Any = None,
    task: TaskSpec | Inference | str | None = None,
    metric: UserMetric | str | None = None,
) -> dict[str, Any]:
    """Compare two lists of output dicts (one dict per sample). Returns a metrics dict.

    ``task``: a spec (or its text, or an :class:`~edgekit.tasks.Inference`) adds a ``task`` section with the
    decoded task metrics; ``metric``: a user metric (or ``module:function``) adds its score to that section.
    """
    if len(reference) != len(candidate):
        raise ValueError("reference and candidate have different sample counts")
    outputs: dict[str, dict[str, Any]] = {}
    shapes_ok = True
    for name in reference[0]:
        refs = [np.asarray(r[name]) for r in reference]
        cands = [np.asarray(c[name]) for c in candidate]
        non_finite = int(sum((~np.isfinite(c.astype(np.float64))).sum() for c in cands if c.dtype.kind == "f"))
        if any(r.shape != c.shape for r, c in zip(refs, cands)):
            outputs[name] = {"error": f"shape mismatch: reference {refs[0].shape}, built {cands[0].shape}"}
            shapes_ok = False
            continue
        full = [(r, c) for r, c in zip(refs, cands) if r.size]
        if not full:  # empty in every sample (a KV-cache branch's zero-length placeholders): the shapes agree
            outputs[name] = {"exact_match": 1.0, "non_finite": 0, "empty": True}
            continue
        refs, cands = [r for r, _ in full], [c for _, c in full]
        if refs[0].dtype.kind not in "fc":
            equal = float(np.mean([np.array_equal(r, c) for r, c in zip(refs, cands)]))
            outputs[name] = {"exact_match": equal, "non_finite": 0}
            continue
        diffs = [
            np.abs(r.astype(np.float64) - np.nan_to_num(c.astype(np.float64), nan=np.inf)) for r, c in zip(refs, cands)
        ]
        cos = [_cosine(r, np.nan_to_num(c)) for r, c in zip(refs, cands)]
        scale = _scale(refs)
        spread = float(np.std(np.concatenate([r.astype(np.float64).ravel() for r in refs])))
        m: dict[str, Any] = {
            "max_abs": float(max(d.max() for d in diffs)) if non_finite == 0 else float("inf"),
            "mean_abs": float(np.mean([d.mean() for d in diffs])) if non_finite == 0 else float("inf"),
            "cosine_min": float(min(cos)),
            "cosine_mean": float(np.mean(cos)),
            "non_finite": non_finite,
            "reference_range": [float(min(r.min() for r in refs)), float(max(r.max() for r in refs))],
        }
        m["range_error"] = m["max_abs"] / scale
        m["cosine_ill_conditioned"] = spread < ILL_CONDITIONED_SPREAD * scale
        if _is_class_like(refs[0]):
            rt = np.concatenate([r.reshape(-1, r.shape[-1]).argmax(-1) for r in refs])
            ct = np.concatenate([c.reshape(-1, c.shape[-1]).argmax(-1) for c in cands])
            m["top1_agreement"] = float(np.mean(rt == ct))
            classes = _class_labels(labels)
            if classes is not None and len(classes) == len(rt):
                m["accuracy_reference"] = float(np.mean(rt == classes) * 100)
                m["accuracy"] = float(np.mean(ct == classes) * 100)
        outputs[name] = m
    result: dict[str, Any] = {"samples": len(reference), "outputs": outputs}
    spec, reason = _as_task(task)
    user = load_metric(metric) if isinstance(metric, str) else metric
    finite = all(not m.get("non_finite") for m in outputs.values())
    if spec is not None or user is not None:
        section: dict[str, Any] = {
            "task": str(spec) if spec else "generic",
            "family": spec.family if spec else "generic",
        }
        if spec is not None and spec.family != "generic" and shapes_ok and finite:
            clean = [{k: np.asarray(v) for k, v in c.items()} for c in candidate]
            section = evaluate(spec, reference, clean, labels)
        if reason:
            section["reason"] = reason
        if user is not None and shapes_ok and finite:
            section["user_metric"] = {**user.to_dict(), "value": user(reference, candidate, labels)}
        result["task"] = section
    return result


def _user_gate(
    section: dict[str, Any], user: UserMetric | None, reference: Any, labels: Any, thresholds: Thresholds
) -> None:
    """Fill the user metric's minimum: --min-score, else 1% below the reference's score against itself."""
    entry = section.get("user_metric")
    if entry is None:
        return
    if thresholds.min_score is not None:
        entry["min"], entry["gate"] = thresholds.min_score, "--min-score"
    elif user is not None:
        own = user(reference, reference, labels)
        entry["min"], entry["gate"] = own - 0.01 * abs(own), f"1% below the reference's own score {own:.6g}"


def verdict(metrics: dict[str, Any], thresholds: Thresholds) -> list[str]:
    """List of human-readable failures (empty when the step passes).

    NaN/Inf and shape changes always fail. With a known task or a user metric, those decide (see
    :func:`edgekit.tasks.judge`); otherwise cosine (or the error relative to the output's range where cosine is
    ill-conditioned), top-1 on real class axes and accuracy.
    """
    failures = []
    section: dict[str, Any] = metrics.get("task") or {}
    # a task metric or a user metric decides instead of the generic cosine/top-1 gates
    task_known = (section.get("family", "generic") != "generic" and "metrics" in section) or "user_metric" in section
    for name, m in metrics["outputs"].items():
        if "error" in m:
            failures.append(f"output {name}: {m['error']}")
            continue
        if m.get("non_finite"):
            failures.append(f"output {name}: {m['non_finite']} NaN/Inf values (the runtime computed garbage)")
            continue
        if task_known:
            continue
        if "exact_match" in m:
            if m["exact_match"] < 1.0:
                failures.append(
                    f"output {name}: integer output differs on {100 * (1 - m['exact_match']):.1f}% of samples"
                )
            continue
        if m.get("cosine_ill_conditioned"):
            if m["range_error"] > thresholds.max_range_error:
                failures.append(
                    f"output {name}: max error {m['range_error']:.3g} of the output's range > "
                    f"{thresholds.max_range_error} (near-constant output: cosine {m['cosine_mean']:.4f} not used)"
                )
        elif m["cosine_mean"] < thresholds.min_cosine:
            failures.append(f"output {name}: mean cosine similarity {m['cosine_mean']:.6f} < {thresholds.min_cosine}")
        if "top1_agreement" in m and m["top1_agreement"] < thresholds.min_top1:
            failures.append(f"output {name}: top-1 agreement {m['top1_agreement']:.3f} < {thresholds.min_top1}")
        if "accuracy" in m and m["accuracy_reference"] - m["accuracy"] > thresholds.max_accuracy_drop:
            failures.append(
                f"output {name}: accuracy {m['accuracy']:.2f}% vs reference {m['accuracy_reference']:.2f}% "
                f"(drop > {thresholds.max_accuracy_drop} points)"
            )
    if section:
        min_score = None if section.get("user_metric") else thresholds.min_score
        failures += judge(section, thresholds.precision, min_score, thresholds.max_accuracy_drop)
    return failures


def check_step(
    step: str,
    reference: list[dict[str, np.ndarray]],
    candidate: list[dict[str, np.ndarray]],
    labels: Any,
    thresholds: Thresholds,
    allow_degraded: bool = False,
    task: TaskSpec | Inference | str | None = None,
    metric: UserMetric | str | None = None,
) -> dict[str, Any]:
    """Compare, judge and return the step's record; raise FidelityError unless allowed."""
    user = load_metric(metric) if isinstance(metric, str) else metric
    metrics = compare(reference, candidate, labels, task=task, metric=user)
    if "task" in metrics:
        _user_gate(metrics["task"], user, reference, labels, thresholds)
    failures = verdict(metrics, thresholds)
    record = {"step": step, **metrics, "thresholds": thresholds.to_dict(), "passed": not failures, "failures": failures}
    if failures and not allow_degraded:
        knobs = "--min-score/--max-accuracy-drop" if "task" in metrics else "--min-cosine/--min-top1"
        raise FidelityError(
            f"fidelity check failed after step '{step}':\n  "
            + "\n  ".join(failures)
            + "\nThe build was not written. Use better calibration data, a higher precision, "
            f"adjust {knobs}, or pass --allow-degraded to keep it anyway.",
            report=record,
        )
    return record


def summary(record: dict[str, Any]) -> str:
    """One line: the worst output of a step (and the task metrics when a task is known)."""
    parts = []
    section = record.get("task")
    if section and "metrics" in section:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in section["metrics"].items() if not k.startswith("boxes_"))
        parts.append(f"task {section['task']}: {shown}")
    if section and "user_metric" in section:
        parts.append(f"metric {section['user_metric']['name']}: {section['user_metric']['value']:.6g}")
    for name, m in record["outputs"].items():
        if "cosine_min" in m:
            s = f"{name}: max|err| {m['max_abs']:.3g}, cos {m['cosine_mean']:.6f} (min {m['cosine_min']:.4f})"
            if "top1_agreement" in m:
                s += f", top-1 {100 * m['top1_agreement']:.1f}%"
            if "accuracy" in m:
                s += f", acc {m['accuracy']:.2f}% (ref {m['accuracy_reference']:.2f}%)"
            parts.append(s)
        elif "exact_match" in m:
            parts.append(f"{name}: exact {100 * m['exact_match']:.1f}%")
        else:
            parts.append(f"{name}: {m.get('error')}")
    return "; ".join(parts)
