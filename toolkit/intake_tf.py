"""TensorFlow in: a SavedModel directory, a ``.keras`` file or a Keras ``.h5`` file.

TensorFlow never runs in edgekit's own Python: it lives in the ``tensorflow`` tool environment
(:data:`TOOLENV`, created on first use) and ``converters/tools/tf_export.py`` runs there. For the tflite backend
the model goes through TensorFlow's own TFLite converter (no ONNX round trip; INT8 calibrated by TF on the build's
``--calib`` samples) and is bundled by :func:`edgekit.intake_tflite.build_given` with an
:class:`~edgekit.intake_tflite.Origin`, judged against TensorFlow running the original. Every other backend gets an
ONNX export (tf2onnx) that :mod:`edgekit.intake` builds like a PyTorch export: the export is judged first.

Versions: TensorFlow 2.15 (tensorflow-cpu) with tf.keras = Keras 2.15 and tf2onnx 1.16.1. tf2onnx 1.16.1 (its
newest release) pins protobuf ~=3.20, which TensorFlow 2.15 accepts; 2.15 is the last TensorFlow whose tf.keras is
Keras 2, which is what tf2onnx is tested with. ``.keras`` files saved by Keras 2.13+ and ``.h5`` files load; a Keras 3
``.keras`` file may not: export it as a SavedModel (``model.export(dir)``) and build the directory.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import shapes as shapes_mod
from .errors import BackendUnavailable, ConversionError, ModelError
from .intake_torch import Exported
from .toolenvs import ToolEnvSpec

OPSET = 17  # tf2onnx 1.16's default opset range ends at 18; 17 is within what every converter here reads
KINDS = {".keras": "Keras", ".h5": "Keras H5", ".hdf5": "Keras H5"}

# tensorflow-cpu 2.15.1 and tf2onnx 1.16.1 with every dependency, as resolved together on Python 3.11 (x86_64 wheels)
REQUIREMENTS = (
    "tensorflow-cpu==2.15.1",
    "tf2onnx==1.16.1",
    "protobuf==3.20.3",
    "keras==2.15.0",
    "onnx==1.17.0",
    "numpy==1.26.4",
    "absl-py==2.5.1",
    "astunparse==1.6.3",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "cryptography==50.0.2",
    "flatbuffers==25.12.19",
    "gast==0.7.0",
    "google-auth==2.63.0",
    "google-auth-oauthlib==1.5.0",
    "google-pasta==0.2.0",
    "grpcio==1.85.3",
    "h5py==3.16.0",
    "idna==3.20",
    "libclang==18.1.1",
    "Markdown==3.11.3",
    "MarkupSafe==3.0.4",
    "ml-dtypes==0.3.2",
    "oauthlib==4.0.1",
    "opt_einsum==3.4.0",
    "packaging==26.4",
    "pyasn1==0.6.5",
    "pyasn1_modules==0.4.2",
    "pycparser==3.12",
    "requests==2.34.2",
    "requests-oauthlib==2.0.0",
    "six==1.17.0",
    "tensorboard==2.15.2",
    "tensorboard-data-server==0.7.2",
    "tensorflow-estimator==2.15.0",
    "tensorflow-io-gcs-filesystem==0.37.1",
    "termcolor==3.3.0",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
    "Werkzeug==3.1.9",
    "wrapt==1.14.2",
)

TOOLENV = ToolEnvSpec(
    name="tensorflow",
    pythons=("3.11", "3.10"),
    requirements=REQUIREMENTS,
    check="import tensorflow, tf2onnx",
    purpose="TensorFlow 2.15 (CPU) and tf2onnx: SavedModel and Keras intake",
    env=(
        ("TF_CPP_MIN_LOG_LEVEL", "2"),
        ("CUDA_VISIBLE_DEVICES", ""),
        ("TF_ENABLE_ONEDNN_OPTS", "0"),
        ("PIP_NO_INPUT", "1"),
    ),
)


def kind_of(model: Any) -> Optional[str]:
    """ "SavedModel", "Keras" or "Keras H5" for a TensorFlow model path, else None."""
    if not isinstance(model, (str, Path)):
        return None
    path = Path(model)
    if path.is_dir() and (path / "saved_model.pb").is_file():
        return "SavedModel"
    return KINDS.get(path.suffix.lower())


def call(action: str, model: Any, kind: str, work: Path, log: Any, **request: Any) -> Dict[str, Any]:
    """Run one action of the tool in the tensorflow environment (created here on first use)."""
    from . import toolenvs
    from .converters.tflite.common import TOOLS

    req = {"action": action, "model": str(Path(model).resolve()), "kind": kind, "step": f"TensorFlow {action}"}
    req.update(request)
    try:
        res = toolenvs.run_tool(TOOLENV, TOOLS / "tf_export.py", req, work, log=log)
    except BackendUnavailable as e:
        raise BackendUnavailable(f"a TensorFlow model needs the tensorflow tool environment: {e}") from None
    except ConversionError as e:
        text = str(e)
        for marker in ("CustomObjects: ", "UsageError: "):
            if marker in text:
                raise ModelError(text.split(marker, 1)[1].split("\n")[0]) from None
        raise
    if "error" in res:
        raise unsupported_op(res["error"], action)
    return res


def unsupported_op(err: Dict[str, Any], action: str) -> ConversionError:
    """An op the converter did not take: its name, the layer, and the options."""
    op, layer = err.get("op"), err.get("layer")
    what = f"the op {op}" if op else "the model"
    at = f" (layer {layer}, node {err.get('node')})" if layer else ""
    if action == "tflite":
        options = (
            "a newer TensorFlow's converter may have it as a builtin; SELECT_TF_OPS (Flex) would take it but is not "
            "available in the LiteRT builds edge devices run, so edgekit does not use it; replace the op in the model "
            "with builtin ones, or build for another backend (--backend ort/openvino: tf2onnx)"
        )
    else:
        options = (
            "a newer tf2onnx or opset may translate it (a custom op handler: tf2onnx's custom_op_handlers); replace "
            "the op in the model with ones ONNX has; or build for --backend tflite (TensorFlow's own converter)"
        )
    detail = "" if op else f": {str(err.get('detail', '')).strip().splitlines()[-1:]}"
    return ConversionError(f"{err.get('converter')} cannot convert {what}{at}{detail}. Options: {options}")


def fixed_shapes(
    inputs: List[Dict[str, Any]], declared: Optional[Dict[str, list]], keep_ranges: bool
) -> Dict[str, List[int]]:
    """A size per input dimension: ``--input-shape``'s, else the signature's, a dynamic batch (first dim) as 1.
    A range or set stays dynamic (-1) when ``keep_ranges`` (ONNX), else is refused (the TFLite converter fixes)."""
    names = [i["name"] for i in inputs]
    declared = declared or {}
    unknown = sorted(set(declared) - set(names))
    if unknown:
        raise ModelError(f"--input-shape names {unknown} but the model's inputs are {names}")
    out: Dict[str, List[int]] = {}
    for spec in inputs:
        n, dims = spec["name"], list(spec["shape"])
        given = declared.get(n)
        if given is not None:
            if len(given) != len(dims):
                raise ModelError(f"--input-shape {n}: {len(given)} dimensions, the model's input has {len(dims)}")
            dims = []
            for d in given:
                d = shapes_mod.as_decl(d)
                if isinstance(d, int):
                    dims.append(d)
                elif d is not None and keep_ranges:
                    dims.append(-1)
                else:
                    raise ModelError(
                        f"--input-shape {n}: give every dimension a size"
                        + ("" if keep_ranges else " (the TFLite converter fixes every size)")
                    )
        elif dims and dims[0] < 0:
            dims[0] = 1
        if any(d < 0 for d in dims[1:]) and given is None:
            raise ModelError(
                f"input {n} has dynamic dimensions {spec['shape']} (-1: None in the signature): declare them with "
                f"--input-shape {n}=D1,D2,... (a range [lo:hi] keeps one dynamic in an ONNX build)"
            )
        out[n] = dims
    return out


def save_samples(path: Path, names: Sequence[str], samples: Sequence[Dict[str, np.ndarray]]) -> None:
    """The tool's sample format: key "<sample>.<input>" (inputs in the signature's order)."""
    arrays: Dict[str, Any] = {f"{i}.{j}": np.asarray(s[n]) for i, s in enumerate(samples) for j, n in enumerate(names)}
    np.savez(path, **arrays)


def load_outputs(path: Path, names: Sequence[str], count: int) -> List[Dict[str, np.ndarray]]:
    data = np.load(path)
    return [{n: data[f"{i}.{j}"] for j, n in enumerate(names)} for i in range(count)]


def section_of(model: Any, kind: str, res: Dict[str, Any], converter: str) -> Dict[str, Any]:
    """The report's ``export`` section, shared by both paths."""
    from .model import file_sha256

    path = Path(model)
    v = res["versions"]
    return {
        "framework": "TensorFlow",
        "from": kind,
        "file": str(path),
        "sha256": file_sha256(path) if path.is_file() else None,
        "source_size_bytes": path.stat().st_size
        if path.is_file()
        else sum(p.stat().st_size for p in path.rglob("*") if p.is_file()),
        "exporter": converter,
        "tensorflow": v.get("tensorflow"),
        "keras": v.get("keras"),
        "tf2onnx": v.get("tf2onnx"),
        "signature_inputs": res["inputs"],
        "export_seconds": res.get("seconds"),
        "reference": f"TensorFlow {v.get('tensorflow')} running the original model",
        "tool_environment": f"tensorflow (Python {v.get('python')})",
    }


