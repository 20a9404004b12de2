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

This module is the core: it reads graphs, asks the backend, assembles reports. What is particular
to a backend lives in its package, in ``placement.py`` (named by the backend's ``placement``
attribute, e.g. :mod:`edgekit.converters.ort.placement`), which may define:

- ``READERS``: ``{model file suffix: read(model_path, workdir) -> (kind, graph)}`` (ONNX is read here);
- ``nodes(kind, graph)``: the node list of a graph kind only it reads (else the graph is the node list);
- ``targets(kind, graph, nodes, profile)``: one section per accelerator the profile names for it;
- ``annotate_build(out, ctx)``: adds to the build report's section (e.g. FLOPs from the reference);
- ``OPS_AS_GRAPH = False``: the manifest's op list is not a graph of its model (default: it is);
- ``SELECTIVE_BUILD = (runtime, folder, write(bundle_dir, manifest, out))`` and ``PLAN`` (what it writes).

Graph nodes, FLOPs and partitions: :mod:`.placement_graph`; an accelerator's section from
per-node verdicts: :mod:`.placement_targets`; text: :mod:`.placement_text`.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import BundleError, EdgekitError
from .placement_graph import onnx_graph, op_list_graph
from .placement_text import summary_lines, text

if TYPE_CHECKING:
    from types import ModuleType

    from edgekit.converters.base import BuildContext, BuildResult

    from .profiles import Profile

SCHEMA = "edgekit.placement"


# -- graph readers per backend ------------------------------------------------------------------
def _read_ort(model_path: str | Path, workdir: Path) -> tuple[str, Any]:
    import onnx

    return "onnx", onnx.load(str(model_path))


def hooks(backend: str) -> ModuleType | None:
    """The placement module of ``backend`` (see the module docstring), or None."""
    from . import converters

    try:
        name = getattr(converters.get(backend), "placement", None)
    except EdgekitError:  # a bundle of a backend this edgekit lacks: the core's answers only
        return None
    return importlib.import_module(name) if name else None


def graph_readers(backend: str) -> dict[str, Callable[[Path, Path], tuple[str, Any]]]:
    """``{suffix: reader}``: ONNX here, the backend's own formats from its placement module."""
    return {".onnx": _read_ort, **getattr(hooks(backend), "READERS", {})}


def graph_nodes(kind: str, graph: Any, backend: str) -> list[dict[str, Any]]:
    """The node list (``name``, ``op``, ``flops``...) of a graph a reader of ``backend`` loaded."""
    h = hooks(backend)
    if kind == "onnx":  # an ONNX graph is what ONNX Runtime runs; other runtimes' tables name their own ops
        return onnx_graph(graph)
    if h is not None and hasattr(h, "nodes"):
        return h.nodes(kind, graph)
    return graph


def analyse(kind: str, graph: Any, backend: str, profile: Profile, graph_note: str = "") -> dict[str, Any]:
    """Placement for a loaded graph: ``kind`` onnx (ModelProto), a backend's own kind (e.g. openvino: ov.Model),
    or a node list (mnn, ops)."""
    h = hooks(backend)
    nodes = graph_nodes(kind, graph, backend)
    targets = h.targets(kind, graph, nodes, profile) if h is not None and hasattr(h, "targets") else []
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


def explain_build(result: BuildResult, ctx: BuildContext, backend: str) -> dict[str, Any]:
    """The build report's ``placement`` section, from the model the backend just built."""
    model_file = Path(result.model_file)
    readers = graph_readers(backend)
    if model_file.suffix == ".ort":
        graph_file, note = ctx.workdir / "model.onnx", "the ONNX graph converted to model.ort"
    elif model_file.suffix in readers:
        graph_file, note = model_file, f"the built {model_file.suffix} model"
    else:
        graph_file, note = None, ""
    if graph_file is not None and graph_file.is_file():
        kind, graph = readers[graph_file.suffix](graph_file, ctx.workdir)
    elif result.ops:
        kind, graph, note = "ops", op_list_graph(result.ops), "the backend's op list (no graph edges)"
    else:
        return {"error": f"no graph reader for {model_file.name}"}
    out = analyse(kind, graph, backend, ctx.profile, note)
    out["precision"] = ctx.precision
    h = hooks(backend)
    if h is not None and hasattr(h, "annotate_build"):
        h.annotate_build(out, kind, ctx)
    out["selective_build"] = selective_build_plan(backend)
    return out


# -- bundles ---------------------------------------------------------------------------------------
def _bundle_profile(manifest: dict[str, Any], profile: str | Profile | None) -> Profile:
    from . import profiles

    if profile is None:
        spec = manifest.get("profile_spec")
        return (
            profiles.Profile(manifest["profile"], spec, "bundle manifest")
            if spec
            else profiles.load(manifest["profile"])
        )
    return profile if isinstance(profile, profiles.Profile) else profiles.load(profile)


def explain(
    bundle_dir: str | Path, profile: str | Profile | None = None, model: str | Path | None = None
) -> dict[str, Any]:
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
    reader = graph_readers(backend).get(model_file.suffix)
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
            shapes = {s["name"]: s["shape"] for s in manifest["inputs"]}
            points = {p["label"]: p["shapes"] for p in (manifest.get("shapes") or {}).get("points", [])}
            src = load_model(model, points.get("typical") or next(iter(points.values()), shapes))  # dynamic: typical
            kind, graph = "onnx", src.proto
            note = (
                f"the source model {Path(model).name} with the bundle's input shapes (fp32); the bundle's "
                f"{manifest['model']} holds the {manifest['precision']} graph"
            )
        elif getattr(hooks(backend), "OPS_AS_GRAPH", True) and manifest.get("ops"):
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


def _report_section(bundle_dir: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(bundle_dir) / "report.json").read_text()).get("placement")
    except (OSError, ValueError):
        return None


def selective_build_plan(backend: str) -> dict[str, Any]:
    return {
        "backend": backend,
        "writes": getattr(hooks(backend), "PLAN", None) or f"nothing: no selective-build writer for {backend}",
        "command": "edgekit explain BUNDLE --selective-build DIR",
    }


def selective_build(bundle_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write the runtime's selective-build inputs for a bundle into ``out_dir/<runtime>/``; return the files."""
    from . import bundle as bundle_mod

    bundle_dir = Path(bundle_dir)
    manifest = bundle_mod.load(bundle_dir)
    backend = manifest["backend"]
    spec = getattr(hooks(backend), "SELECTIVE_BUILD", None)
    if spec is None:
        from . import converters

        have = [b for b in converters.all_backends() if getattr(hooks(b), "SELECTIVE_BUILD", None)]
        raise EdgekitError(f"edgekit has no selective-build writer for backend {backend!r} (it has: {', '.join(have)})")
    runtime, folder, writer = spec
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


__all__ = [
    "SCHEMA",
    "analyse",
    "explain",
    "explain_build",
    "graph_readers",
    "hooks",
    "op_list_graph",
    "selective_build",
    "selective_build_plan",
    "summary_lines",
    "text",
]
