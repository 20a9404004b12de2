"""A PyTorch file (``.pt2``, TorchScript ``.pt``) exported in the ``torch`` tool environment (:data:`TOOLENV`,
created on first use): where torch is not importable in edgekit's own Python, or ``EDGEKIT_TORCH=toolenv``.

``converters/tools/torch_export.py`` (the code :mod:`edgekit.intake_torch` runs in this Python) runs there twice:
once to export, once to run the original on the build's fidelity samples for the export step.

Versions: torch 2.13.0 with onnxscript 0.7.2 and onnx 1.23.2 on Python 3.11, every package pinned, wheels only.
Where a CPU build of torch 2.13.0 is on pip's index (PyTorch's CPU index, or a local wheel) pip takes it (about
200 MB); PyPI's own Linux x86_64 torch is a CUDA build that pulls several GB of NVIDIA libraries (not pinned here):
``edgekit backends install torch`` creates the environment ahead of a build.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .errors import BackendUnavailable, ConversionError, ModelError
from .intake_torch import Exported, io_names, plain_shapes
from .toolenvs import ToolEnvSpec

# torch 2.13.0 and the exporter's packages with every dependency, as resolved together on Python 3.11 (x86_64)
REQUIREMENTS = (
    "torch==2.13.0",
    "onnxscript==0.7.2",
    "onnx==1.23.2",
    "onnx-ir==1.1.0",
    "numpy==2.4.6",
    "ml_dtypes==0.7.0",
    "protobuf==7.36.2",
    "packaging==26.4",
    "typing_extensions==4.16.0",
    "filelock==4.3.1",
    "fsspec==2026.9.0",
    "Jinja2==3.1.6",
    "MarkupSafe==3.0.4",
    "mpmath==1.3.0",
    "networkx==3.6.1",
    "sympy==1.14.0",
    "setuptools==84.2.1",
)

TOOLENV = ToolEnvSpec(
    name="torch",
    pythons=("3.11", "3.12", "3.13"),
    requirements=REQUIREMENTS,
    check="import torch, onnxscript, onnx",
    purpose=(
        "torch 2.13 and onnxscript: PyTorch .pt2/.pt intake where torch is not in this Python (a CPU torch where "
        "pip's index has one; PyPI's Linux torch is a CUDA build of several GB)"
    ),
    env=(("CUDA_VISIBLE_DEVICES", ""), ("PIP_NO_INPUT", "1")),
)
WHERE = " (torch tool environment)"


def call(request: Dict[str, Any], work: Path, log: Any) -> Dict[str, Any]:
    """Run one action of ``torch_export.py`` in the torch environment (created here on first use)."""
    from . import toolenvs
    from .converters.tflite.common import TOOLS

    try:
        res = toolenvs.run_tool(TOOLENV, TOOLS / "torch_export.py", request, work, log=log)
    except BackendUnavailable as e:
        raise BackendUnavailable(
            f"a PyTorch file without torch in this Python is exported in the torch tool environment, which could not "
            f"be created: {e}\n(create it ahead with `edgekit backends install torch`, or install torch here: "
            "pip install 'edgekit[torch]')"
        ) from None
    err = res.get("error")
    if err:
        raise (ModelError if err.get("kind") == "usage" else ConversionError)(err["message"])
    return res


def export(
    model: Any,
    example_inputs: Any,
    dynamic_shapes: Any,
    input_shapes: Optional[Dict[str, list]],
    log: Callable[[str], None],
) -> Exported:
    """``torch_export.py`` in the torch environment: ``Exported`` (its ``run`` runs the original there)."""
    from .model import file_sha256

    if example_inputs is not None or dynamic_shapes is not None:
        raise ModelError(
            "example_inputs and dynamic_shapes are torch objects, taken where torch runs in this Python; a file "
            "exported in the torch tool environment takes --input-shape (input_shapes), ranges included"
        )
    path = Path(model).resolve()
    if not path.is_file():
        raise ModelError(f"model file not found: {model}")
    sha = file_sha256(path)
    work = Path(tempfile.mkdtemp(prefix="edgekit-torch-export-"))
    try:
        name = path.stem
        onnx_path = work / f"{name}.onnx"
        request = {
            "action": "export",
            "model": str(path),
            "input_shapes": plain_shapes(input_shapes),
            "output": str(onnx_path),
            "step": "PyTorch export",
        }
        res = call(request, work / "export", log)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    v = res["versions"]
    log(f"exported {name} ({res['kind']}) to ONNX opset {res['opset']} in the torch tool environment")
    head, sep, tail = res["exporter"].partition(":")
    section: Dict[str, Any] = {
        "from": res["kind"],
        "file": str(model),
        "sha256": sha,
        "exporter": f"{head}{WHERE}{sep}{tail}",
        "torch": v["torch"],
        "onnxscript": v.get("onnxscript"),
        "opset": res["opset"],
        "dynamic_dims": res["dynamic_dims"],
        "example_inputs": res["example_inputs"],
        "export_seconds": res["export_seconds"],
        "exporter_warnings": res["exporter_warnings"],
        **({"fallback": res["fallback"]} if "fallback" in res else {}),
        "reference": f"PyTorch {v['torch']} running the original model{WHERE}",
        "tool_environment": f"torch (Python {v.get('python')})",
    }

    def run(samples: Sequence[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
        from .intake_tf import load_outputs, save_samples

        ins, outs = io_names(onnx_path)
        save_samples(work / "samples.npz", ins, samples)
        req = {
            "action": "run",
            "model": str(path),
            "inputs": ins,
            "samples": str(work / "samples.npz"),
            "outputs_npz": str(work / "original.npz"),
            "step": "PyTorch original",
        }
        call(req, work / "run", log)
        return load_outputs(work / "original.npz", outs, len(samples))

    return Exported(onnx_path=onnx_path, name=name, section=section, run=run, workdir=work)
