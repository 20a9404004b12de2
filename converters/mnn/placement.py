"""Placement for MNN: the op types each GPU backend (OpenCL, Vulkan, Metal) registers; the op list for MNN's
reduced build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit import support_tables as st
from edgekit.placement_graph import _node
from edgekit.placement_targets import _accelerator_name, _fix_op, _target

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext
    from edgekit.profiles import Profile

MNN_GPU_API = {"OPENCL": "opencl", "VULKAN": "vulkan", "METAL": "metal", "CUDA": "cuda"}


def mnn_graph(model_file: str | Path, workdir: str | Path) -> list[dict[str, Any]]:
    """Nodes of a .mnn model from MNN's own JSON dump (op types and edges; the dump has no shapes)."""
    import tempfile

    from edgekit.converters.mnn.tools import _run_tool

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


def mnn_targets(nodes: list[dict[str, Any]], profile: Profile) -> list[dict[str, Any]]:
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


def _read_mnn(model_path: str | Path, workdir: str | Path) -> tuple[str, list[dict[str, Any]]]:
    return "mnn", mnn_graph(model_path, workdir)


def _write_mnn(bundle_dir: Path, manifest: dict[str, Any], out: Path) -> list[Path]:
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


def targets(kind: str, graph: Any, nodes: list[dict[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    return mnn_targets(nodes, profile) if kind not in ("onnx", "openvino") else []


def annotate_build(out: dict[str, Any], kind: str, ctx: BuildContext) -> None:
    """FLOPs from the reference graph MNN converted (the .mnn dump carries no shapes)."""
    if kind != "mnn":
        return
    import onnx

    from edgekit.placement_graph import onnx_graph

    ref = onnx_graph(onnx.load(str(ctx.reference_path)))
    out["graph"]["flops"] = sum(n["flops"] or 0 for n in ref)
    out["graph"]["flops_note"] = "FLOPs of the ONNX reference graph MNN converted"


READERS = {".mnn": _read_mnn}
OPS_AS_GRAPH = False
SELECTIVE_BUILD = ("MNN", "mnn", _write_mnn)
PLAN = "op.txt (MNN op types) for MNN's tools/script/prue_mnn_ops.py"
