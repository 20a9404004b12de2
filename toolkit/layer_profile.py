"""``edgekit profile``: per-layer times of a deployed bundle, measured on the device by its runtime's profiler.

The agent (``POST /v1/models/{name}/profile``, :mod:`edgekit_agent.profiling`) runs the model in a fresh process
with ONNX Runtime's trace, OpenVINO's performance counters or MNN's per-operator callbacks and answers, per node
(or fused kernel): the median time over the runs, its share, the accelerator that ran it, its input shapes and
precision; with the end-to-end latency of plain runs, peak RSS after loading and after inference, and the weight
size. Runtimes whose Python API exposes no per-node timing say so (``profiler.available`` false, with the reason).

Here each node is joined with ``edgekit explain``'s placement from the build report (``report.json``'s
``placement`` section) by node name, and the report sums time per accelerator and per partition (consecutive
nodes in execution order on the same accelerator). Schema ``edgekit.profile/1``: docs/PROFILING.md.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from . import bundle as bundle_mod
from .deployer import _device_for, _threads, bundle_profile, require_deployed
from .device import Device
from .transports import Transport

SCHEMA = "edgekit.profile/1"
#: the per-node sum the tests accept against the end-to-end median (docs/PROFILING.md says why it differs)
RATIO_TOLERANCE = (0.33, 3.0)


def profile(
    bundle_dir: str | Path,
    device: Device | Transport | str,
    runs: int = 20,
    warmup: int = 3,
    threads: int | None = None,
    providers: list[str] | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """Profile the bundle deployed on ``device`` (a Device, a connected transport or a transport kind) layer by
    layer; the agent's report joined with the bundle's placement (schema ``edgekit.profile/1``)."""
    if not 1 <= runs <= 200 or not 0 <= warmup <= 200:
        from .errors import EdgekitError

        raise EdgekitError(f"a profile takes 1 to 200 runs and 0 to 200 warm-up runs (got {runs} and {warmup})")
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    with _device_for(device, prof, manifest["backend"]) as dev:
        require_deployed(dev, bundle_dir, manifest, log)
        return profile_deployed(dev, bundle_dir, manifest, runs, warmup, _threads(prof, dev, threads), providers)


def profile_deployed(
    dev: Device,
    bundle_dir: str | Path,
    manifest: dict[str, Any],
    runs: int,
    warmup: int,
    threads: int,
    providers: list[str] | None,
) -> dict[str, Any]:
    """Profile the bundle ``dev`` serves (checked by the caller) and join the placement: :func:`profile`'s report."""
    report = dev.profile(manifest["name"], runs=runs, warmup=warmup, threads=threads, providers=providers)
    report["transport"] = dev.transport.description
    report["profile"] = manifest["profile"]
    graph = built_graph(bundle_dir, manifest)
    if graph is not None:
        report["traced_kernels"] = trace_kernels(report.get("nodes") or [], graph)
    return join(report, placement_of(bundle_dir), {n["name"] for n in graph} if graph is not None else None)


def summary(report: dict[str, Any], top: int = 5) -> dict[str, Any]:
    """What a lab record keeps of a profile (``deploy --profile-layers``): where the time goes, in short."""
    nodes = sorted(report.get("nodes") or [], key=lambda n: -n["time_ms"])
    keep = ("name", "op", "accelerator", "time_ms", "share")
    return {
        "schema": SCHEMA,
        "runtime": report.get("runtime"),
        "runtime_version": report.get("runtime_version"),
        "runs": report.get("runs"),
        "profiler": report.get("profiler"),
        "end_to_end_p50_ms": (report.get("end_to_end_ms") or {}).get("p50"),
        "node_sum_ms": report.get("node_sum_ms"),
        "nodes": len(nodes),
        "top": [{k: n.get(k) for k in keep} for n in nodes[:top]],
        "by_accelerator": report.get("by_accelerator") or [],
        "partitions": len(report.get("partitions") or []),
    }


# -- placement ---------------------------------------------------------------------------------------------
def placement_of(bundle_dir: str | Path) -> dict[str, Any] | None:
    """The build report's placement section (``edgekit explain``'s verdicts when the bundle was built)."""
    try:
        return json.loads((Path(bundle_dir) / "report.json").read_text()).get("placement")
    except (OSError, ValueError):
        return None


