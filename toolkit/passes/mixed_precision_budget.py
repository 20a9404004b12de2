"""``--budget``: how much quality an INT8 build may lose against the FP32 reference (see
:mod:`edgekit.passes.mixed_precision` for the search that keeps layers in float until it holds)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from ..errors import DataError, EdgekitError

if TYPE_CHECKING:
    from edgekit.converters.base import Backend

    from ..data import Dataset
    from ..fidelity import Thresholds

SENSITIVITY_SAMPLES = 32
MAX_EVALUATIONS = 12
# budgets on a task metric (edgekit.tasks.evaluate): the metric -> the task family that measures it
TASK_METRICS = {
    "map50": "detection",
    "box_f1": "detection",
    "miou": "segmentation",
    "dice": "segmentation",
    "mask_iou": "dense",
    "region_f1": "dense",
    "char_accuracy": "ctc",
    "sequence_equal": "ctc",
    "pck": "keypoints",
    "cosine_mean": "embedding",
    "nn_agreement": "embedding",
    "top5_agreement": "classification",
}


class BudgetError(EdgekitError):
    """A ``--budget`` that cannot be read, or that does not fit the build."""


# -- the budget -------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    kind: str  # accuracy | cosine | top1 | task
    value: float  # accuracy: max drop in points; cosine/top1/task: minimum
    text: str = ""
    max_evaluations: int = MAX_EVALUATIONS
    sensitivity_samples: int = SENSITIVITY_SAMPLES
    metric: str | None = None  # task: the task metric (map50, mask_iou, ...); None: the task's primary score

    METRICS = {
        "accuracy": "accuracy drop (points)",
        "cosine": "mean cosine to the reference",
        "top1": "top-1 agreement with the reference",
        "task": "the task's primary score (agreement with the reference after decoding)",
    }

    @property
    def description(self) -> str:
        if self.kind == "task" and self.metric:
            return f"task metric {self.metric} (agreement with the reference after decoding)"
        return self.METRICS[self.kind]

    @classmethod
    def parse(cls, text: str | Budget, **options: Any) -> Budget:
        """``1pt``, ``0.5pt``, ``cos=0.999``, ``top1=0.99``, ``score=0.99``, ``map50=1pt``, ``mask_iou=0.9``
        (a Budget passes through). ``METRIC=Npt`` is a minimum of ``1 - N/100``: N points below the reference's own
        agreement with itself (1.0)."""
        if isinstance(text, Budget):
            return text
        raw = str(text).strip().lower().replace(" ", "")
        usage = (
            "--budget takes accuracy points (e.g. 1pt, 0.5pt: needs labels), a cosine similarity "
            "(cos=0.999), a top-1 agreement (top1=0.99), the task's primary score (score=0.99, score=1pt) or "
            f"a task metric ({', '.join(f'{k}=' for k in TASK_METRICS)}; e.g. map50=1pt, mask_iou=0.9)"
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
        m = re.fullmatch(r"([a-z][a-z0-9_]*)=(\d+(?:\.\d*)?|\.\d+)(pt|pts|points?)?", raw)
        if m and (m.group(1) == "score" or m.group(1) in TASK_METRICS):
            name, value = m.group(1), float(m.group(2))
            if m.group(3):
                if not 0 <= value <= 100:
                    raise BudgetError(f"--budget {text}: points must be between 0 and 100; {usage}")
                minimum = 1 - value / 100
            elif not 0 < value <= 1:
                raise BudgetError(f"--budget {text}: {name} is a score in (0, 1], e.g. {name}=0.99 or {name}=1pt")
            else:
                minimum = value
            shown = f"{name}={value:g}{'pt' if m.group(3) else ''}"
            return cls("task", minimum, shown, metric=None if name == "score" else name, **options)
        raise BudgetError(f"cannot read --budget {text!r}: {usage}")

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.text,
            "metric": self.description,
            ("max_drop" if self.kind == "accuracy" else "min"): self.value,
        }

    def thresholds(
        self,
        thresholds: Thresholds,
        min_cosine: float | None = None,
        min_top1: float | None = None,
        max_accuracy_drop: float | None = None,
        min_score: float | None = None,
    ) -> Thresholds:
        """The build's fidelity gate with the budget's own metric set to the budget (unless given explicitly)."""
        from dataclasses import replace

        if self.kind == "task" and self.metric is None and min_score is None:
            return replace(thresholds, min_score=self.value)
        if self.kind == "accuracy" and max_accuracy_drop is None:
            return replace(thresholds, max_accuracy_drop=self.value)
        if self.kind == "cosine" and min_cosine is None:
            return replace(thresholds, min_cosine=self.value)
        if self.kind == "top1" and min_top1 is None:
            return replace(thresholds, min_top1=self.value)
        return thresholds

    def measure(self, metrics: dict[str, Any]) -> tuple[float | None, float, bool, dict[str, Any]]:
        """The budget's metric from :func:`edgekit.fidelity.compare` output: (value, score, holds, detail).

        ``score`` is higher-is-better (the negative drop for accuracy). The worst output counts.
        """
        if self.kind == "task":
            return self._measure_task(metrics)
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
        labelled = (metrics.get("task") or {}).get("labels")
        if not acc and labelled:  # the task's real score against its labels (mAP@0.5, mIoU, ... in points)
            detail["label_metric"] = labelled["metric"]
            detail["accuracy"], detail["accuracy_reference"] = labelled["candidate"], labelled["reference"]
            detail["accuracy_drop"] = labelled["drop"]
        if self.kind == "accuracy":
            value = detail.get("accuracy_drop")
            if value is None:
                return None, float("-inf"), False, detail
            return value, -value, value <= self.value + 1e-9, detail
        value = detail["cosine_mean"] if self.kind == "cosine" else detail.get("top1_agreement")
        if value is None:
            return None, float("-inf"), False, detail
        return value, value, value >= self.value, detail

    def _measure_task(self, metrics: dict) -> tuple:
        section = metrics.get("task") or {}
        if any(m.get("non_finite") or "error" in m for m in metrics["outputs"].values()):
            return None, float("-inf"), False, {"error": "non-finite outputs or changed shapes"}
        detail = {k: v for k, v in section.get("metrics", {}).items() if isinstance(v, (int, float))}
        if "user_metric" in section:
            detail["user_metric"] = section["user_metric"]["value"]
        if self.metric is not None:
            value = detail.get(self.metric)
        else:
            value = section.get("score", detail.get("user_metric"))
        if value is None:
            return None, float("-inf"), False, detail
        return float(value), float(value), float(value) >= self.value - 1e-12, detail

    def check_task(self, task: object, metric: object = None) -> None:
        """Refuse a task budget the build's task cannot measure (before anything is quantized)."""
        if self.kind != "task":
            return
        family = getattr(getattr(task, "spec", task), "family", None)
        if self.metric is None and family is None and metric is None:
            raise BudgetError(
                f"--budget {self.text} is the task's score, and this build has no task metric (no --task, and "
                "a classifier or an unrecognised model is judged by the generic gate): pass --task (e.g. --task "
                "classification or detection:yolov8) or --metric module:function, or use --budget cos=0.999"
            )
        if self.metric is not None and TASK_METRICS[self.metric] != family:
            raise BudgetError(
                f"--budget {self.text}: {self.metric} is a {TASK_METRICS[self.metric]} metric and this build's "
                f"task is {family or 'not known'}; use --budget score=... (the task's primary score) or pass --task"
            )

    def check_data(self, dataset: Dataset | None) -> None:
        """Refuse a budget the evaluation data cannot measure (before anything is built)."""
        if self.kind == "accuracy" and (dataset is None or dataset.labels is None):
            raise DataError(
                f"--budget {self.text} is measured in accuracy points, which needs labels: give --val "
                "(or --calib) data with a 'labels' array (or image folders named by class), or use a "
                "budget without labels: --budget cos=0.999 or --budget top1=0.99"
            )
        if dataset is None or dataset.synthetic:
            raise DataError(f"--budget {self.text} must be measured on real data: pass --val (held-out) or --calib")


@overload
def prepare(
    budget: None,
    backend: Backend,
    precision: str,
    dataset: Dataset | None,
    min_cosine: float | None = ...,
    min_top1: float | None = ...,
    max_accuracy_drop: float | None = ...,
) -> None: ...
@overload
def prepare(
    budget: str | Budget,
    backend: Backend,
    precision: str,
    dataset: Dataset | None,
    min_cosine: float | None = ...,
    min_top1: float | None = ...,
    max_accuracy_drop: float | None = ...,
) -> Budget: ...
def prepare(
    budget: str | Budget | None,
    backend: Backend,
    precision: str,
    dataset: Dataset | None,
    min_cosine: float | None = None,
    min_top1: float | None = None,
    max_accuracy_drop: float | None = None,
) -> Budget | None:
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
