"""One accelerator's section of a placement report, assembled from per-node verdicts (yes / no / unknown)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from . import support_tables as st
from .placement_graph import partitions

if TYPE_CHECKING:
    from .profiles import Profile

MAX_LISTED = 200  # fallback / unknown nodes kept per accelerator in reports


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


def _fix_op(op: str, accelerator: str) -> str:
    return OP_FIXES.get(
        op,
        f"replace {op} with ops {accelerator} runs, or move it to the start or end of the graph "
        "so the rest stays one partition (each boundary costs a copy)",
    )


# -- targets -----------------------------------------------------------------------------------
def _accelerator_name(profile: Profile, api: str) -> str | None:
    for a in profile.data.get("accelerators", []):
        if api in a.get("apis", []):
            return a["name"]
    return None


def _summary(nodes: list[dict[str, Any]], status: list[str], partition_count: int | str | None) -> dict[str, Any]:
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


def _by_op(nodes: list[dict[str, Any]], status: list[str]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for node, s in zip(nodes, status):
        r = rows.setdefault(node["op"], {"op": node["op"], "nodes": 0, "on_accelerator": 0, "unknown": 0})
        r["nodes"] += 1
        r["on_accelerator"] += s == st.YES
        r["unknown"] += s == st.UNKNOWN
    return sorted(rows.values(), key=lambda r: (-r["nodes"], r["op"]))


def _target(
    name: str,
    device: str | None,
    checked_with: str,
    nodes: list[dict[str, Any]],
    verdicts: Sequence[tuple[str, str, str]],
    source: str | None = None,
    partition_count: int | str | None = "compute",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
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


def _unchecked_target(
    name: str, device: str | None, why: str, nodes: list[dict[str, Any]], source: str | None = None
) -> dict[str, Any]:
    verdicts = [(st.UNKNOWN, why, "")] * len(nodes)
    t = _target(name, device, f"not checked: {why}", nodes, verdicts, source, partition_count=None)
    t["unknown"] = t["unknown"][:1] and [{"node": "*", "op": "*", "reason": why}]
    return t
