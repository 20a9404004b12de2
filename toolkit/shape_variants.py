"""One static model per declared shape, in one bundle: for a backend or accelerator that needs static shapes, a
declaration with ranges or sets (``--input-shape x=1,3,48,[160:960]``) is built once per point, each checked at its
own shape, and the models are merged into the typical point's bundle (docs/SHAPES.md, "One model per declared
shape").

The points: a range gives its min, typical and max; sets give one model per size when every varying dimension is a
set of the same length (the k-th size of each together), else their min, typical and max too. The typical point's
model stays ``manifest["model"]``; the others are ``model.v1.EXT``, ``model.v2.EXT``, ... listed in
``manifest["variants"]`` with the files each needs, every one of them in ``manifest["files"]`` with its sha256.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import bundle as bundle_mod
from . import fidelity
from .shape_checks import SHAPE_SAMPLES, fit
from .shapes import Choice, Decl, Range, as_decl, parse_input_shapes

Point = Dict[str, List[int]]
# Files of a variant's own bundle that describe its samples, not its model: the typical point's are kept.
SAMPLE_ROLES = ("sample_inputs", "expected_outputs", "shape_samples")


def points(declared: Dict[str, List[Decl]], typical: Point) -> List[Tuple[str, Point]]:
    """``[(label, {input: shape})]``, one per model: ``typical`` for the typical point, ``v1``, ``v2``, ... for the
    others in order of size; ``[]`` when nothing declared varies (one model, as before)."""
    varying = [(n, i, d) for n, dims in declared.items() for i, d in enumerate(dims) if isinstance(d, (Range, Choice))]
    if not varying:
        return []
    sets = [d for _, _, d in varying if isinstance(d, Choice)]
    per_size = len(sets) == len(varying) and len({len(d.sizes) for d in sets}) == 1
    count = len(sets[0].sizes) if per_size else 3
    shapes: List[Point] = []
    for k in range(count):
        point = {n: list(s) for n, s in typical.items()}
        for n, i, d in varying:
            if per_size:
                point[n][i] = sorted(d.sizes)[k]  # type: ignore[union-attr]
            elif k != 1 or not d.allows(typical[n][i]):
                point[n][i] = d.values()[k]
        if point not in shapes:
            shapes.append(point)
    if typical not in shapes:  # the data's size in a set: still its own model
        shapes.append({n: list(s) for n, s in typical.items()})
    out, k = [], 0
    for point in shapes:
        if point == typical:
            out.append(("typical", point))
        else:
            k += 1
            out.append((f"v{k}", point))
    return out


def declaration(input_shapes: Any) -> Dict[str, List[Decl]]:
    """``--input-shape`` strings or a Python ``{input: [dims]}`` as declarations (``edgekit.shapes``)."""
    if isinstance(input_shapes, (list, tuple)):
        return parse_input_shapes(input_shapes)
    return {name: [as_decl(d) for d in dims] for name, dims in dict(input_shapes).items()}


def fit_data(path: Any, point: Point, workdir: Path) -> Any:
    """``path`` (an ``.npz``/``.npy`` whose arrays hold samples along axis 0) with each input cropped or wrapped to
    ``point``, written under ``workdir``; other data (an image folder, .jsonl) is returned as it is."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_file() or path.suffix not in (".npz", ".npy"):
        return path
    if path.suffix == ".npy":
        (name,) = point if len(point) == 1 else (None,)
        arrays = {name: np.load(path, allow_pickle=False)} if name else {}
    else:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    if not arrays:
        return path
    for name, shape in point.items():
        a = arrays.get(name)
        if a is not None and a.ndim == len(shape):
            arrays[name] = fit(a, [a.shape[0]] + list(shape[1:]))
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / (path.stem + ".npz")
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out


def _renamed(name: str, label: str) -> str:
    """``model.tflite`` -> ``model.v1.tflite``; any other file ``NAME`` -> ``v1.NAME``."""
    stem, dot, ext = name.partition(".")
    return f"{stem}.{label}.{ext}" if stem == "model" and dot else f"{label}.{name}"


def _fidelity(report: Dict[str, Any]) -> Dict[str, Any]:
    steps = report["fidelity"]["steps"]
    return {
        "passed": report["fidelity"]["passed"],
        "steps": [{"step": s["step"], "passed": s["passed"], "summary": fidelity.summary(s)} for s in steps],
    }


