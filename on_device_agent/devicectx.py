"""The device's state around a request: load, free memory, temperature (read, never changed)."""

import os
from typing import Dict, Optional


def device_context() -> Dict[str, Optional[float]]:
    """Load, free memory and the hottest thermal zone, where this system exposes them."""
    ctx = {"load1": None, "mem_available_mb": None, "temp_c": None}  # type: Dict[str, Optional[float]]
    try:
        ctx["load1"] = os.getloadavg()[0]
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    ctx["mem_available_mb"] = int(line.split()[1]) / 1024.0
                    break
    except OSError:
        pass
    temps = []
    base = "/sys/class/thermal"
    try:
        zones = [z for z in os.listdir(base) if z.startswith("thermal_zone")]
    except OSError:
        zones = []
    for z in zones:
        try:
            with open(os.path.join(base, z, "temp")) as f:
                temps.append(int(f.read().strip()) / 1000.0)
        except (OSError, ValueError):
            pass
    if temps:
        ctx["temp_c"] = max(temps)
    return ctx
