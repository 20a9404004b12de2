"""``--auto``'s choice: reject compressions measured slower than their parent, keep the Pareto front, pick the
winner and say why."""

from __future__ import annotations

from typing import Any

SLOWER = 0.95  # measured below 0.95x its parent's speed: rejected as slower


def _parent(c: dict[str, Any], by_key: dict[tuple, dict[str, Any]]) -> dict[str, Any] | None:
    if c["prune"]:
        return by_key.get((c["backend"], c["precision"], 0.0))
    if c["precision"] != "fp32":
        return by_key.get((c["backend"], "fp32", 0.0))
    return None


def _dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    qa, qb = a.get("quality") or 0.0, b.get("quality") or 0.0
    no_worse = a["p50_ms"] <= b["p50_ms"] and a["size_bytes"] <= b["size_bytes"] and qa >= qb
    better = a["p50_ms"] < b["p50_ms"] or a["size_bytes"] < b["size_bytes"] or qa > qb
    return no_worse and better


def choose(cands: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str]:
    """Reject compressions measured slower than their parent; return ``(front, winner, reason)``."""
    by_key = {(c["backend"], c["precision"], c["prune"]): c for c in cands if c["status"] == "measured"}
    for c in list(by_key.values()):
        parent = _parent(c, by_key)
        if parent is not None:
            c["speedup_vs_parent"] = round(parent["p50_ms"] / c["p50_ms"], 3)
            if c["speedup_vs_parent"] < SLOWER:
                c.update(
                    status="rejected",
                    reason=f"measured slower than its parent {parent['label']} on the device "
                    f"({c['p50_ms']:.3f} vs {parent['p50_ms']:.3f} ms p50)",
                )
    alive = [c for c in cands if c["status"] == "measured"]
    if not alive:
        return [], None, "no candidate passed fidelity and ran on the device"
    front = [c for c in alive if not any(_dominates(o, c) for o in alive if o is not c)]
    for c in front:
        c["pareto"] = True
    fastest = min(front, key=lambda c: c["p50_ms"])
    # within the measurement's noise of the fastest (5 %), prefer the smaller model
    close = [c for c in front if c["p50_ms"] <= fastest["p50_ms"] / SLOWER]
    winner = min(close, key=lambda c: (c["size_bytes"], c["p50_ms"]))
    base = by_key.get((winner["backend"], "fp32", 0.0))
    if winner is fastest:
        lead = f"fastest on the device among the {len(alive)} candidates that kept fidelity"
    else:
        lead = (
            f"the smallest of the front's candidates within 5 % of the fastest ({fastest['label']}, "
            f"{fastest['p50_ms']:.3f} ms) on the device, among {len(alive)} that kept fidelity"
        )
    reason = f"{winner['label']}: {lead} ({winner['p50_ms']:.3f} ms p50"
    if base is not None and base is not winner:
        reason += f", {base['p50_ms'] / winner['p50_ms']:.2f}x {base['label']}"
    reason += f"; {winner['size_bytes'] / 1024:.0f} KB; {winner['quality_metric']} {winner['quality']})"
    return front, winner, reason
