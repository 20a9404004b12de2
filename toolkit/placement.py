"""``edgekit explain``: which accelerator runs each node of a built model, and why not.

For every accelerator the profile names for the bundle's backend, each node of the built graph is
``yes`` (the accelerator runs it), ``no`` (it falls back to the CPU: with the reason and what would
fix it) or ``unknown`` (no checker or table decides it; never counted as yes). The answer comes
from the runtime's own checker where one exists:

- ONNX Runtime NNAPI / Core ML: ORT's mobile usability checker (the same one
  :mod:`edgekit.converters.ort` runs for its yes/no), per node, plus the caveats of ORT's op lists
  that can be decided from the graph (``support/nnapi.toml``, ``support/coreml.toml``);
- OpenVINO: ``Core.query_model`` for each profile device whose plugin is on this machine;
  "not checked" otherwise, with the documented device limits (``support/openvino.toml``);
- MNN OpenCL / Metal / Vulkan: the op types each backend registers (``support/mnn_gpu.toml``);
- TFLite GPU delegate: its documented op list with versions (``support/tflite_gpu.toml``).

The summary gives the share of nodes and of FLOPs on the accelerator (multiply-add = 2 FLOPs;
Conv, Gemm/MatMul, pooling, elementwise, from inferred shapes), the partitions (contiguous
accelerator subgraphs: each boundary costs a copy) and the nodes that fell back.

``selective_build(bundle, out_dir)`` writes the inputs of the runtimes' own reduced builds.
Backends added later register a graph reader in ``GRAPH_READERS``, accelerator checks in
``TARGETS`` and selective-build writers in ``SELECTIVE_BUILD``.
"""

import json
import math
from pathlib import Path

from . import support_tables as st
from .errors import BundleError, EdgekitError

SCHEMA = "edgekit.placement"
MAX_LISTED = 200  # fallback / unknown nodes kept per accelerator in reports

# ONNX Runtime execution providers that are the CPU (not an accelerator placement question).
CPU_PROVIDERS = {"CPUExecutionProvider", "XNNPACKExecutionProvider", "ACLExecutionProvider", "ArmNNExecutionProvider"}
ORT_ACCELERATORS = {  # provider -> (short name, profile accelerator api, support table)
    "NNAPIExecutionProvider": ("NNAPI", "nnapi", "nnapi"),
    "CoreMLExecutionProvider": ("CoreML", "coreml", "coreml"),
    "QNNExecutionProvider": ("QNN", "qnn", None),
    "OpenVINOExecutionProvider": ("OpenVINO EP", "openvino-npu", None),
    "TensorrtExecutionProvider": ("TensorRT", "tensorrt", None),
    "CUDAExecutionProvider": ("CUDA", "cuda", None),
    "DmlExecutionProvider": ("DirectML", "directml", None),
}
MNN_GPU_API = {"OPENCL": "opencl", "VULKAN": "vulkan", "METAL": "metal", "CUDA": "cuda"}

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
OV_SKIP = {"Parameter", "Result", "Constant"}


# -- graphs: one normalized node list per kind of model file ----------------------------------
def _node(name, op, inputs, outputs, attrs=None, domain="", version=None):
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


def _prod(shape):
    return math.prod(shape) if shape is not None and all(isinstance(d, int) and d >= 0 for d in shape) else None


def _flops(node, out_shapes):
    """FLOPs of one node (multiply-add = 2) from its input and output shapes; None when unknown."""
    op = node["op"]
    out = _prod(out_shapes[0]) if out_shapes else None
    ins = [i["shape"] for i in node["inputs"]]
    if out is None:
        return None
    if op in ("Conv", "Convolution", "ConvInteger", "QLinearConv") and len(ins) > 1 and ins[1]:
        w = ins[1] if op != "QLinearConv" else (ins[3] if len(ins) > 3 else None)
        return 2 * out * _prod(w[1:]) if w and _prod(w[1:]) else None
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


def _attr_value(a):
    import onnx

    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v if isinstance(v, (int, float, str)) else None


def onnx_graph(proto):
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


def openvino_graph(model):
    """Nodes of an OpenVINO model (Parameter/Constant/Result left out), shapes from the IR, FLOPs."""
    nodes = []
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind in OV_SKIP:
            continue
        inputs = []
        for port in op.inputs():
            src = port.get_source_output()
            ps = port.get_partial_shape()
            shape = [d.get_length() if d.is_static else -1 for d in ps] if ps.rank.is_static else None
            inputs.append(
                {
                    "name": f"{src.get_node().get_friendly_name()}:{src.get_index()}",
                    "shape": shape,
                    "dtype": port.get_element_type().get_type_name(),
                    "const": src.get_node().get_type_name() == "Constant",
                }
            )
        outputs = [f"{op.get_friendly_name()}:{i}" for i in range(op.get_output_size())]
        attrs = {}
        try:
            attrs = {k: v for k, v in op.get_attributes().items() if isinstance(v, (int, float, str, list))}
        except Exception:  # some ops do not expose attributes to Python
            pass
        node = _node(op.get_friendly_name(), kind, inputs, outputs, attrs, "openvino")
        out_shapes = []
        if op.get_output_size():
            ps = op.get_output_partial_shape(0)
            out_shapes = [[d.get_length() if d.is_static else -1 for d in ps] if ps.is_static else None]
        node["flops"] = _flops(node, out_shapes)
        nodes.append(node)
    return nodes


