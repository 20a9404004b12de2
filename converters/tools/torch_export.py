"""PyTorch -> ONNX: what edgekit does with torch, shared by both places torch runs (standalone: no edgekit imports).

edgekit's own Python imports this file by path (:mod:`edgekit.intake_torch`) when torch is importable there; where it
is not, ``edgekit.toolenvs.run_tool`` runs it as a script in the ``torch`` tool environment
(:mod:`edgekit.intake_torch_env`), where edgekit is not installed and ``-I`` keeps this directory off ``sys.path``.
Every function takes ``torch`` as an argument, so importing the file imports nothing heavy.

Usage: python -I torch_export.py request.json result.json (cwd: a scratch work directory)

request: {"action": "export" | "run", "model": a .pt2 or TorchScript .pt file,
          "input_shapes": {input: [dim]} (a dim: a size, null, or the sizes a declared range or set allows),
          "output": the .onnx to write (export),
          "samples": npz of samples (run): key "<sample index>.<input index>", inputs in ``"inputs"``'s order,
          "inputs": input names (run), "outputs_npz": where the original's outputs go (same keys, by output index)}
result:  {"kind", "name", "inputs", "example_inputs", "exporter", "opset", "fallback", "dynamic_dims", "seconds",
          "exporter_warnings", "versions": {...}} or {"error": {"kind": "usage" | "op", "message": ...}}
"""

import inspect
import json
import re
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

OPSET = 18  # the dynamo exporter's lowest; within what every converter here reads (IR 10 keeps opsets <= 21)
TORCHSCRIPT_OPSET = 17
DYNAMO = "torch.onnx.export(dynamo=True): torch.export, then onnxscript"
TORCHSCRIPT = "torch.onnx.export(dynamo=False), the TorchScript-based exporter"


class UsageError(Exception):
    """The model or its inputs are not what the exporter needs (edgekit raises ModelError)."""


class OpError(Exception):
    """Neither exporter takes an operator of the model (edgekit raises ConversionError)."""


def log(msg: str) -> None:
    sys.__stderr__.write(msg + "\n")  # type: ignore[union-attr]
    sys.__stderr__.flush()  # type: ignore[union-attr]


def load(torch: Any, model: Any) -> Tuple[Any, str, str]:
    """(the module or program, its kind, a name) of a live model or a .pt2 / TorchScript file."""
    if not isinstance(model, str):
        kind = "ExportedProgram" if type(model).__name__ == "ExportedProgram" else "nn.Module"
        if isinstance(model, torch.jit.ScriptModule):
            kind = "TorchScript"
        return (model.eval() if kind != "ExportedProgram" else model), kind, type(model).__name__.lower()
    stem = re.sub(r"\.[^./]*$", "", model.replace("\\", "/").rsplit("/", 1)[-1])
    if model.lower().endswith(".pt2"):
        try:
            return torch.export.load(model), "ExportedProgram", stem
        except Exception as e:
            raise UsageError(f"{model} is not an ExportedProgram torch.export.load reads: {first(e)}") from None
    try:
        return torch.jit.load(model, map_location="cpu").eval(), "TorchScript", stem
    except Exception as e:
        raise UsageError(
            f"{model} is not a TorchScript file torch.jit.load reads ({first(e)}): a .pt/.pth of weights alone "
            "(a state_dict, or a pickled module) is not a model edgekit can load; save it with "
            "torch.export.save (.pt2) or torch.jit.save, or pass the nn.Module to edgekit.build with example_inputs"
        ) from None


