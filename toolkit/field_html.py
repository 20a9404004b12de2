"""The field report as one self-contained HTML file: inline SVG, no scripts, no network."""

import html
import math
import time
from typing import Any

W, H, PAD = 560, 220, 44
COLORS = {"p50": "#1f6feb", "p99": "#d1242f", "lab": "#8250df", "field": "#1a7f37", "bar": "#54aeff", "cdf": "#cf222e"}


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _axis_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    step = (hi - lo) / n
    return [lo + i * step for i in range(n + 1)]


def _frame(cls: str, title: str, body: str, x_label: str, y_label: str) -> str:
    return (
        f'<svg class="chart {cls}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{_esc(title)}" xmlns="http://www.w3.org/2000/svg">'
        f'<rect x="{PAD}" y="10" width="{W - PAD - 10}" height="{H - PAD - 10}" fill="#f6f8fa" stroke="#d0d7de"/>'
        f"{body}"
        f'<text x="{W / 2}" y="{H - 6}" text-anchor="middle" class="axis">{_esc(x_label)}</text>'
        f'<text x="12" y="{H / 2}" text-anchor="middle" class="axis" transform="rotate(-90 12 {H / 2})">'
        f"{_esc(y_label)}</text></svg>"
    )


def histogram_svg(hist: dict[str, list[Any]]) -> str:
    edges, counts = hist["edges"], hist["counts"]
    if not counts:
        return "<p>no successful requests</p>"
    lx0, lx1 = math.log10(edges[0]), math.log10(edges[-1])
    iw, ih = W - PAD - 10, H - PAD - 10

    def x(v: float) -> float:
        return PAD + (math.log10(v) - lx0) / max(lx1 - lx0, 1e-9) * iw

    top = max(counts)
    parts = []
    for a, b, c in zip(edges, edges[1:], counts):
        h = c / top * (ih - 4)
        parts.append(
            f'<rect class="bar" x="{x(a):.1f}" y="{10 + ih - h:.1f}" width="{max(x(b) - x(a) - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="{COLORS["bar"]}"><title>{a:.3f}-{b:.3f} ms: {c}</title></rect>'
        )
    total, acc, pts = sum(counts), 0, []
    for b, c in zip(edges[1:], counts):
        acc += c
        pts.append(f"{x(b):.1f},{10 + ih - acc / total * (ih - 4):.1f}")
    parts.append(
        f'<polyline class="cdf" points="{" ".join(pts)}" fill="none" stroke="{COLORS["cdf"]}" stroke-width="2"/>'
    )
    for v, anchor in ((edges[0], "start"), (math.sqrt(edges[0] * edges[-1]), "middle"), (edges[-1], "end")):
        parts.append(f'<text x="{x(v):.1f}" y="{H - PAD + 14}" text-anchor="{anchor}" class="tick">{v:.3g}</text>')
    parts.append(f'<text x="{PAD + 4}" y="24" class="legend" fill="{COLORS["cdf"]}">CDF</text>')
    return _frame(
        "histogram",
        "latency histogram and CDF",
        "".join(parts),
        "inference latency, ms (log scale)",
        "requests / cumulative",
    )


