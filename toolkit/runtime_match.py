"""Does the device run the runtime version a bundle was built and checked with?

A bundle records the runtime its build was checked on (``manifest["runtime"]``: name and version); the agent
reports the version of every runtime importable on the device (``/v1/health`` ``runtimes``). Before an upload,
:func:`check` compares them:

- same version (major.minor.patch): nothing to say;
- another version: a warning in the deploy report (the build's fidelity was measured on the bundle's version);
- known to be incompatible: refused before anything is uploaded, naming the fix. Known today: an ONNX Runtime
  ORT-format model (``.ort``) on an older ONNX Runtime than the one that wrote it (ONNX Runtime documents the ORT
  format as backward compatible only: a newer release reads older files, not the other way round).
"""

from __future__ import annotations

import re
from typing import Any

from .errors import AgentError

# backend -> what an older device runtime cannot read, per model file suffix
NEWER_ONLY = {
    ("ort", ".ort"): "the ORT format is read by the ONNX Runtime release that wrote it and newer ones only",
}
INSTALL = {
    "ort": "onnxruntime",
    "openvino": "openvino",
    "mnn": "MNN",
    "tflite": "ai-edge-litert",
    "paddlelite": "paddlelite",
    "mindspore-lite": "mindspore-lite",
}


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``"1.32.0"`` -> ``(1, 32, 0)``; ``"2026.4.1-20000"`` -> ``(2026, 4, 1)``; None when it has no number."""
    if not text:
        return None
    nums = re.findall(r"\d+", str(text).split("-")[0].split("+")[0])
    return tuple(int(n) for n in nums[:3]) if nums else None


def check(manifest: dict[str, Any], device_runtimes: dict[str, str | None] | None, where: str) -> list[str]:
    """Warnings for a deploy of ``manifest`` to a device reporting ``device_runtimes``; raises AgentError when the
    device's runtime is known not to read the bundle. Nothing to compare (an old bundle, an old agent): []."""
    backend = manifest.get("backend", "")
    built = (manifest.get("runtime") or {}).get("version")
    if not device_runtimes or backend not in device_runtimes or not built:
        return []
    have = device_runtimes.get(backend)
    if not have:
        return []  # missing runtime: the install's own check names it and how to get it
    b, d = parse_version(built), parse_version(have)
    if b is None or d is None or b == d:
        return []
    package = INSTALL.get(backend, backend)
    suffix = "." + str(manifest.get("model", "")).rsplit(".", 1)[-1]
    why = NEWER_ONLY.get((backend, suffix))
    if why and d < b:
        raise AgentError(
            f"{where} runs {package} {have}, older than {built}, which built and checked this bundle, and {why}: "
            f"install {package}=={built} (or newer) in the device's Python (`pip install {package}=={built}`), "
            f"or rebuild with the device's version installed on this machine"
        )
    return [
        f"the bundle was built and checked with {package} {built}; {where} runs {have}: its fidelity and speed "
        f"were measured on {built} (install {package}=={built} on the device to run what was checked)"
    ]


__all__ = ["check", "parse_version"]
