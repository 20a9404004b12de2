"""PyTorch in: an ``nn.Module`` (with example inputs), an ExportedProgram ``.pt2`` or a TorchScript ``.pt``, exported
to ONNX in this Python, with the original kept to judge the export.

The exporter is ``torch.onnx.export(dynamo=True)`` (torch.export, then onnxscript); a TorchScript file, which
torch.export does not take, goes through the TorchScript-based exporter (``dynamo=False``), as does a module the
dynamo exporter fails on (the report says why). The ONNX model is then an ordinary edgekit reference; the export
step is judged by running the original module on the build's own fidelity samples (:func:`export_step`).
"""

from __future__ import annotations

import inspect
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import shapes as shapes_mod
from .errors import ConversionError, ModelError

SUFFIXES = (".pt", ".pt2", ".pth")
OPSET = 18  # the dynamo exporter's lowest; within what every converter here reads (IR 10 keeps opsets <= 21)
TORCHSCRIPT_OPSET = 17
INSTALL = "pip install 'edgekit[torch]'"


@dataclass
class Exported:
    """An ONNX model exported from a PyTorch source, and what runs the original."""

    onnx_path: Path
    name: str  # the bundle's default name
    section: Dict[str, Any]  # the report's ``export`` section (the step's numbers are added by export_step)
    run: Callable[[Sequence[Dict[str, np.ndarray]]], List[Dict[str, np.ndarray]]] = field(repr=False)
    workdir: Path = field(repr=False)


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