def timeline_svg(points: list[dict[str, Any]], events: list[dict[str, Any]]) -> str:
    if not points:
        return "<p>no successful requests</p>"
    t0 = min([p["t"] for p in points] + [e["ts"] for e in events])
    t1 = max([p["t"] for p in points] + [e["ts"] for e in events])
    t1 = t1 if t1 > t0 else t0 + 1
    ymax = max(p["p99"] for p in points) * 1.1 or 1
    iw, ih = W - PAD - 10, H - PAD - 10

    def x(t: float) -> float:
        return PAD + (t - t0) / (t1 - t0) * iw

    def y(v: float) -> float:
        return 10 + ih - v / ymax * ih

    parts = []
    for e in events:
        parts.append(
            f'<line class="deploy" x1="{x(e["ts"]):.1f}" x2="{x(e["ts"]):.1f}" y1="10" y2="{10 + ih}" '
            f'stroke="#6e7781" stroke-dasharray="4 3"><title>{_esc(e["kind"])} {_esc(e["version"])}</title></line>'
            f'<text x="{x(e["ts"]) + 3:.1f}" y="{6 + ih:.1f}" class="tick">'
            f"{_esc(e['kind'])} {_esc(str(e['version'])[:8])}</text>"
        )
    for key in ("p99", "p50"):
        pts = " ".join(f"{x(p['t']):.1f},{y(p[key]):.1f}" for p in points)
        parts.append(f'<polyline class="{key}" points="{pts}" fill="none" stroke="{COLORS[key]}" stroke-width="2"/>')
        parts += [
            f'<circle class="{key}" cx="{x(p["t"]):.1f}" cy="{y(p[key]):.1f}" r="2.5" fill="{COLORS[key]}">'
            f"<title>{key} {p[key]:.3f} ms ({p['count']} requests)</title></circle>"
            for p in points
        ]
    for v in _axis_ticks(0, ymax):
        parts.append(f'<text x="{PAD - 4}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">{v:.2g}</text>')
    for t, anchor in ((t0, "start"), (t1, "end")):
        parts.append(
            f'<text x="{x(t):.1f}" y="{H - PAD + 14}" text-anchor="{anchor}" class="tick">'
            f"{time.strftime('%m-%d %H:%M:%S', time.localtime(t))}</text>"
        )
    parts.append(
        f'<text x="{W - 90}" y="24" class="legend" fill="{COLORS["p50"]}">p50</text>'
        f'<text x="{W - 50}" y="24" class="legend" fill="{COLORS["p99"]}">p99</text>'
    )
    return _frame("timeline", "p50 and p99 over time, deploys marked", "".join(parts), "time", "ms")


