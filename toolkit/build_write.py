"""A build's last phase: the bundle (model files, samples, expected outputs, manifest) and its report, staged
beside the output directory and moved into place in one rename; the cache keeps a copy.

Nothing is written to ``output`` unless every file is complete: a failure removes the staging directory.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from . import __version__, cache, profiles
from . import bundle as bundle_mod
from . import shape_checks as at
from .build_check import StepChecker
from .build_prepare import Prepared
from .data import save_samples
from .host_timing import SLOWER, time_on_host
from .report import SCHEMA_VERSION, write_report


def write_bundle(
    p: Prepared, checker: StepChecker, result: Any, reference_path: Path, session: Any, t0: float
) -> Dict[str, Any]:
    """Stage the bundle and its report, publish it to ``p.output``; return the report."""
    staged = bundle_mod.staging_dir(p.output)
    try:
        files = _files(p, checker, result, staged)
        manifest = _manifest(p, checker, result, files)
        manifest["id"] = bundle_mod.bundle_id(manifest)
        bundle_mod.write_json(staged / bundle_mod.MANIFEST, manifest)
        host_latency = _host_latency(p, result, reference_path, session)
        report = _report(p, checker, result, manifest, files, host_latency, t0)
        write_report(staged, report)
        if p.opts.use_cache:
            cache.store(p.cache_key, staged)
        bundle_mod.replace_dir(staged, p.output)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return report


def _files(p: Prepared, checker: StepChecker, result: Any, staged: Path) -> List[Dict[str, Any]]:
    model_name = "model" + result.model_file.suffix
    shutil.copyfile(result.model_file, staged / model_name)
    files = [bundle_mod.file_entry(staged / model_name, model_name, "model")]
    for path, role in result.extra_files:
        fname = {"required_operators": "required_operators.config"}.get(role, Path(path).name)
        shutil.copyfile(path, staged / fname)
        files.append(bundle_mod.file_entry(staged / fname, fname, role))
    save_samples(p.fid_ds, staged / "sample_inputs.npz")
    files.append(bundle_mod.file_entry(staged / "sample_inputs.npz", "sample_inputs.npz", "sample_inputs"))
    if p.points.save(staged / at.SHAPE_SAMPLES):
        files.append(bundle_mod.file_entry(staged / at.SHAPE_SAMPLES, at.SHAPE_SAMPLES, "shape_samples"))
    # What this machine computed for that sample with the final model file: the device compares.
    np.savez(staged / "expected_outputs.npz", **checker.last_outputs[0])  # type: ignore[arg-type]
    files.append(bundle_mod.file_entry(staged / "expected_outputs.npz", "expected_outputs.npz", "expected_outputs"))
    return files


def _manifest(p: Prepared, checker: StepChecker, result: Any, files: List[Dict[str, Any]]) -> Dict[str, Any]:
    src, judged_by = p.src, checker.judged_by
    return {
        "schema_version": bundle_mod.MANIFEST_SCHEMA_VERSION,
        "name": p.bundle_name,
        "backend": p.opts.backend,
        "precision": p.precision,
        "profile": p.prof.name,
        "format": result.format,
        "model": files[0]["name"],
        "files": files,
        "inputs": at.manifest_inputs(src),
        "outputs": [s.to_dict() for s in src.outputs],
        "shapes": src.shapes.section() if src.shapes else None,
        "source": {"file": src.path.name, "sha256": src.sha256, "opset": src.opset},
        "toolkit": {"name": "edgekit", "version": __version__},
        "runtime": {"name": result.runtime, "version": result.runtime_version},
        "profile_spec": p.prof.data,
        "runner": result.runner_options,
        "ops": result.ops,
        "sample_inputs_synthetic": p.fid_ds.synthetic,
        **({"stream": p.plan.to_dict()} if p.plan else {}),
        # inputs fixed in the converted graph: a request may send that value or leave the input out
        **({"fixed_inputs": p.specialised["fixed_inputs"]} if p.specialised else {}),
        # the device judges its outputs for the sample by this task's decoded answers (edgekit_agent.taskcheck)
        **({"task": judged_by.spec.to_dict()} if judged_by is not None else {}),
    }


def _host_latency(p: Prepared, result: Any, reference_path: Path, session: Any) -> Optional[Dict[str, Any]]:
    """The built model timed against the reference here, for the host profile (where this machine is the target).

    An unpruned fp32 build is the reference in the runtime's own format: nothing to compare it with."""
    if p.prof.name != profiles.HOST or (p.precision == "fp32" and not p.pruning):
        return None
    be, threads = p.be, p.prof.threads
    try:
        host_latency = time_on_host(
            be, reference_path, result.model_file, p.fid_ds.samples[0], threads, session=session
        )
    except Exception as e:  # e.g. the runtime cannot load the ONNX reference itself (only the built model): advice
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        result.warnings.append(f"not timed against the fp32 reference on this machine: {first}")
        p.log(f"  on this machine: not timed against the fp32 reference ({first})")
        return None
    p.log(
        f"  on this machine: {host_latency['built_p50_ms']:.3f} ms vs fp32 "
        f"{host_latency['reference_p50_ms']:.3f} ms p50 ({host_latency['speedup']:.2f}x)"
    )
    try:
        host_latency["by_shape"] = p.points.time(
            lambda feed: time_on_host(be, reference_path, result.model_file, feed, threads, 1, 20, session)
        )
    except Exception as e:  # as above: the point timings are advice
        host_latency["by_shape_error"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return host_latency


def _warnings(p: Prepared, result: Any, host_latency: Optional[Dict[str, Any]]) -> List[str]:
    warnings = list(result.warnings)
    if host_latency and host_latency["speedup"] < SLOWER:
        warnings.append(
            f"{p.precision} ran {host_latency['speedup']:.2f}x the speed of the fp32 reference on this "
            "machine (slower); --precision fp32 is faster here"
            if not p.pruning
            else f"the pruned {p.precision} build ran {host_latency['speedup']:.2f}x the speed of the "
            "unpruned fp32 model on this machine (slower)"
        )
    if p.src.shapes and p.src.shapes.note:
        warnings.append(f"static shapes: {p.src.shapes.note}")
    if p.thresholds.precision != p.precision and p.thresholds.precision == "int8" and p.precision != "int8":
        warnings.append(
            "the source model is already quantized: judged by the int8 gate (runtimes round its integer "
            "arithmetic differently), not the tighter fp32 one"
        )
    if p.fid_ds.synthetic:
        warnings.append("fidelity was checked on synthetic random inputs only: pass --calib or --val with real data")
    if p.calib_ds is not None and p.val_ds is None:
        warnings.append(
            "fidelity was measured on the calibration data itself (in-sample): pass --val with held-out data"
        )
    return warnings


def _report(
    p: Prepared,
    checker: StepChecker,
    result: Any,
    manifest: Dict[str, Any],
    files: List[Dict[str, Any]],
    host_latency: Optional[Dict[str, Any]],
    t0: float,
) -> Dict[str, Any]:
    degraded = checker.degraded
    return {
        "schema": "edgekit.build-report",
        "schema_version": SCHEMA_VERSION,
        "bundle_id": manifest["id"],
        "name": p.bundle_name,
        "backend": p.opts.backend,
        "precision": p.precision,
        "profile": p.prof.name,
        "format": result.format,
        "runtime": manifest["runtime"],
        "source": manifest["source"],
        "inputs": manifest["inputs"],
        "outputs": manifest["outputs"],
        "shapes": manifest["shapes"],
        "files": [dict(f, size_kb=round(f["size"] / 1024, 1)) for f in files],
        # the model file plus its external weights (OpenVINO's model.bin beside model.xml)
        "model_size_bytes": sum(f["size"] for f in files if f["role"] in ("model", "weights")),
        "source_size_bytes": p.src.path.stat().st_size,
        "task": checker.task_section(),
        "fidelity": {
            "data": p.fid_ds.describe(),
            "measured_on": f"this machine ({profiles.detect_host().arch}, {p.be.runtime} CPU); the device "
            "compares its own outputs for the sample when the bundle is installed",
            "calibration": p.calib_ds.describe() if p.calib_ds else None,
            "thresholds": p.thresholds.to_dict(),
            "passed": not degraded,
            "degraded_allowed": bool(degraded and p.opts.allow_degraded),
            "steps": checker.steps,
        },
        "source_nodes": p.specialised["nodes"]["before"] if p.specialised else len(p.src.proto.graph.node),
        "ops": result.ops,
        "ops_graph": result.ops_graph,
        "host_latency": host_latency,
        "warnings": _warnings(p, result, host_latency),
        **result.sections,
        **({"pruning": p.pruning} if p.pruning else {}),
        **({"stream": p.plan.report(p.fid_ds)} if p.plan else {}),
        **({"specialised": p.specialised} if p.specialised else {}),
        "cache": {"hit": False, "key": p.cache_key},
        "build_seconds": round(time.perf_counter() - t0, 3),
        "output": str(p.output),
    }
