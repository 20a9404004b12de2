"""What a build is asked to do, in one object: :func:`edgekit.build` takes these as keyword arguments.

Each field is one ``edgekit build`` flag (docs/CLI.md); the builder, the cache key and the report read them from
here, so a new option is one field, one flag and the code that uses it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

PathLike = Union[str, Path]


@dataclass
class BuildOptions:
    """A build's options (everything but the model, the profile and the output directory)."""

    backend: str = "ort"
    precision: Optional[str] = "auto"  # auto: what the profile runs fast
    calib: Optional[PathLike] = None  # calibration data (.npz/.npy, a folder of images or of .npz, .jsonl)
    val: Optional[PathLike] = None  # fidelity data (default: the calibration data)
    preprocess: Optional[str] = None  # image preprocessing for an image folder
    input_shapes: Any = None  # {input: [dims]} or ["NAME=D1,D2"]; a dimension may be a range or a set
    name: Optional[str] = None  # the model's name on the device (default: the file's stem)
    min_cosine: Optional[float] = None
    min_top1: Optional[float] = None
    max_accuracy_drop: Optional[float] = None
    min_score: Optional[float] = None  # the task metric's gate
    allow_degraded: bool = False  # write a build that fails its gate, marked as such
    use_cache: bool = True
    log: Optional[Callable[[str], None]] = None
    budget: Any = None  # --budget: "1pt", "cos=0.999", "score=0.99", "map50=1pt" or a Budget
    prune: Any = None
    prune_mode: Optional[str] = None
    prune_recipe: Optional[PathLike] = None
    task: Any = None  # "detection:yolov8,conf=0.25" or a TaskSpec; inferred when None
    metric: Optional[str] = None  # "module:function", a user metric in the gate
    stream: Any = None  # {"state": "stateN"} or ["state=stateN"]: outputs fed back as inputs
    sample_axes: Any = None  # {input: axis} or ["state=1"]
    input_values: Any = None  # {input: value} or ["sr=16000"]
    keep_head_float: bool = True  # int8: a detector's or segmenter's decoder tail may stay float
    example_inputs: Any = None  # a PyTorch model: (tensor, ...) its forward takes (edgekit.intake_torch)
    dynamic_shapes: Any = None  # a PyTorch model: torch.export's dynamic_shapes ({input: {axis: Dim}})
    exported: Any = None  # set by edgekit.intake: the PyTorch original the ONNX model was exported from

    @classmethod
    def of(cls, options: Optional["BuildOptions"] = None, **changes: Any) -> "BuildOptions":
        """``options`` (or the defaults) with ``changes``; an unknown name is a TypeError naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown build option(s) {unknown}; the options are: {', '.join(sorted(known))}")
        return dataclasses.replace(options or cls(), **changes)

    def replace(self, **changes: Any) -> "BuildOptions":
        return BuildOptions.of(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def names() -> List[str]:
    """The option names, as :func:`edgekit.build` takes them."""
    return [f.name for f in dataclasses.fields(BuildOptions)]
