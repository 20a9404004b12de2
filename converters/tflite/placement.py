"""Placement for TFLite: the GPU delegate's documented op list (with versions); the ops of a reduced build."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgekit import support_tables as st
from edgekit.placement_targets import _accelerator_name, _target

if TYPE_CHECKING:
    from pathlib import Path

    from edgekit.profiles import Profile


def tflite_targets(nodes: list[dict[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    """TFLite GPU delegate from its documented op list (the tflite backend's ops carry versions)."""
    if not profile.data.get("accelerators"):
        return []
    table = st.load("tflite_gpu")
    device = (
        _accelerator_name(profile, "opencl")
        or _accelerator_name(profile, "metal")
        or _accelerator_name(profile, "opengl-es")
    )
    verdicts = [st.check_op_list(table, n) for n in nodes]
    return [
        _target("TFLite GPU delegate", device, "tflite_gpu.toml (documented op list)", nodes, verdicts, st.cite(table))
    ]


def _write_tflite(bundle_dir: Path, manifest: dict[str, Any], out: Path) -> list[Path]:
    """TFLite: the op list with versions (TFLite's selective build reads the .tflite model itself)."""
    lines = []
    for o in manifest.get("ops", []):
        versions = o.get("versions") or ([o["version"]] if o.get("version") is not None else [])
        lines.append(o["op"] + (" " + ",".join(f"v{v}" for v in versions) if versions else ""))
    (out / "ops.txt").write_text("".join(f"{line}\n" for line in sorted(lines)))
    (out / "README.txt").write_text(
        "TFLite (LiteRT) selective build\n\n"
        "TFLite's selective build reads the model file itself, e.g.\n"
        f"  bash tensorflow/lite/tools/build_aar.sh --input_models={manifest['model']} --target_archs=arm64-v8a\n"
        "ops.txt lists the builtin ops with the versions the model needs.\n"
    )
    return [out / "ops.txt", out / "README.txt"]


def targets(kind: str, graph: Any, nodes: list[dict[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    return tflite_targets(nodes, profile) if kind not in ("onnx", "openvino") else []


SELECTIVE_BUILD = ("TFLite", "tflite", _write_tflite)
PLAN = "ops.txt (builtin ops with versions); TFLite's build_aar.sh --input_models reads the model itself"
