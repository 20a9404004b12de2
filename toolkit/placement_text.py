"""Placement reports as text (``edgekit explain``, the build report's summary)."""

from __future__ import annotations

from typing import Any


# -- text ---------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f} %"


def _mflops(f: float | None) -> str:
    return "?" if f is None else f"{f / 1e6:.2f} MFLOPs"


def text(r: dict[str, Any], max_fallback: int = 40) -> str:
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


def summary_lines(section: dict[str, Any] | None) -> list[str]:
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
        graph = section.get("graph") or {}
        of = f" of {graph.get('note') or graph.get('kind')}" if graph.get("note") or graph.get("kind") else ""
        line = (
            f"  placement {t['accelerator']}: {s['on_accelerator']}/{s['nodes']} nodes{of} on the accelerator "
            f"({_pct(s['node_share'])}), "
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
