"""Paddle Lite's reduced build: the tailoring lists ``opt`` recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgekit.errors import BundleError

if TYPE_CHECKING:
    from pathlib import Path


def _write_paddlelite(bundle_dir: Path, manifest: dict[str, Any], out: Path) -> list[Path]:
    """Paddle Lite: the tailoring lists ``opt --record_tailoring_info=true`` wrote, under the names its build reads.

    The bundle carries them as ``tailored_ops`` / ``tailored_kernels`` files (the agent refuses
    file names with a leading dot); Paddle Lite's build script wants ``.tailored_ops_list`` and
    ``.tailored_kernels_list`` in the directory given as ``--opt_model_dir``.
    """
    import shutil

    wanted = {"tailored_ops": ".tailored_ops_list", "tailored_kernels": ".tailored_kernels_list"}
    found = [
        (bundle_dir / f["name"], wanted[f["role"]])
        for f in manifest.get("files", [])
        if f.get("role") in wanted and (bundle_dir / f["name"]).is_file()
    ]
    if not found:
        raise BundleError(
            f"bundle {bundle_dir} has no Paddle Lite tailoring lists (files with roles "
            f"{', '.join(wanted)}); rebuild it with this edgekit (opt --record_tailoring_info=true)"
        )
    for src, name in found:
        shutil.copyfile(src, out / name)
    (out / "README.txt").write_text(
        "Paddle Lite tailored build (only the ops and kernels this model uses)\n\n"
        "  ./lite/tools/build_android.sh --with_strip=ON --opt_model_dir=THIS_DIR   # or build_linux.sh for ARM Linux\n"
    )
    return [out / name for _, name in found] + [out / "README.txt"]


SELECTIVE_BUILD = ("Paddle Lite", "paddlelite", _write_paddlelite)
PLAN = "Paddle Lite tailoring lists from opt --record_tailoring_info"
