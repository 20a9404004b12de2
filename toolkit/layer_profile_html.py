"""``edgekit profile --html``: an ``edgekit.profile/1`` report as one self-contained HTML page.

Inline SVG and CSS only: no scripts, no fonts, images or styles fetched. Every text that comes from the model or the
device (node names, op types, accelerators, reasons) is escaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .field_html import _esc

TOP = 20
W = 880
PALETTE = ("#1f6feb", "#1a7f37", "#bf8700", "#8250df", "#cf222e", "#0a7b83", "#9a6700", "#6e7781")
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;max-width:1000px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{padding:3px 8px;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:top}th{background:#f6f8fa}td.n{text-align:right}.muted{color:#57606a}
.unavailable{background:#fff8c5;border:1px solid #d4a72c;padding:8px}.warning{color:#9a6700}
svg text{font-size:12px;fill:#1f2328}svg text.v{fill:#57606a}
"""


def _colors(r: dict[str, Any]) -> dict[str, str]:
    """One color per accelerator, the busiest first."""
    names = [a["accelerator"] for a in r.get("by_accelerator") or []]
    names += [p["accelerator"] for p in r.get("partitions") or [] if p["accelerator"] not in names]
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _short(name: str, n: int = 44) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _header(r: dict[str, Any]) -> str:
    dev = r.get("device") or {}
    e2e = r.get("end_to_end_ms") or {}
    prof = r.get("profiler") or {}
    ratio = r.get("node_sum_ratio")
    rows = [
        ("model", f"{r.get('name')} ({r.get('bundle_id')}), profile {r.get('profile', '?')}"),
        ("device", f"{dev.get('hostname', '?')} [{dev.get('machine', '?')}] via {r.get('transport', '?')}"),
        ("backend", f"{r.get('backend')}, precision {r.get('precision')}"),
        ("runtime", f"{r.get('runtime')} {r.get('runtime_version')}"),
        ("accelerator", str(r.get("accelerator"))),
        ("threads", str(r.get("threads"))),
        ("runs", f"{r.get('runs')} profiled and {r.get('runs')} plain, {r.get('warmup', '?')} warm-up"),
        ("end to end", f"median {e2e.get('p50', 0.0):.3f} ms (p90 {e2e.get('p90', 0.0):.3f} ms), plain runs"),
    ]
    if prof.get("available"):
        rows.append(
            (
                "per-node sum",
                f"{r.get('node_sum_ms', 0.0):.3f} ms"
                + (f" = {ratio:.2f} × end to end" if ratio is not None else "")
                + f", {len(r.get('nodes') or [])} nodes ({prof.get('source')})",
            )
        )
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f'<table id="header">{body}</table>'


