"""What a build starts from: an ONNX file (the ordinary path), a PyTorch model (exported here, the export judged
against the original: :mod:`edgekit.intake_torch`), a TensorFlow SavedModel or Keras file (TensorFlow's TFLite
converter or tf2onnx, in a tool environment: :mod:`edgekit.intake_tf`), a Paddle inference model (``opt`` or
paddle2onnx, in the paddlelite tool environment, or, for Paddle 3's JSON format, paddle2onnx 2 in the paddle3 one:
:mod:`edgekit.intake_paddle`) or a ``.tflite`` deployed as given
(:mod:`edgekit.intake_tflite`). docs/INTAKE.md says what comes in, how, and what is checked.

An exported model handed to the ONNX build (``opts.exported``) is any object with: ``onnx_path`` (the ONNX file),
``name`` (the bundle's default name), ``section`` (the report's ``export`` section: ``framework``, ``from``,
``exporter``, ``opset`` and ``reference``, what runs the original, at least), ``workdir`` (removed after the build)
and ``run(samples) -> outputs`` (the original on the build's samples, outputs by the ONNX model's output names).
"""

from __future__ import annotations

import shutil
from typing import Any, Callable, Dict, List, Protocol, Sequence

import numpy as np

from . import bundle as bundle_mod
from . import fidelity, intake_paddle, intake_tf, intake_tflite, intake_torch, progress
from .build_options import BuildOptions
from .errors import ModelError
from .model import parse_input_shapes

BuildOnnx = Callable[[Any, BuildOptions], Dict[str, Any]]


class ExportedModel(Protocol):
    """An ONNX model exported from another framework's model, and what runs the original (see the module doc)."""

    onnx_path: Any
    name: str
    section: Dict[str, Any]
    workdir: Any

    def run(self, samples: Sequence[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]: ...


def build(model: Any, profile: Any, output: Any, opts: BuildOptions, build_onnx: BuildOnnx) -> Dict[str, Any]:
    """Build ``model`` whatever it is: ``build_onnx(onnx_model, opts)`` does the ordinary build."""
    if intake_tflite.is_tflite(model):
        return intake_tflite.build_given(model, profile, output, opts)
    tf_kind = intake_tf.kind_of(model)
    if tf_kind is not None:
        return _build_tf(model, tf_kind, profile, output, opts, build_onnx)
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
    return _build_exported(exported, shapes, opts, build_onnx)


def _build_tf(
    model: Any, kind: str, profile: Any, output: Any, opts: BuildOptions, build_onnx: BuildOnnx
) -> Dict[str, Any]:
    if opts.example_inputs is not None or opts.dynamic_shapes is not None:
        raise ModelError(
            "example_inputs and dynamic_shapes are for a PyTorch model; a TensorFlow model's shapes come from its "
            "signature, its dynamic dimensions declared with input_shapes (--input-shape)"
        )
    if opts.backend == "tflite":
        return intake_tf.build_tflite(model, kind, profile, output, opts)
    bundle_mod.check_output(output)
    shapes = opts.input_shapes
    if isinstance(shapes, (list, tuple)):
        shapes = parse_input_shapes(shapes)
    exported = intake_tf.export(model, kind, shapes, opts.log or (lambda m: None))
    return _build_exported(exported, shapes, opts, build_onnx)


def _build_exported(exported: Any, shapes: Any, opts: BuildOptions, build_onnx: BuildOnnx) -> Dict[str, Any]:
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
    """The export step, judged first: the original model (PyTorch, TensorFlow) run on the build's fidelity samples
    against the exported ONNX model's outputs; recorded as the first of ``fidelity.steps``. Returns the ``export``
    section."""
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
