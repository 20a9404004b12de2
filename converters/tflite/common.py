"""Shared by the TFLite backend's modules: its tool environment, the agent's runner module, probes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from edgekit.toolenvs import ToolEnvSpec

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np

    from edgekit.model import TensorSpec

TOOLS = Path(__file__).resolve().parent.parent / "tools"


IO_FILE = "io_layout.json"


# onnx2tf 2.x and every package it needs, as resolved together on Python 3.12 (no TensorFlow), all pinned
# and installed from wheels; ai-edge-quantizer 0.5.1 is the newest release that accepts onnx2tf's
# ai-edge-litert pin.
REQUIREMENTS = (
    "onnx2tf==2.6.9",
    "ai-edge-quantizer==0.5.1",
    "ai-edge-litert==2.1.2",
    "absl-py==2.5.1",
    "backports.strenum==1.2.8",
    "flatbuffers==25.12.19",
    "h5py==3.14.0",
    "immutabledict==4.3.1",
    "iniconfig==2.3.1",
    "litert-lm-builder==0.18.1",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "ml_dtypes==0.5.4",
    "mpmath==1.3.0",
    "numpy==2.2.6",
    "onnx-ir==1.1.0",
    "onnx==1.20.1",
    "onnxoptimizer==0.4.2",
    "onnxruntime==1.26.0",
    "onnxscript==0.6.2",
    "onnxsim==0.6.5",
    "opencv-python==4.13.0.92",
    "packaging==26.4",
    "pluggy==1.7.0",
    "protobuf==7.35.1",
    "psutil==5.9.5",
    "Pygments==2.21.0",
    "pytest==9.0.2",
    "rich==15.0.0",
    "scipy==1.18.1",
    "setuptools==81.0.0",
    "sne4onnx==2.0.1",
    "sng4onnx==2.0.1",
    "sympy==1.14.0",
    "tomli==2.5.0",
    "tqdm==4.67.1",
    "typing_extensions==4.16.0",
)


TOOLENV = ToolEnvSpec(
    name="tflite",
    pythons=("3.12", "3.13"),
    requirements=REQUIREMENTS,
    check="import onnx2tf, onnxsim, onnxruntime, ai_edge_quantizer, ai_edge_litert.interpreter",
    purpose="onnx2tf 2.x (ONNX -> TFLite without TensorFlow) and ai-edge-quantizer",
    env=(
        ("TQDM_DISABLE", "1"),
        ("TF_CPP_MIN_LOG_LEVEL", "2"),
        ("PIP_NO_INDEX", "1"),
        ("PIP_NO_INPUT", "1"),
        ("HF_HUB_OFFLINE", "1"),
    ),
)


def _runner_module() -> ModuleType:
    from edgekit_agent.runners import tflite

    return tflite


def _threads(threads: int | None) -> int:
    return threads or min(4, os.cpu_count() or 1)


def _structured_probe(specs: Sequence[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """One input per spec with spatial structure (gradients and waves differing per axis), so a wrong
    layout shows as a large error (random noise through global pooling hides it)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in s.shape]
        grids = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
        a = np.zeros(shape)
        for axis, g in enumerate(grids):
            a += np.sin((g + 1) * (0.37 + 0.23 * axis)) * (axis + 1) / len(shape)
        a += 0.05 * rng.standard_normal(shape)
        out[s.name] = a.astype(s.dtype if s.dtype.startswith("float") else "float32")
    return out
