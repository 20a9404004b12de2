"""What a build starts from: an ONNX file (the ordinary path), a PyTorch model (exported here, the export judged
against the original: :mod:`edgekit.intake_torch`) or a ``.tflite`` deployed as given (:mod:`edgekit.intake_tflite`).
docs/INTAKE.md says what comes in, how, and what is checked.
"""

from __future__ import annotations

import shutil
from typing import Any, Callable, Dict, List

from . import bundle as bundle_mod
from . import fidelity, intake_paddle, intake_tflite, intake_torch, progress
from .build_options import BuildOptions
from .errors import ModelError
from .model import parse_input_shapes

BuildOnnx = Callable[[Any, BuildOptions], Dict[str, Any]]


def build(model: Any, profile: Any, output: Any, opts: BuildOptions, build_onnx: BuildOnnx) -> Dict[str, Any]:
    """Build ``model`` whatever it is: ``build_onnx(onnx_model, opts)`` does the ordinary build."""
    if intake_tflite.is_tflite(model):
        return intake_tflite.build_given(model, profile, output, opts)
    paddle = intake_paddle.is_paddle_source(model)
    if not paddle and not intake_torch.is_torch_source(model):
        if opts.example_inputs is not None or opts.dynamic_shapes is not None:
            raise ModelError(
                "example_inputs and dynamic_shapes are for a PyTorch model (an nn.Module, .pt2 or .pt); "
                "an ONNX model's shapes are declared with input_shapes"
            )
        return build_onnx(model, opts)
    bundle_mod.check_output(output)  # before the export's work
    shapes = opts.input_shapes
    if isinstance(shapes, (list, tuple)):
        shapes = parse_input_shapes(shapes)
    if paddle:
        exported: Any = intake_paddle.export(model, shapes, opts.log or (lambda m: None))
    else:
        exported = intake_torch.export(
            model, opts.example_inputs, opts.dynamic_shapes, shapes, opts.log or (lambda m: None)
        )
    try:
        if shapes is None and opts.dynamic_shapes is not None:
            shapes = intake_torch.declared_ranges(exported.onnx_path, opts.dynamic_shapes)
        sub = opts.replace(
            name=opts.name or exported.name,
            input_shapes=shapes,
            example_inputs=None,
            dynamic_shapes=None,
            exported=exported,
        )
        return build_onnx(exported.onnx_path, sub)
    finally:
        shutil.rmtree(exported.workdir, ignore_errors=True)


def record_export(p: Any, checker: Any, reference_outputs: List[dict]) -> Dict[str, Any]:
    """The export step, judged first: the original PyTorch model run on the build's fidelity samples against the
    exported ONNX model's outputs; recorded as the first of ``fidelity.steps``. Returns the ``export`` section."""
    exported = p.opts.exported
    section = dict(exported.section)
    if p.plan is not None:
        section["step"] = "not checked: stream builds feed sequences the original is not run on here"
        return section
    framework = section.get("framework", "PyTorch")
    with progress.of(p.log).step(f"running the original {framework} model on {len(p.fid_ds)} samples"):
        original = exported.run(p.fid_ds.samples)
    thresholds = fidelity.thresholds_for(
        "fp32", p.opts.min_cosine, p.opts.min_top1, p.opts.max_accuracy_drop, min_score=p.opts.min_score
    )
    step = (
        f"export ({framework} {section['from']} -> ONNX opset {section['opset']}, {section['exporter'].split(':')[0]})"
    )
    record = fidelity.check_step(
        step,
        original,
        reference_outputs,
        p.fid_ds.labels,
        thresholds,
        p.opts.allow_degraded,
        task=checker.judged_by,
        metric=p.user_metric,
    )
    record["reference"] = section.get("reference") or f"PyTorch {section['torch']} running the original model"
    checker.steps.insert(0, record)
    p.log(f"  {step}: {'ok' if record['passed'] else 'DEGRADED'} - {fidelity.summary(record)}")
    section["step"] = {k: record[k] for k in ("step", "samples", "passed", "failures", "outputs") if k in record}
    return section
