"""TFLite in: a ``.tflite`` deployed as it is to LiteRT, for the tflite backend.

Nothing is converted: the bundle holds the original bytes. Its inputs and outputs come from the LiteRT interpreter,
its quantization from its tensors' types, and the delegate (placement) checks run on its op list as for a built
model. Fidelity has no step to compare: the bundle's model IS the original, so the report records it as taken as
given with its sha256, and the samples' outputs are the original's own (the device compares against them).
Other backends are refused: no maintained TFLite -> ONNX converter ships here.

A ``.tflite`` converted here from another framework's model (:mod:`edgekit.intake_tf`: TensorFlow's own converter)
is bundled the same way with an :class:`Origin`: its fidelity step compares it with the original framework's outputs
on the same samples, and the report's ``export`` section says how it was made.
"""

from __future__ import annotations

import shutil
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from . import __version__, converters, profiles
from . import bundle as bundle_mod
from .build_options import BuildOptions
from .data import Dataset, load_dataset, save_samples, synthetic_dataset
from .errors import ConversionError, ModelError, ProfileError
from .fidelity import check_step, summary, thresholds_for
from .model import TensorSpec, file_sha256, guess_layout
from .report import SCHEMA_VERSION, write_report

STEP = "taken as given (identical bytes)"


@dataclass
class Origin:
    """A .tflite converted from another framework's model, with what judges it: the original's outputs on
    ``dataset``'s samples. ``io`` maps the original's input/output names to the .tflite's tensors (the runner's
    ``io``); ``section`` is the report's ``export`` section (its ``step`` is added here)."""

    path: Path  # the converted .tflite
    source: Path  # the original model (a file or a SavedModel directory)
    precision: str  # fp32, fp16, int8
    io: Dict[str, Any]
    dataset: Dataset
    original: List[Dict[str, np.ndarray]] = field(repr=False)
    section: Dict[str, Any]
    step: str  # the fidelity step's name
    reference: str  # what produced ``original``, for the report


def is_tflite(model: Any) -> bool:
    return isinstance(model, (str, Path)) and Path(model).suffix.lower() == ".tflite"


def refuse_other_backend(path: Path, backend: str) -> None:
    if backend != "tflite":
        raise ConversionError(
            f"{path.name} is a TFLite model, and the {backend} backend needs ONNX: no maintained TFLite -> ONNX "
            "converter ships with edgekit. Build it for the tflite backend (--backend tflite: deployed as it is), "
            "or convert it yourself (tflite2onnx, or tf2onnx's `python -m tf2onnx.convert --tflite "
            f"{path.name} --output model.onnx`) and build the .onnx, whose fidelity is then checked against it"
        )