def labfield_svg(entries: list[dict[str, Any]]) -> str:
    rows = [e for e in entries if e["latency_ms"]["p50"] is not None]
    if not rows:
        return "<p>no data</p>"
    height = 30 + 34 * len(rows)
    vmax = max(max(e["latency_ms"]["p50"], (e["lab"] or {}).get("p50_ms") or 0) for e in rows) * 1.15
    left, iw = 230, W - 230 - 80
    parts = []
    for i, e in enumerate(rows):
        y0 = 20 + 34 * i
        label = f"{e['device']} · {e['model']} · {str(e['version'])[:8]}"
        parts.append(f'<text x="{left - 6}" y="{y0 + 14}" text-anchor="end" class="tick">{_esc(label[:38])}</text>')
        f = e["latency_ms"]["p50"]
        parts.append(
            f'<rect class="field" x="{left}" y="{y0}" width="{f / vmax * iw:.1f}" height="12" '
            f'fill="{COLORS["field"]}"><title>field p50 {f:.3f} ms</title></rect>'
            f'<text x="{left + f / vmax * iw + 4:.1f}" y="{y0 + 10}" class="tick">field {f:.3f}</text>'
        )
        if e["lab"]:
            lab = e["lab"]["p50_ms"]
            parts.append(
                f'<rect class="lab" x="{left}" y="{y0 + 14}" width="{lab / vmax * iw:.1f}" height="12" '
                f'fill="{COLORS["lab"]}"><title>lab p50 {lab:.3f} ms</title></rect>'
                f'<text x="{left + lab / vmax * iw + 4:.1f}" y="{y0 + 24}" class="tick">lab {lab:.3f}</text>'
            )
    return (
        f'<svg class="chart labfield" width="{W}" height="{height}" viewBox="0 0 {W} {height}" role="img" '
        f'aria-label="lab against field p50" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def lab_profile_html(e: dict[str, Any]) -> str:
    """Where the time goes, from the layer profile ``deploy --profile-layers`` kept with the lab benchmark."""
    s = e["lab_profile"]
    prof = s.get("profiler") or {}
    head = (
        f"<h3 class='lab-profile'>Where the time goes (lab profile): {_esc(e['device'])} · {_esc(e['model'])} · "
        f"{_esc(e['version'])}</h3><p class='muted'>{_esc(s.get('runtime'))} {_esc(s.get('runtime_version'))}, "
        f"{_esc(s.get('runs'))} profiled runs"
    )
    if not prof.get("available"):
        return head + f": {_esc(prof.get('reason', 'not available'))}</p>"
    acc = ", ".join(f"{a['accelerator']} {100 * a['share']:.1f} %" for a in s.get("by_accelerator") or [])
    rows = "".join(
        f"<tr><td>{_esc(n['name'])}</td><td class='l'>{_esc(n.get('op'))}</td><td class='l'>"
        f"{_esc(n.get('accelerator'))}</td><td>{n['time_ms']:.3f}</td><td>{100 * (n.get('share') or 0):.1f}%</td></tr>"
        for n in s.get("top") or []
    )
    return (
        head + f"; {_esc(s.get('nodes'))} nodes; per accelerator: {_esc(acc)}; "
        f"{_esc(s.get('partitions'))} partition(s)</p><table class='lab-profile'><tr><th>layer</th><th>op</th>"
        f"<th>ran on</th><th>ms</th><th>share</th></tr>{rows}</table>"
    )


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de}h3{font-size:14px;margin:8px 0 4px}
table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #eaeef2;text-align:right}
th:first-child,td:first-child,td.l{text-align:left}.regressions{background:#fff1f1;border:1px solid #d1242f;padding:8px}
.charts{display:flex;flex-wrap:wrap;gap:16px}.axis,.tick,.legend{font-size:11px;fill:#57606a}.legend{font-weight:600}
.muted{color:#57606a}
"""


def render(r: dict[str, Any]) -> str:
    def num(v: float | None, fmt: str = "{:.3f}") -> str:
        return fmt.format(v) if v is not None else "–"

    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>edgekit field report</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>edgekit field report</h1><p class='muted'>{r['records']} requests"
        + (f" of {_esc(r['model'])}" if r["model"] else "")
        + (f", last {_esc(r['since'])}" if r["since"] else "")
        + f"; generated {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r['generated']))}. Latencies are "
        "measured by the agent around the runtime call on the device; lab is edgekit deploy's benchmark of the "
        "same bundle on the same device.</p>",
    ]
    if r["regressions"]:
        out.append("<div class='regressions' id='regressions'><b>Regressions after a deploy</b><ul>")
        for g in r["regressions"]:
            out.append(
                f"<li>{_esc(g['device'])}: {_esc(g['model'])} {_esc(g['from'])} → {_esc(g['to'])}: p50 "
                f"{g['p50_before_ms']:.3f} → {g['p50_after_ms']:.3f} ms ({100 * g['change']:+.0f}%)</li>"
            )
        out.append("</ul></div>")
    out.append(
        "<h2>Summary</h2><table id='summary'><tr><th>device</th><th>model</th><th>version</th><th>backend</th>"
        "<th>accelerator</th><th>requests</th><th>errors</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>"
        "<th>lab p50 ms</th><th>drift</th><th>req/s</th></tr>"
    )
    for e in r["entries"]:
        lat = e["latency_ms"]
        out.append(
            f"<tr><td>{_esc(e['device'])}</td><td class='l'>{_esc(e['model'])}</td><td class='l'>"
            f"{_esc(e['version'])}</td><td class='l'>{_esc(e['backend'])}</td><td class='l'>{_esc(e['accelerator'])}"
            f"</td><td>{e['requests']}</td><td>{100 * e['error_rate']:.1f}%</td><td>{num(lat['p50'])}</td>"
            f"<td>{num(lat['p90'])}</td><td>{num(lat['p99'])}</td><td>{num((e['lab'] or {}).get('p50_ms'))}</td>"
            f"<td>{num(e['drift'] and 100 * e['drift'], '{:+.1f}%')}</td>"
            f"<td>{num(e['throughput_rps'], '{:.1f}')}</td></tr>"
        )
    out.append("</table><h2>Lab against field (p50)</h2>")
    out.append(labfield_svg(r["entries"]))
    out += [lab_profile_html(e) for e in r["entries"] if e.get("lab_profile")]
    for tl in r.get("timelines", []):
        evs = [ev for ev in r["events"] if ev["store_id"] == tl["store_id"] and ev["model"] == tl["model"]]
        out.append(
            f"<h2 class='entry'>{_esc(tl['device'])} · {_esc(tl['model'])}</h2>"
            "<p class='muted'>p50 and p99 over time, all versions; dashed lines mark installs and rollbacks.</p>"
            f"<div class='charts'>{timeline_svg(tl['points'], evs)}</div><div class='charts'>"
        )
        for e in r["entries"]:
            if e["store_id"] == tl["store_id"] and e["model"] == tl["model"]:
                out.append(f"<div><h3>version {_esc(e['version'])}</h3>{histogram_svg(e['histogram'])}</div>")
        out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out)