def layers_svg(nodes: list[dict[str, Any]], colors: dict[str, str], top: int = TOP) -> str:
    """The ``top`` slowest nodes as horizontal bars: name, bar (time against the slowest), time and share."""
    rows = sorted(nodes, key=lambda n: -n["time_ms"])[:top]
    if not rows:
        return ""
    left, right, step = 330, 150, 22
    iw, vmax = W - left - right, max(rows[0]["time_ms"], 1e-9)
    height = 8 + step * len(rows)
    parts = []
    for i, n in enumerate(rows):
        y = 4 + step * i
        w = max(n["time_ms"] / vmax * iw, 1.0)
        tip = f"{n['name']} ({n.get('op', '')}) on {n.get('accelerator', '')}: {n['time_ms']:.3f} ms"
        parts.append(
            f'<g class="layer"><title>{_esc(tip)}</title>'
            f'<text class="name" x="{left - 6}" y="{y + 13}" text-anchor="end">{_esc(_short(str(n["name"])))}</text>'
            f'<rect class="bar" x="{left}" y="{y + 2}" width="{w:.1f}" height="15" '
            f'fill="{colors.get(n.get("accelerator", ""), PALETTE[-1])}"/>'
            f'<text class="v" x="{left + w + 6:.1f}" y="{y + 13}">{n["time_ms"]:.3f} ms · '
            f"{100 * (n.get('share') or 0.0):.1f} %</text></g>"
        )
    return (
        f'<svg class="chart layers" width="{W}" height="{height}" viewBox="0 0 {W} {height}" role="img" '
        f'aria-label="slowest nodes" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def _strip(cls: str, label: str, segments: list[tuple[float, str, str, str]], height: int = 26) -> str:
    """A horizontal strip of segments ``(fraction, color, label inside, tooltip)``, left to right."""
    x, parts = 0.0, []
    for frac, color, text, tip in segments:
        w = frac * W
        parts.append(
            f'<g class="segment"><title>{_esc(tip)}</title><rect x="{x:.1f}" y="0" width="{max(w, 0.5):.1f}" '
            f'height="{height}" fill="{color}" stroke="#ffffff"/>'
            + (f'<text x="{x + 4:.1f}" y="{height - 8}" style="fill:#ffffff">{_esc(text)}</text>' if w > 90 else "")
            + "</g>"
        )
        x += w
    return (
        f'<svg class="chart {cls}" width="{W}" height="{height}" viewBox="0 0 {W} {height}" role="img" '
        f'aria-label="{_esc(label)}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def _accelerators(r: dict[str, Any], colors: dict[str, str]) -> str:
    rows = r.get("by_accelerator") or []
    segs = [
        (
            a["share"],
            colors[a["accelerator"]],
            f"{a['accelerator']} {100 * a['share']:.0f} %",
            f"{a['accelerator']}: {a['time_ms']:.3f} ms, {100 * a['share']:.1f} %, {a['nodes']} nodes",
        )
        for a in rows
    ]
    table = "".join(
        f'<tr><td><span style="color:{colors[a["accelerator"]]}">■</span> {_esc(a["accelerator"])}</td>'
        f'<td class="n">{a["nodes"]}</td><td class="n">{a["time_ms"]:.3f}</td>'
        f'<td class="n">{100 * a["share"]:.1f} %</td></tr>'
        for a in rows
    )
    verdicts = "".join(
        f"<li>explain's verdict for {_esc(v['accelerator'])}: "
        + _esc(", ".join(f"{k} {ms:.3f} ms ({100 * v['share'][k]:.0f} %)" for k, ms in sorted(v["time_ms"].items())))
        + "</li>"
        for v in r.get("by_verdict") or []
    ) + "".join(f'<li class="fallbacks">{_esc(f["headline"])}</li>' for f in r.get("fallbacks") or [])
    h = r.get("handovers") or {}
    if h.get("nodes") or h.get("boundaries"):
        verdicts += (
            f'<li id="handovers">hand-overs: {h["nodes"]} copy/re-layout kernel(s) the runtime inserted, '
            f"{h['time_ms']:.3f} ms ({100 * h['share']:.1f} %); {len(h['boundaries'])} boundary(ies) between "
            "accelerators</li>"
        )
    return (
        "<h2>Time per accelerator</h2>"
        + _strip("accelerators", "share of the per-node time per accelerator", segs)
        + '<table id="accelerators"><tr><th>accelerator</th><th>nodes</th><th>ms</th><th>share</th></tr>'
        + table
        + "</table>"
        + (f"<ul>{verdicts}</ul>" if verdicts else "")
    )


def _partitions(r: dict[str, Any], colors: dict[str, str]) -> str:
    parts = r.get("partitions") or []
    total = sum(p["nodes"] for p in parts) or 1
    segs = [
        (
            p["nodes"] / total,
            colors[p["accelerator"]],
            f"#{p['index']} {p['accelerator']}",
            f"partition {p['index']} on {p['accelerator']}: {p['nodes']} nodes from {p['first']}, "
            f"{p['time_ms']:.3f} ms ({100 * p['share']:.1f} %)",
        )
        for p in parts
    ]
    boundaries = max(len(parts) - 1, 0)
    return (
        "<h2>Partitions</h2>"
        f'<p class="muted" id="partition-count">{len(parts)} partition(s) in execution order, {boundaries} '
        "boundary(ies) where one accelerator hands over to another; width = nodes.</p>"
        + _strip("partitions", "partitions in execution order", segs)
    )


def _memory(r: dict[str, Any]) -> str:
    mem = r.get("memory") or {}

    def mb(key: str) -> str:
        v = mem.get(key)
        return "?" if v is None else f"{v:.1f} MB"

    rows = [
        ("before load", mb("rss_before_load_mb")),
        ("peak RSS after load", mb("peak_rss_load_mb")),
        ("peak RSS after inference", mb("peak_rss_inference_mb")),
        ("weights", f"{(mem.get('weights_bytes') or 0) / 1e6:.2f} MB"),
    ]
    return (
        '<h2>Memory</h2><table id="memory">'
        + "".join(f'<tr><th>{k}</th><td class="n">{v}</td></tr>' for k, v in rows)
        + "</table>"
    )


def _details(nodes: list[dict[str, Any]], top: int) -> str:
    from .layer_profile_text import _shapes, _verdict

    rows = sorted(nodes, key=lambda n: -n["time_ms"])[:top]
    body = "".join(
        f"<tr><td>{_esc(n['name'])}</td><td>{_esc(n.get('op', ''))}</td><td>{_esc(n.get('accelerator', ''))}</td>"
        f'<td class="n">{n["time_ms"]:.3f}</td><td class="n">{100 * (n.get("share") or 0.0):.1f} %</td>'
        f"<td>{_esc(n.get('precision') or '-')}</td><td>{_esc(_shapes(n.get('input_shapes')))}</td>"
        f"<td>{_esc(_verdict(n))}</td></tr>"
        for n in rows
    )
    return (
        '<table id="nodes"><tr><th>node</th><th>op</th><th>ran on</th><th>ms</th><th>share</th><th>precision</th>'
        f"<th>input shapes</th><th>placement</th></tr>{body}</table>"
    )


def render(r: dict[str, Any], top: int = TOP) -> str:
    """The page, as one string."""
    title = f"edgekit profile: {r.get('name')} on {(r.get('device') or {}).get('hostname', '?')}"
    nodes = r.get("nodes") or []
    colors = _colors(r)
    prof = r.get("profiler") or {}
    body = [f"<h1>{_esc(title)}</h1>", _header(r)]
    if not prof.get("available"):
        body.append(f'<p class="unavailable" id="unavailable">per node: {_esc(prof.get("reason", "not available"))}'
                    "; the end-to-end latency and the memory are still measured.</p>")  # fmt: skip
    if nodes:
        body += [
            f"<h2>Top {min(top, len(nodes))} of {len(nodes)} nodes by time</h2>",
            '<p class="muted">median per node over the profiled runs; bar length against the slowest node, '
            "colour = the accelerator that ran it; share = part of the per-node sum.</p>",
            layers_svg(nodes, colors, top),
            _details(nodes, top),
            _accelerators(r, colors),
            _partitions(r, colors),
        ]
    body.append(_memory(r))
    notes = ([f"placement: {r['placement_note']}"] if r.get("placement_note") else []) + [
        f"warning: {w}" for w in r.get("warnings") or []
    ]
    if notes:
        body.append('<ul class="warning">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>" + "".join(body) + "</body></html>\n"
    )


def profile_html(report: dict[str, Any], path: str | Path | None = None, top: int = TOP) -> str:
    """The page of an ``edgekit.profile/1`` report (:func:`edgekit.profile`'s result); with ``path``, also written
    there whole (a temporary file, then renamed)."""
    page = render(report, top=top)
    if path is not None:
        out = Path(path)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    return page


__all__ = ["layers_svg", "profile_html", "render"]