def _shape_samples(staged: Path, others: Sequence[Tuple[str, Path]]) -> Optional[Path]:
    """Each other variant's own sample, keys ``LABEL.INPUT``: the agent's benchmark times every model with it."""
    arrays: Dict[str, Any] = {}
    for label, src_dir in others:
        with np.load(src_dir / "sample_inputs.npz", allow_pickle=False) as z:
            arrays.update((f"{label}.{k}", z[k]) for k in z.files)
    if not arrays or (staged / SHAPE_SAMPLES).exists():
        return None
    np.savez(staged / SHAPE_SAMPLES, **arrays)
    return staged / SHAPE_SAMPLES


def _allowed(variants: Sequence[Dict[str, Any]], name: str) -> List[Any]:
    """Per dimension: the size every variant has, else ``{"values": [...]}`` of theirs."""
    sizes = list(zip(*(v["shapes"][name] for v in variants)))
    return [dims[0] if len(set(dims)) == 1 else {"values": sorted(set(dims))} for dims in sizes]


def _per_shape(note: str) -> str:
    head, sep, _ = note.partition(": fixed at ")
    return f"{head}: fixed per declared shape, one model each" if sep else note


def merge(staged: Path, built: Sequence[Tuple[str, Point, Path]], output: Optional[Path] = None) -> Dict[str, Any]:
    """Merge the bundles in ``built`` (``(label, point, bundle_dir)``, the ``typical`` one already copied to
    ``staged``) into ``staged``: files, ``variants``, allowed shapes, id and report; return the report."""
    manifest = json.loads((staged / bundle_mod.MANIFEST).read_text())
    report = json.loads((staged / bundle_mod.REPORT_JSON).read_text())
    variants, summaries = [], []
    for label, point, src_dir in built:
        own = json.loads((src_dir / bundle_mod.MANIFEST).read_text())
        sub_report = report if label == "typical" else json.loads((src_dir / bundle_mod.REPORT_JSON).read_text())
        if label == "typical":
            names = [f["name"] for f in manifest["files"] if f["role"] not in SAMPLE_ROLES]
            model = manifest["model"]
        else:
            names = []
            for f in own["files"]:
                if f["role"] in SAMPLE_ROLES:
                    continue
                name = _renamed(f["name"], label)
                (staged / name).write_bytes((src_dir / f["name"]).read_bytes())
                manifest["files"].append(bundle_mod.file_entry(staged / name, name, f["role"]))
                names.append(name)
            model = _renamed(own["model"], label)
        inputs = [{k: v for k, v in s.items() if k != "allowed"} for s in own["inputs"]]
        variants.append({"label": label, "shapes": point, "model": model, "files": names, "inputs": inputs,
                         "runner": own.get("runner")})  # fmt: skip
        summaries.append({"label": label, "shapes": point, "model": model, "fidelity": _fidelity(sub_report)})
    manifest["variants"] = variants
    samples = _shape_samples(staged, [(label, src_dir) for label, _, src_dir in built if label != "typical"])
    if samples is not None:
        manifest["files"].append(bundle_mod.file_entry(samples, samples.name, "shape_samples"))
    allowed = {s["name"]: _allowed(variants, s["name"]) for s in manifest["inputs"]}
    for s in manifest["inputs"]:
        if "allowed" in s or allowed[s["name"]] != s["shape"]:
            s["allowed"] = allowed[s["name"]]
    section = dict(manifest.get("shapes") or {"dynamic": False})
    section.update(
        allowed=allowed,
        points=[{"label": label, "shapes": point} for label, point, _ in built],
        variants=summaries,
    )
    if section.get("fixed_because"):  # "WHY: fixed at x=[...]" -> "WHY: fixed per declared shape"
        section["fixed_because"] = _per_shape(section["fixed_because"])
    manifest["shapes"] = section
    manifest["id"] = bundle_mod.bundle_id(manifest)
    bundle_mod.write_json(staged / bundle_mod.MANIFEST, manifest)
    report.update(
        bundle_id=manifest["id"],
        inputs=manifest["inputs"],
        shapes=section,
        files=[dict(f, size_kb=round(f["size"] / 1024, 1)) for f in manifest["files"]],
        **({"output": str(output)} if output is not None else {}),
    )
    report["warnings"] = [_per_shape(w) for w in report.get("warnings", [])]
    report["fidelity"]["passed"] = all(v["fidelity"]["passed"] for v in summaries)
    return report
