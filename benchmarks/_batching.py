"""``agent_load.py --batching``: the same load, one-by-one against dynamically batched, on a model whose batch
dimension is dynamic (the tiny CNN with its first dimension made ``N``)."""

import os
import shutil
import subprocess
import sys
from typing import Any, Callable, Dict, List


def start(work: Any, bundle_dir: Any, extra: List[str]) -> Any:
    """An agent from its zipapp under ``work/NAME`` (serve options ``extra``) with ``bundle_dir`` deployed."""
    from edgekit import agent_package
    from edgekit.deployer import deploy, open_device

    root = os.path.join(str(work), "device-" + ("batched" if extra else "single"))
    built, _ = agent_package.build(os.path.join(root, "agent"))
    pyz = os.path.join(root, "agent", "edgekit-agent.pyz")
    shutil.copy(str(built), pyz)
    subprocess.run([sys.executable, pyz, "start", "--root", root, *extra], check=True, capture_output=True, timeout=60)
    dev = open_device("local", device_root=root)
    deploy(str(bundle_dir), dev, bench=False)
    return dev


def compare(
    work: Any,
    bundle_dir: Any,
    load: Callable[..., Dict[str, Any]],
    clients: int,
    seconds: float,
    window_ms: float,
    max_batch: int,
    stop: Callable[[Any, str], None],
) -> Dict[str, Any]:
    """``{"single": load result, "batched": load result}`` with the same clients and duration."""
    from harness.batchbundle import dynamic_batch_bundle

    batchable = dynamic_batch_bundle(bundle_dir, os.path.join(str(work), "bundle-n"))
    out = {"window_ms": window_ms, "max_batch": max_batch}
    for mode, extra in (
        ("single", []),
        ("batched", ["--batch-window-ms", str(window_ms), "--max-batch", str(max_batch)]),
    ):
        dev = start(work, batchable, extra)
        try:
            out[mode] = load(dev.state["port"], clients, seconds)
        finally:
            stop(dev, dev.root)
    return out


def table(r: Dict[str, Any]) -> str:
    rows = [
        "| mode | clients | requests | errors | req/s | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode in ("single", "batched"):
        ld = r[mode]
        name = "one by one" if mode == "single" else "batched (%g ms window, max %d)" % (r["window_ms"], r["max_batch"])
        rows.append(
            f"| {name} | {ld['clients']} | {ld['requests']} | {ld['errors']} | {ld['rps']:.0f} | {ld['p50_ms']:.2f} "
            f"| {ld['p99_ms']:.2f} |"
        )
    return "\n".join(rows)
