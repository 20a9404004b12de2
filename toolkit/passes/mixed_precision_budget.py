"""``--budget``: how much quality an INT8 build may lose against the FP32 reference (see
:mod:`edgekit.passes.mixed_precision` for the search that keeps layers in float until it holds)."""

import re
from dataclasses import dataclass

from ..errors import DataError, EdgekitError

SENSITIVITY_SAMPLES = 32
MAX_EVALUATIONS = 12


class BudgetError(EdgekitError):
    """A ``--budget`` that cannot be read, or that does not fit the build."""


# -- the budget -------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    kind: str  # accuracy | cosine | top1
    value: float  # accuracy: max drop in points; cosine/top1: minimum
    text: str = ""
    max_evaluations: int = MAX_EVALUATIONS
    sensitivity_samples: int = SENSITIVITY_SAMPLES

    METRICS = {
        "accuracy": "accuracy drop (points)",
        "cosine": "mean cosine to the reference",
        "top1": "top-1 agreement with the reference",
    }

    @classmethod
    def parse(cls, text, **options):
        """``1pt``, ``0.5pt``, ``cos=0.999``, ``top1=0.99`` (a Budget passes through)."""
        if isinstance(text, Budget):
            return text
        raw = str(text).strip().lower().replace(" ", "")
        usage = (
            "--budget takes accuracy points (e.g. 1pt, 0.5pt: needs labels), a cosine similarity "
            "(cos=0.999) or a top-1 agreement (top1=0.99)"
        )
        m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)(?:pt|pts|points?)", raw)
        if m:
            value = float(m.group(1))
            if not 0 <= value <= 100:
                raise BudgetError(f"--budget {text}: accuracy points must be between 0 and 100; {usage}")
            return cls("accuracy", value, f"{value:g}pt", **options)
        m = re.fullmatch(r"(cos|cosine|top1|top-1)=(\d+(?:\.\d*)?|\.\d+)", raw)
        if m:
            kind = "cosine" if m.group(1).startswith("cos") else "top1"
            value = float(m.group(2))
            if not 0 < value <= 1:
                raise BudgetError(
                    f"--budget {text}: {kind} must be in (0, 1], e.g. "
                    f"{'cos=0.999' if kind == 'cosine' else 'top1=0.99'}; {usage}"
                )
            return cls(kind, value, f"{'cos' if kind == 'cosine' else 'top1'}={value:g}", **options)
        raise BudgetError(f"cannot read --budget {text!r}: {usage}")

    def __str__(self):
        return self.text

    def to_dict(self):
        return {
            "budget": self.text,
            "metric": self.METRICS[self.kind],
            ("max_drop" if self.kind == "accuracy" else "min"): self.value,
        }

    def thresholds(self, thresholds, min_cosine=None, min_top1=None, max_accuracy_drop=None):
        """The build's fidelity gate with the budget's own metric set to the budget (unless given explicitly)."""
        from dataclasses import replace

        if self.kind == "accuracy" and max_accuracy_drop is None:
            return replace(thresholds, max_accuracy_drop=self.value)
        if self.kind == "cosine" and min_cosine is None:
            return replace(thresholds, min_cosine=self.value)
        if self.kind == "top1" and min_top1 is None:
            return replace(thresholds, min_top1=self.value)
        return thresholds

    def measure(self, metrics):
        """The budget's metric from :func:`edgekit.fidelity.compare` output: (value, score, holds, detail).

        ``score`` is higher-is-better (the negative drop for accuracy). The worst output counts.
        """
        outs = [m for m in metrics["outputs"].values() if "cosine_mean" in m]
        if not outs or any(m.get("non_finite") for m in outs):
            return None, float("-inf"), False, {"error": "non-finite or missing outputs"}
        detail = {"cosine_mean": min(m["cosine_mean"] for m in outs)}
        top1 = [m["top1_agreement"] for m in outs if "top1_agreement" in m]
        if top1:
            detail["top1_agreement"] = min(top1)
        acc = [m for m in outs if "accuracy" in m]
        if acc:
            worst = max(acc, key=lambda m: m["accuracy_reference"] - m["accuracy"])
            detail["accuracy"] = worst["accuracy"]
            detail["accuracy_reference"] = worst["accuracy_reference"]
            detail["accuracy_drop"] = worst["accuracy_reference"] - worst["accuracy"]
        if self.kind == "accuracy":
            value = detail.get("accuracy_drop")
            if value is None:
                return None, float("-inf"), False, detail
            return value, -value, value <= self.value + 1e-9, detail
        value = detail["cosine_mean"] if self.kind == "cosine" else detail.get("top1_agreement")
        if value is None:
            return None, float("-inf"), False, detail
        return value, value, value >= self.value, detail

    def check_data(self, dataset):
        """Refuse a budget the evaluation data cannot measure (before anything is built)."""
        if self.kind == "accuracy" and (dataset is None or dataset.labels is None):
            raise DataError(
                f"--budget {self.text} is measured in accuracy points, which needs labels: give --val "
                "(or --calib) data with a 'labels' array (or image folders named by class), or use a "
                "budget without labels: --budget cos=0.999 or --budget top1=0.99"
            )
        if dataset is None or dataset.synthetic:
            raise DataError(f"--budget {self.text} must be measured on real data: pass --val (held-out) or --calib")


def prepare(budget, backend, precision, dataset, min_cosine=None, min_top1=None, max_accuracy_drop=None):
    """Parse and validate ``budget`` for a build; returns the Budget (or None)."""
    if budget is None:
        return None
    budget = Budget.parse(budget)
    if precision != "int8":
        raise BudgetError(
            f"--budget keeps layers of an INT8 build in float: pass --precision int8 (this build is {precision})"
        )
    if not backend.supports_mixed_precision():
        why = (
            getattr(backend, "mixed_precision_refusal", None)
            or f"backend {backend.name!r} cannot keep single layers in float"
        )
        raise BudgetError(
            f"{why}, so --budget is not available for it: build it with --precision int8 (no budget) "
            f"or fp16, or use a backend that can (ort, openvino, mnn, tflite)"
        )
    budget.check_data(dataset)
    return budget