def export(
    model: Any,
    example_inputs: Any,
    dynamic_shapes: Any,
    input_shapes: Optional[Dict[str, list]],
    log: Callable[[str], None],
) -> Exported:
    """Export ``model`` to ONNX in a temporary folder (``Exported.workdir``, the caller removes it)."""
    torch = import_torch()
    module, kind, name, sha = _load(torch, model)
    names = _input_names(torch, module, kind)
    args, declared_dynamic = _example_args(torch, module, kind, names, example_inputs, input_shapes)
    if dynamic_shapes is None and declared_dynamic:
        dynamic_shapes = {
            n: {i: torch.export.Dim(f"{n}_{i}", min=lo, max=hi) for i, (lo, hi) in d.items()}
            for n, d in declared_dynamic.items()
        }
    call = module.module() if kind == "ExportedProgram" else module
    with torch.no_grad():
        try:
            reference = _flat(torch, call(*args))
        except Exception as e:  # the module's own error: a wrong shape or dtype of an example input
            raise ModelError(
                f"the model fails on its example inputs ({_shapes_text(names, args)}): {type(e).__name__}: "
                f"{_first(e)}; give example inputs the model's forward takes (example_inputs=(tensor, ...), or "
                "--input-shape NAME=D1,D2,... for each input of a file)"
            ) from None
    del reference
    work = Path(tempfile.mkdtemp(prefix="edgekit-export-"))
    try:
        return _export_in(torch, model, module, kind, name, sha, names, args, dynamic_shapes, call, work, log)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _export_in(
    torch: Any,
    model: Any,
    module: Any,
    kind: str,
    name: str,
    sha: Optional[str],
    names: List[str],
    args: tuple,
    dynamic_shapes: Any,
    call: Any,
    work: Path,
    log: Callable[[str], None],
) -> Exported:
    path = work / f"{name}.onnx"
    with warnings.catch_warnings(record=True) as caught:  # the exporters' own notices: counted in the report
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        fallback = None
        if kind == "TorchScript":
            exporter, opset = "torch.onnx.export(dynamo=False), the TorchScript-based exporter", TORCHSCRIPT_OPSET
            _export_torchscript(torch, module, args, names, dynamic_shapes, path, opset)
            fallback = (
                "a TorchScript module cannot be exported by torch.export (dynamo); the TorchScript exporter took it"
            )
        else:
            exporter, opset = "torch.onnx.export(dynamo=True): torch.export, then onnxscript", OPSET
            try:
                _export_dynamo(torch, module, args, dynamic_shapes, path)
            except Exception as e:
                reason = _first(e)
                log(f"the dynamo exporter failed ({reason}): trying the TorchScript-based exporter")
                try:
                    _export_torchscript(torch, call, args, names, dynamic_shapes, path, TORCHSCRIPT_OPSET)
                except Exception as e2:
                    raise unsupported_op(torch, call, args, e, e2) from None
                exporter, opset = "torch.onnx.export(dynamo=False), the TorchScript-based exporter", TORCHSCRIPT_OPSET
                fallback = f"the dynamo exporter failed: {reason}"
    seconds = round(time.perf_counter() - t0, 2)
    log(f"exported {name} ({kind}) to ONNX opset {opset} in {seconds:.1f} s")
    section: Dict[str, Any] = {
        "from": kind,
        "file": None if sha is None else str(model),
        "sha256": sha,
        "exporter": exporter,
        "torch": torch.__version__,
        "onnxscript": _version("onnxscript"),
        "opset": opset,
        "dynamic_dims": _dims_text(dynamic_shapes),
        "example_inputs": {
            n: {"shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")} for n, a in zip(names, args)
        },
        "export_seconds": seconds,
        "exporter_warnings": len(caught),
        **({"fallback": fallback} if fallback else {}),
    }

    def run(samples: Sequence[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
        import onnx

        outs = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
        ins = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
        results = []
        with torch.no_grad():
            for s in samples:
                flat = _flat(torch, call(*[torch.from_numpy(np.ascontiguousarray(s[n])) for n in ins]))
                results.append(dict(zip(outs, flat)))
        return results

    return Exported(onnx_path=path, name=name, section=section, run=run, workdir=work)


def _load(torch: Any, model: Any) -> Tuple[Any, str, str, Optional[str]]:
    """(the module or program, its kind, a name, the file's sha256 or None)."""
    if not isinstance(model, (str, Path)):
        kind = "ExportedProgram" if type(model).__name__ == "ExportedProgram" else "nn.Module"
        if isinstance(model, torch.jit.ScriptModule):
            kind = "TorchScript"
        return (model.eval() if kind != "ExportedProgram" else model), kind, type(model).__name__.lower(), None
    from .model import file_sha256

    path = Path(model)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    sha = file_sha256(path)
    if path.suffix.lower() == ".pt2":
        try:
            return torch.export.load(str(path)), "ExportedProgram", path.stem, sha
        except Exception as e:
            raise ModelError(f"{path} is not an ExportedProgram torch.export.load reads: {_first(e)}") from None
    try:
        return torch.jit.load(str(path), map_location="cpu").eval(), "TorchScript", path.stem, sha
    except Exception as e:
        raise ModelError(
            f"{path} is not a TorchScript file torch.jit.load reads ({_first(e)}): a .pt/.pth of weights alone "
            "(a state_dict, or a pickled module) is not a model edgekit can load; save it with "
            "torch.export.save (.pt2) or torch.jit.save, or pass the nn.Module to edgekit.build with example_inputs"
        ) from None


def _input_names(torch: Any, module: Any, kind: str) -> List[str]:
    if kind == "ExportedProgram":
        return list(module.graph_signature.user_inputs)
    if kind == "TorchScript":
        return [a.name for a in module.forward.schema.arguments[1:]]
    params = inspect.signature(module.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _example_args(
    torch: Any, module: Any, kind: str, names: List[str], given: Any, input_shapes: Optional[Dict[str, list]]
) -> Tuple[tuple, Dict[str, Dict[int, Tuple[int, int]]]]:
    """The example inputs (given, the ExportedProgram's own, or float32 zeros of ``--input-shape``) and the
    dimensions ``--input-shape`` declares as ranges or sets: ``{input: {axis: (min, max)}}``."""
    dynamic: Dict[str, Dict[int, Tuple[int, int]]] = {}
    if given is not None:
        args = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        bad = [type(a).__name__ for a in args if not isinstance(a, torch.Tensor)]
        if bad:
            raise ModelError(f"example_inputs must be torch tensors, one per input of forward; got {bad}")
        return args, dynamic
    if input_shapes:
        unknown = sorted(set(input_shapes) - set(names))
        if unknown:
            raise ModelError(f"--input-shape names {unknown} but the model's inputs are {names}")
        missing = [n for n in names if n not in input_shapes]
        if missing and kind != "ExportedProgram":
            raise ModelError(f"give --input-shape for every input of the model: {missing} missing (inputs: {names})")
        if not missing:
            dims: Dict[str, List[int]] = {}
            for n in names:
                dims[n] = []
                for i, d in enumerate(input_shapes[n]):
                    d = shapes_mod.as_decl(d)
                    if isinstance(d, int):
                        dims[n].append(d)
                    elif d is None:
                        raise ModelError(f"--input-shape {n}: give every dimension a size, a range or a set")
                    else:
                        values = d.values()
                        dynamic.setdefault(n, {})[i] = (values[0], values[-1])
                        dims[n].append(max(values[1], 2))  # torch specialises a dynamic size given as 1
            return tuple(torch.zeros(dims[n]) for n in names), dynamic
    if kind == "ExportedProgram" and module.example_inputs is not None:
        args, kwargs = module.example_inputs
        return tuple(args), dynamic
    raise ModelError(
        f"the model's inputs {names} need example inputs to be exported: example_inputs=(tensor, ...) in Python, "
        f"or --input-shape NAME=D1,D2,... for each (float32); a .pt2 saved with its example inputs needs neither"
    )


def _export_dynamo(torch: Any, module: Any, args: tuple, dynamic_shapes: Any, path: Path) -> None:
    program = torch.onnx.export(
        module,
        args,
        dynamic_shapes=dynamic_shapes,
        dynamo=True,
        opset_version=OPSET,
        verbose=False,
        optimize=True,
        external_data=False,
    )
    program.save(str(path), external_data=False)


def _export_torchscript(
    torch: Any, module: Any, args: tuple, names: List[str], dynamic_shapes: Any, path: Path, opset: int
) -> None:
    axes = None
    if isinstance(dynamic_shapes, dict):
        axes = {n: {int(i): f"{n}_{i}" for i in d} for n, d in dynamic_shapes.items() if isinstance(d, dict)}
    torch.onnx.export(
        module, args, str(path), dynamo=False, opset_version=opset, input_names=names, dynamic_axes=axes or None
    )


OP_PATTERNS = (
    r"(?:operator|aten op|op|OpOverload|function)[ :]+[`'\"]?([A-Za-z_][\w.]*::[\w.]+|aten\.[\w.]+|[\w]+\.[\w]+\.\w+)",
    r"([A-Za-z_]\w*::\w+)",
    r"((?:aten|[a-z_]\w*)\.\w+\.(?:default|\w+))",
)


def unsupported_op(
    torch: Any, module: Any, args: tuple, dynamo_error: Exception, ts_error: Exception
) -> ConversionError:
    """The error for a model neither exporter takes: the op, where it is in the model, and the options."""
    text = f"{_first(dynamo_error)}\n{_first(ts_error)}\n{dynamo_error}\n{ts_error}"
    op = next((m.group(1) for p in OP_PATTERNS for m in [re.search(p, text)] if m), None)
    where = _module_path(torch, module, args, op) if op else None
    what = f"the operator {op}" if op else "an operator"
    at = f" (at {where})" if where else ""
    return ConversionError(
        f"PyTorch's ONNX exporters cannot export {what}{at}: dynamo: {_first(dynamo_error)}; TorchScript exporter: "
        f"{_first(ts_error)}. Options: a newer opset or torch (the exporter may translate it there); a custom "
        "translation (torch.onnx.export(custom_translation_table={op: onnxscript function}) for dynamo, "
        "torch.onnx.register_custom_op_symbolic for the TorchScript exporter), then build the .onnx you export; "
        "or replace the op in the module with ones ONNX has"
    )


def _module_path(torch: Any, module: Any, args: tuple, op: str) -> Optional[str]:
    """Where ``op`` is called in ``module``, from torch.export's record of the module stack."""
    try:
        program = torch.export.export(module, args)
    except Exception:
        return None
    short = op.replace("::", ".").split(".")
    for node in program.graph.nodes:
        target = str(getattr(node, "target", ""))
        if node.op == "call_function" and all(part in target for part in short[:2]):
            stack = node.meta.get("nn_module_stack") or {}
            paths = [p for p, _ in stack.values() if p]
            cls = list(stack.values())[-1][1] if stack else None
            name = getattr(cls, "__name__", None) or (str(cls).split(".")[-1].strip("'>") if cls else "")
            return f"module {paths[-1]} ({name})" if paths else "the top-level module's forward"
    return None


def _flat(torch: Any, out: Any) -> List[np.ndarray]:
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    return [t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in leaves]


def _dims_text(dynamic_shapes: Any) -> Dict[str, Any]:
    if not isinstance(dynamic_shapes, dict):
        return {} if dynamic_shapes is None else {"given": str(dynamic_shapes)}
    out: Dict[str, Any] = {}
    for n, d in dynamic_shapes.items():
        if isinstance(d, dict):
            out[n] = {str(i): str(getattr(dim, "__name__", dim)) for i, dim in d.items()}
        elif d is not None:
            out[n] = str(d)
    return out


def _shapes_text(names: List[str], args: tuple) -> str:
    return ", ".join(
        f"{n}: {list(getattr(a, 'shape', []))} {str(getattr(a, 'dtype', type(a).__name__))}"
        for n, a in zip(names, args)
    )


def _version(package: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _first(e: BaseException) -> str:
    """The first line of the root cause (torch.onnx wraps the translator's error in a generic 'step 3/3' one)."""
    while e.__cause__ is not None and e.__cause__ is not e:
        e = e.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:400]


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
