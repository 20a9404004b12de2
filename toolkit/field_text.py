"""The field report as text: one row per device, model and version, then traffic splits and breaker changes."""

import time
from typing import Any

from .layer_profile_text import lab_profile_lines


def _split_line(r: dict[str, Any], ev: dict[str, Any]) -> str:
    device = next((e["device"] for e in r["entries"] if e["store_id"] == ev["store_id"]), ev["store_id"][:8])
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(ev["ts"]))
    detail = ev["detail"] or {}
    if ev["kind"] == "breaker":
        state, reason = detail.get("state"), detail.get("reason")
        return f"  breaker {state} on {device}: {ev['model']} {ev['version']} at {when} ({reason})"
    versions = detail.get("versions")
    what = ", ".join(f"{v} {w}" for v, w in versions.items()) if versions else "ended"
    return f"  split on {device}: {ev['model']} {what} at {when}"


def _fmt(v: float | None) -> str:
    return f"{v:8.3f}" if v is not None else f"{'-':>8}"


def report_text(r: dict) -> str:
    """The field report (``field.report``'s result) as a table, then the splits and breaker changes."""
    if not r["records"]:
        what = (f" of {r['model']}" if r["model"] else "") + (f" in the last {r['since']}" if r["since"] else "")
        return (
            f"no field records{what} in {r.get('store', 'the field store')}: fetch what devices recorded with "
            "`edgekit field pull --ssh HOST` (or --adb, --serial, --local), then report again\n"
        )
    lines = [
        f"edgekit field report: {r['records']} requests"
        + (f" of {r['model']}" if r["model"] else "")
        + (f" in the last {r['since']}" if r["since"] else "")
    ]
    header = (
        f"  {'device':<16} {'model':<22} {'version':<17} {'accelerator':<22} {'reqs':>7} {'err%':>6} "
        f"{'p50':>8} {'p90':>8} {'p99':>8} {'lab p50':>8} {'drift':>7} {'req/s':>7} {'share':>6}"
    )
    lines.append(header)
    for e in r["entries"]:
        lat = e["latency_ms"]
        lab = e["lab"]["p50_ms"] if e["lab"] else None
        drift = f"{100 * e['drift']:+6.1f}%" if e["drift"] is not None else f"{'-':>7}"
        rps = f"{e['throughput_rps']:7.1f}" if e["throughput_rps"] else f"{'-':>7}"
        share = f"{100 * e['share']:5.1f}%" if e.get("share") is not None else f"{'-':>6}"
        lines.append(
            f"  {e['device'][:16]:<16} {(e['model'] or '-')[:22]:<22} {(e['version'] or '-')[:17]:<17} "
            f"{(e['accelerator'] or '-')[:22]:<22} {e['requests']:>7} {100 * e['error_rate']:5.1f}% "
            f"{_fmt(lat['p50'])} {_fmt(lat['p90'])} {_fmt(lat['p99'])} {_fmt(lab)} {drift} {rps} {share}"
        )
    lines.extend(_split_line(r, ev) for ev in r["events"] if ev["kind"] in ("split", "breaker"))
    for g in r["regressions"]:
        lines.append(
            f"  REGRESSION on {g['device']}: {g['model']} {g['from']} -> {g['to']}: p50 "
            f"{g['p50_before_ms']:.3f} -> {g['p50_after_ms']:.3f} ms ({100 * g['change']:+.0f}%)"
        )
    lines.append(
        "  latencies in ms, measured by the agent around the runtime call; lab = edgekit deploy's benchmark "
        "of the same bundle on the same device"
    )
    for e in r["entries"]:
        if e.get("lab_profile"):
            lines.append(f"  {e['device']}: {e['model']} {e['version']}")
            lines += lab_profile_lines(e["lab_profile"], indent="    ")
    return "\n".join(lines) + "\n"