def mnn_graph(model_file, workdir):
    """Nodes of a .mnn model from MNN's own JSON dump (op types and edges; the dump has no shapes)."""
    import tempfile

    from edgekit.converters.mnn import _run_tool

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        dump = Path(tmp) / "model.json"
        _run_tool(
            "convert", ["mnnconvert", "-f", "MNN", "--modelFile", str(model_file), "--JsonFile", str(dump)], tmp, dump
        )
        net = json.loads(dump.read_text())
    nodes = []
    for i, op in enumerate(net.get("oplists") or []):
        kind = op.get("type", "?")
        if kind in ("Input", "Const"):
            continue
        inputs = [{"name": f"t{t}", "shape": None, "dtype": None, "const": False} for t in op.get("inputIndexes") or []]
        nodes.append(
            _node(
                op.get("name") or f"{kind}_{i}",
                kind,
                inputs,
                [f"t{t}" for t in op.get("outputIndexes") or []],
                domain="mnn",
            )
        )
    return nodes


def op_list_graph(ops):
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
def partitions(nodes, supported):
    """Contiguous groups of supported nodes, as ONNX Runtime forms them (partitioning_utils.cc):
    topological order, a group closes when only unsupported nodes are ready. None without edges."""
    from collections import deque

    producer = {o: i for i, n in enumerate(nodes) for o in n["outputs"]}
    if not producer or not any(i["name"] in producer for n in nodes for i in n["inputs"]):
        return None if len(nodes) > 1 else (1 if supported and supported[0] else 0)
    consumers = {i: set() for i in range(len(nodes))}
    indeg = {}
    for i, n in enumerate(nodes):
        preds = {producer[x["name"]] for x in n["inputs"] if x["name"] in producer}
        indeg[i] = len(preds)
        for p in preds:
            consumers[p].add(i)
    ready = deque(i for i in range(len(nodes)) if indeg[i] == 0)
    later, group, border, count = deque(), [], set(), 0
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


# -- fixes -------------------------------------------------------------------------------------
OP_FIXES = {  # advice for op types accelerators commonly reject (the math is exact; no source needed)
    "ArgMax": "take the argmax in app code on the model's output (drop the ArgMax from the export)",
    "ArgMin": "take the argmin in app code on the model's output",
    "HardSwish": "export HardSwish as x * HardSigmoid(x) (Mul + HardSigmoid), or x * Clip(x + 3, 0, 6) / 6",
    "Einsum": "rewrite the Einsum as MatMul/Transpose/Reshape at export",
    "Gelu": "export Gelu as its tanh approximation (Mul, Add, Tanh, Pow) if the accelerator runs those",
    "Erf": "export Gelu with the tanh approximation (no Erf)",
    "NonZero": "compute indices in app code, or move the NonZero to the end of the graph",
    "TopK": "take the top-k in app code on the model's output",
    "Shape": "fix the input shapes (--input-shape) so shape arithmetic folds into constants",
    "Expand": "fix the input shapes (--input-shape) so Expand folds, or broadcast with Mul/Add by a constant",
    "Mod": "compute the remainder as x - Floor(x / m) * m with Div, Floor, Mul and Sub",
    "CumSum": "express the cumulative sum as a MatMul with a constant triangular matrix",
    "ReduceMax": "use GlobalMaxPool over the spatial axes if that is what it reduces",
    "Range": "fix the input shapes so Range folds into a constant",
    "ConstantOfShape": "fix the input shapes so ConstantOfShape folds into a constant",
    "HardSigmoid": "export HardSigmoid as Clip(x * alpha + beta, 0, 1) (Mul, Add, Clip)",
    "Flatten": "export the Flatten as a Reshape to a constant shape (e.g. [1, -1])",
}


def _fix_op(op, accelerator):
    return OP_FIXES.get(
        op,
        f"replace {op} with ops {accelerator} runs, or move it to the start or end of the graph "
        "so the rest stays one partition (each boundary costs a copy)",
    )


# -- targets -----------------------------------------------------------------------------------
def _accelerator_name(profile, api):
    for a in profile.data.get("accelerators", []):
        if api in a.get("apis", []):
            return a["name"]
    return None


def _summary(nodes, status, partition_count):
    n = len(nodes)
    yes = sum(1 for s in status if s == st.YES)
    unknown = sum(1 for s in status if s == st.UNKNOWN)
    flops = [x["flops"] for x in nodes]
    known = any(f is not None for f in flops)  # nodes whose shapes are unknown count as 0 (flops_partial)
    total = sum(f for f in flops if f) if known else None
    on = sum(f for f, s in zip(flops, status) if f and s == st.YES) if known else None
    return {
        "nodes": n,
        "on_accelerator": yes,
        "fallback": n - yes - unknown,
        "unknown": unknown,
        "node_share": round(yes / n, 4) if n else None,
        "flops": total,
        "flops_on_accelerator": on,
        "flops_share": round(on / total, 4) if total else None,
        "flops_partial": known and any(f is None for f in flops),
        "partitions": partition_count,
    }


