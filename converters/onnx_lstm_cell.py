"""A one-step ONNX ``LSTM`` written as the cell's own arithmetic, for a converter whose LSTM mapping is broken.

X2Paddle 1.6 maps an ``LSTM`` whose final state outputs (``Y_h``, ``Y_c``) are read by other nodes to a graph that
refers to outputs it never made ("Couldn't find ..._p1 in previous layers"). A streaming model such as Silero VAD
runs its LSTM one step at a time (sequence length 1) and reads exactly those outputs. For that case the node is
the cell itself (ONNX's default activations, gate order i, o, f, c)::

    gates = x W^T + h R^T + (Wb + Rb)
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)        h' = sigmoid(o) * tanh(c')

written with ``MatMul``, ``Add``, ``Slice``, ``Sigmoid``, ``Tanh``, ``Mul`` and ``Reshape``; the outputs keep their
names. Any other LSTM (longer or unknown sequence, bidirectional, peepholes, clip, other activations, weights that
are not initializers) is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_ACTIVATIONS = (b"Sigmoid", b"Tanh", b"Tanh")


def _one_step(node: Any, consts: dict[str, np.ndarray], static: dict[str, list[int]]) -> bool:
    """Whether ``node`` is a forward LSTM of one step this rewrite computes exactly."""
    attrs = {a.name: a for a in node.attribute}
    if node.op_type != "LSTM" or node.domain:
        return False
    if attrs.get("direction") and attrs["direction"].s not in (b"forward",):
        return False
    if (
        "clip" in attrs
        or (attrs.get("input_forget") and attrs["input_forget"].i)
        or (attrs.get("layout") and attrs["layout"].i)
    ):
        return False
    if "activations" in attrs and tuple(attrs["activations"].strings) != DEFAULT_ACTIVATIONS:
        return False
    ins = list(node.input) + [""] * (8 - len(node.input))
    if ins[4] or ins[7] or ins[1] not in consts or ins[2] not in consts or (ins[3] and ins[3] not in consts):
        return False  # sequence_lens, peepholes, or weights computed by the graph
    return static.get(ins[0], [0])[0] == 1


def _cell(node: Any, consts: dict[str, np.ndarray], prefix: str) -> tuple[list[Any], list[Any]]:
    from onnx import helper, numpy_helper

    w, r = consts[node.input[1]][0], consts[node.input[2]][0]  # [4h, in], [4h, h]
    hidden = r.shape[1]
    b = consts[node.input[3]][0] if len(node.input) > 3 and node.input[3] else np.zeros(8 * hidden, w.dtype)
    ins = list(node.input) + [""] * (8 - len(node.input))
    outs = list(node.output) + [""] * (3 - len(node.output))

    def init(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), f"{prefix}/{name}"))
        return f"{prefix}/{name}"

    def op(kind: str, inputs: list[str], out: str = "") -> str:
        out = out or f"{prefix}/{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, inputs, [out], name=f"{prefix}/{kind}_{len(nodes)}"))
        return out

    inits: list[Any] = []
    nodes: list[Any] = []
    x = op("Reshape", [ins[0], init("x_shape", np.array([-1, w.shape[1]], np.int64))])
    gates = op("Add", [op("MatMul", [x, init("W_t", w.T)]), init("bias", b[: 4 * hidden] + b[4 * hidden :])])
    state_shape = init("state_shape", np.array([-1, hidden], np.int64))
    if ins[5]:
        gates = op("Add", [gates, op("MatMul", [op("Reshape", [ins[5], state_shape]), init("R_t", r.T)])])
    axis = init("axis", np.array([1], np.int64))
    i, o, f, g = (
        op("Slice", [gates, init(f"start{k}", np.array([k * hidden], np.int64)),
                     init(f"end{k}", np.array([(k + 1) * hidden], np.int64)), axis])
        for k in range(4)
    )  # fmt: skip
    c_new = op("Mul", [op("Sigmoid", [i]), op("Tanh", [g])])
    if ins[6]:
        c_new = op("Add", [op("Mul", [op("Sigmoid", [f]), op("Reshape", [ins[6], state_shape])]), c_new])
    h_new = op("Mul", [op("Sigmoid", [o]), op("Tanh", [c_new])])
    for out, value, dims in ((outs[0], h_new, [1, 1, -1, hidden]), (outs[1], h_new, [1, -1, hidden]),
                             (outs[2], c_new, [1, -1, hidden])):  # fmt: skip
        if out:
            op("Reshape", [value, init(f"{out}_shape", np.array(dims, np.int64))], out)
    return nodes, inits


def lstm_steps_as_cells(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` with each one-step LSTM of the main graph written as its cell; and the
    nodes changed."""
    import onnx
    from onnx import numpy_helper

    from edgekit.passes.graph_fold import drop_unused_initializers, static_shapes

    model = onnx.load(str(onnx_path))
    g = model.graph
    if not any(n.op_type == "LSTM" for n in g.node):
        return Path(onnx_path), []
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    try:
        static = static_shapes(model)
    except Exception:  # shape inference refuses the graph: no sequence length is known
        return Path(onnx_path), []
    changed, nodes = [], []
    for node in g.node:
        if not _one_step(node, consts, static):
            nodes.append(node)
            continue
        name = node.name or node.output[0]
        cell, inits = _cell(node, consts, name)
        nodes.extend(cell)
        g.initializer.extend(inits)
        changed.append(name)
    if not changed:
        return Path(onnx_path), []
    del g.node[:]
    g.node.extend(nodes)
    drop_unused_initializers(model)  # the LSTM's own weights
    Path(work).mkdir(parents=True, exist_ok=True)
    out_path = Path(work) / (Path(onnx_path).stem + ".cell.onnx")
    onnx.save(model, str(out_path))
    return out_path, changed
