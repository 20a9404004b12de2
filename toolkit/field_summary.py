"""What the field report derives from its per-version entries, whichever store they came from."""

from __future__ import annotations

from typing import Any

REGRESSION = 0.10  # a new version whose field p50 is more than 10 % above the previous one is flagged
MIN_SAMPLES = 20


def shares_and_regressions(entries: list[dict[str, Any]], all_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set each entry's share of its model's requests; return the versions whose field p50 regressed."""
    totals: dict[tuple[str, str], int] = {}
    for e in entries:
        totals[(e["store_id"], e["model"])] = totals.get((e["store_id"], e["model"]), 0) + e["requests"]
    for e in entries:  # a version's share of its model's requests (a traffic split's observed percentages)
        e["share"] = e["requests"] / totals[(e["store_id"], e["model"])]
    regressions = []
    by_device_model: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        by_device_model.setdefault((e["store_id"], e["model"]), []).append(e)
    for (sid, mdl), versions in by_device_model.items():
        installed = {
            ev["version"]: ev["ts"]
            for ev in all_events
            if ev["store_id"] == sid and ev["model"] == mdl and ev["kind"] in ("install", "rollback")
        }
        # Only versions with enough successful requests are compared (failed lookups have no version).
        versions = [v for v in versions if v["version"] and v["ok"] >= MIN_SAMPLES]
        versions.sort(key=lambda v: installed.get(v["version"], v["first_ts"]))
        for before, after in zip(versions, versions[1:]):
            change = after["latency_ms"]["p50"] / before["latency_ms"]["p50"] - 1.0
            if change > REGRESSION:
                regressions.append(
                    {
                        "device": after["device"],
                        "model": mdl,
                        "from": before["version"],
                        "to": after["version"],
                        "p50_before_ms": before["latency_ms"]["p50"],
                        "p50_after_ms": after["latency_ms"]["p50"],
                        "change": change,
                    }
                )
    return regressions