def _by_op(nodes, status):
    rows = {}
    for node, s in zip(nodes, status):
        r = rows.setdefault(node["op"], {"op": node["op"], "nodes": 0, "on_accelerator": 0, "unknown": 0})
        r["nodes"] += 1
        r["on_accelerator"] += s == st.YES
        r["unknown"] += s == st.UNKNOWN
    return sorted(rows.values(), key=lambda r: (-r["nodes"], r["op"]))


def _target(name, device, checked_with, nodes, verdicts, source=None, partition_count="compute", notes=()):
    """Assemble one accelerator's section from per-node verdicts ``(status, reason, fix)``."""
    status = [v[0] for v in verdicts]
    if partition_count == "compute":
        partition_count = partitions(nodes, [s == st.YES for s in status])
    fallback = [
        {"node": n["name"], "op": n["op"], "reason": v[1], "fix": v[2]}
        for n, v in zip(nodes, verdicts)
        if v[0] == st.NO
    ]
    unknown = [
        {"node": n["name"], "op": n["op"], "reason": v[1]} for n, v in zip(nodes, verdicts) if v[0] == st.UNKNOWN
    ]
    return {
        "accelerator": name,
        "device": device,
        "checked_with": checked_with,
        "source": source,
        "summary": _summary(nodes, status, partition_count),
        "by_op": _by_op(nodes, status),
        "fallback": fallback[:MAX_LISTED],
        "unknown": unknown[:MAX_LISTED],
        "notes": list(notes),
    }


def _ort_checker_target(proto, provider, profile):
    """NNAPI / Core ML: ORT's usability checker decides; our rules check the caveats it only prints."""
    import tempfile

    import onnx
    import onnxruntime
    from onnxruntime.tools.mobile_helpers import usability_checker as uc
    from onnxruntime.tools.onnx_model_utils import is_fixed_size_tensor, optimize_model

    from edgekit.converters.ort import _quiet

    short, api, table_name = ORT_ACCELERATORS[provider]
    table = st.load(table_name)
    with tempfile.TemporaryDirectory() as tmp:  # as ORT's checker and edgekit's ort backend do:
        src, optimized = Path(tmp) / "model.onnx", Path(tmp) / "basic.onnx"  # basic optimizations first
        onnx.save(proto, str(src))
        with _quiet():
            optimize_model(src, optimized, use_external_initializers=True)
        model = onnx.shape_inference.infer_shapes(onnx.load(str(optimized)))
    for i, n in enumerate(model.graph.node):  # name every node so the checker's groups map back
        if not n.name:
            n.name = f"{n.op_type}_{i}"
    with _quiet():
        if short == "NNAPI":
            info, max_rank = uc.check_nnapi_partitions(model, True), 999
        else:
            info, max_rank = uc.check_coreml_partitions(model, True, "coreml_supported_mlprogram_ops.md"), 5
    checker = info.supported_ops_checker
    in_groups = {n.name for group in info.supported_groups for n in group}
    g = model.graph
    vi = {v.name: v for v in list(g.input) + list(g.output) + list(g.value_info)}
    inits = {i.name for i in g.initializer}
    nodes = onnx_graph(model)
    by_name = {n.name: n for n in g.node}
    verdicts, caveats = [], set()
    for node in nodes:
        proto_node = by_name.get(node["name"])
        if proto_node is None:
            verdicts.append((st.UNKNOWN, "not found in ORT's checked graph", ""))
            continue
        op_ok = checker.is_op_supported(proto_node)
        dynamic = [x for x in proto_node.input if x and not (x in inits or (x in vi and is_fixed_size_tensor(vi[x])))]
        high = [
            x
            for x in proto_node.input
            if x in vi and vi[x].type.HasField("tensor_type") and len(vi[x].type.tensor_type.shape.dim) > max_rank
        ]
        if not op_ok:
            verdicts.append(
                (
                    st.NO,
                    f"{short} does not support op type {node['domain']}:{node['op']} (ONNX Runtime's {short} op list)",
                    _fix_op(node["op"], short),
                )
            )
        elif dynamic:
            verdicts.append(
                (
                    st.NO,
                    f"input {dynamic[0]} has a dynamic shape; the {short} check requires fixed shapes",
                    "fix the shapes: rebuild with --input-shape NAME=D1,D2,... for every input; shapes "
                    "computed from data (NonZero, TopK with a runtime k) stay dynamic: move those ops to the "
                    "end of the graph",
                )
            )
        elif high:
            verdicts.append(
                (
                    st.NO,
                    f"input {high[0]} has rank > {max_rank}, which {short} does not take",
                    f"reshape to rank <= {max_rank} around {node['op']}",
                )
            )
        elif node["name"] not in in_groups:
            verdicts.append((st.UNKNOWN, "not in a partition of ORT's checker (a subgraph or an ordering effect)", ""))
        else:
            broken = st.check_rules(table, node)
            if broken:
                verdicts.append((st.NO, broken[0]["reason"], broken[0]["fix"]))
            else:
                verdicts.append((st.YES, "", ""))
                caveat = checker._ops.get(f"{node['domain']}:{node['op']}", "").strip()
                ruled = {r["quote"] for r in table.get("rules", []) if node["op"] in st._ops_of(r)}
                if caveat and not any(q in caveat for q in ruled):
                    caveats.add(f"{node['op']}: {caveat}")
    ours = sum(1 for v in verdicts if v[0] == st.YES)
    notes = [
        "analysed after ONNX Runtime's basic graph optimizations, as a session on the device applies them "
        "(constant folding, fusions, function ops inlined)",
        f"ONNX Runtime's checker: {info.num_supported_nodes}/{info.num_nodes} nodes in {info.num_partitions} "
        f"partition(s), suitability {info.suitability().name}",
    ]
    if ours != info.num_supported_nodes:
        notes.append(
            f"{info.num_supported_nodes - ours} node(s) the checker accepts break a caveat of its op list "
            "(checked here)"
        )
    target = _target(
        short,
        _accelerator_name(profile, api),
        f"ONNX Runtime {onnxruntime.__version__} mobile usability checker (per node) + {table_name}.toml caveat rules",
        nodes,
        verdicts,
        st.cite(table),
        notes=notes,
    )
    target["caveats_not_checked"] = sorted(caveats)
    return target


