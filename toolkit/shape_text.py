"""The text report's lines about shapes: fidelity and timings per declared shape, and what stays dynamic."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional


def _shapes(point: Dict[str, List[int]]) -> str:
    return " ".join(f"{k}=[{','.join(str(d) for d in v)}]" for k, v in point.items())


def _allowed(dims: List[Any]) -> str:
    out = []
    for a in dims:
        if isinstance(a, dict) and "values" in a:
            out.append("{" + ",".join(str(v) for v in a["values"]) + "}")
        elif isinstance(a, dict):
            out.append(f"{a['min']}..{a['max']}")
        else:
            out.append("any" if a is None else str(a))
    return "[" + ", ".join(out) + "]"


def plan(section: Optional[Dict[str, Any]]) -> List[str]:
    """What stays dynamic (or why not), the allowed shapes and the points checked."""
    if not section or (not section["dynamic"] and not section.get("fixed_because")):
        return []
    allowed = ", ".join(f"{k} {_allowed(v)}" for k, v in section["allowed"].items())
    kind = "dynamic, allowed" if section["dynamic"] else "static"
    lines = [f"  shapes     {kind}: {allowed}"]
    if section.get("fixed_because"):
        lines.append(f"             {section['fixed_because']}")
    if section.get("variants"):
        lines.append(f"             {variants(section)}")
        for v in section["variants"]:
            ok = "ok" if v["fidelity"]["passed"] else "DEGRADED"
            lines.append(f"               {v['model']} @ {_shapes(v['shapes'])}: fidelity {ok}")
    points = "; ".join(f"{p['label']} {_shapes(p['shapes'])}" for p in section["points"])
    return lines + [f"             checked and benchmarked at: {points}"]


def variants(section: Dict[str, Any]) -> str:
    """``fixed per declared shape: 3 models (x=[1,3,48,160], ...)`` (edgekit.shape_variants)."""
    shapes = ", ".join(_shapes(v["shapes"]) for v in section["variants"])
    return f"fixed per declared shape: {len(section['variants'])} models ({shapes})"


def step(record: Dict[str, Any], summary: Callable[[Dict[str, Any]], str]) -> List[str]:
    """A fidelity step's record at each declared shape."""
    lines = []
    for sub in record.get("at_shapes", [])[1:]:
        lines.append(f"      @ {sub['label']} {_shapes(sub['shapes'])}: {summary(sub)}")
        lines += [f"        ! {f}" for f in sub.get("failures", [])]
    return lines


def host(latency: Dict[str, Any]) -> List[str]:
    """Host timings at each declared shape other than the data's."""
    return [
        f"    @ {t['label']} {_shapes(t['shapes'])}: {t['built_p50_ms']:.3f} ms p50 vs fp32 "
        f"{t['reference_p50_ms']:.3f} ms ({t['speedup']:.2f}x)"
        for t in latency.get("by_shape", [])
    ]


def bench(report: Dict[str, Any]) -> List[str]:
    """The device benchmark at each declared shape (the agent's ``by_shape``)."""
    if not report.get("by_shape"):
        return []
    lines = [f"  @ sample     {_shapes(report.get('input_shapes') or {})}: the latency above"]
    for t in report["by_shape"]:
        lat = t["latency_ms"]
        lines.append(
            f"  @ {t['label']:<10} {_shapes(t['shapes'])}: p50 {lat['p50']:.3f} ms  p90 {lat['p90']:.3f}  "
            f"p99 {lat['p99']:.3f} over {t['runs']} runs"
        )
    return lines
