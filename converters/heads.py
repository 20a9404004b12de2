"""The post-processing tail of a detection or segmentation graph: the nodes INT8 leaves in float.

A detector's last weighted layers are followed by arithmetic that decodes their outputs: the distribution-focal
softmax and its expectation, anchor offsets, strides, the sigmoid of the class scores, and often one ``Concat``
that puts boxes (0..image size) and scores (0..1) into one tensor. Quantized, that tensor shares one scale: the
scores are crushed to a few levels and detections vanish, while every cosine stays high. The tail is found by
walking back from the graph's outputs through such ops (:data:`TAIL_OPS`) up to the last weighted layers
(Conv, ConvTranspose, Gemm, MatMul), which stay quantized; a weighted layer that consumes a ``Softmax`` is the
distribution-focal integral (YOLOv8's ``dfl`` Conv, a fixed 0..reg_max weight) and belongs to the tail.

Both ONNX-level quantizers use it: ONNX Runtime's ``nodes_to_exclude`` and OpenVINO NNCF's ``ignored_scope``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

WEIGHTED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
# float arithmetic and data movement a head's decoder is made of
TAIL_OPS = frozenset(
    {
        "Abs",
        "Add",
        "ArgMax",
        "Cast",
        "Clip",
        "Concat",
        "Div",
        "Exp",
        "Expand",
        "Flatten",
        "Gather",
        "GatherElements",
        "Identity",
        "Log",
        "Max",
        "Min",
        "Mul",
        "Neg",
        "Pow",
        "ReduceMax",
        "ReduceSum",
        "Reshape",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Tile",
        "TopK",
        "Transpose",
        "Unsqueeze",
        "Where",
    }
)
SHAPE_ONLY = frozenset({"Shape", "Size"})  # their outputs depend on shapes only, fixed in a build
# families whose answers come from a decoded head (edgekit.tasks.FAMILIES)
HEAD_FAMILIES = frozenset({"detection", "segmentation"})


@dataclass(frozen=True)
class Tail:
    """The tail's node names (graph order) and the weighted layers it starts after."""

    nodes: tuple[str, ...]
    boundary: tuple[str, ...]  # the weighted layers the walk stopped at (they stay quantized)

    def __bool__(self) -> bool:
        return bool(self.nodes)


def find_tail(graph: onnx.GraphProto) -> Tail:
    """The decoder tail of ``graph``: nodes reachable backwards from its outputs through :data:`TAIL_OPS`.

    Nodes must be named (quantizers exclude by name); unnamed ones are skipped. Only nodes whose values depend on
    the data are part of it: arithmetic on shapes (anchor grids built from ``Shape``, ``Range``...) is constant once
    the shapes are fixed, and quantizers fold it.
    """
    producer = {out: node for node in graph.node for out in node.output}
    constants = {t.name for t in graph.initializer}
    live = {i.name for i in graph.input if i.name not in constants}  # tensors that depend on the data
    for node in graph.node:  # graphs are topologically sorted
        if node.op_type not in SHAPE_ONLY and any(i in live for i in node.input):
            live.update(node.output)
    seen: set[int] = set()
    tail: set[int] = set()
    boundary: set[str] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if not any(o in live for o in node.output):
            continue
        if node.op_type in WEIGHTED:
            source = producer.get(node.input[0]) if node.input else None
            if source is None or source.op_type != "Softmax":  # a learned layer: the tail starts after it
                boundary.add(node.name)
                continue
        elif node.op_type not in TAIL_OPS:
            continue
        tail.add(id(node))
        stack.extend(producer[i] for i in node.input if i in producer)
    names = tuple(n.name for n in graph.node if id(n) in tail and n.name)
    return Tail(names, tuple(sorted(b for b in boundary if b)))


def wants_float_tail(family: str | None) -> bool:
    """Whether a task's answers come from a decoded head whose tail INT8 may keep in float."""
    return family in HEAD_FAMILIES


def _score(record: dict[str, Any]) -> tuple[str, float | None]:
    section = record.get("task") or {}
    return str(section.get("primary", "score")), section.get("score")


def keep_tail_float(
    ctx: Any,
    plain: Path,
    load_graph: Callable[[], onnx.GraphProto],
    rebuild: Callable[[tuple[str, ...]], Path],
    step: str,
) -> tuple[Path, dict[str, Any] | None]:
    """The INT8 model to check as ``step``: ``plain``, or one rebuilt with the decoder tail of ``graph`` in float.

    Only for a detection or segmentation task (``ctx.task``), with ``ctx.keep_head_float``, and only when the task
    metric says it matters: ``plain`` is tried first (``ctx.trial``); where it fails its gate, ``rebuild(nodes)``
    quantizes again with the tail's nodes (names in ``load_graph()``, the graph the quantizer reads) in float, and the
    better of the two by the task's primary metric is returned with the report's section (None: plain, untouched).
    """
    family = getattr(getattr(ctx.task, "spec", None), "family", None)
    if not (ctx.keep_head_float and ctx.trial is not None and wants_float_tail(family)):
        return plain, None
    first = ctx.trial(step, plain)
    if first["passed"]:
        return plain, None
    metric, before = _score(first)
    tail = find_tail(load_graph())
    if not tail:
        ctx.log(f"  int8: {metric} {before} fails its gate, and no decoder tail was found after the last layers")
        return plain, {"kept": False, "reason": f"{family}: no decoder tail found after the last weighted layers"}
    candidate = rebuild(tail.nodes)
    after = _score(ctx.trial(f"{step}, {family} tail float", candidate))[1]
    better = before is None or (after is not None and after > before)
    reason = f"{family} tail: {metric} {_fmt(before)} -> {_fmt(after)} with {len(tail.nodes)} nodes float" + (
        "" if better else "; no better: plain int8 kept"
    )
    ctx.log(f"  int8: {reason} ({', '.join(tail.nodes[-4:])}, ...)")
    section = {
        "kept": better,
        "reason": reason,
        "metric": metric,
        "plain": before,
        "tail_float": after,
        "nodes": list(tail.nodes),
        "after_layers": list(tail.boundary),
    }
    return (candidate if better else plain), section


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
