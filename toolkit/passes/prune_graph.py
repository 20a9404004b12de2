"""Channel dependencies of an ONNX graph, and removing channels with every consumer rewired.

Every Conv (group 1), Gemm and MatMul with constant weights *produces* a channel space:
its output channels. Walking the graph in order, each tensor carries a *layout* along
axis 1: a list of segments ``(space, size)`` (``space`` None: channels that cannot be
removed). Channel-wise ops (BatchNormalization, activations, pooling, depthwise Conv,
Flatten/Reshape of ``[N, C, 1, 1]``) pass the layout on and slice their per-channel
parameters; Concat on axis 1 concatenates layouts (indices offset); an elementwise Add/Mul
of two tensors *unites* their spaces (a residual Add or a squeeze-excitation Mul prunes
the same channels in every producer); a Conv/Gemm/MatMul consuming a layout drops its
input columns. A space that reaches a graph output, a Reshape with hard-coded sizes, a
grouped Conv, or any op not understood here is marked unprunable with the reason.

The bookkeeping (spaces, groups) is in :mod:`.prune_spaces`, the rewriting in :mod:`.prune_rewrite`.
"""

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from . import prune_rewrite
from .prune_rewrite import macs  # noqa: F401  (prune.py imports it from here)
from .prune_spaces import Group, Spaces, implicit_inputs, layout_size, node_attr

PASS_THROUGH = {
    "Relu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Tanh",
    "Elu",
    "Selu",
    "Softplus",
    "Softsign",
    "Identity",
    "Dropout",
    "Neg",
    "Abs",
    "Exp",
    "Sqrt",
    "Erf",
    "Gelu",
    "Mish",
    "Celu",
    "ThresholdedRelu",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "LpPool",
    "Floor",
    "Ceil",
    "Round",
    "Cast",
}
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow", "PRelu"}


