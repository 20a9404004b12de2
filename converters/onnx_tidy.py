"""ONNX rewrites that change no value, for converters that refuse a spelling of a graph rather than its meaning.

X2Paddle and MindSpore Lite's converter refuse a pooling node that carries a ``dilations`` attribute, even one of
all ones (the default, which exporters such as Ultralytics' write out on every ``MaxPool``): "only dilations = 0
is supported", "pooling op not support dilations now". Dropping an all-ones ``dilations`` computes the same function;
a pooling node with a real dilation is left as it is, and the converter's own error then names it.

MindSpore Lite's converter accepts a ``Clip`` whose bounds are constants, but computes a wrong answer for one whose
bound is computed by the graph (openWakeWord's mel spectrogram clips at ``max(x) - 80``: cosine 0.34 with the ONNX
model). ``Clip(x, lo, hi)`` is ``Min(Max(x, lo), hi)``: that spelling is written for such a node.

X2Paddle 1.6 maps an opset-13 ``Unsqueeze`` to ``paddle.unsqueeze`` with its axes as a tensor, which loses the
static shape: a ``Conv`` after it then fails ("The channel dimension of the input((-1, -1, -1)) should be defined").
An ``Unsqueeze`` with constant axes of a tensor whose shape is static is a ``Reshape`` to that shape, which X2Paddle
maps with the shape as a list. Paddle's ``reflect`` and ``replicate`` padding take tensors of rank 3 to 5 only
("input tesor dimension must be in [3, 4, 5] but got 2") and X2Paddle writes a rank-3 one in a layout they refuse:
such a ``Pad`` of a static rank-2 tensor (Silero VAD's audio) is written on the tensor reshaped to rank 4
(``[1, 1, a, b]``), then reshaped back.

OpenVINO's ``If`` takes a condition of rank 0 or 1 ("Rank of If condition input must be equal to 0 or 1"); ONNX
Runtime reads the single element of any one-element tensor, and exporters write ``[1, 1]`` conditions (openWakeWord's
keyword models: a verifier branch taken when the score passes a threshold). Such a condition is reshaped to ``[]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

POOLS = ("MaxPool", "AveragePool", "LpPool")


def _save_copy(model: Any, onnx_path: str | Path, work: Path, suffix: str) -> Path:
    """``model`` (the rewritten ``onnx_path``) saved in ``work`` as ``<stem>.<suffix>.onnx``."""
    import onnx

    Path(work).mkdir(parents=True, exist_ok=True)
    out = Path(work) / f"{Path(onnx_path).stem}.{suffix}.onnx"
    onnx.save(model, str(out))
    return out


def drop_default_dilations(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` without all-ones pooling dilations; and the nodes changed."""
    import onnx

    from edgekit.model import all_nodes

    model = onnx.load(str(onnx_path))
    changed = []
    for node in all_nodes(model.graph):
        if node.op_type not in POOLS:
            continue
        for attr in list(node.attribute):
            if attr.name == "dilations" and all(d == 1 for d in attr.ints):
                node.attribute.remove(attr)
                changed.append(node.name or node.output[0])
    if not changed:
        return Path(onnx_path), []
    return _save_copy(model, onnx_path, work, "tidy"), changed


