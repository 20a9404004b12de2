"""Graphs for placement: one normalized node list per kind of model file, FLOPs, partitions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import onnx

ELEMENTWISE = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "HardSigmoid",
    "HardSwish",
    "Exp",
    "Log",
    "Sqrt",
    "Pow",
    "Max",
    "Min",
    "Abs",
    "Neg",
    "Erf",
    "Elu",
    "Selu",
    "Softplus",
    "Gelu",
    "Where",
    "Sum",
    "Mean",
    "Reciprocal",
    "QuantizeLinear",
    "DequantizeLinear",
    # OpenVINO names
    "Multiply",
    "Subtract",
    "Divide",
    "Clamp",
    "HSwish",
    "HSigmoid",
    "Swish",
    "Mish",
    "Power",
    "Maximum",
    "Minimum",
    "FakeQuantize",
    "Convert",
}


# -- graphs: one normalized node list per kind of model file ----------------------------------
def _node(
    name: str,
    op: str,
    inputs: list[dict[str, Any]],
    outputs: list[str],
    attrs: dict[str, Any] | None = None,
    domain: str = "",
    version: int | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "op": op,
        "domain": domain,
        "inputs": inputs,
        "outputs": outputs,
        "attrs": attrs or {},
        "flops": None,
        "version": version,
    }


def _prod(shape: Sequence[Any] | None) -> int | None:
    return math.prod(shape) if shape is not None and all(isinstance(d, int) and d >= 0 for d in shape) else None


def _flops(node: dict[str, Any], out_shapes: list[Any]) -> int | None:
    """FLOPs of one node (multiply-add = 2) from its input and output shapes; None when unknown."""
    op = node["op"]
    out = _prod(out_shapes[0]) if out_shapes else None
    ins = [i["shape"] for i in node["inputs"]]
    if out is None:
        return None
    if op in ("Conv", "Convolution", "ConvInteger", "QLinearConv") and len(ins) > 1 and ins[1]:
        w = ins[1] if op != "QLinearConv" else (ins[3] if len(ins) > 3 else None)
        return 2 * out * _prod(w[1:]) if w and _prod(w[1:]) else None  # type: ignore[operator]
    if op == "GroupConvolution" and len(ins) > 1 and ins[1]:
        return 2 * out * (_prod(ins[1][2:]) or 0)
    if op in ("ConvTranspose",) and ins and ins[1]:
        return 2 * (_prod(ins[0]) or 0) * (_prod(ins[1][1:]) or 0)
    if op in ("MatMul", "Gemm", "MatMulInteger", "FusedMatMul") and ins and ins[0]:
        trans_a = node["attrs"].get("transA", node["attrs"].get("transpose_a", 0))
        k = ins[0][-2] if trans_a and len(ins[0]) > 1 else ins[0][-1]
        return 2 * out * k if isinstance(k, int) else None
    if op in ("AveragePool", "MaxPool", "AvgPool"):
        kernel = node["attrs"].get("kernel_shape") or node["attrs"].get("kernel")
        return out * (_prod(list(kernel)) or 1) if kernel else out
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return _prod(ins[0]) if ins and ins[0] else out
    if op in ("BatchNormalization", "InstanceNormalization", "LayerNormalization", "MVN", "NormalizeL2"):
        return 2 * out
    if op in ("Softmax", "LogSoftmax", "SoftMax"):
        return 3 * out
    if op in ELEMENTWISE:
        return out
    return 0  # data movement (Reshape, Transpose, Concat, Gather, ...): no arithmetic counted


def _attr_value(a: Any) -> Any:
    import onnx

    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v if isinstance(v, (int, float, str)) else None


def onnx_graph(proto: onnx.ModelProto) -> list[dict[str, Any]]:
    """Nodes of an ONNX model's main graph, with shapes from ONNX shape inference and FLOPs."""
    import onnx

    try:
        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # inference fails on some custom-domain graphs: shapes stay unknown
        pass
    g = proto.graph
    consts = {i.name for i in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    info = {}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        t = v.type.tensor_type
        shape = (
            [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
            if t.HasField("shape")
            else None
        )
        if shape is not None and any(not isinstance(d, int) for d in shape):
            shape = [d if isinstance(d, int) else -1 for d in shape]
        info[v.name] = (shape, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else None)
    for i in g.initializer:
        info[i.name] = (list(i.dims), onnx.helper.tensor_dtype_to_np_dtype(i.data_type).name)
    nodes = []
    for idx, n in enumerate(g.node):
        if n.op_type == "Constant":
            continue
        inputs = [
            {
                "name": x,
                "shape": info.get(x, (None, None))[0],
                "dtype": info.get(x, (None, None))[1],
                "const": x in consts,
            }
            for x in n.input
        ]
        node = _node(
            n.name or f"{n.op_type}_{idx}",
            n.op_type,
            inputs,
            list(n.output),
            {a.name: _attr_value(a) for a in n.attribute},
            n.domain or "ai.onnx",
        )
        node["flops"] = _flops(node, [info.get(o, (None, None))[0] for o in n.output[:1]])
        nodes.append(node)
    return nodes


def op_list_graph(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes from a manifest's op list (``[{op, count, version?}]``): one node per counted op, no edges."""
    nodes = []
    for entry in ops:
        versions = entry.get("versions") or ([entry["version"]] if entry.get("version") is not None else [None])
        for k in range(int(entry.get("count", 1))):
            nodes.append(
                _node(
                    f"{entry['op']}#{k}",
                    entry["op"],
                    [],
                    [],
                    domain=entry.get("domain", ""),
                    version=versions[min(k, len(versions) - 1)],
                )
            )
    return nodes


# -- partitions ----------------------------------------------------------------------------
def partitions(nodes: list[dict[str, Any]], supported: Sequence[bool]) -> int | None:
    """Contiguous groups of supported nodes, as ONNX Runtime forms them (partitioning_utils.cc):
    topological order, a group closes when only unsupported nodes are ready. None without edges."""
    from collections import deque

    producer = {o: i for i, n in enumerate(nodes) for o in n["outputs"]}
    if not producer or not any(i["name"] in producer for n in nodes for i in n["inputs"]):
        return None if len(nodes) > 1 else (1 if supported and supported[0] else 0)
    consumers: dict[int, set[int]] = {i: set() for i in range(len(nodes))}
    indeg: dict[int, int] = {}
    for i, n in enumerate(nodes):
        preds = {producer[x["name"]] for x in n["inputs"] if x["name"] in producer}
        indeg[i] = len(preds)
        for p in preds:
            consumers[p].add(i)
    ready = deque(i for i in range(len(nodes)) if indeg[i] == 0)
    later: deque[int] = deque()
    group: list[int] = []
    border: set[int] = set()
    count = 0
    while ready or later:
        if not ready:
            if group:
                count += 1
            group, border = [], set()
            ready, later = later, deque()
            continue
        i = ready.popleft()
        if not supported[i] and i in border:
            later.append(i)
            continue
        if supported[i]:
            group.append(i)
            border.discard(i)
            border |= consumers[i]
        for c in consumers[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    return count + (1 if group else 0)