def _unchecked_target(name, device, why, nodes, source=None):
    verdicts = [(st.UNKNOWN, why, "")] * len(nodes)
    t = _target(name, device, f"not checked: {why}", nodes, verdicts, source, partition_count=None)
    t["unknown"] = t["unknown"][:1] and [{"node": "*", "op": "*", "reason": why}]
    return t


def ort_targets(proto, profile):
    targets = []
    providers = profile.backend("ort").get("providers", ["CPUExecutionProvider"])
    nodes = None
    for p in providers:
        if p in CPU_PROVIDERS:
            continue
        short, api, table_name = ORT_ACCELERATORS.get(p, (p.replace("ExecutionProvider", ""), "", None))
        if table_name:
            try:
                targets.append(_ort_checker_target(proto, p, profile))
                continue
            except ImportError as e:
                why = f"ONNX Runtime's usability checker is not installed here ({e})"
            except Exception as e:  # the checker asserts on graphs it does not understand
                why = f"ONNX Runtime's usability checker failed on this graph: {type(e).__name__}: {e}"
        else:
            why = f"no checker or support table for {short} in edgekit; its op support is unknown"
        nodes = nodes if nodes is not None else onnx_graph(proto)
        targets.append(_unchecked_target(short, _accelerator_name(profile, api), why, nodes))
    return targets


def openvino_targets(ov_model, profile):
    from edgekit.converters.openvino import BACKEND as ov_backend
    from edgekit.converters.openvino import _present, device_list

    core = ov_backend.core()
    available = list(core.available_devices)
    nodes = openvino_graph(ov_model)
    table = st.load("openvino")
    dynamic = any(not ov_model.input(i).get_partial_shape().is_static for i in range(len(ov_model.inputs)))
    targets = []
    for dev in device_list(profile.backend("openvino").get("device", "CPU")):
        kind = "npu" if dev.startswith("NPU") else "gpu" if dev.startswith("GPU") else "cpu"
        device = _accelerator_name(profile, f"openvino-{kind}") or (
            profile.data["cpu"].get("model") if kind == "cpu" else None
        )
        if _present(dev, available):
            supported = core.query_model(ov_model, dev)
            verdicts = [
                (st.YES, "", "")
                if n["name"] in supported
                else (
                    st.NO,
                    f"OpenVINO's {dev} plugin does not support {n['op']} (Core.query_model)",
                    _fix_op(n["op"], f"OpenVINO {dev}"),
                )
                for n in nodes
            ]
            notes = []
            if dev == "CPU":
                notes.append(
                    "the CPU is the fallback device, not an accelerator: listed to show what OpenVINO's "
                    "CPU plugin on this machine accepts"
                )
            targets.append(
                _target(
                    dev,
                    device,
                    f"Core.query_model on this machine's {dev} plugin ({ov_backend._device_name(core, dev)})",
                    nodes,
                    verdicts,
                    notes=notes,
                )
            )
            continue
        why = f"not checked: no {dev} plugin on this machine"
        limits = st.device_limits(table, dev)
        if dynamic and limits.get("dynamic_shapes") == "no":
            verdicts = [
                (
                    st.NO,
                    f'the model has dynamic input shapes; "{limits["quote"]}"',
                    "fix the shapes: rebuild with --input-shape NAME=D1,D2,...",
                )
            ] * len(nodes)
        else:
            verdicts = [(st.UNKNOWN, f"{why}; OpenVINO's documentation has no per-operation {dev} table", "")] * len(
                nodes
            )
        t = _target(dev, device, why, nodes, verdicts, st.cite(table), partition_count=None)
        t["unknown"] = t["unknown"][:1] and [{"node": "*", "op": "*", "reason": verdicts[0][1]}]
        t["notes"].append(ov_backend._plugin_detail(core, dev, available))
        targets.append(t)
    return targets


