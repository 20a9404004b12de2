"""Graph tidying that later passes rely on: constants as initializers, constant sub-graphs folded.

Exporters (Paddle, older PyTorch) put weights in ``Constant`` nodes and build biases
and target shapes with small sub-graphs (``Reshape(offset, Constant)``,
``Shape -> Slice -> Concat``). With static input shapes these are all constants; once
folded, a pass sees every weight, bias and target shape as an initializer. The result
computes the same function (the pass that uses it is fidelity-checked anyway).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

# never folded: random or stateful ops
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
_MAX_FOLDED = 1 << 22  # elements: fold shapes and biases, not huge broadcasts


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name in ("value_float", "value_int"):
        return np.array(helper.get_attribute_value(attr), np.float32 if attr.name == "value_float" else np.int64)
    if attr.name in ("value_floats", "value_ints"):
        return np.array(helper.get_attribute_value(attr), np.float32 if attr.name == "value_floats" else np.int64)
    return None  # sparse or string constants stay nodes


def name_nodes(model: onnx.ModelProto) -> None:
    """Give every node a unique name (``OpType_i``): reports and recipes refer to layers by name."""
    seen = set()
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        node.name = name
        seen.add(name)


def static_shapes(model: onnx.ModelProto, dynamic_as_one: bool = False) -> dict[str, list]:
    """``{tensor: [dims]}`` for every tensor ONNX shape inference can size (ints only).

    ``dynamic_as_one``: size dynamic input dimensions (a batch ``N``) as 1 first; channel
    counts do not depend on them, so a channel analysis may use these shapes.
    """
    if dynamic_as_one:
        fixed = onnx.ModelProto()
        fixed.CopyFrom(model)
        for inp in fixed.graph.input:
            for d in inp.type.tensor_type.shape.dim:
                if not (d.HasField("dim_value") and d.dim_value > 0):
                    d.Clear()
                    d.dim_value = 1
        model = fixed
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        if all(d is not None for d in dims):
            shapes[vi.name] = dims
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _evaluate(node: onnx.NodeProto, consts: dict[str, np.ndarray], opsets: Any) -> Any:
    from onnx.reference import ReferenceEvaluator

    inputs = [i for i in node.input if i]
    graph = helper.make_graph(
        [node],
        "fold",
        [],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o],
        [numpy_helper.from_array(consts[i], i) for i in inputs],
    )
    m = helper.make_model(graph, opset_imports=opsets)
    return ReferenceEvaluator(m).run(None, {})


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with Constant nodes and all-constant sub-graphs turned into initializers."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    graph_outputs = {o.name for o in g.output}
    weights = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in weights]  # older exporters list weights as inputs too
    del g.input[:]
    g.input.extend(inputs)
    overridable = {i.name for i in g.input}
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer if i.name not in overridable}
    new_inits = {}
    opsets = list(m.opset_import)
    shapes = None
    changed = True
    while changed:
        changed = False
        keep = []
        for node in g.node:
            outs = [o for o in node.output if o]
            value = None
            if (
                node.domain not in ("", "ai.onnx")
                or node.op_type in _NO_FOLD
                or any(o in graph_outputs for o in outs)
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
            ):
                keep.append(node)
                continue
            if node.op_type == "Constant":
                v = _constant_value(node)
                value = None if v is None else [v]
            elif node.op_type == "Shape":
                if shapes is None:
                    shapes = static_shapes(m)
                if node.input[0] in shapes and not node.attribute:
                    value = [np.array(shapes[node.input[0]], np.int64)]
            elif all(i in consts for i in node.input if i) and any(node.input):
                try:
                    value = _evaluate(node, consts, opsets)
                except Exception:  # the reference evaluator lacks the op or refuses it: leave the node
                    value = None
            if value is None or len(value) != len(outs) or any(np.asarray(v).size > _MAX_FOLDED for v in value):
                keep.append(node)
                continue
            for name, v in zip(outs, value):
                consts[name] = new_inits[name] = np.asarray(v)
            changed = True
        if changed:
            del g.node[:]
            g.node.extend(keep)
            shapes = None
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in new_inits.items())
    drop_unused_initializers(m)
    del g.value_info[:]
    return m


def drop_unused_initializers(model: onnx.ModelProto) -> None:
    g = model.graph
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}

    def walk(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            used.update(n.input)
            for a in n.attribute:
                for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                    walk(sub)

    walk(g)
    kept = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
