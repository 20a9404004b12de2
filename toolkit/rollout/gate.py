"""A wave's gate: after the soak time and enough field samples, the new version against the old one on the same
devices, from the field report's numbers (``edgekit.field.report``: p50/p99 of successful requests, error rate).

:func:`wave_numbers` gathers the numbers; :func:`judge` decides: ``wait`` (soak or samples missing), ``proceed``
or ``stop``, with the reason in words and the numbers it was decided on. Pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..field import MIN_SAMPLES

WAIT, PROCEED, STOP = "wait", "proceed", "stop"


@dataclass(frozen=True)
class Thresholds:
    """What a wave must satisfy. Fractions: 0.10 is 10 %. ``None``: not checked."""

    min_soak_s: float = 1800.0
    min_samples: int = MIN_SAMPLES
    max_p99_regression: float | None = 0.10
    max_p50_regression: float | None = None
    max_error_rate: float | None = 0.005

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Verdict:
    decision: str  # wait | proceed | stop
    reason: str
    numbers: dict[str, Any]


def _version_numbers(entry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    lat = entry.get("latency_ms") or {}
    return {
        "version": entry["version"],
        "samples": entry["ok"],
        "requests": entry["requests"],
        "errors": entry["errors"],
        "error_rate": entry["error_rate"],
        "p50_ms": lat.get("p50"),
        "p99_ms": lat.get("p99"),
    }


def wave_numbers(
    report: Mapping[str, Any], model: str, new_version: str, devices: Mapping[str, str | None]
) -> dict[str, dict[str, Any]]:
    """Per device of the wave (``{name: old version or None}``): the field numbers of the new and the old version,
    from a field report's entries (the device's name in the report is its inventory name)."""
    entries = {(e["device"], e["version"]): e for e in report.get("entries", []) if e.get("model") == model}
    out: dict[str, dict[str, Any]] = {}
    for name, old in devices.items():
        new_n = _version_numbers(entries.get((name, new_version)))
        old_n = _version_numbers(entries.get((name, old))) if old and old != new_version else None
        row: dict[str, Any] = {"new": new_n, "old": old_n, "p50_change": None, "p99_change": None}
        if new_n and old_n:
            for q in ("p50", "p99"):
                a, b = old_n[f"{q}_ms"], new_n[f"{q}_ms"]
                row[f"{q}_change"] = (b / a - 1.0) if a and b is not None else None
        out[name] = row
    return out


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def judge(per_device: Mapping[str, Mapping[str, Any]], soaked_s: float, t: Thresholds) -> Verdict:
    """Decide a wave from :func:`wave_numbers` output and how long it has soaked."""
    numbers: dict[str, Any] = {"soaked_s": round(soaked_s, 3), "devices": dict(per_device)}
    if soaked_s < t.min_soak_s:
        return Verdict(WAIT, f"soaking: {soaked_s:.0f} s of {t.min_soak_s:g} s", numbers)
    short = []
    for name, row in per_device.items():
        new = row.get("new")
        got = new["samples"] if new else 0
        if got < t.min_samples:
            short.append(f"{name} has {got}/{t.min_samples} samples of the new version")
    if short:
        return Verdict(WAIT, "waiting for field data: " + "; ".join(short), numbers)
    requests = sum(r["new"]["requests"] for r in per_device.values())
    errors = sum(r["new"]["errors"] for r in per_device.values())
    rate = errors / requests if requests else 0.0
    numbers["error_rate"] = rate
    problems = []
    if t.max_error_rate is not None and rate > t.max_error_rate:
        problems.append(f"error rate {rate * 100:.2f}% ({errors}/{requests}) is above {t.max_error_rate * 100:g}%")
    # devices whose old version has too few samples are not compared (its numbers would be noise)
    compared = {n: r for n, r in per_device.items() if r.get("old") and r["old"]["samples"] >= t.min_samples}
    numbers["compared"] = sorted(compared)
    lines = []
    for q, limit in (("p99", t.max_p99_regression), ("p50", t.max_p50_regression)):
        changes = {n: r[f"{q}_change"] for n, r in compared.items() if r.get(f"{q}_change") is not None}
        if not changes:
            continue
        worst = max(changes, key=lambda n: changes[n])
        w = compared[worst]
        numbers[f"{q}_change"] = changes[worst]
        numbers[f"{q}_worst_device"] = worst
        said = (
            f"{q} {w['old'][f'{q}_ms']:.3f} ms -> {w['new'][f'{q}_ms']:.3f} ms ({_pct(changes[worst])}) on {worst}"
            f" ({w['old']['version']} -> {w['new']['version']})"
        )
        if limit is not None and changes[worst] > limit:
            problems.append(f"{said}, above the {limit * 100:g}% allowed")
        else:
            lines.append(said)
    if problems:  # what failed, then the other numbers measured
        return Verdict(STOP, "; ".join(problems + lines), numbers)
    if compared:
        reason = "within limits: " + "; ".join(lines) + f"; error rate {rate * 100:.2f}%"
    else:
        reason = (
            f"error rate {rate * 100:.2f}%; latency not compared: no earlier version with "
            f"{t.min_samples}+ samples on these devices"
        )
    return Verdict(PROCEED, reason, numbers)


__all__ = ["PROCEED", "STOP", "WAIT", "Thresholds", "Verdict", "judge", "wave_numbers"]