def mnn_targets(nodes, profile):
    backend = profile.backend("mnn").get("backend", "CPU").upper()
    if backend == "CPU":
        return []
    table = st.load("mnn_gpu")
    device = _accelerator_name(profile, MNN_GPU_API.get(backend, backend.lower()))
    verdicts = []
    for n in nodes:
        s, why = st.check_backend_op(table, backend, n["op"])
        verdicts.append((s, why, _fix_op(n["op"], f"MNN {backend}") if s == st.NO else ""))
    notes = (
        ["FLOPs: the .mnn dump carries no shapes; the build report computes them from the ONNX graph"]
        if any(n["flops"] is None for n in nodes)
        else []
    )
    return [
        _target(
            f"MNN {backend}", device, f"{table['name']} (mnn_gpu.toml)", nodes, verdicts, st.cite(table), notes=notes
        )
    ]


def tflite_targets(nodes, profile):
    """TFLite GPU delegate from its documented op list (the tflite backend's ops carry versions)."""
    if not profile.data.get("accelerators"):
        return []
    table = st.load("tflite_gpu")
    device = (
        _accelerator_name(profile, "opencl")
        or _accelerator_name(profile, "metal")
        or _accelerator_name(profile, "opengl-es")
    )
    verdicts = [st.check_op_list(table, n) for n in nodes]
    return [
        _target("TFLite GPU delegate", device, "tflite_gpu.toml (documented op list)", nodes, verdicts, st.cite(table))
    ]


# -- graph readers per backend ------------------------------------------------------------------
def _read_ort(model_path, workdir):
    import onnx

    return "onnx", onnx.load(str(model_path))


def _read_openvino(model_path, workdir):
    from edgekit.converters.openvino import BACKEND as ov_backend

    return "openvino", ov_backend.core().read_model(str(model_path))


def _read_mnn(model_path, workdir):
    return "mnn", mnn_graph(model_path, workdir)


GRAPH_READERS = {".onnx": _read_ort, ".xml": _read_openvino, ".mnn": _read_mnn}
TARGETS = {"ort": ort_targets, "openvino": openvino_targets, "mnn": mnn_targets, "tflite": tflite_targets}


def analyse(kind, graph, backend, profile, graph_note=""):
    """Placement for a loaded graph: ``kind`` onnx (ModelProto), openvino (ov.Model), mnn / ops (node list)."""
    if kind == "onnx":  # an ONNX graph is what ONNX Runtime runs; other runtimes' tables name their own ops
        nodes = onnx_graph(graph)
        targets = ort_targets(graph, profile) if backend == "ort" else []
    elif kind == "openvino":
        nodes, targets = openvino_graph(graph), openvino_targets(graph, profile)
    else:
        nodes = graph
        fn = TARGETS.get(backend)
        targets = fn(nodes, profile) if fn and backend not in ("ort", "openvino") else []
    flops = [n["flops"] for n in nodes]
    out = {
        "schema": SCHEMA,
        "backend": backend,
        "profile": profile.name,
        "graph": {
            "kind": kind,
            "nodes": len(nodes),
            "flops": sum(f for f in flops if f) if any(f is not None for f in flops) else None,
            "flops_partial": any(f is None for f in flops),
            "note": graph_note,
        },
        "targets": targets,
    }
    if not targets:
        out["note"] = f"profile {profile.name} names no accelerator for backend {backend}: every node runs on the CPU"
    return out


def explain_build(result, ctx, backend):
    """The build report's ``placement`` section, from the model the backend just built."""
    model_file = Path(result.model_file)
    if model_file.suffix == ".ort":
        graph_file, note = ctx.workdir / "model.onnx", "the ONNX graph converted to model.ort"
    elif model_file.suffix in GRAPH_READERS:
        graph_file, note = model_file, f"the built {model_file.suffix} model"
    else:
        graph_file, note = None, ""
    if graph_file is not None and graph_file.is_file():
        kind, graph = GRAPH_READERS[graph_file.suffix](graph_file, ctx.workdir)
    elif result.ops:
        kind, graph, note = "ops", op_list_graph(result.ops), "the backend's op list (no graph edges)"
    else:
        return {"error": f"no graph reader for {model_file.name}"}
    out = analyse(kind, graph, backend, ctx.profile, note)
    out["precision"] = ctx.precision
    if kind == "mnn":  # FLOPs from the reference graph MNN converted
        import onnx

        ref = onnx_graph(onnx.load(str(ctx.reference_path)))
        out["graph"]["flops"] = sum(n["flops"] or 0 for n in ref)
        out["graph"]["flops_note"] = "FLOPs of the ONNX reference graph MNN converted"
    out["selective_build"] = selective_build_plan(backend)
    return out


# -- bundles ---------------------------------------------------------------------------------------
def _bundle_profile(manifest, profile):
    from . import profiles

    if profile is None:
        spec = manifest.get("profile_spec")
        return (
            profiles.Profile(manifest["profile"], spec, "bundle manifest")
            if spec
            else profiles.load(manifest["profile"])
        )
    return profile if isinstance(profile, profiles.Profile) else profiles.load(profile)


