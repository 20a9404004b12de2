"""Task-aware fidelity: specs, inference rules, decoders against known answers, metrics, gates, user metrics.

Fast, no model file needed; the real public models are in tests/test_tasks_zoo.py (marked e2e).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from edgekit import fidelity
from edgekit.errors import FidelityError
from edgekit.tasks import TaskError, TaskSpec, evaluate, gates_for, infer_task, load_metric, parse_task
from edgekit.tasks.boxes import box_iou, class_nms, nms, picodet_decode, yolov8_decode, yolox_decode
from edgekit.tasks.metrics import detection_agreement, segmentation_agreement
from edgekit.tasks.regions import db_regions, label_components
from edgekit.tasks.sequence import char_error_rate, ctc_collapse, ctc_greedy, edit_distance


# ------------------------------------------------------------------------------------------------ specs
def test_task_specs_parse_and_round_trip():
    spec = parse_task("detection:yolov8,conf=0.25,iou=0.45")
    assert (spec.family, spec.head, spec.num("conf"), spec.num("iou"), spec.num("match")) == (
        "detection",
        "yolov8",
        0.25,
        0.45,
        0.5,
    )
    assert str(spec) == "detection:yolov8,conf=0.25,iou=0.45"
    for text in ("classification", "dense,thresh=0.3", "ctc,blank=0", "segmentation", "embedding", "keypoints"):
        assert str(parse_task(text)) == text.replace("segmentation", "segmentation:semantic")
    assert parse_task(str(parse_task("detection:picodet,size=800x608,strides=8x16x32x64"))).ints("size") == (800, 608)
    assert parse_task(spec) is spec


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty task"),
        ("detector", "unknown task family 'detector'"),
        ("detection", "detection needs a head"),
        ("detection:yolov9", "has no head 'yolov9'"),
        ("detection:yolov8,conf", "is not KEY=VALUE"),
        ("detection:yolov8,conf=high", "must be a number"),
        ("detection:yolov8,conf=1.5", "between 0 and 1"),
        ("dense,blank=0", "unknown parameter 'blank'"),
    ],
)
def test_bad_task_specs_say_what_is_wrong_and_the_accepted_forms(text, message):
    with pytest.raises(TaskError, match=message) as info:
        parse_task(text)
    assert "classification |" in str(info.value) or "known:" in str(info.value)


# ------------------------------------------------------------------------------------------------ decoders
def test_label_components_matches_scipy():
    ndimage = pytest.importorskip("scipy.ndimage")
    rng = np.random.default_rng(0)
    for density in (0.2, 0.45, 0.6):
        mask = rng.random((40, 57)) < density
        for conn, structure in ((4, None), (8, np.ones((3, 3), bool))):
            ours, n = label_components(mask, conn)
            theirs, m = ndimage.label(mask, structure=structure)
            assert n == m and np.array_equal(ours, theirs)


def test_db_regions_known_answer():
    prob = np.zeros((40, 100), np.float32)
    prob[5:15, 10:60] = 0.9  # a text line
    prob[25:30, 20:90] = 0.4  # above thresh, below box_thresh on average
    prob[33:35, 5:8] = 0.95  # 2 px high: too small
    assert db_regions(prob, 0.3, 0.5) == [(10, 5, 60, 15, pytest.approx(0.9))]
    assert [r[:4] for r in db_regions(prob, 0.3, 0.3)] == [(10, 5, 60, 15), (20, 25, 90, 30)]


def test_nms_and_class_nms_known_answer():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6])
    assert nms(boxes, scores, 0.5) == [0, 2]
    assert box_iou(boxes[:1], boxes[1:2])[0, 0] == pytest.approx(81 / 119)
    cls_scores = np.array([[0.9, 0.1], [0.8, 0.1], [0.1, 0.7], [0.2, 0.6]])
    # box 3 is class 1 (0.6) and overlaps box 0 of class 0 fully: per-class NMS keeps it
    assert [(c, round(s, 2)) for c, s, _ in class_nms(boxes, cls_scores, 0.5, 0.5)] == [(0, 0.9), (1, 0.7), (1, 0.6)]


def test_box_decoders_known_answer():
    head = np.zeros((4 + 2, 3), np.float32)
    head[:4, 0] = [50, 40, 20, 10]
    head[4:, 0] = [0.1, 0.8]
    boxes, scores = yolov8_decode(head)
    assert boxes[0].tolist() == [40, 35, 60, 45] and scores.shape == (3, 2)
    raw = np.zeros((4 * 4 + 2 * 2 + 1, 6), np.float32)  # 8x8 input at strides 2/4/8
    raw[5] = [0.5, 0.5, np.log(2), 0.0, 0.5, 0.8]  # cell (x=1, y=1) at stride 2
    boxes, scores = yolox_decode(raw, 8, strides=(2, 4, 8))
    assert boxes[5].tolist() == pytest.approx([1.0, 2.0, 5.0, 4.0]) and scores[5, 0] == pytest.approx(0.4)
    # GFL: a one-hot distribution at bin 2 on every side = 2 strides from the cell centre
    dist = np.full((1, 4, 8), -50.0, np.float32)
    dist[..., 2] = 50.0
    boxes, _ = picodet_decode([np.ones((1, 3), np.float32)], [dist.reshape(1, 32)], (8, 8), (8,), 7)
    assert boxes[0].tolist() == pytest.approx([-12.0, -12.0, 20.0, 20.0])


def test_ctc_and_edit_distance_known_answer():
    assert ctc_collapse(np.array([0, 1, 1, 0, 1, 2, 2, 0, 0, 3])) == [1, 1, 2, 3]
    assert ctc_greedy(np.array([0, 1, 1, 0, 1, 2, 2, 0]), ["-", "a", "b"]) == "aab"
    assert edit_distance("kitten", "sitting") == 3
    assert char_error_rate("abcd", "abxd") == 0.25 and char_error_rate("", "") == 0.0


# ------------------------------------------------------------------------------------------------ metrics
def test_detection_agreement_counts_lost_boxes():
    ref = [[(0, 0.9, (0, 0, 10, 10)), (1, 0.8, (20, 20, 30, 30)), (0, 0.7, (40, 40, 50, 50))]]
    assert detection_agreement(ref, ref) == {"box_f1": 1.0, "map50": 1.0, "boxes_reference": 3, "boxes_candidate": 3}
    lost = detection_agreement(ref, [ref[0][:1]])
    assert lost["box_f1"] == pytest.approx(0.5) and lost["map50"] == pytest.approx(0.5 * (0.5 + 0.0))
    wrong_class = detection_agreement(ref, [[(1, 0.9, (0, 0, 10, 10))]])
    assert wrong_class["box_f1"] == 0.0
    assert detection_agreement([[]], [[]])["box_f1"] == 1.0


def test_segmentation_agreement_known_answer():
    ref = np.zeros((4, 4), np.int64)
    ref[:2] = 1
    cand = ref.copy()
    cand[0, 0] = 0
    m = segmentation_agreement([ref], [cand], 2)
    assert m["miou"] == pytest.approx((8 / 9 + 7 / 8) / 2)
    assert m["dice"] == pytest.approx((16 / 17 + 14 / 15) / 2)


def test_classification_top1_only_on_a_real_class_axis():
    rng = np.random.default_rng(1)
    assert fidelity._is_class_like(np.zeros((1, 10), np.float32))
    assert not fidelity._is_class_like(rng.random((1, 84, 8400)).astype(np.float32))  # YOLO anchors
    assert not fidelity._is_class_like(rng.random((1, 1, 64, 64)).astype(np.float32))  # pixels of a map row
    seq = rng.random((1, 20, 30)).astype(np.float32)
    assert fidelity._is_class_like(seq / seq.sum(-1, keepdims=True))  # softmax per step (CTC)
    ref = [{"y": rng.random((1, 84, 8400)).astype(np.float32)}]
    assert "top1_agreement" not in fidelity.compare(ref, ref)["outputs"]["y"]


def test_near_constant_output_is_judged_relative_to_its_range():
    """A probability map ~0 everywhere: cosine is noise (the issue's 0.26 at 8e-8), the range error is not."""
    rng = np.random.default_rng(2)
    ref = [{"p": (rng.random((1, 1, 32, 32)) * 1e-7).astype(np.float32)}]
    cand = [{"p": (ref[0]["p"] + rng.random((1, 1, 32, 32)) * 8e-8 - 4e-8).astype(np.float32)}]
    m = fidelity.compare(ref, cand)["outputs"]["p"]
    assert m["cosine_ill_conditioned"] and m["cosine_mean"] < 0.99 and m["range_error"] < 1e-7
    assert fidelity.verdict(fidelity.compare(ref, cand), fidelity.thresholds_for("fp32")) == []
    worse = [{"p": ref[0]["p"] + np.float32(0.01)}]
    failures = fidelity.verdict(fidelity.compare(ref, worse), fidelity.thresholds_for("fp32"))
    assert failures and "of the output's range" in failures[0]


def test_classifier_behaviour_is_unchanged_without_a_task():
    ref = [{"y": np.array([[0.1, 0.7, 0.2]], np.float32)}] * 4
    flipped = [{"y": np.array([[0.7, 0.1, 0.2]], np.float32)}] * 4
    m = fidelity.compare(ref, flipped, labels=np.array([1, 1, 1, 1]))["outputs"]["y"]
    assert m["top1_agreement"] == 0.0 and m["accuracy_reference"] == 100.0 and m["accuracy"] == 0.0
    failures = fidelity.verdict(fidelity.compare(ref, flipped), fidelity.thresholds_for("int8"))
    assert any("cosine" in f for f in failures) and any("top-1" in f for f in failures)


def test_task_gate_replaces_cosine_and_names_metric_value_threshold_and_advice():
    spec = parse_task("classification")
    ref = [{"y": np.array([[0.1, 0.7, 0.2]], np.float32)} for _ in range(10)]
    cand = [dict(r) for r in ref]
    cand[0] = {"y": np.array([[0.7, 0.1, 0.2]], np.float32)}
    section = fidelity.compare(ref, cand, labels=np.ones(10, np.int64), task=spec)["task"]
    assert section["metrics"]["top1_agreement"] == 0.9 and section["labels"]["drop"] == pytest.approx(10.0)
    with pytest.raises(FidelityError) as info:
        fidelity.check_step("int8", ref, cand, np.ones(10, np.int64), fidelity.thresholds_for("fp32"), task=spec)
    text = str(info.value)
    assert "top1_agreement 0.9000 < 0.99" in text and "try:" in text and "--min-score" in text
    assert "cosine" not in text.split("\n")[1]
    rec = fidelity.check_step(
        "int8", ref, cand, None, fidelity.thresholds_for("int8", min_score=0.85), task="classification"
    )
    assert rec["passed"] and rec["thresholds"]["min_score"] == 0.85
    assert "task classification: top1_agreement 0.9" in fidelity.summary(rec)


def test_nan_and_shape_checks_stay_with_a_task():
    ref = [{"y": np.ones((1, 4), np.float32)}]
    with pytest.raises(FidelityError, match="NaN"):
        fidelity.check_step("x", ref, [{"y": np.array([[np.nan, 1, 1, 1]], np.float32)}], None,
                            fidelity.thresholds_for("fp32"), task="classification")  # fmt: skip
    with pytest.raises(FidelityError, match="shape mismatch"):
        fidelity.check_step("x", ref, [{"y": np.ones((1, 5), np.float32)}], None,
                            fidelity.thresholds_for("fp32"), task="embedding")  # fmt: skip


def test_default_gates_per_task_and_precision():
    assert gates_for("detection", "fp32") == {"box_f1": 0.99, "map50": 0.99}
    assert gates_for("detection", "int8-dynamic")["box_f1"] < gates_for("detection", "fp16")["box_f1"]
    assert gates_for("dense", "int8", min_score=0.7) == {"mask_iou": 0.7}
    assert gates_for("generic", "fp32") == {}


def test_embedding_and_ctc_metrics_from_raw_outputs(tmp_path):
    rng = np.random.default_rng(3)
    emb = [{"e": rng.standard_normal((1, 1, 1, 96)).astype(np.float32)} for _ in range(6)]
    m = evaluate(TaskSpec("embedding"), emb, emb)["metrics"]
    assert m["cosine_mean"] == pytest.approx(1.0) and m["nn_agreement"] == 1.0
    probs = np.full((1, 6, 4), 0.01, np.float32)
    for t, c in enumerate([1, 1, 0, 2, 0, 3]):
        probs[0, t, c] = 0.97
    cand = probs.copy()
    cand[0, 3] = cand[0, 3, [0, 1, 3, 2]]  # step 3 now says class 3
    charset = tmp_path / "chars.txt"
    charset.write_text("\n".join(["<blank>", "a", "b", "c"]), encoding="utf-8")
    res = evaluate(parse_task(f"ctc,charset={charset}"), [{"p": probs}], [{"p": cand}], labels=["abc"])
    assert res["metrics"]["sequence_equal"] == 0.0 and res["metrics"]["cer"] == pytest.approx(1 / 3)
    assert res["labels"]["reference"] == pytest.approx(100.0) and res["labels"]["candidate"] == pytest.approx(200 / 3)


def test_user_metric_is_loaded_hashed_and_gated(tmp_path):
    src = (
        "import numpy as np\n\n\ndef agreement(ref, cand, labels):\n"
        "    return float(np.mean([np.allclose(r['y'], c['y'], atol=0.05) for r, c in zip(ref, cand)]))\n"
    )
    path = tmp_path / "mymetric.py"
    path.write_text(src, encoding="utf-8")
    metric = load_metric(f"{path}:agreement")
    assert metric.sha256 == hashlib.sha256(src.encode()).hexdigest() and metric.name.endswith(":agreement")
    ref = [{"y": np.full((1, 3), i, np.float32)} for i in range(4)]
    cand = [dict(r) for r in ref]
    cand[0] = {"y": np.full((1, 3), 9, np.float32)}
    thresholds = fidelity.thresholds_for("fp32")
    with pytest.raises(FidelityError, match=r"metric .*:agreement: 0.75 < 0.99 \(1% below"):
        fidelity.check_step("x", ref, cand, None, thresholds, metric=metric)
    rec = fidelity.check_step("x", ref, cand, None, fidelity.thresholds_for("fp32", min_score=0.7), metric=metric)
    assert rec["passed"] and rec["task"]["user_metric"]["sha256"] == metric.sha256
    for bad, message in (("nomodule", "module:function"), ("no_such_module_x:f", "cannot import"),
                         (f"{path}:missing", "has no function")):  # fmt: skip
        with pytest.raises(TaskError, match=message):
            load_metric(bad)


def test_resolve_task_prefers_the_given_task(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edgekit.tasks import resolve_task

    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
    )
    model = helper.make_model(graph)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    inferred = resolve_task(None, path)
    assert str(inferred.spec) == "classification" and inferred.inferred and "softmax over 5 classes" in inferred.reason
    given = resolve_task("embedding", path)
    assert str(given.spec) == "embedding" and not given.inferred and given.to_dict()["reason"] == "given: embedding"
    # a 2-D output without softmax: logits or an embedding, never a confident guess
    model.graph.node[0].op_type = "Relu"
    del model.graph.node[0].attribute[:]
    unsure = resolve_task("", model)
    assert str(unsure.spec) == "generic" and "cannot tell" in unsure.reason and "--task" in unsure.reason


def _graph(outputs, ops=None, input_shape=(1, 3, 64, 64)):
    """A model whose graph only declares its outputs (infer_task reads shapes and ops, it never runs the model)."""
    from onnx import TensorProto, helper

    ops = ops or ["Identity"] * len(outputs)
    nodes = [helper.make_node(op, ["x"], [name]) for op, name in zip(ops, outputs, strict=True)]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))
    return helper.make_model(helper.make_graph(nodes, "g", [x], outs))


@pytest.mark.parametrize(
    "outputs, ops, family, words",
    [
        ({"seg": (1, 21, 64, 64)}, None, "segmentation:semantic", "21 class scores per pixel"),
        ({"heat": (1, 17, 16, 16)}, None, "generic", "heatmaps, cannot tell"),
        ({"det": (1, 84, 84)}, None, "generic", "matches no known head"),  # 84 rows are not 64x64 anchors
        ({"det": (1, 84, 84)}, ["NonMaxSuppression"], "detection:nms", "NonMaxSuppression"),
        ({"boxes": (1, 100, 4), "scores": (1, 100, 91)}, None, "detection:ssd", "SSD/RetinaNet"),
        ({"emb": (1, 128)}, ["LpNormalization"], "embedding", "L2-normalised"),
        ({"a": (1, 4), "b": (1, 10)}, None, "generic", "2 outputs"),
    ],
)
def test_inference_rules_on_declared_shapes(outputs, ops, family, words):
    inferred = infer_task(_graph(outputs, ops))
    assert str(inferred.spec) == family and words in inferred.reason
