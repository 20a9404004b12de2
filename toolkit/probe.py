"""What a device is, read from the device: the agent's stand-alone probe script run through a transport.

    device_probe(device) -> dict     copies ``probe.py`` to the device root, runs it, parses its JSON

No agent needs to be running and no runtime installed: the device needs only Python 3.7+. The fields are
those of :mod:`edgekit_agent.probe` (None or empty where the device did not say); ``transport`` is added.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from .device import Device
from .errors import TransportError

PROBE_FILE = "probe.py"


def device_probe(device: Device) -> dict[str, Any]:
    """Run the probe script on ``device`` and return what it read."""
    device.probe()  # the device's Python (3.7+) and home; expands a ``~`` root
    device.step("probing the device")
    remote = f"{device.root}/{PROBE_FILE}"
    r = device.transport.run(["mkdir", "-p", device.root], timeout=60)
    if not r.ok:
        device.fail("creating the device root", (r.stderr or r.stdout).strip()[-500:] or f"mkdir -p {device.root}")
    with resources.as_file(resources.files("edgekit_agent").joinpath(PROBE_FILE)) as local:
        device.put_file(local, remote)
    r = device.transport.run([device.python, remote, "--root", device.root], timeout=120)
    if not r.ok:
        device.fail("running the probe", (r.stderr or r.stdout).strip()[-500:])
    lines = r.stdout.strip().splitlines()
    try:
        info = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise TransportError(
            f"{device.transport.description}: the probe printed no JSON object (got {r.stdout.strip()[-200:]!r})"
        ) from None
    info["transport"] = device.transport.name
    return info