def explain(bundle_dir, profile=None, model=None):
    """Placement report for a bundle (``profile``: the bundle's, or another profile to ask about).

    ``model``: the source ONNX model, for bundles whose model file edgekit cannot read as a graph
    (ONNX Runtime's ``.ort``); it must be the source the bundle was built from (sha256 checked).
    """
    import tempfile

    from . import bundle as bundle_mod

    bundle_dir = Path(bundle_dir)
    manifest = bundle_mod.load(bundle_dir)
    prof = _bundle_profile(manifest, profile)
    backend = manifest["backend"]
    model_file = bundle_dir / manifest["model"]
    reader = GRAPH_READERS.get(model_file.suffix)
    with tempfile.TemporaryDirectory(prefix="edgekit-explain-") as tmp:
        if reader is not None:
            kind, graph = reader(model_file, Path(tmp))
            note = f"{manifest['model']} ({manifest['precision']})"
        elif model is not None:
            from .model import file_sha256, load_model

            if not Path(model).is_file() or file_sha256(model) != manifest["source"]["sha256"]:
                raise BundleError(
                    f"{model} is not the model bundle {bundle_dir} was built from (sha256 differs from "
                    f"the manifest's source {manifest['source']['file']}); pass that file to --model"
                )
            src = load_model(model, {s["name"]: s["shape"] for s in manifest["inputs"]})
            kind, graph = "onnx", src.proto
            note = (
                f"the source model {Path(model).name} with the bundle's input shapes (fp32); the bundle's "
                f"{manifest['model']} holds the {manifest['precision']} graph"
            )
        elif backend not in ("ort", "openvino", "mnn") and manifest.get("ops"):
            kind, graph, note = "ops", op_list_graph(manifest["ops"]), "the manifest's op list (no graph edges)"
        else:
            report = _report_section(bundle_dir)
            if report is not None and report.get("profile") == prof.name:
                report = dict(report)
                report["graph"] = dict(
                    report.get("graph", {}),
                    note=(
                        f"from the build report: {manifest['model']} cannot be read as a graph here; pass --model "
                        "SOURCE.onnx to analyse it again"
                    ),
                )
                report["bundle"] = manifest["name"]
                return report
            raise BundleError(
                f"{manifest['model']} cannot be read as a graph by edgekit, and the build report has "
                f"no placement for profile {prof.name}: pass the source ONNX model with --model"
            )
        out = analyse(kind, graph, backend, prof, note)
    out["bundle"] = manifest["name"]
    out["precision"] = manifest["precision"]
    out["selective_build"] = selective_build_plan(backend)
    return out


def _report_section(bundle_dir):
    try:
        return json.loads((Path(bundle_dir) / "report.json").read_text()).get("placement")
    except (OSError, ValueError):
        return None


# -- selective build ---------------------------------------------------------------------------
def _write_ort(bundle_dir, manifest, out):
    from onnxruntime.tools.reduced_build_config_parser import parse_config

    src = bundle_dir / "required_operators.config"
    if not src.is_file():
        raise BundleError(f"bundle {bundle_dir} has no required_operators.config; rebuild it with --backend ort")
    dst = out / "required_operators.config"
    dst.write_text(src.read_text())
    try:
        required, _ = parse_config(str(dst))
    except Exception as e:  # ORT's parser raises plain exceptions
        raise BundleError(f"{src} does not parse with ONNX Runtime's own reader ({e}); rebuild the bundle") from None
    ops = sorted(f"{d}:{op}" for d, by in required.items() for opset, names in by.items() for op in names)
    (out / "README.txt").write_text(
        "ONNX Runtime reduced-operator (minimal) build for this model\n\n"
        "required_operators.config lists domain;opset;ops, the format of ONNX Runtime's\n"
        "tools/python/create_reduced_build_config.py, read by its --include_ops_by_config:\n\n"
        "  ./build.sh --config MinSizeRel --minimal_build --disable_ml_ops --disable_exceptions \\\n"
        "      --include_ops_by_config required_operators.config --skip_tests\n"
        "  (Android: add --android --android_abi arm64-v8a --android_api 29 --android_sdk_path ... "
        "--android_ndk_path ...;\n   with the NNAPI EP: --use_nnapi; iOS: --ios --use_coreml; "
        "a .ort model needs --minimal_build, an .onnx one --minimal_build extended)\n\n"
        f"operators ({len(ops)}): {', '.join(ops)}\n"
    )
    return [dst, out / "README.txt"]


def _write_mnn(bundle_dir, manifest, out):
    nodes = mnn_graph(bundle_dir / manifest["model"], out)
    ops = sorted({n["op"] for n in nodes})
    dst = out / "op.txt"
    dst.write_text(
        "# MNN op types of "
        + manifest["model"]
        + " (one per line, for tools/script/prue_mnn_ops.py)\n"
        + "".join(f"{op}\n" for op in ops)
    )
    (out / "README.txt").write_text(
        "MNN build with only this model's operators\n\n"
        "op.txt lists MNN OpType names, one per line, as MNN's tools/script/prue_mnn_ops.py reads them.\n"
        "It edits MNN's op registration (CPUOPRegister.cpp, MetalOPRegister.mm, ShapeRegister.cpp,\n"
        "GeometryOPRegister.cpp) in a source checkout, so work on a copy:\n\n"
        "  python3 tools/script/prue_mnn_ops.py op.txt $MNN_ROOT\n"
        "  cmake -DMNN_REDUCE_SIZE=ON [-DMNN_OPENCL=ON | -DMNN_VULKAN=ON | -DMNN_METAL=ON] .. && make -j\n\n"
        "MNN_BUILD_MINI=ON also drops MNN's geometry computation; MNN then loads only models converted with\n"
        "MNNConvert --saveStaticModel (fixed input shapes), which this bundle's model.mnn was not.\n"
    )
    return [dst, out / "README.txt"]


