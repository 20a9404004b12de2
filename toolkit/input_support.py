"""What a backend's runtime does with inputs that are not float tensors, and the error when it cannot run them.

Each backend was tried at FP32 with int64 token ids, bool masks and 0-d scalars (docs/INPUTS.md has the table).
A runtime that fails on a built model says it as a :class:`~edgekit.errors.ConversionError` naming the backend,
the step, the model's non-float and 0-d inputs, and what to do; never as the runtime's traceback.
"""

from __future__ import annotations

import re
from typing import Any

# measured at FP32 with int64 ids, a bool mask and a 0-d int64 input (tests/test_inputs_backends.py)
RUNS_NON_FLOAT = ("ort", "openvino", "mnn", "tflite", "mindspore-lite")


def describe_inputs(specs: list[Any]) -> list[str]:
    """``["src int64 [1, 12]", "sr int64 0-d"]``: the inputs a runtime may not take (non-float or 0-d)."""
    out = []
    for s in specs:
        if not s.dtype.startswith("float") or not s.shape:
            out.append(f"{s.name} {s.dtype} {list(s.shape) if s.shape else '0-d'}")
    return out


def _onnx_node(onnx_path: Any, name: str) -> str:
    """``" (the ONNX node 'Loop_12', Loop)"``: the source node a runtime's op name comes from (runtimes name an op
    after the node or after its first output); "" when none matches."""
    import onnx

    try:
        nodes = onnx.load(str(onnx_path), load_external_data=False).graph.node
    except Exception:
        return ""
    for n in nodes:
        if name == n.name or name in n.output:
            return f" (the ONNX node {n.name or n.output[0]!r}, {n.op_type})"
    return ""


def cannot_run(
    backend: str,
    step: str,
    specs: list[Any],
    error: BaseException,
    precision: str = "",
    onnx_path: Any = None,
) -> str:
    """The message for a built model its runtime fails to run on the fidelity samples; an op the runtime names is
    traced to the node of ``onnx_path`` (the source model) where one matches."""
    first = str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
    op = re.search(r"its op '([^']+)'", first)
    if op and onnx_path is not None:
        first = first.replace(op.group(0), op.group(0) + _onnx_node(onnx_path, op.group(1)), 1)
    special = describe_inputs(specs)
    if special and backend in RUNS_NON_FLOAT:
        kinds = (
            f" {backend} runs int64, bool and 0-d inputs such as this model's ({', '.join(special)}; docs/INPUTS.md), "
            "so the cause is more likely one of the model's operators as converted for this runtime."
        )
    elif special:
        kinds = (
            f" The model has inputs that are not float tensors or are 0-d ({', '.join(special)}): {backend} may not "
            "take them (or one of the model's nodes on them)."
        )
    else:
        kinds = ""
    other = "another backend" if precision == "fp32" else "another backend or precision (e.g. --precision fp32)"
    export = ", or export the model with float32/int32 inputs" if special else ""
    return (
        f"{backend} built '{step}' but its runtime cannot run it on the fidelity samples: {first}.{kinds} "
        f"Choose {other}: ort and openvino run every input kind and the most ONNX operators{export}. "
        "Nothing was written."
    )
