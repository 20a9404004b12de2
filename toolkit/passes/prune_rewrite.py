"""Rewriting an ONNX graph after channel pruning's analysis: every producer and consumer of removed channels
sliced (:func:`apply`), and the multiply-accumulates per node (:func:`macs`)."""

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .prune_spaces import layout_size, node_attr


def apply(analysis: Any, keep: dict, bias_add: dict | None = None) -> onnx.ModelProto:
    """A new model with the channels not in ``keep`` (``{group root: sorted kept indices}``) removed from
    ``analysis`` (an :class:`edgekit.passes.prune_graph.Analysis`); ``bias_add = {node: delta}`` adds to biases
    first."""
    m = onnx.ModelProto()
    m.CopyFrom(analysis.model)
    nodes = {n.name: n for n in m.graph.node}
    arrays = dict(analysis.inits)
    uses: dict[str, int] = {}
    for n in m.graph.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1

    def own(node: onnx.NodeProto, idx: int) -> str:
        """The node's private copy of its idx-th input (cloned when shared)."""
        name = node.input[idx]
        if uses.get(name, 0) > 1:
            new = f"{name}__{node.name}"
            arrays[new] = arrays[name].copy()
            uses[name] -= 1
            uses[new] = 1
            node.input[idx] = new
            name = new
        return name

    for name, delta in (bias_add or {}).items():
        node = nodes[name]
        if len(node.input) < 3 or not node.input[2]:
            bname = f"{name}__bias"
            arrays[bname] = np.zeros(len(delta), np.float32)
            uses[bname] = 1
            del node.input[2:]
            node.input.append(bname)
        b = own(node, 2)
        scale = node_attr(node, "beta", 1.0) if node.op_type == "Gemm" else 1.0
        cur = arrays[b]
        add = delta.reshape(cur.shape) if cur.size == delta.size else delta
        arrays[b] = (np.broadcast_to(cur, add.shape) + add / scale).astype(cur.dtype)

    for kind, name, idx, lay, axis in analysis.edits:
        node = nodes[name]
        if kind == "out":
            root = analysis.spaces.find(lay)
            if root not in keep:
                continue
            k = keep[root]
            w = own(node, 1)
            arrays[w] = np.take(arrays[w], k, axis=axis)
            if len(node.input) > 2 and node.input[2]:
                bias = arrays[node.input[2]]
                if node.op_type == "Gemm" and bias.ndim == 2 and bias.shape[1] > 1:
                    b = own(node, 2)
                    arrays[b] = np.take(arrays[b], k, axis=1)
                elif bias.ndim >= 1 and bias.shape[-1] > 1:
                    b = own(node, 2)
                    arrays[b] = np.take(arrays[b], k, axis=bias.ndim - 1)
            continue
        k = analysis.keep_indices(lay, keep)
        if len(k) == layout_size(lay):
            continue
        if kind == "depthwise":
            w = own(node, 1)
            arrays[w] = np.take(arrays[w], k, axis=0)
            if len(node.input) > 2 and node.input[2]:
                b = own(node, 2)
                arrays[b] = np.take(arrays[b], k, axis=0)
            for a in node.attribute:
                if a.name == "group":
                    a.i = len(k)
        else:
            p = own(node, idx)
            arrays[p] = np.take(arrays[p], k, axis=axis)

    used = {i for n in m.graph.node for i in n.input}
    del m.graph.initializer[:]
    m.graph.initializer.extend(
        numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in arrays.items() if k in used
    )
    del m.graph.value_info[:]
    return m


def macs(model: onnx.ModelProto, shapes: dict[str, Any]) -> dict[str, int]:
    """Multiply-accumulates per Conv/Gemm/MatMul node (batch included)."""
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type == "Conv" and n.input[1] in inits and n.output[0] in shapes:
            w = inits[n.input[1]]
            out[n.name] = int(np.prod(shapes[n.output[0]]) * np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul") and n.input[1] in inits and n.output[0] in shapes:
            w = inits[n.input[1]]
            k = w[1] if n.op_type == "Gemm" and node_attr(n, "transB", 0) else w[0]
            out[n.name] = int(np.prod(shapes[n.output[0]]) * k)
    return out