def _write_openvino(bundle_dir, manifest, out):
    from edgekit.converters.openvino import BACKEND as ov_backend

    model = ov_backend.core().read_model(str(bundle_dir / manifest["model"]))
    ops = sorted({op.get_type_name() for op in model.get_ops()})
    (out / "ops.txt").write_text("".join(f"{op}\n" for op in ops))
    (out / "README.txt").write_text(
        "OpenVINO: no operator list applies\n\n"
        "OpenVINO's size reduction is conditional compilation, which reads code-usage statistics collected\n"
        "by running the model on an instrumented OpenVINO build, not a list of operators:\n\n"
        "  cmake -DENABLE_PROFILING_ITT=ON -DSELECTIVE_BUILD=COLLECT .. && cmake --build .\n"
        "  python thirdparty/itt_collector/runtool/sea_runtool.py --bindir $OPENVINO_LIBRARY_DIR -o stats/model \\\n"
        "      ! ./benchmark_app -niter 1 -nireq 1 -m model.xml\n"
        "  cmake -DSELECTIVE_BUILD=ON -DSELECTIVE_BUILD_STAT=$PWD/stats/*.csv .. && cmake --build .\n\n"
        "ops.txt lists the model's OpenVINO operation types for reference only.\n"
        "Source: https://docs.openvino.ai/2024/openvino-workflow/deployment-locally/"
        "optimial-binary-size-conditional-compilation.html\n"
    )
    return [out / "ops.txt", out / "README.txt"]


def _write_tflite(bundle_dir, manifest, out):
    """TFLite: the op list with versions (TFLite's selective build reads the .tflite model itself)."""
    lines = []
    for o in manifest.get("ops", []):
        versions = o.get("versions") or ([o["version"]] if o.get("version") is not None else [])
        lines.append(o["op"] + (" " + ",".join(f"v{v}" for v in versions) if versions else ""))
    (out / "ops.txt").write_text("".join(f"{l}\n" for l in sorted(lines)))
    (out / "README.txt").write_text(
        "TFLite (LiteRT) selective build\n\n"
        "TFLite's selective build reads the model file itself, e.g.\n"
        f"  bash tensorflow/lite/tools/build_aar.sh --input_models={manifest['model']} --target_archs=arm64-v8a\n"
        "ops.txt lists the builtin ops with the versions the model needs.\n"
    )
    return [out / "ops.txt", out / "README.txt"]


def _write_paddlelite(bundle_dir, manifest, out):
    """Paddle Lite: the tailoring lists ``opt --record_tailoring_info=true`` wrote, under the names its build reads.

    The bundle carries them as ``tailored_ops`` / ``tailored_kernels`` files (the agent refuses
    file names with a leading dot); Paddle Lite's build script wants ``.tailored_ops_list`` and
    ``.tailored_kernels_list`` in the directory given as ``--opt_model_dir``.
    """
    import shutil

    wanted = {"tailored_ops": ".tailored_ops_list", "tailored_kernels": ".tailored_kernels_list"}
    found = [
        (bundle_dir / f["name"], wanted[f["role"]])
        for f in manifest.get("files", [])
        if f.get("role") in wanted and (bundle_dir / f["name"]).is_file()
    ]
    if not found:
        raise BundleError(
            f"bundle {bundle_dir} has no Paddle Lite tailoring lists (files with roles "
            f"{', '.join(wanted)}); rebuild it with this edgekit (opt --record_tailoring_info=true)"
        )
    for src, name in found:
        shutil.copyfile(src, out / name)
    (out / "README.txt").write_text(
        "Paddle Lite tailored build (only the ops and kernels this model uses)\n\n"
        "  ./lite/tools/build_android.sh --with_strip=ON --opt_model_dir=THIS_DIR   # or build_linux.sh for ARM Linux\n"
    )
    return [out / name for _, name in found] + [out / "README.txt"]


SELECTIVE_BUILD = {  # backend -> (runtime, folder, writer)
    "ort": ("onnxruntime", "onnxruntime", _write_ort),
    "mnn": ("MNN", "mnn", _write_mnn),
    "openvino": ("OpenVINO", "openvino", _write_openvino),
    "tflite": ("TFLite", "tflite", _write_tflite),
    "paddlelite": ("Paddle Lite", "paddlelite", _write_paddlelite),
}
PLAN = {
    "ort": "required_operators.config for ONNX Runtime's --include_ops_by_config (minimal build)",
    "mnn": "op.txt (MNN op types) for MNN's tools/script/prue_mnn_ops.py",
    "openvino": "none applies: OpenVINO's conditional compilation needs usage statistics from an instrumented run; "
    "README.txt gives the steps",
    "tflite": "ops.txt (builtin ops with versions); TFLite's build_aar.sh --input_models reads the model itself",
    "paddlelite": "Paddle Lite tailoring lists from opt --record_tailoring_info",
}


