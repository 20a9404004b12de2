"""PyTorch in: an ``nn.Module`` (with example inputs), an ExportedProgram ``.pt2`` or a TorchScript ``.pt``, exported
to ONNX, with the original kept to judge the export.

Where torch runs: a live module in this Python (it is a torch object); a file in this Python when torch is importable
here, else in the ``torch`` tool environment (:mod:`edgekit.intake_torch_env`, created on first use).
``EDGEKIT_TORCH=toolenv`` sends files there even when torch is importable here; ``EDGEKIT_TORCH=here`` never does.
Both run the same code: ``converters/tools/torch_export.py``, imported here by path and run as a script there.

The exporter is ``torch.onnx.export(dynamo=True)`` (torch.export, then onnxscript); a TorchScript file, which
torch.export does not take, goes through the TorchScript-based exporter (``dynamo=False``), as does a module the
dynamo exporter fails on (the report says why). The ONNX model is then an ordinary edgekit reference; the export
step is judged by running the original module on the build's own fidelity samples
(:func:`edgekit.intake.record_export`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from . import shapes as shapes_mod
from .errors import ConversionError, ModelError

SUFFIXES = (".pt", ".pt2", ".pth")
INSTALL = "pip install 'edgekit[torch]'"
MODES = ("auto", "here", "toolenv")


@dataclass
class Exported:
    """An ONNX model exported from a PyTorch source, and what runs the original."""

    onnx_path: Path
    name: str  # the bundle's default name
    section: Dict[str, Any]  # the report's ``export`` section (the step's numbers are added by export_step)
    run: Callable[[Sequence[Dict[str, np.ndarray]]], List[Dict[str, np.ndarray]]] = field(repr=False)
    workdir: Path = field(repr=False)


@lru_cache(maxsize=None)
def core() -> Any:
    """``converters/tools/torch_export.py`` as a module: the torch code both places torch runs share."""
    from .converters.tflite.common import TOOLS

    spec = importlib.util.spec_from_file_location("edgekit_torch_export", TOOLS / "torch_export.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _export_dynamo(torch: Any, module: Any, args: tuple, dynamic_shapes: Any, path: str) -> None:
    core().export_dynamo(torch, module, args, dynamic_shapes, path)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """The shared code's errors as edgekit's: a bad model or input is a ModelError, an op no exporter takes a
    ConversionError."""
    c = core()
    try:
        yield
    except c.UsageError as e:
        raise ModelError(str(e)) from None
    except c.OpError as e:
        raise ConversionError(str(e)) from None


def is_torch_source(model: Any) -> bool:
    """A PyTorch file by its suffix, or a live nn.Module / ExportedProgram (found without importing torch)."""
    if isinstance(model, (str, Path)):
        return Path(model).suffix.lower() in SUFFIXES
    return any(
        c.__module__.startswith("torch") and c.__name__ in ("Module", "ExportedProgram") for c in type(model).__mro__
    )


def import_torch() -> Any:
    """torch, or a ModelError that says how to get it."""
    try:
        import torch
    except ImportError as e:
        raise missing_torch(str(e)) from None
    return torch


def missing_torch(detail: str) -> ModelError:
    return ModelError(
        f"a PyTorch model needs torch in this Python, and it is not importable ({detail}): {INSTALL} "
        "(torch and onnxscript, for the ONNX exporter), or export to ONNX yourself and build the .onnx file"
    )


def mode() -> str:
    """``EDGEKIT_TORCH``: where a PyTorch file is exported (auto: here when torch is importable)."""
    m = os.environ.get("EDGEKIT_TORCH", "auto").strip().lower() or "auto"
    if m not in MODES:
        raise ModelError(f"EDGEKIT_TORCH={m!r}: expected one of {', '.join(MODES)}")
    return m


def in_toolenv(model: Any) -> bool:
    """Whether ``model`` is exported in the torch tool environment: a file, forced there or without torch here."""
    if not isinstance(model, (str, Path)):
        return False
    m = mode()
    if m != "auto":
        return m == "toolenv"
    try:
        import torch  # noqa: F401
    except ImportError:
        return True
    return False


def plain_shapes(input_shapes: Optional[Dict[str, list]]) -> Optional[Dict[str, list]]:
    """``input_shapes`` with each dimension a size, None, or the sizes a declared range or set allows."""
    if not input_shapes:
        return input_shapes
    out: Dict[str, list] = {}
    for n, dims in input_shapes.items():
        out[n] = []
        for d in dims:
            d = shapes_mod.as_decl(d)
            out[n].append(d if d is None or isinstance(d, int) else list(d.values()))
    return out


def export(
    model: Any,
    example_inputs: Any,
    dynamic_shapes: Any,
    input_shapes: Optional[Dict[str, list]],
    log: Callable[[str], None],
) -> Exported:
    """Export ``model`` to ONNX in a temporary folder (``Exported.workdir``, the caller removes it)."""
    if in_toolenv(model):
        from . import intake_torch_env

        return intake_torch_env.export(model, example_inputs, dynamic_shapes, input_shapes, log)
    torch = import_torch()
    c = core()
    sha = None
    if isinstance(model, (str, Path)):
        from .model import file_sha256

        if not Path(model).is_file():
            raise ModelError(f"model file not found: {model}")
        sha = file_sha256(Path(model))
    with translated():
        module, kind, name = c.load(torch, str(model) if isinstance(model, Path) else model)
        names = c.input_names(torch, module, kind)
        args, declared = c.example_args(torch, module, kind, names, example_inputs, plain_shapes(input_shapes))
        if dynamic_shapes is None and declared:
            dynamic_shapes = c.dims_of(torch, declared)
        call = c.callable_of(module, kind)
        c.check_runs(torch, call, names, args)
    work = Path(tempfile.mkdtemp(prefix="edgekit-export-"))
    try:
        path = work / f"{name}.onnx"
        with translated():
            done = c.export_to(torch, module, kind, names, args, dynamic_shapes, str(path), log, dynamo=_export_dynamo)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log(f"exported {name} ({kind}) to ONNX opset {done['opset']} in {done['export_seconds']:.1f} s")
    section: Dict[str, Any] = {
        "from": kind,
        "file": None if sha is None else str(model),
        "sha256": sha,
        "exporter": done["exporter"],
        "torch": torch.__version__,
        "onnxscript": c.version("onnxscript"),
        "opset": done["opset"],
        "dynamic_dims": c.dims_text(dynamic_shapes),
        "example_inputs": c.example_text(names, args),
        "export_seconds": done["export_seconds"],
        "exporter_warnings": done["exporter_warnings"],
        **({"fallback": done["fallback"]} if "fallback" in done else {}),
    }

    def run(samples: Sequence[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
        ins, outs = io_names(path)
        return [dict(zip(outs, o)) for o in c.run_original(torch, call, [[s[n] for n in ins] for s in samples])]

    return Exported(onnx_path=path, name=name, section=section, run=run, workdir=work)


def io_names(onnx_path: Path) -> tuple:
    """(input names, output names) of an exported ONNX model."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    return [i.name for i in graph.input], [o.name for o in graph.output]


def declared_ranges(onnx_path: Path, dynamic_shapes: Any) -> Optional[Dict[str, list]]:
    """``input_shapes`` for the exported model from torch.export ``Dim``s with bounds (``Dim("b", min=1, max=8)``
    -> ``[1:8]``): the build keeps them dynamic and checks them at min/typical/max. Unbounded dims stay free."""
    import onnx

    if not isinstance(dynamic_shapes, dict):
        return None
    out: Dict[str, list] = {}
    for inp in onnx.load(str(onnx_path), load_external_data=False).graph.input:
        given = dynamic_shapes.get(inp.name)
        dims: list = []
        for i, dim in enumerate(inp.type.tensor_type.shape.dim):
            spec = given.get(i) if isinstance(given, dict) else None
            lo, hi = getattr(spec, "min", None), getattr(spec, "max", None)
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            elif isinstance(lo, int) and isinstance(hi, int) and hi < 1 << 16:
                dims.append(shapes_mod.parse_dim(f"[{max(lo, 1)}:{hi}]"))
            else:
                dims.append(None)
        out[inp.name] = dims
    return out
