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
    return join(report, placement_of(bundle_dir), graph_names(bundle_dir, manifest))


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


def graph_names(bundle_dir: str | Path, manifest: dict[str, Any]) -> set[str] | None:
    """Names of the built graph's nodes, where edgekit reads the model file as a graph; else None."""
    from .placement import graph_nodes, graph_readers

    model = Path(bundle_dir) / manifest["model"]
    reader = graph_readers(manifest["backend"]).get(model.suffix)
    if reader is None:
        return None
    with tempfile.TemporaryDirectory(prefix="edgekit-profile-") as tmp:
        try:
            kind, graph = reader(model, Path(tmp))
        except Exception:  # the reader's runtime is missing or refuses the file here: names unknown, not fatal
            return None
        return {n["name"] for n in graph_nodes(kind, graph, manifest["backend"])}


def _verdicts(target: dict[str, Any]) -> tuple[dict[str, tuple[str, str]], bool]:
    """``{node: (verdict, reason)}`` for the nodes a target lists (no / unknown), and whether the lists are
    complete (every node not listed is yes)."""
    out: dict[str, tuple[str, str]] = {}
    for f in target.get("fallback") or []:
        out[f["node"]] = ("no", f"{f.get('reason', '')}" + (f"; fix: {f['fix']}" if f.get("fix") else ""))
    for u in target.get("unknown") or []:
        out[u["node"]] = ("unknown", u.get("reason", ""))
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
            verdict, reason = listed[name]
            return {"accelerator": target["accelerator"], "verdict": verdict, "reason": reason, "matched": name}
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


__all__ = ["RATIO_TOLERANCE", "SCHEMA", "join", "profile", "profile_deployed", "summary"]
