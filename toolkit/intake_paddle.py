"""Paddle in: a Paddle inference model (``.pdmodel`` + ``.pdiparams``), read, run and exported in the paddlelite
tool environment (paddlepaddle 2.6.2, paddle2onnx, Paddle Lite's ``opt``; ``converters/tools/paddle_intake.py``).

The ONNX export (paddle2onnx) is the reference of an ordinary build, its step judged first against Paddle Inference
running the original on the build's own samples. The paddlelite backend does not convert that ONNX model: ``opt``
reads the original (``Exported.paddle``) and the ``.nb`` is judged against Paddle's outputs directly
(``Exported.reference_for``).

A program in the JSON format (Paddle 3, PIR: ``inference.json`` + ``.pdiparams``) is read, run and exported in a
second tool environment, ``paddle3`` (paddlepaddle 3, paddle2onnx 2; ``converters/tools/paddle3_intake.py``).
Paddle Lite's ``opt`` reads only the older program format and Paddle 3 cannot write a PIR program in it, so such a
model reaches paddlelite through its ONNX export (x2paddle, then opt), as an ONNX model does.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import BackendUnavailable, ConversionError, ModelError
from .toolenvs.spec import ToolEnvSpec

NAMES = ("inference", "model")  # the stems a model directory is searched for, in this order
OPSET = 13  # asked of paddle2onnx; it raises it where an op needs a newer one (hard_swish: 14)
OPTIONS = (
    "Options: replace the op in the model with ones paddle2onnx maps, or export ONNX yourself with a paddle2onnx "
    "that maps it (or with a custom op: paddle2onnx's custom_op_info) and build the .onnx"
)

PADDLE3 = ToolEnvSpec(
    name="paddle3",
    pythons=("3.10",),  # the one its pins were resolved and tested on
    requirements=(  # every package of the environment (resolved on Python 3.10), pinned
        "paddlepaddle==3.3.1",
        "paddle2onnx==2.1.0",
        "onnx==1.17.0",
        "onnxoptimizer==0.3.13",
        "polygraphy==0.53.6",
        "packaging==26.4",  # imported by paddle2onnx 2.1.0, which does not declare it
        "anyio==4.16.0",
        "certifi==2026.10.19.post1",
        "exceptiongroup==1.3.2",
        "h11==0.16.0",
        "httpcore==1.0.9",
        "httpx==0.28.1",
        "idna==3.20",
        "ml_dtypes==0.7.0",
        "networkx==3.4.2",
        "numpy==2.2.6",
        "opt-einsum==3.3.0",
        "pillow==12.3.0",
        "protobuf==7.36.2",
        "safetensors==0.8.0",
        "typing_extensions==4.16.0",
    ),
    check="import paddle, paddle2onnx, onnx, onnxoptimizer",
    purpose="Paddle 3 programs in the JSON format (PIR): read and run by paddlepaddle 3, exported by paddle2onnx 2",
    env=(("POLYGRAPHY_AUTOINSTALL_DEPS", "0"),),
)


@dataclass
class Exported:
    """An ONNX model exported from a Paddle inference model, and what runs the original."""

    onnx_path: Path
    name: str  # the bundle's default name
    section: Dict[str, Any]  # the report's ``export`` section
    run: Callable[[Sequence[Dict[str, np.ndarray]]], List[Dict[str, np.ndarray]]] = field(repr=False)
    workdir: Path = field(repr=False)
    paddle: Dict[str, Any] = field(default_factory=dict)  # the original for opt: model, params, input_names, ...
    source: Dict[str, Any] = field(default_factory=dict)  # what runs the original: model, params, input_names
    reference_for: Tuple[str, ...] = ("paddlelite",)  # backends converting the original: judged against Paddle
    original_outputs: Optional[List[Dict[str, np.ndarray]]] = field(default=None, repr=False)  # run's last


def is_paddle_source(model: Any) -> bool:
    """A ``.pdmodel``, a JSON program with its ``.pdiparams`` beside it, or a directory holding a ``.pdmodel``."""
    if not isinstance(model, (str, Path)):
        return False
    path = Path(model)
    if path.suffix.lower() == ".pdmodel":
        return True
    if path.suffix.lower() == ".json":
        return path.with_suffix(".pdiparams").is_file()
    return path.is_dir() and (any(path.glob("*.pdmodel")) or any(path.glob("*.pdiparams")))


def locate(model: Any) -> Tuple[Path, Path]:
    """(the .pdmodel or JSON program, its .pdiparams), or a ModelError saying what is missing."""
    path = Path(model)
    if path.is_dir():
        found = [path / f"{n}.pdmodel" for n in NAMES if (path / f"{n}.pdmodel").is_file()]
        found += sorted(p for p in path.glob("*.pdmodel") if p not in found)
        if not found:
            found = [path / f"{n}.json" for n in NAMES if (path / f"{n}.json").is_file()]
        if not found:
            looked = ", ".join(f"{n}.{x}" for x in ("pdmodel", "json") for n in NAMES)
            raise ModelError(f"{path} holds no Paddle program (looked for {looked}, then any .pdmodel)")
        path = found[0]
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    params = path.with_suffix(".pdiparams")
    if not params.is_file():
        raise ModelError(
            f"{path.name} has no parameters beside it: {params.name} is missing. A Paddle inference model is the "
            "pair written by paddle.jit.save / paddle.static.save_inference_model: put the .pdiparams next to it"
        )
    return path, params


def _spec(json_format: bool) -> ToolEnvSpec:
    if json_format:
        return PADDLE3
    from .converters.paddlelite.backend import BACKEND

    return BACKEND.toolenv  # type: ignore[no-any-return]


def _tool(request: Dict[str, Any], work: Path, log: Any = None) -> Dict[str, Any]:
    from . import toolenvs
    from .converters.paddlelite.backend import TOOLS

    json_format = str(request["model"]).lower().endswith(".json")
    script = "paddle3_intake.py" if json_format else "paddle_intake.py"
    try:
        return toolenvs.run_tool(_spec(json_format), TOOLS / script, request, work, log=log)
    except BackendUnavailable as e:
        if json_format:
            raise BackendUnavailable(
                f"a Paddle program in the JSON format (Paddle 3, PIR) is read by edgekit's paddle3 tool environment "
                f"(paddlepaddle 3.3.1, paddle2onnx 2.1.0), which could not be created: {e}. Retry with network "
                "access to PyPI; or export ONNX yourself (paddle2onnx 2.x) and build the .onnx"
            ) from None
        raise BackendUnavailable(
            f"a Paddle model is read by edgekit's Paddle tool environment (paddlepaddle 2.6.2, paddle2onnx, "
            f"paddlelite), which could not be created: {e}. Retry with network access to PyPI, or create it with "
            "`edgekit backends install paddlelite`; or export ONNX yourself (paddle2onnx) and build the .onnx"
        ) from None


def export(model: Any, input_shapes: Optional[Dict[str, list]], log: Callable[[str], None]) -> Exported:
    """Read the Paddle model, check it, export it to ONNX in a temporary folder (the caller removes it)."""
    from .model import file_sha256

    pdmodel, params = locate(model)
    work = Path(tempfile.mkdtemp(prefix="edgekit-export-"))
    try:
        base = {"model": str(pdmodel.resolve()), "params": str(params.resolve())}
        json_format = pdmodel.suffix.lower() == ".json"
        log(f"reading the Paddle inference model {pdmodel.name} ({_spec(json_format).name} tool environment)")
        onnx_path = work / f"{pdmodel.stem}.onnx"
        request: Dict[str, Any] = dict(base, action="export", onnx=str(onnx_path), opset=OPSET, step="paddle2onnx")
        request.update(info=str(work / "info.json"), opt_dir=str(work / "for-opt"))
        try:
            res = _tool(request, work / "x")
        except ConversionError as e:
            if not (work / "info.json").is_file():
                raise
            raise _unsupported(work / "x", json.loads((work / "info.json").read_text()), e) from None
        info = res["info"]
        if info["training"]:
            raise ModelError(
                f"{pdmodel.name} is a training program, not an inference model: {info['training']}. Save the "
                "inference model with paddle.jit.save(layer, path, input_spec=[...]) (or "
                "paddle.static.save_inference_model) and build that"
            )
        _check_shapes(info["inputs"], input_shapes)
        log(f"exported {pdmodel.name} to ONNX opset {res['opset']} (paddle2onnx {res['paddle2onnx']})")
        v = info["versions"]
        section: Dict[str, Any] = {
            "from": "JSON inference model" if json_format else "inference model",
            "framework": "Paddle",
            "file": str(pdmodel),
            "sha256": file_sha256(pdmodel),
            "params_sha256": file_sha256(params),
            "exporter": f"paddle2onnx {res['paddle2onnx']}",
            "paddlepaddle": v["paddlepaddle"],
            "framework_version": f"paddlepaddle {v['paddlepaddle']}",
            "paddle2onnx": res["paddle2onnx"],
            "reference": f"Paddle Inference {v['paddlepaddle']} running the original model",
            "opset": res["opset"],
            "dynamic_dims": {
                i["name"]: {str(a): "-1" for a, d in enumerate(i["shape"]) if d < 0}
                for i in info["inputs"]
                if any(d < 0 for d in i["shape"])
            },
            "feed": {i["name"]: {"shape": i["shape"], "dtype": i["dtype"]} for i in info["inputs"]},
            "export_seconds": res["seconds"],
        }
        exported = Exported(onnx_path=onnx_path, name=pdmodel.stem, section=section, run=lambda s: [], workdir=work)
        exported.source = dict(base, input_names=[i["name"] for i in info["inputs"]])
        if json_format:  # opt cannot read it: paddlelite converts the ONNX export, judged against it
            exported.reference_for = ()
        else:
            exported.paddle = dict(
                exported.source,
                output_names=[o["name"] for o in info["outputs"]],
                # {model, params, flatten_as_reshape2}: what opt reads where the given program crashes it
                for_opt=info["for_opt"],
                ops=info["ops"],  # [{type, outputs}]: to name an op a converter lacks
            )
        exported.run = lambda samples: _run(exported, samples)
        return exported
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _check_shapes(inputs: List[Dict[str, Any]], given: Optional[Dict[str, list]]) -> None:
    names = [i["name"] for i in inputs]
    unknown = sorted(set(given or {}) - set(names))
    if unknown:
        raise ModelError(f"--input-shape names {unknown} but the Paddle model's inputs (feed vars) are {names}")


def _run(exported: Exported, samples: Sequence[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
    """Paddle Inference running the original on ``samples``; outputs named as the ONNX export's, in order."""
    import onnx

    work = Path(tempfile.mkdtemp(prefix="run-", dir=exported.workdir))
    try:
        feeds = exported.source["input_names"]
        arrays = {f"{i}/{n}": np.asarray(s[n]) for i, s in enumerate(samples) for n in feeds}
        np.savez(work / "in.npz", **arrays)  # type: ignore[arg-type]
        req = dict(
            model=exported.source["model"],
            params=exported.source["params"],
            action="run",
            samples=str(work / "in.npz"),
            count=len(samples),
        )
        res = _tool(dict(req, out=str(work / "out.npz"), step="run the Paddle model"), work)
        onnx_names = [o.name for o in onnx.load(str(exported.onnx_path), load_external_data=False).graph.output]
        with np.load(work / "out.npz") as data:
            outs = [{o: data[f"{i}/{n}"] for o, n in zip(onnx_names, res["outputs"])} for i in range(len(samples))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    exported.original_outputs = outs
    return outs


def _unsupported(work: Path, info: Dict[str, Any], error: Exception) -> ConversionError:
    """The error for a model paddle2onnx cannot export: the op(s), the output var of each, the options."""
    said = ""
    log = work / "paddle_intake.stdout.log"
    if log.is_file():
        said = log.read_text(errors="replace")
    found = re.search(r"not supported yet, including ([\w, ]+)", said)
    if not found and "unsupported operators" in str(error):  # paddle2onnx 2 aborts before its list is printed
        types = sorted({o["type"] for o in info["ops"]})
        return ConversionError(
            f"paddle2onnx {info['versions']['paddle2onnx']} cannot export an op of this Paddle model and aborted "
            f'without naming it ("Due to the unsupported operators, the conversion is aborted"); the program\'s '
            f"ops are {', '.join(types)}. {OPTIONS}"
        )
    if not found:
        return ConversionError(f"paddle2onnx could not export the Paddle model: {error}. {OPTIONS}")
    ops = [o.strip() for o in found.group(1).split(",") if o.strip()]
    where = []
    for op in ops:
        outs = [o["outputs"][0] for o in info["ops"] if o["type"] == op and o["outputs"]]
        where.append(
            f"{op} (output {outs[0]!r}{f' and {len(outs) - 1} more' if len(outs) > 1 else ''})" if outs else op
        )
    return ConversionError(
        f"paddle2onnx {info['versions']['paddle2onnx']} cannot export the Paddle op(s) {'; '.join(where)}. {OPTIONS}"
    )
