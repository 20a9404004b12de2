"""Infer the task of a model from its outputs' shapes, its graph's last ops and its metadata, with the reason.

The guess is deliberately cautious: when shapes and ops do not tell a family apart, the answer is ``generic`` and
the reason says what was seen, so that the user can pass the task instead of being judged by a wrong decoder.
Shapes come from sample outputs when given (what the reference model really returned), else from the graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from .boxes import anchors_per_cell
from .spec import TaskSpec, parse_task

PASS_THROUGH = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Cast", "Scale"}


@dataclass(frozen=True)
class Inference:
    """The inferred task and why (one sentence a person can check)."""

    spec: TaskSpec
    reason: str

    inferred: bool = True

    def to_dict(self) -> dict[str, object]:
        return {**self.spec.to_dict(), "reason": self.reason, "inferred": self.inferred}


def _tail_op(graph: onnx.GraphProto, name: str) -> str:
    producers = {o: n for n in graph.node for o in n.output}
    node = producers.get(name)
    while node is not None and node.op_type in PASS_THROUGH and node.input:
        node = producers.get(node.input[0])
    return node.op_type if node is not None else ""


def _graph_shape(vi: onnx.ValueInfoProto) -> list[int | str]:
    dims = vi.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]


def _input_hw(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray] | None) -> tuple[int, int] | None:
    """Height and width of the first image-like (4-D float) input, NCHW or NHWC, when known."""
    init = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        shape = list(inputs[vi.name].shape) if inputs and vi.name in inputs else _graph_shape(vi)
        if len(shape) != 4:
            continue
        if shape[1] in (1, 3) and all(isinstance(d, int) and d > 0 for d in shape[2:]):
            return int(shape[2]), int(shape[3])
        if shape[3] in (1, 3) and all(isinstance(d, int) and d > 0 for d in shape[1:3]):
            return int(shape[1]), int(shape[2])
    return None


def _is_distribution(arr: np.ndarray | None) -> bool:
    if arr is None or arr.ndim < 2 or arr.shape[-1] < 2:
        return False
    return bool(arr.min() >= 0 and np.allclose(arr.sum(-1), 1.0, atol=1e-3))


def _dims(shape: list[int | str]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def infer_task(
    model: onnx.ModelProto | str | Path,
    outputs: Mapping[str, np.ndarray] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> Inference:
    """The task family of a model and the reason. `outputs`/`inputs`: one sample of the reference run, if any."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    graph = model.graph
    names = [o.name for o in graph.output]
    shapes = {
        o.name: list(outputs[o.name].shape) if outputs and o.name in outputs else _graph_shape(o) for o in graph.output
    }
    values = {n: np.asarray(outputs[n]) for n in names if outputs and n in outputs}
    meta = {p.key: p.value for p in model.metadata_props}
    hw = _input_hw(model, inputs)
    ops = {n.op_type for n in graph.node}

    def generic(why: str) -> Inference:
        return Inference(TaskSpec("generic"), why + "; pass --task to judge it by its task")

    if "NonMaxSuppression" in ops:
        return Inference(
            TaskSpec("detection", "nms"), "the graph contains NonMaxSuppression: detections come out decoded"
        )
    if meta.get("task") == "detect" and len(names) == 1 and len(shapes[names[0]]) == 3:
        s = shapes[names[0]]
        return Inference(
            TaskSpec("detection", "yolov8"), f"Ultralytics metadata task=detect and one output {_dims(s)}: YOLOv8 head"
        )
    known = {n: s for n, s in shapes.items() if all(isinstance(d, int) and d > 0 for d in s)}
    if len(known) < len(names):
        return generic(f"output shapes not all known ({', '.join(_dims(s) for s in shapes.values())})")

    stateful = _stateful_probability(names, shapes, values, inputs)
    if stateful is not None:
        return stateful
    if len(names) == 1:
        return _one_output(names[0], known[names[0]], _tail_op(graph, names[0]), values.get(names[0]), hw, generic)
    return _several_outputs(names, known, hw, generic)