def clip_bounds_as_max_min(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` where each main-graph ``Clip`` with a bound computed by the graph is
    ``Max`` then ``Min`` (a bound of +/-inf is left out); and the nodes changed."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(onnx_path))
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})  # fmt: skip
    changed, nodes = [], []
    for node in g.node:
        bounds = list(node.input[1:3]) + [""] * (3 - len(node.input))
        if node.op_type != "Clip" or node.domain or all(not b or b in consts for b in bounds[:2]):
            nodes.append(node)
            continue
        name, x = node.name or node.output[0], node.input[0]
        steps = [(op, b) for op, b in zip(("Max", "Min"), bounds[:2]) if b and not np.all(np.isinf(consts.get(b, 0.0)))]
        for k, (op, bound) in enumerate(steps):
            out = node.output[0] if k == len(steps) - 1 else f"{name}/{op}"
            nodes.append(helper.make_node(op, [x, bound], [out], name=f"{name}/{op}"))
            x = out
        if not steps:
            nodes.append(helper.make_node("Identity", [x], [node.output[0]], name=name))
        changed.append(name)
    if not changed:
        return Path(onnx_path), []
    del g.node[:]
    g.node.extend(nodes)
    return _save_copy(model, onnx_path, work, "clip"), changed


def unsqueeze_as_reshape(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` where each main-graph ``Unsqueeze`` with constant axes of a tensor of
    static shape is a ``Reshape`` to its output shape; and the nodes changed."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(onnx_path))
    g = model.graph
    consts = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # shape inference refuses the graph: nothing is known to be static
        return Path(onnx_path), []
    static = {}
    for v in list(inferred.value_info) + list(inferred.input) + list(inferred.output):
        dims = v.type.tensor_type.shape.dim
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            static[v.name] = [d.dim_value for d in dims]
    changed, nodes, shapes = [], [], []
    for node in g.node:
        ok = node.op_type == "Unsqueeze" and not node.domain and len(node.input) == 2 and node.input[1] in consts
        if not ok or node.input[0] not in static or node.output[0] not in static:
            nodes.append(node)
            continue
        name = node.name or node.output[0]
        shape = numpy_helper.from_array(np.array(static[node.output[0]], np.int64), f"{name}/shape")
        shapes.append(shape)
        nodes.append(helper.make_node("Reshape", [node.input[0], shape.name], [node.output[0]], name=name))
        changed.append(name)
    if not changed:
        return Path(onnx_path), []
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(shapes)
    return _save_copy(model, onnx_path, work, "reshape"), changed


def prelu_for_x2paddle(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` where each ``PRelu`` with a constant per-channel slope is in a form
    X2Paddle 1.6 maps right; and the nodes changed. X2Paddle reads a slope as ``[C, 1, 1]`` on axis 1 only: a slope
    with leading unit axes (``[1, C, 1, 1]``, as Keras exports it) is given as ``[C, 1, 1]`` (the same broadcast);
    any other per-channel slope (``[C]`` on a rank-2 tensor after a dense layer, which X2Paddle computes wrong, or a
    channel-last one) becomes ``Relu(x) + slope * -Relu(-x)``, the same function in elementwise ops."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(onnx_path))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    changed, added, nodes = [], [], []
    for node in g.node:
        if node.op_type != "PRelu" or node.domain or len(node.input) != 2 or node.input[1] not in inits:
            nodes.append(node)
            continue
        slope = numpy_helper.to_array(inits[node.input[1]])
        lead = 0
        while lead < slope.ndim - 1 and slope.shape[lead] == 1:
            lead += 1
        rest = slope.shape[lead:]
        if slope.size == 1 or (lead == 0 and len(rest) >= 2 and all(d == 1 for d in rest[1:])):
            nodes.append(node)  # one value, or already [C, 1, 1]: X2Paddle maps it right
            continue
        name = node.name or node.output[0]
        if len(rest) >= 2 and all(d == 1 for d in rest[1:]):  # [1, C, 1, 1] -> [C, 1, 1]
            added.append(numpy_helper.from_array(np.ascontiguousarray(slope.reshape(rest)), f"{name}/slope"))
            node.input[1] = added[-1].name
            nodes.append(node)
        else:
            x, s, p = node.input[0], node.input[1], f"{name}/"
            nodes += [
                helper.make_node("Relu", [x], [p + "pos"], name=p + "pos"),
                helper.make_node("Neg", [x], [p + "negx"], name=p + "negx"),
                helper.make_node("Relu", [p + "negx"], [p + "relu_negx"], name=p + "relu_negx"),
                helper.make_node("Neg", [p + "relu_negx"], [p + "neg"], name=p + "neg"),
                helper.make_node("Mul", [p + "neg", s], [p + "scaled"], name=p + "scaled"),
                helper.make_node("Add", [p + "pos", p + "scaled"], [node.output[0]], name=name),
            ]
        changed.append(name)
    if not changed:
        return Path(onnx_path), []
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(added)
    return _save_copy(model, onnx_path, work, "prelu"), changed


def pad_rank2_as_rank4(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` where each main-graph ``reflect``/``edge`` ``Pad`` of a static rank-2
    tensor with constant pads is done on that tensor reshaped to ``[1, 1, a, b]``; and the nodes changed."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from edgekit.passes.graph_fold import static_shapes

    model = onnx.load(str(onnx_path))
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    pads_of = [n for n in g.node if n.op_type == "Pad" and not n.domain and len(n.input) >= 2]
    modes = {n.name or n.output[0]: next((a.s for a in n.attribute if a.name == "mode"), b"constant") for n in pads_of}
    if not any(m in (b"reflect", b"edge") for m in modes.values()):
        return Path(onnx_path), []
    try:
        static = static_shapes(model)
    except Exception:  # shape inference refuses the graph: no rank is known
        return Path(onnx_path), []
    changed, nodes = [], []
    for node in g.node:
        name = node.name or node.output[0]
        dims = static.get(node.input[0], []) if node in pads_of else []
        ok = len(dims) == 2 and modes[name] in (b"reflect", b"edge")
        if not ok or node.input[1] not in consts or (len(node.input) > 2 and node.input[2]):
            nodes.append(node)
            continue
        pads = consts[node.input[1]].astype(np.int64)
        padded = [d + int(pads[k]) + int(pads[k + 2]) for k, d in enumerate(dims)]
        rank4 = numpy_helper.from_array(np.array([1, 1, *dims], np.int64), f"{name}/rank4")
        back = numpy_helper.from_array(np.array(padded, np.int64), f"{name}/rank2")
        pads4 = np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64)
        pads4_init = numpy_helper.from_array(pads4, f"{name}/pads")
        g.initializer.extend([rank4, back, pads4_init])
        nodes += [
            helper.make_node("Reshape", [node.input[0], rank4.name], [f"{name}/x4"], name=f"{name}/Reshape"),
            helper.make_node("Pad", [f"{name}/x4", pads4_init.name], [f"{name}/y4"], name=name, mode=modes[name]),
            helper.make_node("Reshape", [f"{name}/y4", back.name], [node.output[0]], name=f"{name}/Reshape_back"),
        ]
        changed.append(name)
    if not changed:
        return Path(onnx_path), []
    del g.node[:]
    g.node.extend(nodes)
    return _save_copy(model, onnx_path, work, "pad4"), changed


def if_condition_as_scalar(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` where each ``If`` whose condition has a static one-element shape of rank
    above 1 reads it through a ``Reshape`` to ``[]``; and the nodes changed."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(onnx_path))
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shapes unknown: nothing to rewrite safely
        return Path(onnx_path), []
    shapes = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        dims = v.type.tensor_type.shape.dim
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[v.name] = [d.dim_value for d in dims]
    g, changed = model.graph, list[str]()
    scalar = "edgekit_if_condition_scalar_shape"
    for node in list(g.node):
        cond = node.input[0] if node.op_type == "If" and node.input else None
        shape = shapes.get(cond or "")
        if cond is None or shape is None or len(shape) <= 1 or int(np.prod(shape)) != 1:
            continue
        if not changed:
            g.initializer.append(numpy_helper.from_array(np.zeros(0, np.int64), scalar))
        reshaped = f"{cond}_as_scalar"
        at = list(g.node).index(node)
        g.node.insert(at, helper.make_node("Reshape", [cond, scalar], [reshaped], name=f"{node.name}_condition"))
        node.input[0] = reshaped
        changed.append(node.name or node.output[0])
    if not changed:
        return Path(onnx_path), []
    return _save_copy(model, onnx_path, work, "ifcond"), changed
