"""What a pruned build was asked for: ratios, TOML recipes, and the fidelity gate of a pruned build."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import PassConfigError

if TYPE_CHECKING:
    from ..fidelity import Thresholds

MODES = ("structured", "unstructured")
RECIPE_KEYS = {
    "mode",
    "ratio",
    "scope",
    "skip",
    "layers",
    "channel_multiple",
    "bias_correction",
    "criterion",
    "allocation",
}
# Pruning without fine-tuning moves outputs more than an fp32 conversion does: unless the user sets
# them, a pruned build is gated like an int8 build.
PRUNED_THRESHOLDS = {"min_cosine": 0.98, "min_top1": 0.9, "max_accuracy_drop": 2.0}
PRUNED_SUFFIX = "+pruned"  # the task gates of a pruned build are its int8 gates (edgekit.tasks.gates_for)


def check_ratio(value: object, what: str = "pruning ratio") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < 1) or math.isnan(value):
        raise PassConfigError(f"{what} must be a number in [0, 1) (the fraction to remove, e.g. 0.3), got {value!r}")
    return float(value)


def load_recipe(path: str | Path) -> dict[str, Any]:
    """Read a TOML recipe: ``mode``, ``ratio``, ``scope``, ``skip = [...]``, ``[layers]`` name = ratio."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    p = Path(path)
    if not p.is_file():
        raise PassConfigError(f"pruning recipe not found: {p}")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise PassConfigError(f"pruning recipe {p} is not valid TOML: {e}") from None
    unknown = sorted(set(data) - RECIPE_KEYS)
    if unknown:
        raise PassConfigError(
            f"pruning recipe {p}: unknown key(s) {', '.join(unknown)}; "
            f"a recipe may set {', '.join(sorted(RECIPE_KEYS))}"
        )
    if not isinstance(data.get("layers", {}), dict) or not isinstance(data.get("skip", []), list):
        raise PassConfigError(f"pruning recipe {p}: 'layers' must be a table (name = ratio) and 'skip' a list of names")
    for name, r in data.get("layers", {}).items():
        check_ratio(r, f"pruning recipe {p}: ratio of layer {name!r}")
    return data


def relax_thresholds(
    thresholds: Thresholds,
    min_cosine: float | None = None,
    min_top1: float | None = None,
    max_accuracy_drop: float | None = None,
) -> Thresholds:
    """The fidelity gate of a pruned build: int8-like defaults where the user set nothing.

    With a task, the task's int8 gates apply (precision ``fp32+pruned``: see :func:`edgekit.tasks.gates_for`);
    ``--min-score`` is kept.
    """
    from ..fidelity import Thresholds

    precision = thresholds.precision
    return Thresholds(
        min_cosine=min_cosine
        if min_cosine is not None
        else min(thresholds.min_cosine, PRUNED_THRESHOLDS["min_cosine"]),
        min_top1=min_top1 if min_top1 is not None else min(thresholds.min_top1, PRUNED_THRESHOLDS["min_top1"]),
        max_accuracy_drop=max_accuracy_drop
        if max_accuracy_drop is not None
        else max(thresholds.max_accuracy_drop, PRUNED_THRESHOLDS["max_accuracy_drop"]),
        precision=None if precision is None else f"{precision}{PRUNED_SUFFIX}",
        min_score=thresholds.min_score,
    )