def build_given(
    model: Any, profile: Any, output: Any, opts: BuildOptions, origin: Optional[Origin] = None
) -> Dict[str, Any]:
    """Bundle the ``.tflite`` as it is for ``profile``; return the build report. With ``origin`` the file was
    converted here and is judged against the original's outputs."""
    t0 = time.perf_counter()
    path = Path(model) if origin is None else origin.path
    log = opts.log or (lambda m: None)
    if origin is None:
        refuse_other_backend(path, opts.backend)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    unused = [
        n
        for n in ("prune", "prune_recipe", "budget", "stream", "example_inputs", "dynamic_shapes")
        if getattr(opts, n) not in (None, False)
    ]
    if unused or (origin is None and opts.precision not in (None, "auto")):
        what = unused[0] if unused else f"precision={opts.precision}"
        raise ModelError(
            f"{path.name} is deployed as it is (no conversion), so {what} does not apply: drop it, or build "
            "the model's ONNX export to convert or shrink it"
        )
    prof, be = runs_tflite(profile)
    bundle_mod.check_output(output)
    inputs, outputs, precision = read_specs(path)
    if origin is not None:
        inputs = _renamed(inputs, origin.io["inputs"])
        outputs = _renamed(outputs, origin.io["outputs"])
        precision = origin.precision
    ds = _dataset(opts, inputs) if origin is None else origin.dataset
    kind = "synthetic" if ds.synthetic else "real"
    how = "deployed as given" if origin is None else "built"
    log(f"{path.name}: {how} ({precision}); running it on {len(ds)} {kind} samples")
    try:
        results = be.predict(path, ds.samples, threads=prof.threads if prof.name == profiles.HOST else None)
    except Exception as e:  # LiteRT's own errors: an op it lacks, a corrupt file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"LiteRT cannot run {path.name} on this machine: {first}") from None
    if origin is not None:  # the sizes it was converted for (the signature's may keep a dynamic batch)
        inputs = [_sized(s, ds.samples[0][s.name]) for s in inputs]
        outputs = [_sized(s, results[0][s.name]) for s in outputs]
    sha = file_sha256(path)
    ops = tflite_ops(path)
    step = _judged(origin, ds, results, opts, log) if origin is not None else None
    settings = prof.backend("tflite")
    runner = {"providers": list(settings.get("delegates") or ["xnnpack"]), "io": origin.io if origin else {}}
    for key in ("delegate_libraries", "delegate_options"):
        if settings.get(key):
            runner[key] = settings[key]
    staged = bundle_mod.staging_dir(output)
    try:
        shutil.copyfile(path, staged / "model.tflite")
        files = [bundle_mod.file_entry(staged / "model.tflite", "model.tflite", "model")]
        if origin is not None:
            bundle_mod.write_json(staged / "io_layout.json", origin.io)
            files.append(bundle_mod.file_entry(staged / "io_layout.json", "io_layout.json", "io_layout"))
        save_samples(ds, staged / "sample_inputs.npz")
        files.append(bundle_mod.file_entry(staged / "sample_inputs.npz", "sample_inputs.npz", "sample_inputs"))
        np.savez(staged / "expected_outputs.npz", **results[0])  # type: ignore[arg-type]
        files.append(bundle_mod.file_entry(staged / "expected_outputs.npz", "expected_outputs.npz", "expected_outputs"))
        manifest: Dict[str, Any] = {
            "schema_version": bundle_mod.MANIFEST_SCHEMA_VERSION,
            "name": opts.name or (path.stem if origin is None else origin.source.stem),
            "backend": "tflite",
            "precision": precision.split()[0],
            "profile": prof.name,
            "format": "tflite",
            "model": "model.tflite",
            "files": files,
            "inputs": [s.to_dict() for s in inputs],
            "outputs": [s.to_dict() for s in outputs],
            "shapes": None,
            "source": {"file": path.name, "sha256": sha, "format": "tflite", "taken_as_given": True}
            if origin is None
            else {"file": origin.source.name, "sha256": origin.section.get("sha256"), "format": origin.section["from"]},
            "toolkit": {"name": "edgekit", "version": __version__},
            "runtime": {"name": be.runtime, "version": be.runtime_version() or ""},
            "profile_spec": prof.data,
            "runner": runner,
            "ops": ops,
            "sample_inputs_synthetic": ds.synthetic,
        }
        manifest["id"] = bundle_mod.bundle_id(manifest)
        bundle_mod.write_json(staged / bundle_mod.MANIFEST, manifest)
        report = _report(manifest, files, ds, sha, precision, path, _placement(staged, ops, prof, precision), t0)
        if origin is not None:
            _as_converted(report, origin, step)
        report["output"] = str(output)
        write_report(staged, report)
        bundle_mod.replace_dir(staged, output)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return report


def runs_tflite(profile: Any) -> tuple:
    """(the profile, the tflite backend), or the error when either cannot serve."""
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load(profile)
    be = converters.get("tflite")
    be.ensure_available()
    if "tflite" not in prof.data["runtimes"]["ranked"]:
        raise ProfileError(
            f"profile {prof.name} does not run backend 'tflite'; it runs: {', '.join(prof.data['runtimes']['ranked'])}"
        )
    return prof, be


def _renamed(specs: List[TensorSpec], entries: List[Dict[str, Any]]) -> List[TensorSpec]:
    """The .tflite's tensors under the original's names (``entries``: the runner's io, by tensor name)."""
    by_tensor = {e["tensor"]: e["name"] for e in entries}
    return [TensorSpec(by_tensor.get(s.name, s.name), s.shape, s.dtype, s.layout) for s in specs]


def _sized(spec: TensorSpec, value: np.ndarray) -> TensorSpec:
    return TensorSpec(spec.name, list(value.shape), spec.dtype, guess_layout(list(value.shape)))


def _judged(origin: Origin, ds: Dataset, results: List[dict], opts: BuildOptions, log: Any) -> Dict[str, Any]:
    """The conversion's fidelity step: the original's outputs against LiteRT running the .tflite."""
    thresholds = thresholds_for(
        origin.precision, opts.min_cosine, opts.min_top1, opts.max_accuracy_drop, min_score=opts.min_score
    )
    record = check_step(
        origin.step,
        origin.original,
        results,
        ds.labels,
        thresholds,
        opts.allow_degraded,
        task=opts.task,
        metric=opts.metric,
    )
    record["reference"] = origin.reference
    log(f"  {origin.step}: {'ok' if record['passed'] else 'DEGRADED'} - {summary(record)}")
    return record


def _as_converted(report: Dict[str, Any], origin: Origin, step: Any) -> None:
    """A converted build's report: the export section and its judged step instead of 'taken as given'."""
    report.pop("taken_as_given")
    report["precision_detail"] = origin.precision
    report["source_size_bytes"] = origin.section.get("source_size_bytes")
    section = dict(origin.section)
    section["step"] = {k: step[k] for k in ("step", "samples", "passed", "failures", "outputs") if k in step}
    report["export"] = section
    report["fidelity"]["steps"] = [step]
    report["fidelity"]["passed"] = bool(step["passed"])
    report["fidelity"]["thresholds"] = step.get("thresholds", {})
    report["ops_graph"] = "the built .tflite model's operators"


