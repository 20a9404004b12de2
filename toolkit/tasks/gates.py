"""Default gates per task and precision, and the failure text when a task metric misses its gate.

The numbers are agreement with the FP32 reference, not accuracy against ground truth: an FP32 build must give the
same answers (box F1 >= 0.99 after decode + NMS), a quantized one may move a few boxes or pixels but not lose a
third of its detections.
"""

from __future__ import annotations

from typing import Any

# family -> precision -> {metric: minimum}; the first metric is the primary one that --min-score overrides
GATES: dict[str, dict[str, dict[str, float]]] = {
    "classification": {
        "fp32": {"top1_agreement": 0.99},
        "fp16": {"top1_agreement": 0.98},
        "int8": {"top1_agreement": 0.9},
    },
    "detection": {
        "fp32": {"box_f1": 0.99, "map50": 0.99},
        "fp16": {"box_f1": 0.97, "map50": 0.97},
        "int8": {"box_f1": 0.8, "map50": 0.9},
    },
    "segmentation": {"fp32": {"miou": 0.99}, "fp16": {"miou": 0.97}, "int8": {"miou": 0.9}},
    "dense": {"fp32": {"mask_iou": 0.99}, "fp16": {"mask_iou": 0.97}, "int8": {"mask_iou": 0.85}},
    "keypoints": {"fp32": {"pck": 0.99}, "fp16": {"pck": 0.98}, "int8": {"pck": 0.95}},
    "ctc": {"fp32": {"char_accuracy": 0.995}, "fp16": {"char_accuracy": 0.99}, "int8": {"char_accuracy": 0.97}},
    "vad": {"fp32": {"frame_agreement": 0.99}, "fp16": {"frame_agreement": 0.98}, "int8": {"frame_agreement": 0.95}},
    "embedding": {
        "fp32": {"cosine_mean": 0.9999},
        "fp16": {"cosine_mean": 0.999},
        "int8": {"cosine_mean": 0.98, "nn_agreement": 0.9},
    },
}
ADVICE = {
    "detection": "keep the detection head (box decode, the concat of boxes and scores, final sigmoids) in float, "
    "quantize boxes and scores separately, or use a higher precision",
    "dense": "keep the last layers and the final sigmoid in float, calibrate on more representative images, "
    "or use a higher precision",
    "segmentation": "keep the decoder's last layers in float or use a higher precision",
    "vad": "keep the last layers and the state's recurrent cell in float, calibrate on speech and silence, "
    "or use a higher precision",
    "ctc": "keep the final classifier and softmax in float or use a higher precision",
}
DEFAULT_ADVICE = "use better calibration data or a higher precision"


def gates_for(family: str, precision: str | None, min_score: float | None = None) -> dict[str, float]:
    """The gate of a task at a precision (int8-dynamic counts as int8; a pruned build, ``fp32+pruned``, is gated
    like int8: pruning without fine-tuning moves answers as quantization does); min_score replaces the primary
    metric's."""
    table = GATES.get(family, {})
    p = precision or "fp32"
    key = "int8" if p.startswith("int8") or p.endswith("+pruned") else p
    gate = dict(table.get(key, table.get("fp32", {})))
    if min_score is not None and gate:
        gate[next(iter(gate))] = min_score
    return gate


def judge(
    section: dict[str, Any], precision: str | None, min_score: float | None = None, max_drop: float | None = None
) -> list[str]:
    """Failures of a task section (see :func:`edgekit.tasks.evaluate`): task metrics, label score drop, user metric."""
    failures = []
    family = section.get("family", "")
    advice = ADVICE.get(family, DEFAULT_ADVICE)
    metrics = section.get("metrics", {})
    for name, minimum in gates_for(family, precision, min_score).items():
        value = metrics.get(name)
        if value is not None and value < minimum:
            failures.append(
                f"task {section['task']}: {name} {value:.4f} < {minimum} (agreement with the reference after "
                f"decoding; precision {precision or 'fp32'}); try: {advice}, or set --min-score"
            )
    lab = section.get("labels")
    if lab and max_drop is not None and lab["drop"] > max_drop:
        failures.append(
            f"task {section['task']}: {lab['metric']} {lab['candidate']:.2f} vs reference {lab['reference']:.2f} "
            f"(drop {lab['drop']:.2f} > {max_drop} points); try: {advice}"
        )
    user = section.get("user_metric")
    if user and user["value"] < user["min"]:
        failures.append(
            f"metric {user['name']}: {user['value']:.6g} < {user['min']:.6g} ({user['gate']}); "
            f"try: {advice}, or set --min-score"
        )
    return failures