def input_names(torch: Any, module: Any, kind: str) -> List[str]:
    if kind == "ExportedProgram":
        return list(module.graph_signature.user_inputs)
    if kind == "TorchScript":
        return [a.name for a in module.forward.schema.arguments[1:]]
    params = inspect.signature(module.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def example_args(
    torch: Any, module: Any, kind: str, names: List[str], given: Any, input_shapes: Optional[Dict[str, list]]
) -> Tuple[tuple, Dict[str, Dict[int, Tuple[int, int]]]]:
    """The example inputs (given, the ExportedProgram's own, or float32 zeros of ``--input-shape``) and the
    dimensions ``--input-shape`` declares as ranges or sets: ``{input: {axis: (min, max)}}``. A dimension of
    ``input_shapes`` is a size, None, or the list of sizes a range or set allows."""
    dynamic: Dict[str, Dict[int, Tuple[int, int]]] = {}
    if given is not None:
        args = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        bad = [type(a).__name__ for a in args if not isinstance(a, torch.Tensor)]
        if bad:
            raise UsageError(f"example_inputs must be torch tensors, one per input of forward; got {bad}")
        return args, dynamic
    if input_shapes:
        unknown = sorted(set(input_shapes) - set(names))
        if unknown:
            raise UsageError(f"--input-shape names {unknown} but the model's inputs are {names}")
        missing = [n for n in names if n not in input_shapes]
        if missing and kind != "ExportedProgram":
            raise UsageError(f"give --input-shape for every input of the model: {missing} missing (inputs: {names})")
        if not missing:
            dims: Dict[str, List[int]] = {}
            for n in names:
                dims[n] = []
                for i, d in enumerate(input_shapes[n]):
                    if isinstance(d, int):
                        dims[n].append(d)
                    elif d is None:
                        raise UsageError(f"--input-shape {n}: give every dimension a size, a range or a set")
                    else:
                        dynamic.setdefault(n, {})[i] = (d[0], d[-1])
                        dims[n].append(max(d[1], 2))  # torch specialises a dynamic size given as 1
            return tuple(torch.zeros(dims[n]) for n in names), dynamic
    if kind == "ExportedProgram" and module.example_inputs is not None:
        args, kwargs = module.example_inputs
        return tuple(args), dynamic
    raise UsageError(
        f"the model's inputs {names} need example inputs to be exported: example_inputs=(tensor, ...) in Python, "
        f"or --input-shape NAME=D1,D2,... for each (float32); a .pt2 saved with its example inputs needs neither"
    )


def dims_of(torch: Any, declared: Dict[str, Dict[int, Tuple[int, int]]]) -> Dict[str, Dict[int, Any]]:
    """torch.export ``Dim``s for the ranges ``--input-shape`` declares."""
    return {
        n: {i: torch.export.Dim(f"{n}_{i}", min=lo, max=hi) for i, (lo, hi) in d.items()} for n, d in declared.items()
    }


def callable_of(module: Any, kind: str) -> Any:
    return module.module() if kind == "ExportedProgram" else module


def check_runs(torch: Any, call: Any, names: List[str], args: tuple) -> None:
    """The model's own error on its example inputs (a wrong shape or dtype), as a UsageError."""
    with torch.no_grad():
        try:
            call(*args)
        except Exception as e:
            raise UsageError(
                f"the model fails on its example inputs ({shapes_text(names, args)}): {type(e).__name__}: "
                f"{first(e)}; give example inputs the model's forward takes (example_inputs=(tensor, ...), or "
                "--input-shape NAME=D1,D2,... for each input of a file)"
            ) from None


def export_to(
    torch: Any,
    module: Any,
    kind: str,
    names: List[str],
    args: tuple,
    dynamic_shapes: Any,
    path: str,
    say: Callable[[str], None],
    dynamo: Optional[Callable[..., None]] = None,
) -> Dict[str, Any]:
    """Export to ``path``: the dynamo exporter, the TorchScript one for a TorchScript module or where dynamo fails.
    Returns the report's ``exporter``, ``opset``, ``fallback``, ``export_seconds`` and ``exporter_warnings``."""
    call = callable_of(module, kind)
    fallback = None
    with warnings.catch_warnings(record=True) as caught:  # the exporters' own notices: counted in the report
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        if kind == "TorchScript":
            exporter, opset = TORCHSCRIPT, TORCHSCRIPT_OPSET
            export_torchscript(torch, module, args, names, dynamic_shapes, path, opset)
            fallback = (
                "a TorchScript module cannot be exported by torch.export (dynamo); the TorchScript exporter took it"
            )
        else:
            exporter, opset = DYNAMO, OPSET
            try:
                (dynamo or export_dynamo)(torch, module, args, dynamic_shapes, path)
            except Exception as e:
                reason = first(e)
                say(f"the dynamo exporter failed ({reason}): trying the TorchScript-based exporter")
                try:
                    export_torchscript(torch, call, args, names, dynamic_shapes, path, TORCHSCRIPT_OPSET)
                except Exception as e2:
                    raise OpError(unsupported_op(torch, call, args, e, e2)) from None
                exporter, opset = TORCHSCRIPT, TORCHSCRIPT_OPSET
                fallback = f"the dynamo exporter failed: {reason}"
    out: Dict[str, Any] = {
        "exporter": exporter,
        "opset": opset,
        "export_seconds": round(time.perf_counter() - t0, 2),
        "exporter_warnings": len(caught),
    }
    if fallback:
        out["fallback"] = fallback
    return out


def export_dynamo(torch: Any, module: Any, args: tuple, dynamic_shapes: Any, path: str) -> None:
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
    program.save(path, external_data=False)


def export_torchscript(
    torch: Any, module: Any, args: tuple, names: List[str], dynamic_shapes: Any, path: str, opset: int
) -> None:
    axes = None
    if isinstance(dynamic_shapes, dict):
        axes = {n: {int(i): f"{n}_{i}" for i in d} for n, d in dynamic_shapes.items() if isinstance(d, dict)}
    torch.onnx.export(
        module, args, path, dynamo=False, opset_version=opset, input_names=names, dynamic_axes=axes or None
    )


OP_PATTERNS = (
    r"(?:operator|aten op|op|OpOverload|function)[ :]+[`'\"]?([A-Za-z_][\w.]*::[\w.]+|aten\.[\w.]+|[\w]+\.[\w]+\.\w+)",
    r"([A-Za-z_]\w*::\w+)",
    r"((?:aten|[a-z_]\w*)\.\w+\.(?:default|\w+))",
)


def unsupported_op(torch: Any, module: Any, args: tuple, dynamo_error: Exception, ts_error: Exception) -> str:
    """What to say of a model neither exporter takes: the op, where it is in the model, and the options."""
    text = f"{first(dynamo_error)}\n{first(ts_error)}\n{dynamo_error}\n{ts_error}"
    op = next((m.group(1) for p in OP_PATTERNS for m in [re.search(p, text)] if m), None)
    where = module_path(torch, module, args, op) if op else None
    what = f"the operator {op}" if op else "an operator"
    at = f" (at {where})" if where else ""
    return (
        f"PyTorch's ONNX exporters cannot export {what}{at}: dynamo: {first(dynamo_error)}; TorchScript exporter: "
        f"{first(ts_error)}. Options: a newer opset or torch (the exporter may translate it there); a custom "
        "translation (torch.onnx.export(custom_translation_table={op: onnxscript function}) for dynamo, "
        "torch.onnx.register_custom_op_symbolic for the TorchScript exporter), then build the .onnx you export; "
        "or replace the op in the module with ones ONNX has"
    )


def module_path(torch: Any, module: Any, args: tuple, op: str) -> Optional[str]:
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


def flat(torch: Any, out: Any) -> List[Any]:
    import numpy as np

    leaves, _ = torch.utils._pytree.tree_flatten(out)
    return [t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in leaves]


def run_original(torch: Any, call: Any, feeds: List[List[Any]]) -> List[List[Any]]:
    """The original's flattened outputs on each sample (a list of numpy arrays, inputs in forward's order)."""
    import numpy as np

    with torch.no_grad():
        return [flat(torch, call(*[torch.from_numpy(np.ascontiguousarray(a)) for a in s])) for s in feeds]


def dims_text(dynamic_shapes: Any) -> Dict[str, Any]:
    if not isinstance(dynamic_shapes, dict):
        return {} if dynamic_shapes is None else {"given": str(dynamic_shapes)}
    out: Dict[str, Any] = {}
    for n, d in dynamic_shapes.items():
        if isinstance(d, dict):
            out[n] = {str(i): str(getattr(dim, "__name__", dim)) for i, dim in d.items()}
        elif d is not None:
            out[n] = str(d)
    return out


def example_text(names: List[str], args: tuple) -> Dict[str, Any]:
    return {n: {"shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")} for n, a in zip(names, args)}