def dynamic_dims(inputs: List[Dict[str, Any]], shapes: Dict[str, List[int]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for spec in inputs:
        got = shapes[spec["name"]]
        dims = {
            str(i): ("dynamic" if got[i] < 0 else f"fixed to {got[i]}") for i, d in enumerate(spec["shape"]) if d < 0
        }
        if dims:
            out[spec["name"]] = dims
    return out


def export(model: Any, kind: str, declared: Optional[Dict[str, list]], log: Callable[[str], None]) -> Exported:
    """tf2onnx in the tensorflow environment: ``Exported`` (its ``run`` runs the original there)."""
    work = Path(tempfile.mkdtemp(prefix="edgekit-tf-export-"))
    try:
        name = Path(model).resolve().name.split(".")[0] or "model"
        path = work / f"{name}.onnx"
        t0 = time.perf_counter()
        shapes = None
        if declared:  # else the tool takes the signature's sizes (one TensorFlow start fewer)
            info = call("inspect", model, kind, work / "inspect", log)
            shapes = fixed_shapes(info["inputs"], declared, keep_ranges=True)
        res = call("onnx", model, kind, work / "onnx", log, shapes=shapes, opset=OPSET, output=str(path))
        if shapes is None:
            shapes = fixed_shapes(res["inputs"], None, keep_ranges=True)  # raises where a dimension needs a size
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log(f"exported {name} ({kind}) to ONNX opset {OPSET} with tf2onnx in {time.perf_counter() - t0:.1f} s")
    section = section_of(model, kind, res, f"tf2onnx {res['versions'].get('tf2onnx')}: the serving signature")
    section.update(opset=OPSET, dynamic_dims=dynamic_dims(res["inputs"], shapes))
    names = [i["name"] for i in res["inputs"]]
    outs = [o["name"] for o in res["outputs"]]

    def run(samples: Sequence[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
        save_samples(work / "samples.npz", names, samples)
        call("run", model, kind, work / "run", log, samples=str(work / "samples.npz"), outputs_npz=str(work / "o.npz"))
        return load_outputs(work / "o.npz", outs, len(samples))

    return Exported(onnx_path=path, name=name, section=section, run=run, workdir=work)


def build_tflite(model: Any, kind: str, profile: Any, output: Any, opts: Any) -> Dict[str, Any]:
    """TensorFlow's TFLite converter (fp32, fp16, int8 calibrated on ``opts.calib``), bundled by intake_tflite
    and judged against TensorFlow running the original on the same samples."""
    from . import bundle as bundle_mod
    from . import intake_tflite
    from .data import load_dataset, synthetic_dataset
    from .model import TensorSpec, guess_layout, parse_input_shapes

    log = opts.log or (lambda m: None)
    unused = [n for n in ("prune", "prune_recipe", "budget", "stream") if getattr(opts, n) not in (None, False)]
    if unused:
        raise ModelError(
            f"{unused[0]} is not taken on the tflite backend's TensorFlow path (TensorFlow's own converter): drop "
            "it, or build for another backend (tf2onnx, then the ordinary build with every option)"
        )
    precision = "fp32" if opts.precision in (None, "auto") and not opts.calib else opts.precision
    precision = "int8" if precision in (None, "auto") else precision
    if precision not in ("fp32", "fp16", "int8"):
        raise ModelError(
            f"--precision {precision}: TensorFlow's TFLite converter builds fp32, fp16 or int8 (full integer, with "
            "--calib) here"
        )
    if precision == "int8" and not opts.calib:
        raise ModelError("int8 needs calibration data: --calib samples.npz (one array per input, names as the model's)")
    intake_tflite.runs_tflite(profile)
    bundle_mod.check_output(output)
    declared = (
        parse_input_shapes(opts.input_shapes) if isinstance(opts.input_shapes, (list, tuple)) else opts.input_shapes
    )
    work = Path(tempfile.mkdtemp(prefix="edgekit-tf-tflite-"))
    try:
        info = call("inspect", model, kind, work / "inspect", log)
        shapes = fixed_shapes(info["inputs"], declared, keep_ranges=False)
        specs = [
            TensorSpec(i["name"], shapes[i["name"]], i["dtype"], guess_layout(shapes[i["name"]]))
            for i in info["inputs"]
        ]
        names = [s.name for s in specs]
        data = opts.val or opts.calib
        ds = load_dataset(data, specs, opts.preprocess, limit=400) if data else synthetic_dataset(specs)
        request: Dict[str, Any] = {"precision": precision, "output": str(work / "model.tflite")}
        if declared:
            request["shapes"] = shapes
        if precision == "int8":
            calib = load_dataset(opts.calib, specs, opts.preprocess, limit=400)
            save_samples(work / "calib.npz", names, calib.samples)
            request["calib"] = str(work / "calib.npz")
        save_samples(work / "samples.npz", names, ds.samples)
        request.update(samples=str(work / "samples.npz"), outputs_npz=str(work / "original.npz"))
        res = call("tflite", model, kind, work / "convert", log, **request)
        log(f"converted {Path(model).name} ({kind}) with {res['converter']} ({precision}) in {res['seconds']:.1f} s")
        original = load_outputs(work / "original.npz", [o["name"] for o in res["outputs"]], len(ds))
        bundle_mod.write_json(work / "io_layout.json", res["io"])
        section = section_of(model, kind, res, res["converter"])
        section.update(precision=precision, dynamic_dims=dynamic_dims(info["inputs"], shapes))
        if "calibration_samples" in res:
            section["calibration_samples"] = res["calibration_samples"]
        origin = intake_tflite.Origin(
            path=work / "model.tflite",
            source=Path(model),
            precision=precision,
            io=res["io"],
            dataset=ds,
            original=original,
            section=section,
            step=f"{precision} ({kind} -> TFLite, TensorFlow's converter)",
            reference=section["reference"],
        )
        return intake_tflite.build_given(model, profile, output, opts, origin=origin)
    finally:
        shutil.rmtree(work, ignore_errors=True)
