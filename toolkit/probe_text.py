"""The text form of a device probe (``edgekit device probe``; ``--json`` prints the probe itself)."""

from __future__ import annotations

from typing import Any

UNREAD = "-"


def _gib(kb: int | None) -> str:
    return f"{kb / 1024 / 1024:.1f} GiB" if kb else UNREAD


def _cluster(c: dict[str, Any]) -> str:
    what = c.get("core") or (f"part {c['part']}" if c.get("part") else "cpu")
    freq = f" @ {c['max_freq_khz'] / 1e6:.2f} GHz" if c.get("max_freq_khz") else ""
    cpus = c["cpus"]
    span = (
        f"{cpus[0]}-{cpus[-1]}"
        if cpus == list(range(cpus[0], cpus[-1] + 1)) and len(cpus) > 1
        else ",".join(str(n) for n in cpus)
    )
    return f"{len(cpus)}x {what}{freq} (cpu {span})"


def probe_text(info: dict[str, Any]) -> str:
    """``key  value`` lines of what the probe read; ``-`` where the device did not say."""
    osi, cpu, mem = info.get("os") or {}, info.get("cpu") or {}, info.get("memory") or {}
    libc, py, disk = info.get("libc") or {}, info.get("pythons") or {}, info.get("disk") or {}
    rows: list[tuple[str, str]] = [
        ("os", f"{osi.get('system') or UNREAD} {osi.get('kernel') or ''}".strip()),
        ("distribution", osi.get("distribution") or UNREAD),
    ]
    android = osi.get("android")
    if android:
        props = android.get("properties") or {}
        rows += [(f"  {k}", v or UNREAD) for k, v in props.items()]
        rows.append(("  nnapi level", str(android.get("nnapi_feature_level") or UNREAD)))
    rows += [
        ("arch", cpu.get("machine") or UNREAD),
        ("cpu", cpu.get("model") or UNREAD),
        ("cores", f"{cpu.get('count') or UNREAD} ({cpu.get('usable') or UNREAD} usable)"),
    ]
    rows += [("  cluster", _cluster(c)) for c in cpu.get("clusters") or []]
    rows += [
        ("features", ", ".join(cpu.get("features") or []) or UNREAD),
        ("memory", f"{_gib(mem.get('total_kb'))} ({_gib(mem.get('available_kb'))} available)"),
        ("libc", f"{libc.get('name') or UNREAD} {libc.get('version') or ''}".strip()),
        ("python", f"{py.get('running') or UNREAD} ({py.get('executable') or UNREAD})"),
    ]
    rows += [("  on PATH", f"{p['name']} {p.get('version') or UNREAD} ({p['path']})") for p in py.get("found") or []]
    acc = info.get("accelerators") or {}
    seen = [p for key in sorted(acc) for p in acc[key] or []]
    rows += [("accelerators", ", ".join(seen) or "none seen")]
    zones = info.get("thermal") or []
    rows += [
        (
            "thermal",
            ", ".join(f"{z.get('type') or z['zone']} {z['temp_c']:.0f} C" for z in zones if z.get("temp_c") is not None)
            or UNREAD,
        )
    ]
    free = disk.get("free_bytes")
    rows.append(("disk free", f"{free / 1e9:.1f} GB at {disk.get('path')}" if free is not None else UNREAD))
    width = max(len(k) for k, _ in rows)
    return "".join(f"{k:<{width}}  {v}\n" for k, v in rows)
