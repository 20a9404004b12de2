"""--budget on the task metric: a mixed INT8 build of a public YOLOv8 detector (benchmarks/zoo) that keeps its boxes.

ONNX Runtime's full INT8 of NudeNet's YOLOv8n loses most of its detections (box F1 ~0.25: boxes and scores share one
quantization scale); ``--budget score=0.9`` keeps the layers that matter in float until the detections agree again,
or says that no such build exists. The budget kinds are parsed and refused like the others.
"""

from __future__ import annotations

import pytest
from test_tasks_build import SHAPE, detector  # noqa: F401  (the module-scoped fixture)

import edgekit
from edgekit.errors import FidelityError
from edgekit.passes.mixed_precision import Budget, BudgetError


def test_task_budget_parsing():
    b = Budget.parse("map50=1pt")
    assert (b.kind, b.metric, round(b.value, 6), b.text) == ("task", "map50", 0.99, "map50=1pt")
    b = Budget.parse("score=0.99")
    assert (b.kind, b.metric, b.value, str(b)) == ("task", None, 0.99, "score=0.99")
    assert Budget.parse("mask_iou=0.9").metric == "mask_iou" and Budget.parse("cos=0.99").kind == "cosine"
    for bad in ("map50=2", "score=0", "map50=101pt", "iou50=0.9"):
        with pytest.raises(BudgetError):
            Budget.parse(bad)
    with pytest.raises(BudgetError, match="detection metric"):
        Budget.parse("map50=1pt").check_task(None)
    with pytest.raises(BudgetError, match="--task"):
        Budget.parse("score=0.9").check_task(None)
    section = {
        "outputs": {"y": {"cosine_mean": 0.99}},
        "task": {"score": 0.8, "metrics": {"box_f1": 0.8, "map50": 0.95}},
    }
    assert Budget.parse("score=0.9").measure(section)[2] is False
    assert Budget.parse("map50=5pt").measure(section)[:3] == (0.95, 0.95, True)


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_score_budget_keeps_the_detections(detector, tmp_path, backend):  # noqa: F811
    model, calib, val = detector
    try:
        r = edgekit.build(
            model,
            "host",
            tmp_path / "b",
            backend=backend,
            precision="int8",
            calib=calib,
            val=val,
            input_shapes=SHAPE,
            budget="score=0.9",
            use_cache=False,
        )
    except FidelityError as e:  # no mixed build reaches the budget: said clearly, nothing written
        assert "cannot meet --budget score=0.9" in str(e) and not (tmp_path / "b").exists()
        assert e.report["final"]["value"] < 0.9
        pytest.fail(f"{backend}: {e}")
    mp = r["mixed_precision"]
    assert mp["metric"].startswith("the task's primary score") and mp["final"]["met"]
    assert mp["final"]["value"] >= 0.9 and mp["final"]["box_f1"] >= 0.9
    assert r["fidelity"]["passed"] and r["fidelity"]["steps"][-1]["task"]["metrics"]["box_f1"] >= 0.9
    if backend == "ort":  # its plain INT8 loses the detections: layers had to stay float
        assert mp["all_int8"]["value"] < 0.9 and mp["float_layer_names"]