def _one_output(name, s, tail, value, hw, generic) -> Inference:  # type: ignore[no-untyped-def]
    rank = len(s)
    squeezed = [d for d in s[1:] if d != 1]
    if rank == 3:
        a, b = s[1], s[2]
        if 5 <= a < b and hw is not None and anchors_per_cell(b, hw) == 1:
            return Inference(
                TaskSpec("detection", "yolov8"),
                f"one output {_dims(s)}: 4 box coordinates + {a - 4} class scores over {b} anchors "
                f"(one per cell of the {hw[0]}x{hw[1]} input at strides 8/16/32): YOLOv8-style anchor-free head",
            )
        if 6 <= b < a and hw is not None and value is not None:
            per_cell = anchors_per_cell(a, hw)
            xy = np.abs(value[..., :2]).max()
            raw = bool(xy < 8)
            obj = value[..., 4]
            if per_cell == 1 and raw and obj.min() >= 0 and obj.max() <= 1:
                return Inference(
                    TaskSpec("detection", "yolox", {"size": f"{hw[0]}x{hw[1]}", "strides": "8x16x32"}),
                    f"one output {_dims(s)}: {a} rows = one per cell of the {hw[0]}x{hw[1]} input at strides 8/16/32, "
                    f"4 raw grid box terms (|xy| < 8) + objectness + {b - 5} class scores: YOLOX head",
                )
            if per_cell == 3 and not raw and obj.min() >= 0 and obj.max() <= 1:
                return Inference(
                    TaskSpec("detection", "yolov5"),
                    f"one output {_dims(s)}: {a} rows = 3 anchors per cell at strides 8/16/32, boxes in pixels + "
                    f"objectness + {b - 5} class scores: YOLOv5-style head",
                )
        if b >= 10 and hw is not None and hw[1] >= 2 * hw[0] and (tail == "Softmax" or _is_distribution(value)):
            return Inference(
                TaskSpec("ctc", "", {"blank": 0}),
                f"one output {_dims(s)}: a distribution over {b} classes at each of {a} steps from a "
                f"{hw[0]}x{hw[1]} text-line image: CTC sequence recogniser (greedy decode, blank index 0 assumed)",
            )
        return generic(f"one 3-D output {_dims(s)} that matches no known head")
    if rank == 4 and hw is not None and s[2] >= 16 and s[3] >= 16 and abs(s[2] / s[3] - hw[0] / hw[1]) < 0.05:
        where = "at the input's resolution" if (s[2], s[3]) == hw else f"at 1/{hw[0] / s[2]:g} of the input's size"
        if s[1] == 1:
            prob = tail == "Sigmoid" or (value is not None and value.min() >= 0 and value.max() <= 1)
            if prob:
                return Inference(
                    TaskSpec("dense", "", {"thresh": 0.3}),
                    f"one output {_dims(s)}: a single-channel probability map {where}"
                    f"{' (ends in Sigmoid)' if tail == 'Sigmoid' else ''}: dense map, thresholded at 0.3",
                )
            return generic(f"one output {_dims(s)}: a single-channel map {where} that is not a probability")
        if 2 <= s[1] <= 1000 and ((s[2], s[3]) == hw or tail in ("Softmax", "ArgMax")):
            return Inference(
                TaskSpec("segmentation", "semantic"),
                f"one output {_dims(s)}: {s[1]} class scores per pixel {where}: semantic segmentation (argmax)",
            )
        return generic(f"one output {_dims(s)}: {s[1]} maps {where}: segmentation logits or heatmaps, cannot tell")
    if len(squeezed) == 1 and squeezed[0] >= 2:
        c = squeezed[0]
        if tail == "Softmax" or _is_distribution(value.reshape(value.shape[0], -1) if value is not None else None):
            return Inference(TaskSpec("classification"), f"one output {_dims(s)} ending in a softmax over {c} classes")
        if tail == "LpNormalization" and c >= 16:
            return Inference(TaskSpec("embedding"), f"one output {_dims(s)}: a {c}-d vector, L2-normalised ({tail})")
        if any(k in name.lower() for k in ("embed", "feature", "pooler")) and c >= 16:
            return Inference(
                TaskSpec("embedding"), f"one output {name!r} {_dims(s)}: a {c}-d vector named as an embedding"
            )
        return generic(f"one output {_dims(s)} ending in {tail or 'an input'}: logits or an embedding, cannot tell")
    return generic(f"one output {_dims(s)} that matches no known head")