def selective_build_plan(backend):
    return {
        "backend": backend,
        "writes": PLAN.get(backend, f"nothing: no selective-build writer for {backend}"),
        "command": "edgekit explain BUNDLE --selective-build DIR",
    }


def selective_build(bundle_dir, out_dir):
    """Write the runtime's selective-build inputs for a bundle into ``out_dir/<runtime>/``; return the files."""
    from . import bundle as bundle_mod

    bundle_dir = Path(bundle_dir)
    manifest = bundle_mod.load(bundle_dir)
    backend = manifest["backend"]
    if backend not in SELECTIVE_BUILD:
        raise EdgekitError(
            f"edgekit has no selective-build writer for backend {backend!r} (it has: {', '.join(SELECTIVE_BUILD)})"
        )
    runtime, folder, writer = SELECTIVE_BUILD[backend]
    out = Path(out_dir) / folder
    tmp = out.with_name(out.name + ".partial")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        files = writer(bundle_dir, manifest, tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.replace(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"runtime": runtime, "dir": str(out), "files": [str(out / Path(f).name) for f in files]}


# -- text ---------------------------------------------------------------------------------------
def _pct(x):
    return "?" if x is None else f"{100 * x:.1f} %"


def _mflops(f):
    return "?" if f is None else f"{f / 1e6:.2f} MFLOPs"


def text(r, max_fallback=40):
    g = r["graph"]
    lines = [
        f"edgekit explain: {r.get('bundle', '?')} ({r['backend']}, {r.get('precision', '?')}) for {r['profile']}",
        f"  graph: {g.get('note') or g['kind']}: {g['nodes']} nodes, {_mflops(g.get('flops'))}",
    ]
    if r.get("note"):
        lines.append(f"  {r['note']}")
    for t in r.get("targets", []):
        s = t["summary"]
        lines.append("")
        lines.append(
            f"  {t['accelerator']}" + (f" ({t['device']})" if t.get("device") else "") + f": {t['checked_with']}"
        )
        if t.get("source"):
            src = t["source"]
            lines.append(f"    source: {src.get('url')} ({src.get('version')}, read {src.get('read')})")
        parts = "?" if s["partitions"] is None else s["partitions"]
        lines.append(
            f"    on the accelerator: {s['on_accelerator']}/{s['nodes']} nodes ({_pct(s['node_share'])}), "
            f"{_pct(s['flops_share'])} of FLOPs, {parts} partition(s); falls back: {s['fallback']}, "
            f"unknown: {s['unknown']}"
        )
        lines.append(f"    {'op type':<24} {'nodes':>6} {'on acc.':>8} {'unknown':>8}")
        for row in t["by_op"]:
            lines.append(f"    {row['op']:<24} {row['nodes']:>6} {row['on_accelerator']:>8} {row['unknown']:>8}")
        if t["fallback"]:
            lines.append("    falls back to the CPU:")
            for f in t["fallback"][:max_fallback]:
                lines.append(f"      {f['node']} ({f['op']}): {f['reason']}")
                if f["fix"]:
                    lines.append(f"        fix: {f['fix']}")
            if len(t["fallback"]) > max_fallback:
                lines.append(f"      ... and {len(t['fallback']) - max_fallback} more (--json lists them)")
        for u in t["unknown"][:3]:
            lines.append(f"    unknown: {u['node']} ({u['op']}): {u['reason']}")
        for c in t.get("caveats_not_checked", []):
            lines.append(f"    caveat not checked: {c}")
        for n in t.get("notes", []):
            lines.append(f"    note: {n}")
    sb = r.get("selective_build")
    if sb:
        lines.append("")
        lines.append(f"  selective build: {sb['writes']} ({sb['command']})")
    return "\n".join(lines) + "\n"


def summary_lines(section):
    """Short lines for the build report's text form."""
    if not section:
        return []
    if "error" in section:
        return [f"  placement: not computed ({section['error']})"]
    if not section.get("targets"):
        return [f"  placement: {section.get('note', 'no accelerator')}"]
    out = []
    for t in section["targets"]:
        s = t["summary"]
        parts = "?" if s["partitions"] is None else s["partitions"]
        line = (
            f"  placement {t['accelerator']}: {s['on_accelerator']}/{s['nodes']} nodes ({_pct(s['node_share'])}), "
            f"{_pct(s['flops_share'])} of FLOPs, {parts} partition(s)"
        )
        if s["unknown"]:
            line += f", {s['unknown']} unknown"
        out.append(line)
        for f in t["fallback"][:5]:
            out.append(f"    falls back: {f['node']} ({f['op']}): {f['reason']}")
        if len(t["fallback"]) > 5:
            out.append(f"    ... {len(t['fallback']) - 5} more: edgekit explain BUNDLE")
    return out
