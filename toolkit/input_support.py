"""What a backend's runtime does with inputs that are not float tensors, and the error when it cannot run them.

Each backend was tried at FP32 with int64 token ids, bool masks and 0-d scalars (docs/INPUTS.md has the table).
A runtime that fails on a built model says it as a :class:`~edgekit.errors.ConversionError` naming the backend,
the step, the model's non-float and 0-d inputs, and what to do; never as the runtime's traceback.
"""

from __future__ import annotations

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


def cannot_run(backend: str, step: str, specs: list[Any], error: BaseException, precision: str = "") -> str:
    """The message for a built model its runtime fails to run on the fidelity samples."""
    first = str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
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
