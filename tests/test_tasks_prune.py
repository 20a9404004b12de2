"""Pruning decided by the task metric: the channel groups' damage is the loss of the task's primary score on the
calibration data, and a pruned build is gated by the task's int8 gates (precision ``fp32+pruned``), not by FP32's
"same answers" gate nor by cosines.
"""

from __future__ import annotations

import numpy as np
import pytest

import edgekit
from edgekit.fidelity import thresholds_for
from edgekit.passes.prune import relax_thresholds
from edgekit.tasks import gates_for


def test_pruned_gate_is_the_tasks_int8_gate():
    t = relax_thresholds(thresholds_for("fp32", min_score=0.85))
    assert t.precision == "fp32+pruned" and t.min_score == 0.85 and t.min_cosine == 0.98
    assert gates_for("detection", t.precision) == {**gates_for("detection", "int8")}
    assert gates_for("detection", t.precision, t.min_score)["box_f1"] == 0.85


@pytest.mark.e2e
def test_pruning_is_judged_by_the_task_metric(tmp_path, textlines):
    """PP-OCR's orientation classifier with --task classification: groups ranked by lost top-1 agreement, the
    pruned build gated by the classification task's int8 gate."""
    from harness import PPOCR

    d = np.load(textlines)
    np.savez(tmp_path / "calib.npz", x=d["x"][:100], labels=d["labels"][:100])
    np.savez(tmp_path / "val.npz", x=d["x"][100:], labels=d["labels"][100:])
    r = edgekit.build(
        PPOCR,
        "host",
        tmp_path / "b",
        backend="ort",
        precision="fp32",
        calib=tmp_path / "calib.npz",
        val=tmp_path / "val.npz",
        input_shapes=["x=1,3,48,192"],
        task="classification",
        prune=0.2,
        allow_degraded=True,
        use_cache=False,
    )
    pruning = r["pruning"]
    assert pruning["allocation"] == "sensitivity" and "top1_agreement" in pruning["sensitivity_metric"]
    assert r["fidelity"]["thresholds"]["precision"] == "fp32+pruned"
    step = next(s for s in r["fidelity"]["steps"] if s["step"].startswith("structured pruning"))
    top1 = step["task"]["metrics"]["top1_agreement"]
    assert step["task"]["family"] == "classification" and "labels" in step["task"]
    # the classification task's int8 gate (top-1 agreement 0.9, label drop 2 points) decides, not the cosine
    assert all(f.startswith("task classification") for f in step["failures"])
    assert step["passed"] == (top1 >= 0.9 and step["task"]["labels"]["drop"] <= 2.0)
