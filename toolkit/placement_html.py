"""``edgekit explain --html``: the placement report as one self-contained HTML file (no scripts)."""

from __future__ import annotations

from typing import Any

from .field_html import _esc


def _bar(share: float, width: int = 240) -> str:
    share = share or 0.0
    return (
        f'<svg class="bar" width="{width}" height="12" role="img" aria-label="{100 * share:.1f} %" '
        f'xmlns="http://www.w3.org/2000/svg"><rect width="{width}" height="12" fill="#eaeef2"/>'
        f'<rect width="{width * share:.1f}" height="12" fill="#1a7f37"/></svg>'
    )


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f} %"


def _target(t: dict[str, Any]) -> str:
    s = t["summary"]
    src = t.get("source") or {}
    parts = [
        f'<section class="target"><h2>{_esc(t["accelerator"])}'
        + (f" <small>{_esc(t['device'])}</small>" if t.get("device") else "")
        + "</h2>",
        f'<p class="checked">{_esc(t["checked_with"])}</p>',
    ]
    if src:
        parts.append(
            f'<p class="source">source: <a href="{_esc(src.get("url", ""))}">{_esc(src.get("title", src.get("url")))}'
            f"</a> ({_esc(src.get('version'))}, read {_esc(src.get('read'))})</p>"
        )
    parts.append(
        '<table class="summary"><tr><th>nodes on the accelerator</th><td>'
        f"{s['on_accelerator']}/{s['nodes']} ({_pct(s['node_share'])})</td><td>{_bar(s['node_share'])}</td></tr>"
        f"<tr><th>FLOPs on the accelerator</th><td>{_pct(s['flops_share'])}</td><td>{_bar(s['flops_share'])}</td></tr>"
        f"<tr><th>partitions</th><td>{'?' if s['partitions'] is None else s['partitions']}</td><td></td></tr>"
        f"<tr><th>fall back / unknown</th><td>{s['fallback']} / {s['unknown']}</td><td></td></tr></table>"
    )
    parts.append(
        '<table class="ops"><thead><tr><th>op type</th><th>nodes</th><th>on accelerator</th><th>unknown</th>'
        "</tr></thead><tbody>"
    )
    parts += [
        f"<tr><td>{_esc(r['op'])}</td><td>{r['nodes']}</td><td>{r['on_accelerator']}</td><td>{r['unknown']}</td></tr>"
        for r in t["by_op"]
    ]
    parts.append("</tbody></table>")
    if t["fallback"]:
        parts.append(
            '<h3>Falls back to the CPU</h3><table class="fallback"><thead><tr><th>node</th><th>op</th>'
            "<th>why</th><th>what would fix it</th></tr></thead><tbody>"
        )
        parts += [
            f"<tr><td>{_esc(f['node'])}</td><td>{_esc(f['op'])}</td><td>{_esc(f['reason'])}</td>"
            f"<td>{_esc(f['fix'])}</td></tr>"
            for f in t["fallback"]
        ]
        parts.append("</tbody></table>")
    if t["unknown"]:
        parts.append(
            '<h3>Unknown</h3><ul class="unknown">'
            + "".join(f"<li>{_esc(u['node'])} ({_esc(u['op'])}): {_esc(u['reason'])}</li>" for u in t["unknown"])
            + "</ul>"
        )
    notes = list(t.get("notes", [])) + [f"caveat not checked: {c}" for c in t.get("caveats_not_checked", [])]
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    parts.append("</section>")
    return "".join(parts)


def render(r: dict[str, Any]) -> str:
    g = r["graph"]
    flops = "?" if g.get("flops") is None else f"{g['flops'] / 1e6:.2f} MFLOPs"
    title = f"edgekit explain: {r.get('bundle', '?')} for {r['profile']}"
    body = [
        f"<h1>{_esc(title)}</h1>",
        f'<p class="graph">{_esc(r["backend"])}, {_esc(r.get("precision", "?"))}: '
        f"{_esc(g.get('note') or g['kind'])}, {g['nodes']} nodes, {flops}</p>",
    ]
    if r.get("note"):
        body.append(f'<p class="note">{_esc(r["note"])}</p>')
    body += [_target(t) for t in r.get("targets", [])]
    sb = r.get("selective_build")
    if sb:
        body.append(f'<p class="selective">selective build: {_esc(sb["writes"])}</p>')
    css = (
        "body{font-family:system-ui,sans-serif;margin:24px;color:#1f2328}table{border-collapse:collapse;margin:8px 0}"
        "th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}"
        "th{background:#f6f8fa}small{color:#656d76}.fallback td:nth-child(3){color:#cf222e}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title><style>{css}</style></head><body>" + "".join(body) + "</body></html>\n"
    )
