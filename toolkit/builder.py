"""``edgekit build``: reference model + profile -> verified bundle.

load profile -> read + shape-fix model -> load data -> cache lookup
  -> backend.build (each step checked against the reference)
  -> manifest + report -> atomic rename into OUTDIR -> cache store
"""

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from edgekit_agent.runners.base import RunnerError

from . import __version__, cache, converters, fidelity, profiles, progress, shape_hints, shapes, tasks
from . import bundle as bundle_mod
from . import shape_checks as at
from . import stream as stream_mod
from .data import int8_needs_calibration, load_dataset, save_samples, synthetic_dataset
from .data_formats import parse_input_values, parse_sample_axes
from .errors import ConversionError, DataError, ProfileError
from .input_support import cannot_run
from .model import load_model, parse_input_shapes
from .report import SCHEMA_VERSION, write_report

FIDELITY_SAMPLES = 400
CACHE_EPOCH = 4  # bump when what a build writes changes, so older cached bundles are not reused
SLOWER = 0.95  # a shrunk build under 0.95x the reference's speed counts as measured slower
CALIB_SAMPLES = 256
GENERIC_GATE = ("classification", "generic")  # inferred task families judged by the generic gate


def build(
    model,
    profile,
    output,
    backend="ort",
    precision="auto",
    calib=None,
    val=None,
    preprocess=None,
    input_shapes=None,
    name=None,
    min_cosine=None,
    min_top1=None,
    max_accuracy_drop=None,
    allow_degraded=False,
    use_cache=True,
    log=None,
    budget=None,
    prune=None,
    prune_mode=None,
    prune_recipe=None,
    task=None,
    metric=None,
    min_score=None,
    stream=None,
    sample_axes=None,
    input_values=None,
    keep_head_float=True,
):
    """Build ``model`` for ``profile`` into the bundle directory ``output``; return the build report.

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
    kwargs = dict(
        backend=backend,
        calib=calib,
        val=val,
        preprocess=preprocess,
        input_shapes=input_shapes,
        name=name,
        min_cosine=min_cosine,
        min_top1=min_top1,
        max_accuracy_drop=max_accuracy_drop,
        allow_degraded=allow_degraded,
        use_cache=use_cache,
        log=log,
        budget=budget,
        task=task,
        metric=metric,
        min_score=min_score,
        stream=stream,
        sample_axes=sample_axes,
        input_values=input_values,
        keep_head_float=keep_head_float,
        prune=prune,
        prune_mode=prune_mode,
        prune_recipe=prune_recipe,
    )
    report = _build_one(model, profile, output, precision=precision, **kwargs)
    measured = report.get("host_latency")
    if (
        precision in (None, "auto")
        and budget is None
        and report["precision"] != "fp32"
        and measured
        and measured["speedup"] < SLOWER
    ):
        (log or (lambda m: None))(
            f"{report['precision']} measured {measured['speedup']:.2f}x the speed of fp32 on this machine: keeping fp32"
        )
        rejected = {
            "precision": report["precision"],
            "speedup_vs_fp32": measured["speedup"],
            "p50_ms": measured["built_p50_ms"],
            "fp32_p50_ms": measured["reference_p50_ms"],
        }
        report = _build_one(model, profile, output, precision="fp32", **kwargs)
        report["precision_choice"] = {
            "auto": True,
            "chosen": "fp32",
            "rejected": [rejected],
            "reason": f"{rejected['precision']} was measured slower than fp32 on this machine "
            f"({rejected['p50_ms']:.3f} ms vs {rejected['fp32_p50_ms']:.3f} ms p50)",
        }
        write_report(Path(output), report)
    return report


def _reference_outputs(be, reference_path, dataset, session=None):
    """Run the reference; refuse models the runtime cannot run and inputs that make it produce NaN."""
    from .errors import ModelError

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


def _time_on_host(be, reference_path, built_path, feed, threads, rounds=3, runs=30, session=None):
    """Interleaved p50s of the reference and the built model on this machine; median over rounds."""
    ref = be.runner(reference_path, threads, session=session)
    try:
        built = be.runner(built_path, threads, session=session)
        try:
            measured = _interleaved(ref, built, feed, rounds, runs)
        finally:
            getattr(built, "close", lambda: None)()  # runners holding a worker process or a temporary build
    finally:
        getattr(ref, "close", lambda: None)()
    r, b = measured
    return {
        "reference_p50_ms": round(r, 4),
        "built_p50_ms": round(b, 4),
        "speedup": round(r / b, 3),
        "runtimes": {
            "reference": getattr(ref, "runtime", None) or be.runtime,
            "built": getattr(built, "runtime", None) or be.runtime,
        },
        "threads": threads,
        "rounds": rounds,
        "runs_per_round": runs,
        "note": "measured on the build machine, which is the target for the host profile",
    }


def _interleaved(ref, built, feed, rounds, runs):
    for fn in (ref, built):
        for _ in range(5):
            fn(feed)
    p50 = {"ref": [], "built": []}
    for _ in range(rounds):
        for key, fn in (("ref", ref), ("built", built)):
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                fn(feed)
                times.append((time.perf_counter() - t0) * 1000)
            p50[key].append(statistics.median(times))
    return statistics.median(p50["ref"]), statistics.median(p50["built"])


def _placement(result, ctx, backend):
    """Which accelerator runs each node (edgekit.placement); advice, so it never fails the build."""
    try:
        from .placement import explain_build

        return explain_build(result, ctx, backend)
    except Exception as e:  # recorded in the report instead
        return {"error": f"placement analysis failed: {type(e).__name__}: {e}"}


def _build_one(
    model,
    profile,
    output,
    backend="ort",
    precision="auto",
    calib=None,
    val=None,
    preprocess=None,
    input_shapes=None,
    name=None,
    min_cosine=None,
    min_top1=None,
    max_accuracy_drop=None,
    allow_degraded=False,
    use_cache=True,
    log=None,
    budget=None,
    prune=None,
    prune_mode=None,
    prune_recipe=None,
    task=None,
    metric=None,
    min_score=None,
    stream=None,
    sample_axes=None,
    input_values=None,
    keep_head_float=True,
):
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load(profile)
    be = converters.get(backend)
    be.ensure_available()
    if isinstance(input_shapes, (list, tuple)):
        input_shapes = parse_input_shapes(input_shapes)
    if backend not in prof.data["runtimes"]["ranked"]:
        raise ProfileError(
            f"profile {prof.name} does not run backend {backend!r}; "
            f"it runs: {', '.join(prof.data['runtimes']['ranked'])}"
        )
    bundle_mod.check_output(output)

    static = shapes.static_reason(backend, be.row.dynamic_shapes, prof.backend(backend))  # edgekit.shapes
    data_shapes = shape_hints.data_reader([] if stream else [calib, val], preprocess)
    src = load_model(model, input_shapes, data_shapes, keep_dynamic=static is None, why_static=static)
    plan = stream_mod.plan(stream, src)  # --stream: data as sequences, each candidate run with its own state
    data_opts = {"sample_axes": parse_sample_axes(sample_axes), "input_values": parse_input_values(input_values)}
    if plan and (data_opts["sample_axes"] or data_opts["input_values"]):
        raise DataError(
            "--sample-axis and --input-value do not apply to --stream data: a sequence's .npz holds each constant "
            "input once (docs/STREAMS.md)"
        )
    specs = at.data_specs(src)

    def load(path, limit):
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

    if precision in (None, "auto"):
        precision = be.default_precision(prof, calib_ds is not None)
    if precision not in be.precisions:
        raise ProfileError(
            f"backend {backend} cannot build precision {precision!r}; choose from {', '.join(be.precisions)}"
        )
    if precision == "int8" and calib_ds is None:
        be.refuse_unbuildable(precision)  # a precision this backend refuses says so first, with its reason
        raise DataError(int8_needs_calibration(backend, be.precisions))
    thresholds = fidelity.thresholds_for(precision, min_cosine, min_top1, max_accuracy_drop, min_score=min_score)
    if task is not None:
        tasks.parse_task(task)  # a bad --task is refused before any work
    user_metric = tasks.load_metric(metric) if metric else None
    if budget is not None:  # INT8 with layers kept float until the budget holds (edgekit.passes.mixed_precision)
        from .passes.mixed_precision import prepare

        budget = prepare(budget, be, precision, fid_ds)
        thresholds = budget.thresholds(thresholds, min_cosine, min_top1, max_accuracy_drop, min_score)
    pruning = None
    if prune is not None or prune_mode or prune_recipe:  # edgekit.passes.prune: on the reference, before conversion
        from .passes import prune as prune_pass

        pruning = prune_pass.settings(prune, prune_mode, prune_recipe)
        thresholds = prune_pass.relax_thresholds(thresholds, min_cosine, min_top1, max_accuracy_drop)
    bundle_name = name or Path(model).stem

    cache_key = cache.key(
        {
            "edgekit": __version__,
            "epoch": CACHE_EPOCH,
            "runtime": be.runtime_version(),
            "source": src.sha256,
            "shapes": {s.name: s.shape for s in src.inputs},
            "shape_plan": src.shapes.section(),
            "profile": prof.data,
            "backend": backend,
            "precision": precision,
            "calib": cache.path_digest(calib),
            "val": cache.path_digest(val),
            "preprocess": preprocess,
            **({"data_options": data_opts} if any(data_opts.values()) else {}),
            "thresholds": thresholds.to_dict(),
            "task": None if task is None else str(task),
            "metric": None if user_metric is None else [user_metric.name, user_metric.sha256],
            "allow_degraded": allow_degraded,
            "name": bundle_name,
            **({} if keep_head_float else {"keep_head_float": False}),
            **({"budget": [str(budget), budget.max_evaluations]} if budget is not None else {}),
            **({"prune": pruning} if pruning else {}),
            **({"stream": plan.to_dict()} if plan else {}),
            **({"toolenv": be.toolenv.digest()} if getattr(be, "toolenv", None) is not None else {}),
        }
    )
    output = Path(output)
    hit = cache.lookup(cache_key) if use_cache else None
    if hit:
        log(f"unchanged inputs: reusing cached build {cache_key[:12]}")

        def stamp(staged):
            report = json.loads((staged / bundle_mod.REPORT_JSON).read_text())
            report["cache"] = {"hit": True, "key": cache_key}
            report["build_seconds"] = round(time.perf_counter() - t0, 3)
            report["output"] = str(output)
            write_report(staged, report)
            return report

        return bundle_mod.publish_copy(hit, output, stamp)

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
            points.reference(be, reference_path, session)
        inferred = tasks.resolve_task(task, reference_path, reference_outputs[0], fid_ds.samples[0])
        # the task's own metric decides where the generic gate is known to be wrong (detections, maps, sequences...);
        # a classifier inferred as such keeps the generic gate (cosine, top-1, accuracy), which is its metric
        judged_by = inferred if not (inferred.inferred and inferred.spec.family in GENERIC_GATE) else None
        task_section = {
            **inferred.to_dict(),
            "gate": "task metric" if judged_by is not None else "generic (cosine, top-1 on class axes, accuracy)",
            **({"metric": {"name": user_metric.name, "sha256": user_metric.sha256}} if user_metric else {}),
        }
        log(f"task: {inferred.spec} ({inferred.reason}); judged by the {task_section['gate']}")
        steps = []
        last_outputs = [reference_outputs]

        tried = {}  # model file -> its outputs, from trial() (a backend trying alternatives before its step)

        def run_on_data(step, model_path, verb):
            with progress.of(log).step(f"{verb} {step} on {len(fid_ds)} samples"):
                try:
                    return runs.predict(model_path, fid_ds.samples, session=session)
                except RunnerError as e:  # the runtime failed on the built model: say so with the model's inputs
                    raise ConversionError(cannot_run(backend, step, src.inputs, e)) from None

        def judge(step, outputs, degraded_ok):
            record = fidelity.check_step(
                step,
                reference_outputs,
                outputs,
                fid_ds.labels,
                thresholds,
                degraded_ok,
                task=judged_by,
                metric=user_metric,
            )
            streamed = plan.metrics(reference_outputs, outputs, fid_ds) if plan else None
            if streamed:
                record["stream"] = streamed
            return record

        def trial(step, model_path):
            tried[str(model_path)] = run_on_data(step, model_path, "trying")
            return judge(step, tried[str(model_path)], True)  # neither recorded nor refused

        def check(step, model_path):
            outputs = tried.pop(str(model_path), None)
            tried.clear()  # the candidates a backend tried and did not keep
            if outputs is None:
                outputs = run_on_data(step, model_path, "checking")
            last_outputs[0] = outputs
            record = judge(step, outputs, allow_degraded)
            record = points.check(
                step,
                model_path,
                record,
                lambda path, samples: be.predict(path, samples, session=session),
                lambda name, ref, out: fidelity.check_step(
                    name, ref, out, None, thresholds, allow_degraded, task=judged_by, metric=user_metric
                ),
                log,
            )
            steps.append(record)
            log(f"  {step}: {'ok' if record['passed'] else 'DEGRADED'} - {fidelity.summary(record)}")
            return record

        ctx = converters.BuildContext(
            source=src,
            reference_path=reference_path,
            profile=prof,
            precision=precision,
            calib=calib_ds,
            workdir=work,
            check=check,
            log=log,
            budget=budget,
            evaluation=fid_ds,
            allow_degraded=allow_degraded,
            session=session,
            task=judged_by,
            metric=user_metric,
            keep_head_float=keep_head_float,
            trial=trial,
        )
        if pruning:  # the backend converts the pruned model; every step is still checked against the original
            ctx.reference_path, pruning = prune_pass.apply(pruning, ctx)
        log(f"building {backend} {precision} for {prof.name}")
        calibrating = f", calibrating on {len(calib_ds)} samples" if calib_ds and precision == "int8" else ""
        with progress.of(log).step(f"building {backend} {precision}{calibrating}"):
            result = be.build(ctx)
        result.sections["placement"] = _placement(result, ctx, backend)

        staged = bundle_mod.staging_dir(output)
        try:
            model_name = "model" + result.model_file.suffix
            shutil.copyfile(result.model_file, staged / model_name)
            files = [bundle_mod.file_entry(staged / model_name, model_name, "model")]
            for path, role in result.extra_files:
                fname = {"required_operators": "required_operators.config"}.get(role, Path(path).name)
                shutil.copyfile(path, staged / fname)
                files.append(bundle_mod.file_entry(staged / fname, fname, role))
            save_samples(fid_ds, staged / "sample_inputs.npz")
            files.append(bundle_mod.file_entry(staged / "sample_inputs.npz", "sample_inputs.npz", "sample_inputs"))
            if points.save(staged / at.SHAPE_SAMPLES):
                files.append(bundle_mod.file_entry(staged / at.SHAPE_SAMPLES, at.SHAPE_SAMPLES, "shape_samples"))
            # What this machine computed for that sample with the final model file: the device compares.
            np.savez(staged / "expected_outputs.npz", **last_outputs[0][0])
            files.append(
                bundle_mod.file_entry(staged / "expected_outputs.npz", "expected_outputs.npz", "expected_outputs")
            )

            manifest = {
                "schema_version": bundle_mod.MANIFEST_SCHEMA_VERSION,
                "name": bundle_name,
                "backend": backend,
                "precision": precision,
                "profile": prof.name,
                "format": result.format,
                "model": model_name,
                "files": files,
                "inputs": at.manifest_inputs(src),
                "outputs": [s.to_dict() for s in src.outputs],
                "shapes": src.shapes.section(),
                "source": {"file": src.path.name, "sha256": src.sha256, "opset": src.opset},
                "toolkit": {"name": "edgekit", "version": __version__},
                "runtime": {"name": result.runtime, "version": result.runtime_version},
                "profile_spec": prof.data,
                "runner": result.runner_options,
                "ops": result.ops,
                "sample_inputs_synthetic": fid_ds.synthetic,
                **({"stream": plan.to_dict()} if plan else {}),
                # the device judges its outputs for the sample by this task's decoded answers (edgekit_agent.taskcheck)
                **({"task": judged_by.spec.to_dict()} if judged_by is not None else {}),
            }
            manifest["id"] = bundle_mod.bundle_id(manifest)
            bundle_mod.write_json(staged / bundle_mod.MANIFEST, manifest)

            degraded = any(not s["passed"] for s in steps)
            host_latency = None
            # An unpruned fp32 build is the reference in the runtime's own format: nothing to compare it with.
            if prof.name == profiles.HOST and not (precision == "fp32" and not pruning):
                host_latency = _time_on_host(
                    be, reference_path, result.model_file, fid_ds.samples[0], prof.threads, session=session
                )
                log(
                    f"  on this machine: {host_latency['built_p50_ms']:.3f} ms vs fp32 "
                    f"{host_latency['reference_p50_ms']:.3f} ms p50 ({host_latency['speedup']:.2f}x)"
                )
                host_latency["by_shape"] = points.time(
                    lambda feed: _time_on_host(
                        be, reference_path, result.model_file, feed, prof.threads, 1, 20, session
                    )
                )
            warnings = list(result.warnings)
            if host_latency and host_latency["speedup"] < SLOWER:
                warnings.append(
                    f"{precision} ran {host_latency['speedup']:.2f}x the speed of the fp32 reference on this "
                    "machine (slower); --precision fp32 is faster here"
                    if not pruning
                    else f"the pruned {precision} build ran {host_latency['speedup']:.2f}x the speed of the "
                    "unpruned fp32 model on this machine (slower)"
                )
            report = {
                "schema": "edgekit.build-report",
                "schema_version": SCHEMA_VERSION,
                "bundle_id": manifest["id"],
                "name": bundle_name,
                "backend": backend,
                "precision": precision,
                "profile": prof.name,
                "format": result.format,
                "runtime": manifest["runtime"],
                "source": manifest["source"],
                "inputs": manifest["inputs"],
                "outputs": manifest["outputs"],
                "shapes": manifest["shapes"],
                "files": [dict(f, size_kb=round(f["size"] / 1024, 1)) for f in files],
                # the model file plus its external weights (OpenVINO's model.bin beside model.xml)
                "model_size_bytes": sum(f["size"] for f in files if f["role"] in ("model", "weights")),
                "source_size_bytes": src.path.stat().st_size,
                "task": task_section,
                "fidelity": {
                    "data": fid_ds.describe(),
                    "measured_on": f"this machine ({profiles.detect_host().arch}, {be.runtime} CPU); the device "
                    "compares its own outputs for the sample when the bundle is installed",
                    "calibration": calib_ds.describe() if calib_ds else None,
                    "thresholds": thresholds.to_dict(),
                    "passed": not degraded,
                    "degraded_allowed": bool(degraded and allow_degraded),
                    "steps": steps,
                },
                "source_nodes": len(src.proto.graph.node),
                "ops": result.ops,
                "ops_graph": result.ops_graph,
                "host_latency": host_latency,
                "warnings": warnings
                + ([f"static shapes: {src.shapes.note}"] if src.shapes.note else [])
                + (
                    ["fidelity was checked on synthetic random inputs only: pass --calib or --val with real data"]
                    if fid_ds.synthetic
                    else []
                )
                + (
                    ["fidelity was measured on the calibration data itself (in-sample): pass --val with held-out data"]
                    if calib_ds is not None and val_ds is None
                    else []
                ),
                **result.sections,
                **({"pruning": pruning} if pruning else {}),
                **({"stream": plan.report(fid_ds)} if plan else {}),
                "cache": {"hit": False, "key": cache_key},
                "build_seconds": round(time.perf_counter() - t0, 3),
                "output": str(output),
            }
            write_report(staged, report)
            if use_cache:
                cache.store(cache_key, staged)
            bundle_mod.replace_dir(staged, output)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)