def shapes_text(names: List[str], args: tuple) -> str:
    return ", ".join(
        f"{n}: {list(getattr(a, 'shape', []))} {str(getattr(a, 'dtype', type(a).__name__))}"
        for n, a in zip(names, args)
    )


def version(package: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def first(e: BaseException) -> str:
    """The first line of the root cause (torch.onnx wraps the translator's error in a generic 'step 3/3' one)."""
    while e.__cause__ is not None and e.__cause__ is not e:
        e = e.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:400]


def act(torch: Any, req: Dict[str, Any]) -> Dict[str, Any]:
    import numpy as np

    module, kind, name = load(torch, req["model"])
    result: Dict[str, Any] = {"kind": kind, "name": name}
    if req["action"] == "run":
        data = np.load(req["samples"])
        count = len({k.split(".")[0] for k in data.files})
        feeds = [[data[f"{i}.{j}"] for j in range(len(req["inputs"]))] for i in range(count)]
        outs = run_original(torch, callable_of(module, kind), feeds)
        np.savez(req["outputs_npz"], **{f"{i}.{j}": a for i, o in enumerate(outs) for j, a in enumerate(o)})
        return result
    names = input_names(torch, module, kind)
    args, declared = example_args(torch, module, kind, names, None, req.get("input_shapes"))
    dynamic = dims_of(torch, declared) if declared else None
    check_runs(torch, callable_of(module, kind), names, args)
    result.update(export_to(torch, module, kind, names, args, dynamic, req["output"], log))
    result.update(inputs=names, example_inputs=example_text(names, args), dynamic_dims=dims_text(dynamic))
    return result


def main() -> None:
    req = json.load(open(sys.argv[1]))
    import torch

    result: Dict[str, Any] = {}
    try:
        result = act(torch, req)
    except UsageError as e:
        result = {"error": {"kind": "usage", "message": str(e)}}
    except OpError as e:
        result = {"error": {"kind": "op", "message": str(e)}}
    result["versions"] = {
        "torch": torch.__version__,
        "onnxscript": version("onnxscript"),
        "python": "%d.%d.%d" % sys.version_info[:3],
    }
    with open(sys.argv[2], "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
