"""Fidelity: how far a built model is from the reference, measured on real inputs.

Every conversion or shrinking step is compared with the *reference* (the user's model,
shapes fixed, FP32) on the same samples: max and mean absolute error, cosine similarity
(per sample, then min and mean), top-1 agreement for class-like outputs, and accuracy
when labels exist. Non-finite outputs always fail: they are how a runtime that computes
garbage (an ARM-only kernel run on x86, say) shows itself.
"""

from dataclasses import dataclass

import numpy as np

from .errors import FidelityError


@dataclass(frozen=True)
class Thresholds:
    min_cosine: float = 0.999  # mean over samples of the per-sample cosine similarity
    min_top1: float = 0.98
    max_accuracy_drop: float = 1.0  # in accuracy points

    def to_dict(self):
        return {"min_cosine": self.min_cosine, "min_top1": self.min_top1, "max_accuracy_drop": self.max_accuracy_drop}


DEFAULT_THRESHOLDS = {
    "fp32": Thresholds(min_cosine=0.99999, min_top1=0.99, max_accuracy_drop=0.5),
    "fp16": Thresholds(min_cosine=0.999, min_top1=0.98, max_accuracy_drop=0.5),
    "int8": Thresholds(min_cosine=0.98, min_top1=0.9, max_accuracy_drop=2.0),
    "int8-dynamic": Thresholds(min_cosine=0.98, min_top1=0.9, max_accuracy_drop=2.0),
}


def thresholds_for(precision, min_cosine=None, min_top1=None, max_accuracy_drop=None):
    base = DEFAULT_THRESHOLDS.get(precision, Thresholds())
    return Thresholds(
        min_cosine=base.min_cosine if min_cosine is None else min_cosine,
        min_top1=base.min_top1 if min_top1 is None else min_top1,
        max_accuracy_drop=base.max_accuracy_drop if max_accuracy_drop is None else max_accuracy_drop,
    )


def _cosine(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _is_class_like(arr):
    return arr.ndim >= 2 and arr.shape[-1] > 1 and np.issubdtype(arr.dtype, np.floating)


def compare(reference, candidate, labels=None):
    """Compare two lists of output dicts (one dict per sample). Returns a metrics dict."""
    if len(reference) != len(candidate):
        raise ValueError("reference and candidate have different sample counts")
    outputs = {}
    for name in reference[0]:
        refs = [np.asarray(r[name]) for r in reference]
        cands = [np.asarray(c[name]) for c in candidate]
        non_finite = int(sum((~np.isfinite(c.astype(np.float64))).sum() for c in cands if c.dtype.kind == "f"))
        if any(r.shape != c.shape for r, c in zip(refs, cands)):
            outputs[name] = {"error": f"shape mismatch: reference {refs[0].shape}, built {cands[0].shape}"}
            continue
        if refs[0].dtype.kind not in "fc":
            equal = float(np.mean([np.array_equal(r, c) for r, c in zip(refs, cands)]))
            outputs[name] = {"exact_match": equal, "non_finite": 0}
            continue
        diffs = [
            np.abs(r.astype(np.float64) - np.nan_to_num(c.astype(np.float64), nan=np.inf)) for r, c in zip(refs, cands)
        ]
        cos = [_cosine(r, np.nan_to_num(c)) for r, c in zip(refs, cands)]
        m = {
            "max_abs": float(max(d.max() for d in diffs)) if non_finite == 0 else float("inf"),
            "mean_abs": float(np.mean([d.mean() for d in diffs])) if non_finite == 0 else float("inf"),
            "cosine_min": float(min(cos)),
            "cosine_mean": float(np.mean(cos)),
            "non_finite": non_finite,
            "reference_range": [float(min(r.min() for r in refs)), float(max(r.max() for r in refs))],
        }
        if _is_class_like(refs[0]):
            rt = np.concatenate([r.reshape(-1, r.shape[-1]).argmax(-1) for r in refs])
            ct = np.concatenate([c.reshape(-1, c.shape[-1]).argmax(-1) for c in cands])
            m["top1_agreement"] = float(np.mean(rt == ct))
            if labels is not None and len(labels) == len(rt):
                m["accuracy_reference"] = float(np.mean(rt == labels) * 100)
                m["accuracy"] = float(np.mean(ct == labels) * 100)
        outputs[name] = m
    return {"samples": len(reference), "outputs": outputs}


def verdict(metrics, thresholds):
    """List of human-readable failures (empty when the step passes)."""
    failures = []
    for name, m in metrics["outputs"].items():
        if "error" in m:
            failures.append(f"output {name}: {m['error']}")
            continue
        if m.get("non_finite"):
            failures.append(f"output {name}: {m['non_finite']} NaN/Inf values (the runtime computed garbage)")
            continue
        if "exact_match" in m:
            if m["exact_match"] < 1.0:
                failures.append(
                    f"output {name}: integer output differs on {100 * (1 - m['exact_match']):.1f}% of samples"
                )
            continue
        if m["cosine_mean"] < thresholds.min_cosine:
            failures.append(f"output {name}: mean cosine similarity {m['cosine_mean']:.6f} < {thresholds.min_cosine}")
        if "top1_agreement" in m and m["top1_agreement"] < thresholds.min_top1:
            failures.append(f"output {name}: top-1 agreement {m['top1_agreement']:.3f} < {thresholds.min_top1}")
        if "accuracy" in m and m["accuracy_reference"] - m["accuracy"] > thresholds.max_accuracy_drop:
            failures.append(
                f"output {name}: accuracy {m['accuracy']:.2f}% vs reference {m['accuracy_reference']:.2f}% "
                f"(drop > {thresholds.max_accuracy_drop} points)"
            )
    return failures


def check_step(step, reference, candidate, labels, thresholds, allow_degraded=False):
    """Compare, judge and return the step's record; raise FidelityError unless allowed."""
    metrics = compare(reference, candidate, labels)
    failures = verdict(metrics, thresholds)
    record = {"step": step, **metrics, "thresholds": thresholds.to_dict(), "passed": not failures, "failures": failures}
    if failures and not allow_degraded:
        raise FidelityError(
            f"fidelity check failed after step '{step}':\n  "
            + "\n  ".join(failures)
            + "\nThe build was not written. Use better calibration data, a higher precision, "
            "adjust --min-cosine/--min-top1, or pass --allow-degraded to keep it anyway.",
            report=record,
        )
    return record


def summary(record):
    """One line: the worst output of a step."""
    parts = []
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
