"""A rollout as text (``edgekit rollout status``): per wave its devices, decision, reason and numbers."""

from __future__ import annotations

from typing import Any

from . import state as st


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def wave_lines(decision: dict[str, Any] | None) -> list[str]:
    """The numbers a wave was judged on, one line per device."""
    numbers = (decision or {}).get("numbers") or {}
    out = []
    for name, row in (numbers.get("devices") or {}).items():
        new, old = row.get("new") or {}, row.get("old") or {}
        out.append(
            f"    {name}: new {new.get('version', '-')} n={new.get('samples', 0)} p50 {_ms(new.get('p50_ms'))} "
            f"p99 {_ms(new.get('p99_ms'))} ms err {new.get('error_rate', 0) * 100:.2f}%"
            + (
                f" | old {old['version']} n={old['samples']} p50 {_ms(old['p50_ms'])} p99 {_ms(old['p99_ms'])} ms"
                f" | p50 {_pct(row.get('p50_change'))} p99 {_pct(row.get('p99_change'))}"
                if old
                else " | no old version to compare"
            )
        )
    return out


def rollout_text(r: dict[str, Any]) -> str:
    """``r``: :meth:`edgekit.rollout.state.Rollout.to_dict` (plus ``log``, optional)."""
    t = r["thresholds"]
    limits = [f"soak {t['min_soak_s']:g} s", f"{t['min_samples']} samples"]
    for key, label in (("max_p99_regression", "p99"), ("max_p50_regression", "p50")):
        if t.get(key) is not None:
            limits.append(f"{label} +{t[key] * 100:g}% max")
    if t.get("max_error_rate") is not None:
        limits.append(f"errors {t['max_error_rate'] * 100:g}% max")
    group = f"tag {r['group']!r} of " if r["group"] else ""
    lines = [
        f"rollout {r['id']}: {r['model']} {r['bundle_id']} to {group}{r['inventory']}",
        f"  waves {r['wave_specs']} ({len(r['waves'])} with devices); {', '.join(limits)}",
        f"  status: {r['status']}" + (f" ({r['reason']})" if r.get("reason") else ""),
    ]
    decisions = {d["wave"]: d for d in r["decisions"]}
    for i, names in enumerate(r["waves"]):
        d = decisions.get(i)
        now = " <- current" if i == r["wave"] and r["status"] in (st.RUNNING, st.PAUSED) else ""
        verdict = f"{d['decision']}: {d['reason']}" if d and d.get("decision") else "not started"
        lines.append(f"wave {i + 1} ({', '.join(names)}){now}: {verdict}")
        lines.extend(wave_lines(d))
    lines.append("devices:")
    for name, dev in r["devices"].items():
        state = dev["state"]
        if state == st.PENDING and r["status"] in (st.STOPPED, st.ABORTED):
            state = "pending (not installed: the rollout ended)"
        was = f" (served {dev['old_version'] or 'nothing'} before)" if dev["old_version"] is not None else ""
        err = f": {dev['error']}" if dev.get("error") else ""
        lines.append(f"  {name}  wave {dev['wave'] + 1}  {state}{was}{err}")
    if not r["finished"] and r["status"] not in (st.RUNNING, st.PAUSED):
        lines.append(f"devices still owed an action: `edgekit rollout resume {r['id']}` when they are back")
    return "\n".join(lines) + "\n"


__all__ = ["rollout_text", "wave_lines"]
