"""A build's first phase: everything checked and loaded before any work starts.

The profile and backend, the model with its shapes, the data (or synthetic samples), the precision, the gate's
thresholds, the budget and pruning settings, and the cache key: a bad option is refused here, before a temporary
directory or a runtime session exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from . import __version__, cache, converters, fidelity, profiles, shape_hints, shapes, tasks
from . import bundle as bundle_mod
from . import shape_checks as at
from . import stream as stream_mod
from .build_options import BuildOptions
from .data import Dataset, int8_needs_calibration, load_dataset, synthetic_dataset
from .data_formats import parse_input_values, parse_sample_axes
from .errors import DataError, ModelError, ProfileError
from .model import SourceModel, load_model, parse_input_shapes, quantized_nodes

FIDELITY_SAMPLES = 400
CACHE_EPOCH = 5  # bump when what a build writes changes, so older cached bundles are not reused
CALIB_SAMPLES = 256


@dataclass
class Prepared:
    """What :func:`prepare` checked and loaded: the rest of the build reads it."""

    opts: BuildOptions
    precision: str  # resolved (never "auto")
    prof: profiles.Profile
    be: Any  # the backend (edgekit.converters.base.Backend)
    src: SourceModel
    plan: Optional[stream_mod.StreamPlan]  # --stream
    calib_ds: Optional[Dataset]
    val_ds: Optional[Dataset]
    fid_ds: Dataset  # what fidelity is measured on: --val, else --calib, else synthetic
    runs: Any  # what runs a candidate on fid_ds: the backend, or a stream runner over it
    points: at.PointChecks  # the declared shapes besides the data's
    thresholds: fidelity.Thresholds
    user_metric: Any  # --metric
    budget: Any  # a prepared edgekit.passes.mixed_precision Budget, or None
    pruning: Optional[dict]
    bundle_name: str
    cache_key: str
    output: Path
    log: Callable[[str], None]
    specialised: Optional[dict] = None  # inputs fixed in the converted graph (edgekit.build_specialise)


def prepare(model: Any, profile: Any, output: Any, opts: BuildOptions) -> Prepared:
    """Check every option and load the model and data; raise an EdgekitError on bad input."""
    log = opts.log or (lambda msg: None)
    backend = opts.backend
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load(profile)
    be = converters.get(backend)
    be.ensure_available()
    input_shapes = opts.input_shapes
    if isinstance(input_shapes, (list, tuple)):
        input_shapes = parse_input_shapes(input_shapes)
    if backend not in prof.data["runtimes"]["ranked"]:
        raise ProfileError(
            f"profile {prof.name} does not run backend {backend!r}; "
            f"it runs: {', '.join(prof.data['runtimes']['ranked'])}"
        )
    bundle_mod.check_output(output)

    calib, val, preprocess = opts.calib, opts.val, opts.preprocess
    static = shapes.static_reason(backend, be.row.dynamic_shapes, prof.backend(backend))  # edgekit.shapes
    data_shapes = shape_hints.data_reader([] if opts.stream else [calib, val], preprocess)
    src = load_model(model, input_shapes, data_shapes, keep_dynamic=static is None, why_static=static)
    plan = stream_mod.plan(opts.stream, src)  # --stream: data as sequences, each candidate run with its own state
    data_opts = {
        "sample_axes": parse_sample_axes(opts.sample_axes),
        "input_values": parse_input_values(opts.input_values),
    }
    if plan and (data_opts["sample_axes"] or data_opts["input_values"]):
        raise DataError(
            "--sample-axis and --input-value do not apply to --stream data: a sequence's .npz holds each constant "
            "input once (docs/STREAMS.md)"
        )
    specs = at.data_specs(src)

    def load(path: Any, limit: int) -> Dataset:
        if plan:
            return plan.load(path, src.inputs, preprocess, limit=limit)
        return load_dataset(path, specs, preprocess, limit=limit, **data_opts)

    calib_ds = load(calib, CALIB_SAMPLES) if calib else None
    val_ds = load(val, FIDELITY_SAMPLES) if val else None
    fid_ds = val_ds or calib_ds
    if fid_ds is None:
        fid_ds = (
            plan.synthetic()
            if plan
            else synthetic_dataset(at.typical_specs(src), proto=src.proto, input_values=data_opts["input_values"])
        )
    runs = plan.runner(be, fid_ds) if plan else be
    points = at.PointChecks(None if plan else src, fid_ds.samples)  # a stream is checked at its data's shape

    precision = opts.precision
    if precision in (None, "auto"):
        precision = be.default_precision(prof, calib_ds is not None)
    if precision not in be.precisions:
        raise ProfileError(
            f"backend {backend} cannot build precision {precision!r}; choose from {', '.join(be.precisions)}"
        )
    if precision == "int8" and calib_ds is None:
        be.refuse_unbuildable(precision)  # a precision this backend refuses says so first, with its reason
        raise DataError(int8_needs_calibration(backend, be.precisions))
    gate = (opts.min_cosine, opts.min_top1, opts.max_accuracy_drop)
    quantized = quantized_nodes(src.proto)
    if quantized and opts.precision in (None, "auto") and precision != "fp32" and "fp32" in be.precisions:
        precision = "fp32"  # the model's own int8 is kept: quantizing it again is not a choice
    if quantized and precision in ("int8", "int8-dynamic"):
        raise ModelError(
            f"the model is already quantized ({quantized} QuantizeLinear/DequantizeLinear/integer nodes): "
            f"{precision} would quantize it again; build --precision fp32 to keep its own int8 arithmetic"
        )
    # an already-quantized source keeps its own int8 arithmetic at fp32/fp16, which runtimes round differently
    thresholds = fidelity.thresholds_for("int8" if quantized else precision, *gate, min_score=opts.min_score)
    if quantized:
        log(f"the model is already quantized ({quantized} integer nodes): every step is judged by the int8 gate")
    if opts.task is not None:
        tasks.parse_task(opts.task)  # a bad --task is refused before any work
    user_metric = tasks.load_metric(opts.metric) if opts.metric else None
    budget = opts.budget
    if budget is not None:  # INT8 with layers kept float until the budget holds (edgekit.passes.mixed_precision)
        from .passes.mixed_precision import prepare as prepare_budget

        budget = prepare_budget(budget, be, precision, fid_ds)
        thresholds = budget.thresholds(thresholds, *gate, opts.min_score)
    pruning = None
    if opts.prune is not None or opts.prune_mode or opts.prune_recipe:  # edgekit.passes.prune, before conversion
        from .passes import prune as prune_pass

        pruning = prune_pass.settings(opts.prune, opts.prune_mode, opts.prune_recipe)
        thresholds = prune_pass.relax_thresholds(thresholds, *gate)
    bundle_name = opts.name or Path(model).stem

    cache_key = cache.key(
        {
            "edgekit": __version__,
            "epoch": CACHE_EPOCH,
            "runtime": be.runtime_version(),
            "source": src.sha256,
            "shapes": {s.name: s.shape for s in src.inputs},
            "shape_plan": src.shapes.section(),  # type: ignore[union-attr]
            "profile": prof.data,
            "backend": backend,
            "precision": precision,
            "calib": cache.path_digest(calib),
            "val": cache.path_digest(val),
            "preprocess": preprocess,
            **({"data_options": data_opts} if any(data_opts.values()) else {}),
            "thresholds": thresholds.to_dict(),
            "task": None if opts.task is None else str(opts.task),
            "metric": None if user_metric is None else [user_metric.name, user_metric.sha256],
            "allow_degraded": opts.allow_degraded,
            "name": bundle_name,
            **({} if opts.keep_head_float else {"keep_head_float": False}),
            **({"budget": [str(budget), budget.max_evaluations]} if budget is not None else {}),
            **({"prune": pruning} if pruning else {}),
            **({"stream": plan.to_dict()} if plan else {}),
            **({"toolenv": be.toolenv.digest()} if getattr(be, "toolenv", None) is not None else {}),
        }
    )
    return Prepared(
        opts=opts,
        precision=precision,
        prof=prof,
        be=be,
        src=src,
        plan=plan,
        calib_ds=calib_ds,
        val_ds=val_ds,
        fid_ds=fid_ds,
        runs=runs,
        points=points,
        thresholds=thresholds,
        user_metric=user_metric,
        budget=budget,
        pruning=pruning,
        bundle_name=bundle_name,
        cache_key=cache_key,
        output=Path(output),
        log=log,
    )