class Analysis:
    """The channel groups of a (folded, named) model and the edits that remove channels from them."""

    def __init__(self, model: onnx.ModelProto, shapes: dict[str, list]) -> None:
        self.model = model
        self.shapes = shapes
        self.inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.spaces = Spaces()
        self.layouts: dict[str, list] = {}
        self.edits: list[tuple] = []  # (kind, node, input_index, layout_or_space, axis)
        self.nodes = {n.name: n for n in model.graph.node}
        self._walk()

    # -- walking ------------------------------------------------------------------
    def _const(self, name: str) -> np.ndarray | None:
        return self.inits.get(name)

    def _walk(self) -> None:
        sp = self.spaces
        for node in self.model.graph.node:
            ins = [self.layouts.get(i) if i else None for i in node.input]
            tracked = [lay for lay in ins if lay is not None]
            implicit = [self.layouts[i] for i in implicit_inputs(node) if i in self.layouts]
            for lay in implicit:
                sp.invalidate(lay, f"used inside the sub-graph of {node.op_type} node '{node.name}'")
            handler = getattr(self, f"_op_{node.op_type}", None)
            if node.domain not in ("", "ai.onnx"):
                handler = None
            if handler is None:
                if node.op_type in PASS_THROUGH and tracked and ins[0] is not None:
                    self.layouts[node.output[0]] = ins[0]
                    continue
                if node.op_type in ELEMENTWISE:
                    self._elementwise(node, ins)
                    continue
                for lay in tracked:
                    sp.invalidate(lay, f"consumed by {node.op_type} node '{node.name}', which cannot be rewired")
                continue
            handler(node, ins)
        for out in self.model.graph.output:
            if out.name in self.layouts:
                sp.invalidate(self.layouts[out.name], f"feeds the graph output '{out.name}'")

    def _weight_consumer(self, node: onnx.NodeProto, lay: list | None, axis: int, ok: bool, why: str) -> None:
        if lay is None:
            return
        if ok:
            self.edits.append(("slice", node.name, 1, lay, axis))
        else:
            self.spaces.invalidate(lay, why)

    def _op_Conv(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        w = self._const(node.input[1])
        group = node_attr(node, "group", 1)
        x = ins[0]
        if w is None:
            self.spaces.invalidate(x, f"Conv node '{node.name}' has non-constant weights")
            return
        cout = w.shape[0]
        if group == 1:
            self._weight_consumer(
                node, x, 1, x is None or layout_size(x) == w.shape[1], f"Conv '{node.name}' shape mismatch"
            )
            s = self.spaces.new(cout, node.name)
            self.edits.append(("out", node.name, None, s, 0))
            self.layouts[node.output[0]] = [(s, cout)]
        elif x is not None and group == layout_size(x) == cout and w.shape[1] == 1:
            self.edits.append(("depthwise", node.name, 1, x, 0))
            self.layouts[node.output[0]] = x
        else:
            self.spaces.invalidate(x, f"grouped Conv '{node.name}' (group={group}) cannot drop single channels")

    def _op_Gemm(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        b = self._const(node.input[1])
        x = ins[0]
        if b is None or b.ndim != 2 or node_attr(node, "transA", 0):
            self.spaces.invalidate(x, f"Gemm '{node.name}' has non-constant or transposed-input weights")
            return
        trans_b = node_attr(node, "transB", 0)
        self._weight_consumer(node, x, 1 if trans_b else 0, True, "")
        f = b.shape[0] if trans_b else b.shape[1]
        s = self.spaces.new(f, node.name)
        self.edits.append(("out", node.name, None, s, 0 if trans_b else 1))
        self.layouts[node.output[0]] = [(s, f)]

    def _op_MatMul(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        b = self._const(node.input[1])
        x = ins[0]
        shape = self.shapes.get(node.input[0])
        if b is None or b.ndim != 2 or shape is None or len(shape) != 2:
            self.spaces.invalidate(x, f"MatMul '{node.name}' is not a 2-D product with constant weights")
            return
        self._weight_consumer(node, x, 0, True, "")
        s = self.spaces.new(b.shape[1], node.name)
        self.edits.append(("out", node.name, None, s, 1))
        self.layouts[node.output[0]] = [(s, b.shape[1])]

    def _op_BatchNormalization(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        x = ins[0]
        if x is None:
            return
        params = [self._const(i) for i in node.input[1:5]]
        if (
            any(p is None or p.shape != (layout_size(x),) for p in params)
            or len(node.output) > 1
            and any(node.output[1:])
        ):
            self.spaces.invalidate(x, f"BatchNormalization '{node.name}' has non-constant parameters")
            return
        for idx in range(1, 5):
            self.edits.append(("slice", node.name, idx, x, 0))
        self.layouts[node.output[0]] = x

    def _flatten_like(self, node: onnx.NodeProto, x: list | None, ok: bool, why: str) -> None:
        if x is None:
            return
        if ok:
            self.layouts[node.output[0]] = x
        else:
            self.spaces.invalidate(x, why)

    def _spatial_is_one(self, name: str) -> bool:
        shape = self.shapes.get(name)
        return shape is not None and len(shape) >= 2 and all(d == 1 for d in shape[2:])

    def _op_Flatten(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        self._flatten_like(
            node,
            ins[0],
            node_attr(node, "axis", 1) == 1 and self._spatial_is_one(node.input[0]),
            f"Flatten '{node.name}' mixes spatial positions into the channel axis",
        )

    def _op_Reshape(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        target = self._const(node.input[1])
        x = ins[0]
        ok = (
            target is not None
            and len(target) >= 2
            and self._spatial_is_one(node.input[0])
            and target[1] == -1
            and all(
                int(d) in (0, 1) or (i == 0 and int(d) == self.shapes[node.input[0]][0])
                for i, d in enumerate(target)
                if i != 1
            )
        )
        self._flatten_like(
            node,
            x,
            ok,
            f"Reshape '{node.name}' has hard-coded sizes"
            + (f" {[int(d) for d in target]}" if target is not None else ""),
        )

    def _axes(self, node: onnx.NodeProto) -> list[int] | None:
        axes = node_attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self._const(node.input[1])
        return None if axes is None else [int(a) for a in np.asarray(axes).ravel()]

    def _op_Squeeze(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        shape = self.shapes.get(node.input[0]) or []
        axes = self._axes(node)
        ok = axes is not None and all((a % len(shape)) >= 2 for a in axes) if shape else False
        self._flatten_like(node, ins[0], ok, f"Squeeze '{node.name}' moves the channel axis")

    def _op_Unsqueeze(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        shape = self.shapes.get(node.output[0]) or []
        axes = self._axes(node)
        ok = axes is not None and all((a % len(shape)) >= 2 for a in axes) if shape else False
        self._flatten_like(node, ins[0], ok, f"Unsqueeze '{node.name}' moves the channel axis")

    def _op_Pad(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        pads = node_attr(node, "pads")
        if pads is None and len(node.input) > 1:
            pads = self._const(node.input[1])
        rank = len(self.shapes.get(node.input[0]) or [])
        ok = pads is not None and rank >= 2 and len(node.input) < 4 and int(pads[1]) == 0 and int(pads[1 + rank]) == 0
        self._flatten_like(node, ins[0], ok, f"Pad '{node.name}' pads the channel axis")

    def _op_Concat(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        tracked = [lay for lay in ins if lay is not None]
        if not tracked:
            return
        rank = len(self.shapes.get(node.output[0]) or [])
        if rank < 2 or node_attr(node, "axis") % rank != 1:
            for lay in tracked:
                self.spaces.invalidate(lay, f"Concat '{node.name}' joins along an axis other than the channels")
            return
        out = []
        for name, lay in zip(node.input, ins):
            if lay is None:
                shape = self.shapes.get(name)
                if shape is None:
                    for t in tracked:
                        self.spaces.invalidate(t, f"Concat '{node.name}' has an input of unknown shape")
                    return
                lay = [(None, shape[1])]
            out += lay
        self.layouts[node.output[0]] = out

    def _elementwise(self, node: onnx.NodeProto, ins: list[Any]) -> None:
        out_shape = self.shapes.get(node.output[0])
        tracked = [lay for lay in ins if lay is not None]
        if not tracked:
            return
        if out_shape is None or len(out_shape) < 2:
            for lay in tracked:
                self.spaces.invalidate(lay, f"{node.op_type} '{node.name}' has an output of unknown rank")
            return
        rank, channels = len(out_shape), out_shape[1]
        result = None
        for idx, (name, lay) in enumerate(zip(node.input, ins)):
            shape = self.shapes.get(name)
            if lay is not None:
                if shape is None or len(shape) != rank or layout_size(lay) != channels:
                    for t in tracked:
                        self.spaces.invalidate(t, f"{node.op_type} '{node.name}' broadcasts a pruned tensor")
                    return
                if result is None:
                    result = lay
                elif [s for _, s in lay] == [s for _, s in result]:
                    for (a, _), (b, _) in zip(result, lay):
                        if a is not None and b is not None:
                            self.spaces.union(a, b)
                        elif a is not None or b is not None:
                            self.spaces.invalidate(
                                [(a or b, 0)],
                                f"{node.op_type} '{node.name}' mixes them with channels that cannot be removed",
                            )
                else:
                    for t in tracked:
                        self.spaces.invalidate(
                            t, f"{node.op_type} '{node.name}' joins differently concatenated tensors"
                        )
                    return
                continue
            axis = 1 - (rank - len(shape)) if shape is not None else None
            if shape is None or (0 <= axis < len(shape) and shape[axis] not in (1, channels)):  # type: ignore[operator, index]
                for t in tracked:
                    self.spaces.invalidate(t, f"{node.op_type} '{node.name}' has an operand of unknown shape")
                return
            if 0 <= axis < len(shape) and shape[axis] == channels and channels > 1:  # type: ignore[operator, index]
                if name not in self.inits:
                    for t in tracked:
                        self.spaces.invalidate(
                            t, f"{node.op_type} '{node.name}' combines them with a computed tensor of the same channels"
                        )
                    return
                self.edits.append(("slice", node.name, idx, tracked[0], axis))
        self.layouts[node.output[0]] = result  # type: ignore[assignment]

    # -- groups ---------------------------------------------------------------------
    def groups(self) -> list[Group]:
        sp = self.spaces
        out = {}
        for i in range(len(sp.parent)):
            r = sp.find(i)
            if r not in out:
                out[r] = Group(root=r, size=sp.size[r], producers=list(sp.producers[r]), reasons=list(sp.reasons[r]))
        return list(out.values())

    def keep_indices(self, layout: list, keep: dict[int, np.ndarray]) -> np.ndarray:
        """Indices along a layout that survive, given ``keep = {group root: sorted kept indices}``."""
        parts, offset = [], 0
        for space, size in layout:
            root = None if space is None else self.spaces.find(space)
            parts.append(offset + (keep[root] if root in keep else np.arange(size)))
            offset += size
        return np.concatenate(parts).astype(np.int64)

    # -- rewriting ------------------------------------------------------------------
    def apply(self, keep: dict, bias_add: dict | None = None) -> Any:
        """A new model with the channels not in ``keep`` removed; ``bias_add = {node: delta}`` adds to biases first."""
        return prune_rewrite.apply(self, keep, bias_add)