def read_specs(path: Path) -> tuple:
    """(inputs, outputs, precision) from the LiteRT interpreter: int8/uint8 tensors make it ``int8 (as given)``."""
    from edgekit_agent.runners import tflite as runner_mod

    found = runner_mod._interpreter_module()
    try:
        it = found[1].Interpreter(model_path=str(path))  # type: ignore[index]
    except Exception as e:
        raise ModelError(f"{path} is not a TFLite model LiteRT reads: {str(e).strip().splitlines()[0]}") from None

    def specs(details: List[dict]) -> List[TensorSpec]:
        out = []
        for d in details:
            sig = d.get("shape_signature")
            dims = [
                int(v) if v > 0 else f"dim{i}"
                for i, v in enumerate(sig if sig is not None and len(sig) else d["shape"])
            ]
            out.append(TensorSpec(d["name"], dims, np.dtype(d["dtype"]).name, guess_layout(dims)))
        return out

    kinds = {np.dtype(t["dtype"]).name for t in it.get_tensor_details()}
    precision = (
        "int8 (as given)"
        if kinds & {"int8", "uint8"}
        else "fp16 (as given)"
        if "float16" in kinds
        else "fp32 (as given)"
    )
    return specs(it.get_input_details()), specs(it.get_output_details()), precision


def _dataset(opts: BuildOptions, inputs: List[TensorSpec]) -> Dataset:
    data = opts.val or opts.calib
    if data:
        return load_dataset(data, inputs, opts.preprocess, limit=400)
    fixed = [TensorSpec(s.name, [d if isinstance(d, int) else 1 for d in s.shape], s.dtype, s.layout) for s in inputs]
    return synthetic_dataset(fixed)


def tflite_ops(path: Path) -> List[Dict[str, Any]]:
    """``[{domain, op, version, count}]`` from the flatbuffer's operator codes: the tflite converter's own reader
    (``converters/tools/tflite_convert.py``, standard library at import), so a given file's op list is a built one's."""
    import importlib.util

    from .converters.tflite.common import TOOLS

    spec = importlib.util.spec_from_file_location("edgekit_tflite_convert", TOOLS / "tflite_convert.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return list(tool.tflite_ops(str(path)))


def _placement(staged: Path, ops: List[Dict[str, Any]], prof: Any, precision: str) -> Dict[str, Any]:
    """The delegate checks a built .tflite gets (edgekit.placement), on the given file's op list."""
    try:
        from .converters.base import BuildResult
        from .placement import explain_build

        result = BuildResult(
            model_file=staged / "model.tflite",
            extra_files=[],
            runtime="litert",
            runtime_version="",
            format="tflite",
            ops=ops,
            ops_graph="the given .tflite model",
        )
        ctx = types.SimpleNamespace(workdir=staged, profile=prof, precision=precision.split()[0])
        return explain_build(result, ctx, "tflite")  # type: ignore[arg-type]
    except Exception as e:  # advice: recorded instead
        return {"error": f"placement analysis failed: {type(e).__name__}: {e}"}


def _report(
    manifest: Dict[str, Any],
    files: List[Dict[str, Any]],
    ds: Dataset,
    sha: str,
    precision: str,
    path: Path,
    placement: Dict[str, Any],
    t0: float,
) -> Dict[str, Any]:
    step = {
        "step": STEP,
        "samples": len(ds),
        "outputs": {},
        "thresholds": {},
        "passed": True,
        "failures": [],
        "sha256": sha,
        "note": f"the bundle's model is the original file, byte for byte (sha256 {sha[:16]}...): nothing was "
        "converted, so nothing is compared here; the device compares its outputs with the original's own",
    }
    warnings = []
    if ds.synthetic:
        warnings.append("the sample outputs are from synthetic random inputs: pass --val with real data")
    return {
        "schema": "edgekit.build-report",
        "schema_version": SCHEMA_VERSION,
        "bundle_id": manifest["id"],
        "name": manifest["name"],
        "backend": "tflite",
        "precision": manifest["precision"],
        "precision_detail": precision,
        "profile": manifest["profile"],
        "format": "tflite",
        "runtime": manifest["runtime"],
        "source": manifest["source"],
        "taken_as_given": {"file": str(path), "sha256": sha, "converter": None, "precision": precision},
        "inputs": manifest["inputs"],
        "outputs": manifest["outputs"],
        "files": [dict(f, size_kb=round(f["size"] / 1024, 1)) for f in files],
        "model_size_bytes": files[0]["size"],
        "source_size_bytes": path.stat().st_size,
        "fidelity": {
            "data": ds.describe(),
            "thresholds": {},
            "passed": True,
            "degraded_allowed": False,
            "steps": [step],
        },
        "ops": manifest["ops"],
        "ops_graph": "the given .tflite model",
        "host_latency": None,
        "warnings": warnings,
        "placement": placement,
        "cache": {"hit": False, "key": None},
        "build_seconds": round(time.perf_counter() - t0, 3),
    }
