"""Text form of an ``edgekit.profile/1`` report: summary, top layers, time per accelerator and per verdict."""

from __future__ import annotations

from typing import Any

TOP = 15


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    cells = [head, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def _shapes(shapes: Any) -> str:
    if not shapes:
        return "-"
    return " ".join(("x".join(str(d) for d in s) or "()") if isinstance(s, list) else str(s) for s in shapes[:3]) + (
        " ..." if len(shapes) > 3 else ""
    )


def _verdict(node: dict[str, Any]) -> str:
    return ", ".join(f"{p['accelerator']}: {p['verdict']}" for p in node.get("placement") or []) or "-"


def profile_text(r: dict[str, Any], top: int = TOP) -> str:
    dev = r.get("device") or {}
    e2e = r["end_to_end_ms"]
    mem = r.get("memory") or {}
    lines = [
        f"edgekit profile: {r.get('name')} ({r.get('bundle_id')}) on {dev.get('hostname', '?')} "
        f"[{dev.get('machine', '?')}]",
        f"  backend      {r.get('backend')} ({r.get('runtime')} {r.get('runtime_version')})   precision "
        f"{r.get('precision')}   accelerator {r.get('accelerator')}   threads {r.get('threads')}",
        f"  end to end   median {e2e['p50']:.3f} ms (p90 {e2e['p90']:.3f}) over {r.get('runs')} plain runs",
    ]
    prof = r.get("profiler") or {}
    if prof.get("available"):
        ratio = r.get("node_sum_ratio")
        lines.append(
            f"  per node     sum of medians {r.get('node_sum_ms', 0.0):.3f} ms"
            + (f" = {ratio:.2f} x end to end" if ratio is not None else "")
            + f"   ({len(r.get('nodes') or [])} nodes; {prof.get('source')})"
        )
        if r.get("profiler_overhead") is not None:
            lines.append(
                f"  profiled     median {r['profiled_ms']['p50']:.3f} ms a run with the profiler on = "
                f"{r['profiler_overhead']:.2f} x the plain run (its own overhead)"
            )
    else:
        lines.append(f"  per node     {prof.get('reason', 'not available')}")

    def mb(key: str) -> str:
        v = mem.get(key)
        return "?" if v is None else f"{v:.1f} MB"

    lines.append(
        f"  memory       peak RSS after load {mb('peak_rss_load_mb')}, after inference {mb('peak_rss_inference_mb')} "
        f"(before load {mb('rss_before_load_mb')});  weights {mem.get('weights_bytes', 0) / 1e6:.2f} MB"
    )
    nodes = sorted(r.get("nodes") or [], key=lambda n: -n["time_ms"])
    if nodes:
        lines.append("")
        lines.append(f"top {min(top, len(nodes))} of {len(nodes)} nodes by time:")
        rows = [
            [
                n["name"][:48],
                n.get("op", ""),
                n.get("accelerator", ""),
                f"{n['time_ms']:.3f}",
                f"{100 * n.get('share', 0.0):.1f}%",
                str(n.get("precision") or "-"),
                _shapes(n.get("input_shapes")),
                _verdict(n),
            ]
            for n in nodes[:top]
        ]
        lines += _table(["node", "op", "ran on", "ms", "share", "precision", "input shapes", "placement"], rows)
        lines.append("")
        lines.append("time per accelerator:")
        lines += _table(
            ["accelerator", "nodes", "ms", "share"],
            [
                [a["accelerator"], str(a["nodes"]), f"{a['time_ms']:.3f}", f"{100 * a['share']:.1f}%"]
                for a in r.get("by_accelerator") or []
            ],
        )
        parts = r.get("partitions") or []
        lines.append(f"  {len(parts)} partition(s) in execution order" + (": " if len(parts) > 1 else ""))
        if len(parts) > 1:
            lines += _table(
                ["#", "accelerator", "nodes", "ms", "first node"],
                [
                    [str(p["index"]), p["accelerator"], str(p["nodes"]), f"{p['time_ms']:.3f}", p["first"]]
                    for p in parts
                ],
            )
        for v in r.get("by_verdict") or []:
            spent = ", ".join(f"{k} {ms:.3f} ms ({100 * v['share'][k]:.0f}%)" for k, ms in sorted(v["time_ms"].items()))
            lines.append(f"  explain's verdict for {v['accelerator']}: {spent}")
        for f in r.get("fallbacks") or []:
            lines.append(f"  {f['headline']}")
        h = r.get("handovers") or {}
        if h.get("nodes") or h.get("boundaries"):
            lines.append(
                f"  hand-overs   {h['nodes']} copy/re-layout kernel(s) the runtime inserted: {h['time_ms']:.3f} ms "
                f"({100 * h['share']:.1f}%); {len(h['boundaries'])} boundary(ies) between accelerators"
            )
    if r.get("placement_note"):
        lines.append(f"  placement: {r['placement_note']}")
    for w in r.get("warnings") or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines) + "\n"


def lab_profile_lines(s: dict[str, Any] | None, indent: str = "  ") -> list[str]:
    """A lab record's profile summary (``deploy --profile-layers``, :func:`edgekit.layer_profile.summary`) as
    lines: the top layers and the time per accelerator; none when the record has no profile."""
    if not s:
        return []
    prof = s.get("profiler") or {}
    lines = [f"{indent}where the time goes (lab profile, {s.get('runtime')} {s.get('runtime_version')}, "
             f"{s.get('runs')} runs):"]  # fmt: skip
    if not prof.get("available"):
        return [*lines, f"{indent}  {prof.get('reason', 'not available')}"]
    rows = [
        [str(n["name"])[:48], str(n.get("op") or ""), str(n.get("accelerator") or ""), f"{n['time_ms']:.3f} ms",
         f"{100 * (n.get('share') or 0.0):.1f}%"]
        for n in s.get("top") or []
    ]  # fmt: skip
    if rows:
        lines += [indent + line for line in _table(["layer", "op", "ran on", "time", "share"], rows)]
    acc = ", ".join(
        f"{a['accelerator']} {100 * a['share']:.1f}% ({a['nodes']} nodes)" for a in s.get("by_accelerator") or []
    )
    lines.append(
        f"{indent}  {s.get('nodes')} nodes, sum {s.get('node_sum_ms') or 0.0:.3f} ms; per accelerator: {acc or '-'}; "
        f"{s.get('partitions')} partition(s)"
    )
    return lines


__all__ = ["lab_profile_lines", "profile_text"]
