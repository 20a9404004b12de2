"""Placement for ONNX Runtime: which execution provider runs each node (ORT's own mobile usability checker for
NNAPI / Core ML, plus the caveats of its op lists), and the required-operators config for a minimal build."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit import support_tables as st
from edgekit.errors import BundleError
from edgekit.placement_graph import onnx_graph
from edgekit.placement_targets import _accelerator_name, _fix_op, _target, _unchecked_target

if TYPE_CHECKING:
    import onnx

    from edgekit.profiles import Profile

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


def _ort_checker_target(proto: onnx.ModelProto, provider: str, profile: Profile) -> dict[str, Any]:
    """NNAPI / Core ML: ORT's usability checker decides; our rules check the caveats it only prints."""
    import tempfile

    import onnx
    import onnxruntime
    from onnxruntime.tools.mobile_helpers import usability_checker as uc
    from onnxruntime.tools.onnx_model_utils import is_fixed_size_tensor, optimize_model

    from edgekit.converters.ort.common import _quiet

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


def ort_targets(proto: onnx.ModelProto, profile: Profile) -> list[dict[str, Any]]:
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


# -- selective build ---------------------------------------------------------------------------
def _write_ort(bundle_dir: Path, manifest: dict[str, Any], out: Path) -> list[Path]:
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


def targets(kind: str, graph: Any, nodes: list[dict[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    """On the ONNX graph (what ONNX Runtime runs): one section per non-CPU execution provider the profile lists."""
    return ort_targets(graph, profile) if kind == "onnx" else []


OPS_AS_GRAPH = False  # a .ort model: --model SOURCE.onnx or the build report's section
SELECTIVE_BUILD = ("onnxruntime", "onnxruntime", _write_ort)
PLAN = "required_operators.config for ONNX Runtime's --include_ops_by_config (minimal build)"


def ort_format_nodes(path: str | Path) -> list[dict[str, Any]]:
    """The nodes of an ORT-format file (``name``, ``op``, ``domain``, ``inputs``, ``outputs``), read with ONNX
    Runtime's own flatbuffers schema: the graph the device loads, for joining a profile's kernels to it."""
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs import InferenceSession

    session = InferenceSession.InferenceSession.GetRootAsInferenceSession(Path(path).read_bytes(), 0)
    graph = session.Model().Graph()
    out = []
    for i in range(graph.NodesLength()):
        n = graph.Nodes(i)
        out.append(
            {
                "name": (n.Name() or b"").decode(),
                "op": (n.OpType() or b"").decode(),
                "domain": (n.Domain() or b"").decode(),
                "inputs": [{"name": n.Inputs(j).decode()} for j in range(n.InputsLength())],
                "outputs": [n.Outputs(j).decode() for j in range(n.OutputsLength())],
            }
        )
    return out
