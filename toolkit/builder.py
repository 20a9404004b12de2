"""``edgekit build``: reference model + profile -> verified bundle.

prepare (edgekit.build_prepare: profile, backend, model + shapes, data, gate, cache key)
  -> cache lookup
  -> reference outputs, the task -> backend.build, each step checked (edgekit.build_check)
  -> bundle + report staged, renamed into OUTDIR in one step, cached (edgekit.build_write)
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from . import build_specialise, converters, intake, profiles, progress, shape_variants
from . import bundle as bundle_mod
from . import shape_text as shape_lines
from .build_check import StepChecker, resolve
from .build_options import BuildOptions
from .build_prepare import CACHE_EPOCH, CALIB_SAMPLES, FIDELITY_SAMPLES, Prepared, prepare  # noqa: F401
from .build_write import write_bundle
from .errors import ConversionError, ModelError
from .host_timing import SLOWER
from .report import write_report
from .shape_checks import shape_text
from .shapes import static_reason


def build(model: Any, profile: Any, output: Any, options: Optional[BuildOptions] = None, **kwargs: Any) -> Dict:
    """Build ``model`` for ``profile`` into the bundle directory ``output``; return the build report.

    The options are keyword arguments, one per ``edgekit build`` flag, or a :class:`edgekit.build_options.
    BuildOptions` (``options``) that keyword arguments change: ``backend``, ``precision``, ``calib``, ``val``,
    ``preprocess``, ``input_shapes``, ``name``, the gate (``min_cosine``, ``min_top1``, ``max_accuracy_drop``,
    ``min_score``, ``allow_degraded``), ``budget``, ``prune``/``prune_mode``/``prune_recipe``, ``task``,
    ``metric``, ``stream``, ``sample_axes``, ``input_values``, ``keep_head_float``, ``use_cache``, ``log``.

    ``input_shapes`` is a dict ``{input: [dims]}`` or a list of ``NAME=D1,D2`` strings; a dimension may be a range
    ``[MIN:MAX]`` or a set ``[A,B,C]`` (docs/SHAPES.md: kept dynamic where the backend runs it, checked at each).
    ``stream`` (``{"state": "stateN"}`` or ``["state=stateN"]``): outputs fed back as inputs at the next step;
    the data are then sequences and fidelity is measured over them (:mod:`edgekit.stream`, docs/STREAMS.md).
    ``sample_axes`` (``{input: axis}`` or ``["state=1"]``): the axis of an ``.npz`` array that counts samples;
    ``input_values`` (``{input: value}`` or ``["sr=16000"]``): an input given once for every sample (docs/INPUTS.md).
    Raises an :class:`edgekit.errors.EdgekitError` subclass on bad input or failed fidelity;
    ``output`` is then left as it was.

    ``precision="auto"`` takes what the profile runs fast. For the ``host`` profile, where
    this machine is the target, a shrunk build is also timed against the FP32 reference
    here, and if it measured slower the FP32 build is kept instead (the report says why).

    ``keep_head_float``: an INT8 detector or segmenter whose task metric fails its gate is quantized again with
    its decoder tail in float (:mod:`edgekit.converters.heads`); False builds and judges the plain INT8 model.
    """
    return intake.build(
        model, profile, output, BuildOptions.of(options, **kwargs), partial(_build_onnx, profile, output)
    )


def _build_onnx(profile: Any, output: Any, model: Any, opts: BuildOptions) -> Dict[str, Any]:
    """The build of an ONNX model (edgekit.intake hands over an exported one with ``opts.exported`` set)."""
    _refuse_growing_state_on_static(profile, opts)
    declared = _variant_declaration(profile, opts)
    if declared:
        return _build_variants(model, profile, output, opts, declared)
    return _build_choosing(model, profile, output, opts)


def _build_choosing(model: Any, profile: Any, output: Any, opts: BuildOptions) -> Dict[str, Any]:
    """One build; ``precision="auto"`` on the host profile falls back to fp32 where it measured faster."""
    report = _build_one(model, profile, output, opts)
    measured = report.get("host_latency")
    if (
        opts.precision in (None, "auto")
        and opts.budget is None
        and report["precision"] != "fp32"
        and measured
        and measured["speedup"] < SLOWER
    ):
        (opts.log or (lambda m: None))(
            f"{report['precision']} measured {measured['speedup']:.2f}x the speed of fp32 on this machine: keeping fp32"
        )
        rejected = {
            "precision": report["precision"],
            "speedup_vs_fp32": measured["speedup"],
            "p50_ms": measured["built_p50_ms"],
            "fp32_p50_ms": measured["reference_p50_ms"],
        }
        report = _build_one(model, profile, output, opts.replace(precision="fp32"))
        report["precision_choice"] = {
            "auto": True,
            "chosen": "fp32",
            "rejected": [rejected],
            "reason": f"{rejected['precision']} was measured slower than fp32 on this machine "
            f"({rejected['p50_ms']:.3f} ms vs {rejected['fp32_p50_ms']:.3f} ms p50)",
        }
        write_report(Path(output), report)
    return report


def _static_reason(profile: Any, opts: BuildOptions) -> Optional[str]:
    """Why this backend on this profile needs static shapes (edgekit.shapes.static_reason), or None."""
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load(profile)
    return static_reason(opts.backend, converters.get(opts.backend).row.dynamic_shapes, prof.backend(opts.backend))


def _refuse_growing_state_on_static(profile: Any, opts: BuildOptions) -> None:
    """A stream state declared with a varying size (a KV cache that grows each step) cannot run where shapes must be
    static: say so before any work, naming the state and the backends that keep it dynamic."""
    if not opts.stream or not opts.input_shapes:
        return
    try:
        from .stream import parse_stream

        spec = parse_stream(opts.stream)
        declared = shape_variants.declaration(opts.input_shapes)
        static = _static_reason(profile, opts)
    except Exception:  # the ordinary build reports it
        return
    growing = [n for n in (spec.pairs if spec else {}) if any(not isinstance(d, int) for d in declared.get(n, []))]
    if static and growing:
        raise ConversionError(
            f"the stream state {growing[0]!r} is declared with a size that varies ({len(growing)} such state(s), e.g. "
            f"a KV cache that grows each step), but {static}: a static model cannot take a state that grows. Build "
            "for a backend that keeps dimensions dynamic (ort, openvino, mnn on their CPU), or give the state one "
            "fixed size (a cache of fixed length)"
        )


def _variant_declaration(profile: Any, opts: BuildOptions) -> Optional[Dict[str, List[Any]]]:
    """The declared shapes when this build needs static shapes and they vary (one model per point), else None.

    Anything wrong with the profile or backend is left to the ordinary build, which says what."""
    if opts.stream or not opts.input_shapes:
        return None
    try:
        declared = shape_variants.declaration(opts.input_shapes)
        static = _static_reason(profile, opts)
    except Exception:  # the ordinary build reports it
        return None
    varies = any(not isinstance(d, int) and d is not None for dims in declared.values() for d in dims)
    return declared if static and varies else None


def _build_variants(model: Any, profile: Any, output: Any, opts: BuildOptions, declared: Dict) -> Dict[str, Any]:
    """One static model per declared point (edgekit.shape_variants), merged into one bundle at ``output``."""
    t0 = time.perf_counter()
    log = opts.log or (lambda m: None)
    bundle_mod.check_output(output)
    work = Path(tempfile.mkdtemp(prefix="edgekit-variants-"))
    try:
        report = _build_choosing(model, profile, work / "typical", opts)
        typical = {s["name"]: list(s["shape"]) for s in report["inputs"]}
        points = shape_variants.points(declared, typical)
        built = []
        for label, point in points:
            if label == "typical":
                built.append((label, point, work / "typical"))
                continue
            log(f"static shapes: building the model for {shape_text(point)} ({label})")
            sub = opts.replace(
                input_shapes=point,
                precision=report["precision"],
                calib=shape_variants.fit_data(opts.calib, point, work / f"data.{label}" / "calib"),
                val=shape_variants.fit_data(opts.val, point, work / f"data.{label}" / "val"),
            )
            _build_one(model, profile, work / label, sub)
            built.append((label, point, work / label))

        def merge(staged: Path) -> Dict[str, Any]:
            merged = shape_variants.merge(staged, built, Path(output))
            merged["build_seconds"] = round(time.perf_counter() - t0, 3)
            write_report(staged, merged)
            return merged

        merged = bundle_mod.publish_copy(work / "typical", output, merge)
        log(shape_lines.variants(merged["shapes"]))
        return merged
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _reference_outputs(be: Any, reference_path: Path, dataset: Any, session: Any = None) -> List[dict]:
    """Run the reference; refuse models the runtime cannot run and inputs that make it produce NaN."""
    try:
        outputs = be.reference_outputs(reference_path, dataset.samples, session=session)
    except Exception as e:  # the runtime's own exception types (e.g. onnxruntime's Fail, InvalidGraph)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{be.runtime} cannot run the reference model on this machine: {first}") from None
    for name, value in outputs[0].items():
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and not all(np.all(np.isfinite(o[name])) for o in outputs):
            raise ModelError(
                f"the reference model itself outputs NaN/Inf for {name} on the "
                f"{'synthetic' if dataset.synthetic else 'given'} inputs; check the data's range and preprocessing"
            )
    return outputs


def _placement(result: Any, ctx: Any, backend: str) -> Dict[str, Any]:
    """Which accelerator runs each node (edgekit.placement); advice, so it never fails the build."""
    try:
        from .placement import explain_build

        return explain_build(result, ctx, backend)
    except Exception as e:  # recorded in the report instead
        return {"error": f"placement analysis failed: {type(e).__name__}: {e}"}


def _from_cache(p: Prepared, hit: Path, t0: float) -> Dict[str, Any]:
    p.log(f"unchanged inputs: reusing cached build {p.cache_key[:12]}")

    def stamp(staged: Path) -> Dict[str, Any]:
        report = json.loads((staged / bundle_mod.REPORT_JSON).read_text())
        report["cache"] = {"hit": True, "key": p.cache_key}
        report["build_seconds"] = round(time.perf_counter() - t0, 3)
        report["output"] = str(p.output)
        write_report(staged, report)
        return report

    return bundle_mod.publish_copy(hit, p.output, stamp)


def _build_one(model: Any, profile: Any, output: Any, opts: BuildOptions) -> Dict[str, Any]:
    t0 = time.perf_counter()
    p = prepare(model, profile, output, opts)
    log, be, src, fid_ds = p.log, p.be, p.src, p.fid_ds
    hit = cache_lookup(p)
    if hit:
        return _from_cache(p, hit, t0)

    work = Path(tempfile.mkdtemp(prefix="edgekit-build-"))
    try:
        reference_path = src.save(work / "reference.onnx")
        log(
            f"reference: {src.path.name} ({len(src.proto.graph.node)} nodes), running it on {len(fid_ds)} "
            f"{'synthetic' if fid_ds.synthetic else 'real'} samples"
        )
        session = converters.BuildSession.for_source(src)
        with progress.of(log).step(f"running the reference on {len(fid_ds)} samples"):
            reference_outputs = _reference_outputs(be, reference_path, fid_ds, session)
            p.points.reference(be, reference_path, session)
        converted_path = reference_path
        p, specialised_path = build_specialise.apply(p, work)  # an input with one value fixed where it removes an If
        if specialised_path is not None:
            converted_path, session = specialised_path, converters.BuildSession.for_source(p.src)
        checker = StepChecker(p, reference_outputs, resolve(p, reference_path, reference_outputs), session)
        export = intake.record_export(p, checker, reference_outputs) if opts.exported is not None else None
        original = getattr(opts.exported, "original_outputs", None)
        if original is not None and opts.backend in getattr(opts.exported, "reference_for", ()):
            checker.reference_outputs = original  # this backend converts the original itself: judged against it
        log(
            f"task: {checker.inferred.spec} ({checker.inferred.reason}); judged by the {checker.task_section()['gate']}"
        )

        ctx = converters.BuildContext(
            source=p.src,
            reference_path=converted_path,
            profile=p.prof,
            precision=p.precision,
            calib=p.calib_ds,
            workdir=work,
            check=checker.check,
            log=log,
            budget=p.budget,
            evaluation=p.fid_ds,
            allow_degraded=opts.allow_degraded,
            session=session,
            task=checker.judged_by,
            metric=p.user_metric,
            keep_head_float=opts.keep_head_float,
            trial=checker.trial,
            exported=opts.exported,
        )
        if p.pruning:  # the backend converts the pruned model; every step is still checked against the original
            from .passes import prune as prune_pass

            ctx.reference_path, p.pruning = prune_pass.apply(p.pruning, ctx)
        log(f"building {opts.backend} {p.precision} for {p.prof.name}")
        calib_ds = p.calib_ds
        calibrating = f", calibrating on {len(calib_ds)} samples" if calib_ds and p.precision == "int8" else ""
        with progress.of(log).step(f"building {opts.backend} {p.precision}{calibrating}"):
            result = be.build(ctx)
        result.sections["placement"] = _placement(result, ctx, opts.backend)
        if export is not None:
            result.sections["export"] = export
        return write_bundle(p, checker, result, converted_path, session, t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cache_lookup(p: Prepared) -> Optional[Path]:
    """The cached bundle for ``p``'s inputs, when caching is on and one exists."""
    from . import cache

    return cache.lookup(p.cache_key) if p.opts.use_cache else None