def _stateful_probability(
    names: list[str],
    shapes: dict[str, list[int | str]],
    values: dict[str, np.ndarray],
    inputs: Mapping[str, np.ndarray] | None,
) -> Inference | None:
    """A streaming detector (voice activity): one probability per frame, every other output shaped like an input
    (its next state, fed back). Needs one sample of the reference run (inputs and outputs)."""
    if not inputs or len(names) < 2 or any(n not in values for n in names):
        return None
    fed = {tuple(np.asarray(v).shape) for v in inputs.values() if np.asarray(v).ndim >= 2}
    states = [n for n in names if tuple(values[n].shape) in fed and values[n].size > 1]
    rest = [n for n in names if n not in states]
    if not states or len(rest) != 1:
        return None
    name, v = rest[0], values[rest[0]]
    if v.dtype.kind != "f" or v.ndim not in (1, 2) or v.size != v.shape[0]:  # [N] or [N, 1]
        return None
    if not (v.size and v.min() >= 0 and v.max() <= 1):
        return None
    return Inference(
        TaskSpec("vad"),
        f"output {name} {_dims(list(v.shape))} holds one probability per frame and {', '.join(states)} "
        "the shape of an input (a state fed back): a streaming detector, judged by speech/no-speech agreement per "
        "frame at 0.5",
    )


def _several_outputs(names, known, hw, generic) -> Inference:  # type: ignore[no-untyped-def]
    three = {n: s for n, s in known.items() if len(s) == 3}
    if len(names) == 2 and len(three) == 2:
        (n1, s1), (n2, s2) = three.items()
        if s1[1] == s2[1] and 4 in (s1[2], s2[2]) and s1[2] != s2[2]:
            c = s2[2] if s1[2] == 4 else s1[2]
            return Inference(
                TaskSpec("detection", "ssd"),
                f"two outputs {_dims(s1)} and {_dims(s2)}: {s1[1]} decoded boxes (4 coordinates) and their "
                f"{c} class scores: SSD/RetinaNet-style head (boxes taken as xyxy)",
            )
    if len(three) == len(names) and len(names) % 2 == 0 and hw is not None:
        rows = sorted({s[1] for s in three.values()}, reverse=True)
        widths = {s[2] for s in three.values()}
        if len(rows) * 2 == len(names) and len(widths) == 2 and max(widths) % 4 == 0:
            dist = max(widths) if (max(widths) // 4) > 1 else min(widths)
            strides = []
            for r in rows:
                match = [st for st in (8, 16, 32, 64, 128) if int(np.ceil(hw[0] / st)) * int(np.ceil(hw[1] / st)) == r]
                strides.extend(match[:1])
            if len(strides) == len(rows):
                classes = (widths - {dist}).pop()
                stride_text = "x".join(str(st) for st in strides)
                return Inference(
                    TaskSpec(
                        "detection",
                        "picodet",
                        {"size": f"{hw[0]}x{hw[1]}", "strides": stride_text, "reg_max": dist // 4 - 1},
                    ),
                    f"{len(names)} outputs in {len(rows)} pairs per level ({', '.join(str(r) for r in rows)} cells of "
                    f"the {hw[0]}x{hw[1]} input at strides {stride_text.replace('x', '/')}): "
                    f"{classes} class scores and 4 x {dist // 4}-bin box distributions: PicoDet/GFL head",
                )
    return generic(f"{len(names)} outputs ({', '.join(_dims(s) for s in known.values())}) that match no known head")


def resolve_task(
    task: str | TaskSpec | None,
    model: onnx.ModelProto | str | Path,
    outputs: Mapping[str, np.ndarray] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> Inference:
    """The task to judge a build by: the user's (``--task``), else the one inferred from the model and one sample
    of the reference run. Either way an :class:`Inference` whose reason says where the task came from."""
    if task is not None and str(task).strip():
        spec = parse_task(task)
        return Inference(spec, f"given: {spec}", inferred=False)
    return infer_task(model, outputs, inputs)