def built_graph(bundle_dir: str | Path, manifest: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The built graph's nodes (``name``, ``op``, ``inputs``, ``outputs``), where edgekit reads the model file as
    a graph; else None."""
    from .placement import graph_nodes, graph_readers

    model = Path(bundle_dir) / manifest["model"]
    if model.suffix == ".ort":  # what the device loads (the build's placement was read from the ONNX before it)
        from .converters.ort.placement import ort_format_nodes

        try:
            return ort_format_nodes(model)
        except Exception:  # not a readable ORT-format file here: names unknown, not fatal
            return None
    reader = graph_readers(manifest["backend"]).get(model.suffix)
    if reader is None:
        return None
    with tempfile.TemporaryDirectory(prefix="edgekit-profile-") as tmp:
        try:
            kind, graph = reader(model, Path(tmp))
        except Exception:  # the reader's runtime is missing or refuses the file here: names unknown, not fatal
            return None
        return list(graph_nodes(kind, graph, manifest["backend"]))


# ops ONNX Runtime fuses into the Conv/Gemm/MatMul before them (Conv+BatchNormalization folded, Conv+activation)
FUSED_AFTER = ("BatchNormalization", "Relu", "Clip", "LeakyRelu", "HardSigmoid", "Sigmoid", "HardSwish", "Add")
FUSED_INTO = ("Conv", "ConvTranspose", "Gemm", "MatMul", "FusedConv")
LAYOUT_SUFFIXES = ("_nchwc",)


def trace_kernels(nodes: list[dict[str, Any]], graph: list[dict[str, Any]]) -> int:
    """Give each profiled kernel that is not a node of the built graph the graph nodes it runs (``fused``), where
    its name says which: ONNX Runtime names a kernel of its optimized graph after the tensor it writes (NCHWc
    kernels: that name + ``_nchwc``), and a kernel that fused a Conv with its BatchNormalization and activation
    writes the last one's output. The nodes are the tensor's producer and the chain of fusable nodes before it,
    back to the Conv/Gemm/MatMul. A kernel named ``NODE/<Op...>Fusion`` (``MatMul@0/MatMulAddFusion``) is that
    node and the consumer the fusion names. Returns how many kernels were traced; the others stay unmatched."""
    by_name = {n["name"]: n for n in graph}
    names = set(by_name)
    producer = {o: n for n in graph for o in n.get("outputs") or []}
    consumers: dict[str, list[dict[str, Any]]] = {}
    for n in graph:
        for i in n.get("inputs") or []:
            consumers.setdefault(str(i.get("name") if isinstance(i, dict) else i), []).append(n)
    traced = 0
    for k in nodes:
        if k["name"] in names or k.get("fused"):
            continue
        base, _, fusion = k["name"].rpartition("/")
        if base in by_name:  # "MatMul@0/MatMulAddFusion": a node fused with the consumer(s) the fusion names
            first = by_name[base]
            after = [c for o in first.get("outputs") or [] for c in consumers.get(o, []) if c["op"] in fusion]
            k["fused"] = [base] + [c["name"] for c in after[:1]]
            traced += 1
            continue
        tensor = k["name"]
        for suffix in LAYOUT_SUFFIXES:
            tensor = tensor[: -len(suffix)] if tensor.endswith(suffix) else tensor
        node = producer.get(tensor)
        chain: list[str] = []
        while node is not None:
            chain.append(node["name"])
            if node["op"] not in FUSED_AFTER or not node.get("inputs"):
                break
            first = node["inputs"][0]
            before = producer.get(first.get("name") if isinstance(first, dict) else first)
            if before is None or before["op"] not in FUSED_AFTER + FUSED_INTO:
                break
            node = before
        if chain:
            k["fused"] = chain[::-1]
            traced += 1
    return traced + _absorbed(nodes, by_name, producer)


def _absorbed(nodes: list[dict[str, Any]], by_name: dict[str, Any], producer: dict[str, Any]) -> int:
    """Graph nodes no kernel ran by name (an activation a runtime fused into the Conv before it, which keeps the
    Conv's name): each joins the ``fused`` list of the kernel that ran its producer. Returns how many kernels grew."""
    kernel_of: dict[str, dict[str, Any]] = {}
    for k in nodes:
        for name in [k["name"], *k.get("fused", [])]:
            kernel_of.setdefault(name, k)
    grown = set()
    for name, node in by_name.items():
        if name in kernel_of or node["op"] not in FUSED_AFTER or not node.get("inputs"):
            continue
        first = node["inputs"][0]
        before = producer.get(str(first.get("name") if isinstance(first, dict) else first))
        owner = kernel_of.get(before["name"]) if before is not None else None
        if owner is None:
            continue
        owner["fused"] = owner.get("fused") or [owner["name"]]
        owner["fused"].append(name)
        kernel_of[name] = owner
        grown.add(id(owner))
    return len(grown)


def _verdicts(target: dict[str, Any]) -> tuple[dict[str, tuple[str, str, str]], bool]:
    """``{node: (verdict, reason)}`` for the nodes a target lists (no / unknown), and whether the lists are
    complete (every node not listed is yes)."""
    out: dict[str, tuple[str, str, str]] = {}
    for f in target.get("fallback") or []:
        reason = f"{f.get('reason', '')}" + (f"; fix: {f['fix']}" if f.get("fix") else "")
        out[f["node"]] = ("no", reason, f.get("op", ""))
    for u in target.get("unknown") or []:
        out[u["node"]] = ("unknown", u.get("reason", ""), u.get("op", ""))
    summary = target.get("summary") or {}
    complete = "*" not in out and len(target.get("fallback") or []) == summary.get("fallback", 0)
    complete = complete and len(target.get("unknown") or []) == summary.get("unknown", 0)
    return out, complete


def node_placement(node: dict[str, Any], target: dict[str, Any], graph: set[str] | None) -> dict[str, str]:
    """One target's verdict for a profiled node: by its name, else by the graph nodes fused into it."""
    listed, complete = _verdicts(target)
    names = [node["name"], *node.get("fused", [])]
    for name in names:
        if name in listed:
            verdict, reason, op = listed[name]
            return {
                "accelerator": target["accelerator"],
                "verdict": verdict,
                "reason": reason,
                "matched": name,
                **({"op": op} if op else {}),
            }
        if "*" in listed:
            return {"accelerator": target["accelerator"], "verdict": "unknown", "reason": listed["*"][1]}
    known = [n for n in names if graph is None or n in graph]
    if graph is not None and not known:
        return {
            "accelerator": target["accelerator"],
            "verdict": "unmatched",
            "reason": "not a node of the built graph: a kernel the runtime made (fused or inserted) at load",
        }
    if not complete:
        return {
            "accelerator": target["accelerator"],
            "verdict": "unknown",
            "reason": "the build report lists only the first fallback/unknown nodes",
        }
    return {"accelerator": target["accelerator"], "verdict": "yes", "reason": "", "matched": known[0] if known else ""}


def join(report: dict[str, Any], placement: dict[str, Any] | None, graph: set[str] | None = None) -> dict[str, Any]:
    """The agent's profile with each node's placement verdict per target, and time per accelerator and partition."""
    nodes = report.get("nodes") or []
    targets = (placement or {}).get("targets") or []
    for n in nodes:
        n["placement"] = [node_placement(n, t, graph) for t in targets]
    if placement is None:
        report["placement_note"] = "the bundle's report.json has no placement section: run `edgekit explain BUNDLE`"
    elif not targets:
        report["placement_note"] = placement.get("note") or "the profile names no accelerator for this backend"
    report["by_accelerator"] = by_accelerator(nodes)
    report["partitions"] = partitions(nodes)
    report["by_verdict"] = by_verdict(nodes, [t["accelerator"] for t in targets])
    report["fallbacks"] = [fallback_cost(nodes, i, t["accelerator"]) for i, t in enumerate(targets)]
    report["handovers"] = handovers(nodes, graph)
    return report


def _share(ms: float, total: float) -> float:
    return ms / total if total else 0.0


def by_accelerator(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured time per accelerator that ran nodes, largest first."""
    rows: dict[str, dict[str, Any]] = {}
    for n in nodes:
        r = rows.setdefault(n["accelerator"], {"accelerator": n["accelerator"], "nodes": 0, "time_ms": 0.0})
        r["nodes"] += 1
        r["time_ms"] += n["time_ms"]
    total = sum(r["time_ms"] for r in rows.values())
    for r in rows.values():
        r["share"] = _share(r["time_ms"], total)
    return sorted(rows.values(), key=lambda r: -r["time_ms"])


def partitions(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive nodes (execution order) on the same accelerator: each boundary is a hand-over."""
    out: list[dict[str, Any]] = []
    for n in nodes:
        if not out or out[-1]["accelerator"] != n["accelerator"]:
            out.append(
                {"index": len(out), "accelerator": n["accelerator"], "first": n["name"], "nodes": 0, "time_ms": 0.0}
            )
        out[-1]["nodes"] += 1
        out[-1]["time_ms"] += n["time_ms"]
    total = sum(p["time_ms"] for p in out)
    for p in out:
        p["share"] = _share(p["time_ms"], total)
    return out


def by_verdict(nodes: list[dict[str, Any]], targets: list[str]) -> list[dict[str, Any]]:
    """Per placement target: measured time of the nodes explain said run there (yes), fall back (no), etc."""
    total = sum(n["time_ms"] for n in nodes)
    out = []
    for i, name in enumerate(targets):
        sums: dict[str, float] = {}
        for n in nodes:
            v = n["placement"][i]["verdict"]
            sums[v] = sums.get(v, 0.0) + n["time_ms"]
        out.append(
            {
                "accelerator": name,
                "time_ms": sums,
                "share": {v: _share(ms, total) for v, ms in sums.items()},
            }
        )
    return out


# kernels a runtime inserts to move or re-lay data between kernels or devices (ORT's Memcpy and NCHWc reorders,
# OpenVINO's Reorder/Convert): not in the model, their time is the cost of a hand-over
HANDOVER_OPS = ("MemcpyToHost", "MemcpyFromHost", "ReorderInput", "ReorderOutput", "Reorder", "Convert")


def fallback_cost(nodes: list[dict[str, Any]], i: int, accelerator: str) -> dict[str, Any]:
    """What the nodes explain says fall back from ``accelerator`` (its ``i``-th target) cost, measured: how many,
    of which ops, their time and share, the partitions they would split the graph into, the fixes, and one
    sentence that says it all (``headline``)."""
    total = sum(n["time_ms"] for n in nodes)
    falls = [n for n in nodes if n["placement"][i]["verdict"] == "no"]
    ops: dict[str, int] = {}
    fixes: list[str] = []
    for n in falls:
        op = n["placement"][i].get("op") or n.get("op") or "?"  # the model's node that falls back, if fused
        ops[op] = ops.get(op, 0) + 1
        reason = n["placement"][i]["reason"]
        fix = reason.split("; fix: ", 1)[1] if "; fix: " in reason else ""
        if fix and fix not in fixes:
            fixes.append(fix)
    # the target's partitions if it ran the model: runs of consecutive nodes on it, in execution order
    sides = [n["placement"][i]["verdict"] == "no" for n in nodes if n["placement"][i]["verdict"] != "unmatched"]
    parts = sum(1 for k, side in enumerate(sides) if not side and (k == 0 or sides[k - 1]))
    ms = sum(n["time_ms"] for n in falls)
    out = {
        "accelerator": accelerator,
        "nodes": len(falls),
        "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
        "time_ms": ms,
        "share": _share(ms, total),
        "partitions": parts,
        "fixes": fixes,
    }
    if falls:
        what = ", ".join(f"{op} x{k}" for op, k in out["ops"].items())
        out["headline"] = (
            f"{len(falls)} node(s) ({what}) fall back from {accelerator}: they split the graph into {parts} "
            f"{accelerator} partitions and cost {100 * out['share']:.0f} % of the measured time"
            + (f"; the fix: {fixes[0]}" if fixes else "")
        )
    else:
        out["headline"] = f"no node falls back from {accelerator}"
    return out


def handovers(nodes: list[dict[str, Any]], graph: set[str] | None) -> dict[str, Any]:
    """The measured cost of moving data between kernels and devices: the copy and re-layout kernels the runtime
    inserted (``HANDOVER_OPS``, not nodes of the built graph), with their time and share; and, where the nodes
    ran on more than one accelerator, each boundary between partitions with the hand-over kernels at it."""
    total = sum(n["time_ms"] for n in nodes)
    inserted = [n for n in nodes if n.get("op") in HANDOVER_OPS and (graph is None or n["name"] not in graph)]
    ms = sum(n["time_ms"] for n in inserted)
    boundaries = []
    for k in range(1, len(nodes)):
        if nodes[k]["accelerator"] != nodes[k - 1]["accelerator"]:
            at = [n for n in nodes[max(0, k - 2) : k + 2] if n in inserted]
            boundaries.append(
                {
                    "from": nodes[k - 1]["accelerator"],
                    "to": nodes[k]["accelerator"],
                    "after": nodes[k - 1]["name"],
                    "copies": [n["name"] for n in at],
                    "time_ms": sum(n["time_ms"] for n in at),
                }
            )
    return {"nodes": len(inserted), "time_ms": ms, "share": _share(ms, total), "boundaries": boundaries}


__all__ = ["RATIO_TOLERANCE", "SCHEMA", "join", "profile", "profile_deployed", "summary"]
