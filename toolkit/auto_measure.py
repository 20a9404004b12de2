"""``--auto``'s measurement: deploy the built candidates, benchmark them on the device in interleaved rounds."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from . import execution, progress
from .errors import EdgekitError


def measure(
    built: list[dict[str, Any]],
    device_url: str,
    prof: Any,
    runs: int,
    warmup: int,
    rounds: int,
    device_python: str | None,
    device_root: str | None,
    log: Callable[[str], Any],
) -> str:
    """Deploy every built candidate, then benchmark them round-robin so drift hits all alike.

    One connection to the device serves every candidate; only on the local machine does a
    backend whose runtime lives in a tool environment get its own agent (its own Python).
    Candidates are removed from the device afterwards (the winner is deployed by the user).
    Each is run there through :func:`edgekit.execution.on_device`. Returns the device's description.
    """
    from .deployer import deploy, open_device
    from .transports import parse_url

    kind, target, opts = parse_url(device_url)
    devices: dict[str, Any] = {}

    def device_for(c: dict[str, Any]) -> Any:
        key = c["backend"] if kind == "local" else "-"
        if key not in devices:
            devices[key] = open_device(
                kind,
                target,
                profile=prof,
                device_python=device_python,
                device_root=device_root,
                backend=c["backend"] if kind == "local" else None,
                **opts,
            )
        return devices[key]

    description = device_url
    prog = progress.of(log)
    try:
        deploying = prog.step(f"--auto: deploying {len(built)} candidates", total=len(built))
        for c in built:
            deploying.advance()
            try:
                dev = device_for(c)
                description = dev.transport.description
                deploy(c["bundle"], dev, bench=False)
                c["deployed_to"] = execution.on_device(dev, c["name"])
            except EdgekitError as e:
                c.update(status="failed", reason=f"deploy failed: {e}")
        deploying.done()
        p50s: dict[str, list[float]] = {c["label"]: [] for c in built}
        last = {}
        measuring = prog.step(f"--auto: benchmarking on {device_url}", total=rounds * len(built))
        for r in range(rounds):
            for c in built:
                measuring.advance()
                if c["status"] != "built":
                    continue  # failed in an earlier round: not measured again
                try:
                    rep = c["deployed_to"].bench(runs=runs, warmup=warmup)
                except EdgekitError as e:
                    c.update(status="failed", reason=f"benchmark failed on the device: {e}")
                    continue
                p50s[c["label"]].append(rep["latency_ms"]["p50"])
                last[c["label"]] = rep
            log(f"  round {r + 1}/{rounds} measured")
        measuring.done()
        for c in built:
            if c["status"] != "built" or not p50s[c["label"]]:
                continue
            rep = last[c["label"]]
            vals = p50s[c["label"]]
            c.update(
                status="measured",
                p50_ms=round(statistics.median(vals), 4),
                p50_range_ms=[round(min(vals), 4), round(max(vals), 4)],
                p90_ms=rep["latency_ms"].get("p90"),
                accelerator=rep.get("accelerator"),
                runtime=f"{rep.get('backend', c['backend'])} {rep.get('runtime_version', '')}".strip(),
                threads=rep.get("threads"),
            )
        for c in built:
            on_device = c.pop("deployed_to", None)
            if on_device is not None:
                try:
                    on_device.device.remove(c["name"])
                except EdgekitError as e:
                    log(f"  could not remove candidate {c['name']} from the device: {e}")
        return description
    finally:
        for c in built:
            c.pop("deployed_to", None)
        for dev in devices.values():
            dev.close()
