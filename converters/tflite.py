"""TFLite / LiteRT backend: ONNX -> ``.tflite`` in FP32, FP16 weights, dynamic-range INT8 and full INT8
calibrated with the user's data.

Choices, and why (measured with onnx2tf 2.6.9, ai-edge-quantizer 0.5.1 and ai-edge-litert 2.1.2 on x86
and the PP-OCR cls model):

- The converter runs in a tool environment (:mod:`edgekit.toolenvs`, Python 3.12+): onnx2tf 2.x writes
  the .tflite directly (its ``flatbuffer_direct`` path) without TensorFlow, but needs Python >= 3.12.
  onnxsim first fixes every shape (without it onnx2tf fails on PP-OCR's Softmax). Nothing is downloaded
  at conversion time (2.x ships its TFLite schema; verified with the network unshared).
- Quantization is ai-edge-quantizer on the FP32 .tflite, in the same environment: fp16 = FP16 weights
  dequantized at load, int8-dynamic = INT8 weights with activations quantized at run time, int8 = static
  INT8 (min/max calibration on the user's samples). onnx2tf's own dynamic-range file outputs NaN on
  PP-OCR and its strict full-int8 path refuses HardSigmoid.
- Layout: onnx2tf makes 4-D inputs and outputs channels-last (NHWC). The bundle keeps the ONNX model's
  inputs and outputs (what the user feeds: NCHW); the runner transposes with the permutations the
  converter measured on a structured sample (``io_layout.json`` beside the model and
  ``manifest["runner"]["io"]``). Fidelity is checked through the same runner code the agent runs.
- On x86, static INT8 runs about 2x faster than FP32 under XNNPACK and dynamic-range runs slower than
  FP32, so the host profile prefers int8 when calibration data is given, else fp32.
"""

import json
import os
import time
from pathlib import Path

from edgekit.toolenvs import ToolEnvSpec

from .base import Backend, BuildResult

TOOLS = Path(__file__).resolve().parent / "tools"
IO_FILE = "io_layout.json"

# onnx2tf 2.x and every package it needs, as resolved together on Python 3.12 (no TensorFlow), all pinned
# and installed from wheels; ai-edge-quantizer 0.5.1 is the newest release that accepts onnx2tf's
# ai-edge-litert pin.
REQUIREMENTS = (
    "onnx2tf==2.6.9",
    "ai-edge-quantizer==0.5.1",
    "ai-edge-litert==2.1.2",
    "absl-py==2.5.1",
    "backports.strenum==1.2.8",
    "flatbuffers==25.12.19",
    "h5py==3.14.0",
    "immutabledict==4.3.1",
    "iniconfig==2.3.1",
    "litert-lm-builder==0.18.1",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "ml_dtypes==0.5.4",
    "mpmath==1.3.0",
    "numpy==2.2.6",
    "onnx-ir==1.1.0",
    "onnx==1.20.1",
    "onnxoptimizer==0.4.2",
    "onnxruntime==1.26.0",
    "onnxscript==0.6.2",
    "onnxsim==0.6.5",
    "opencv-python==4.13.0.92",
    "packaging==26.4",
    "pluggy==1.7.0",
    "protobuf==7.35.1",
    "psutil==5.9.5",
    "Pygments==2.21.0",
    "pytest==9.0.2",
    "rich==15.0.0",
    "scipy==1.18.1",
    "setuptools==81.0.0",
    "sne4onnx==2.0.1",
    "sng4onnx==2.0.1",
    "sympy==1.14.0",
    "tomli==2.5.0",
    "tqdm==4.67.1",
    "typing_extensions==4.16.0",
)
TOOLENV = ToolEnvSpec(
    name="tflite",
    pythons=("3.12", "3.13"),
    requirements=REQUIREMENTS,
    check="import onnx2tf, onnxsim, onnxruntime, ai_edge_quantizer, ai_edge_litert.interpreter",
    purpose="onnx2tf 2.x (ONNX -> TFLite without TensorFlow) and ai-edge-quantizer",
    env=(
        ("TQDM_DISABLE", "1"),
        ("TF_CPP_MIN_LOG_LEVEL", "2"),
        ("PIP_NO_INDEX", "1"),
        ("PIP_NO_INPUT", "1"),
        ("HF_HUB_OFFLINE", "1"),
    ),
)


def _runner_module():
    from edgekit_agent.runners import tflite

    return tflite


def _threads(threads):
    return threads or min(4, os.cpu_count() or 1)


def _structured_probe(specs, seed=0):
    """One input per spec with spatial structure (gradients and waves differing per axis), so a wrong
    layout shows as a large error (random noise through global pooling hides it)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in s.shape]
        grids = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
        a = np.zeros(shape)
        for axis, g in enumerate(grids):
            a += np.sin((g + 1) * (0.37 + 0.23 * axis)) * (axis + 1) / len(shape)
        a += 0.05 * rng.standard_normal(shape)
        out[s.name] = a.astype(s.dtype if s.dtype.startswith("float") else "float32")
    return out


class TFLiteBackend(Backend):
    name = "tflite"
    install_hint = (
        "The host needs the LiteRT runtime for fidelity checks: pip install 'edgekit[tflite]' "
        "(ai-edge-litert); the converter lives in a tool environment edgekit creates "
        "(`edgekit backends install tflite`)."
    )
    toolenv = TOOLENV

    # per-build state lives in ctx.session: the FP32 .tflite of each reference (host timing) and, in
    # memo["tflite.converted"], the tool's result for the build's conversion (mixed precision)

    def availability(self):
        from edgekit import toolenvs

        found = _runner_module()._interpreter_module()
        env = toolenvs.state(self.toolenv)
        if found is None:
            return False, "ai-edge-litert is not installed (the host runs each step's output for the fidelity checks)"
        if env.get("interpreter_missing"):
            return False, f"{found[0]} {found[2]}; {env['detail']}"
        where = (
            "ready"
            if env["ready"]
            else "not created yet: `edgekit backends install tflite` or the first build creates it"
        )
        return True, f"{found[0]} {found[2]} (XNNPACK on CPU); converter tool environment {where}"

    def explain_unavailable(self, detail):
        # the install hint is for a missing LiteRT; a missing interpreter for the tool environment says its own fix
        return f"{detail}. {self.install_hint}" if _runner_module()._interpreter_module() is None else detail

    def runtime_version(self):
        found = _runner_module()._interpreter_module()
        return found[2] if found else None

    def default_precision(self, profile, have_calib):
        for p in profile.backend("tflite").get("precisions", ["fp32"]):
            if p == "int8" and not have_calib:
                continue
            if p in self.precisions:
                return p
        return "fp32"

    def host_settings(self, arch, isa):
        import importlib.util

        if importlib.util.find_spec("ai_edge_litert") is None and importlib.util.find_spec("tflite_runtime") is None:
            return None
        # XNNPACK: static int8 ~2x faster than fp32 on x86; dynamic-range int8 slower than fp32 (measured).
        return {"delegates": ["xnnpack"], "precisions": ["int8", "fp32"]}

    # -- host-side inference (fidelity, timing) -------------------------------------
    def _model(self, model_path, threads, specs_from=None):
        """The agent's runner on the host, with the layout file beside the model."""
        tfl = _runner_module()
        model_path = Path(model_path)
        io_path = model_path.parent / IO_FILE
        io = json.loads(io_path.read_text()) if io_path.is_file() else {}
        inputs = [{"name": e["name"]} for e in io.get("inputs", [])]
        outputs = [{"name": e["name"]} for e in io.get("outputs", [])]
        if not inputs:  # no layout file: feed by the model's own tensor names, no transposition
            mod = tfl._interpreter_module()
            if mod is None:
                from edgekit.errors import BackendUnavailable

                raise BackendUnavailable(f"ai-edge-litert is not installed here. {self.install_hint}")
            it = mod[1].Interpreter(model_path=str(model_path))
            inputs = [{"name": d["name"]} for d in it.get_input_details()]
            outputs = [{"name": d["name"]} for d in it.get_output_details()]
        manifest = {"model": model_path.name, "inputs": inputs, "outputs": outputs, "runner": {"io": io}}
        r = tfl.TFLiteRunner(str(model_path.parent), manifest, threads=_threads(threads))
        r.load()
        return r

    def reference_threads(self, threads):
        return _threads(threads)

    def execution(self, model_path, threads=None, session=None):
        """The agent's LiteRT runner, in this Python."""
        return self._model(model_path, threads)

    def predict(self, model_path, samples, threads=None, session=None):
        if str(model_path).endswith(".onnx"):  # the reference: ONNX Runtime, so the FP32 step tests onnx2tf
            return self.reference_outputs(model_path, samples, threads, session)
        return super().predict(model_path, samples, threads, session)

    def runner(self, model_path, threads=None, session=None):
        """Timing on the host: an ONNX reference is timed as its FP32 .tflite (LiteRT against LiteRT): the one this
        build made, else one converted now (e.g. the unpruned model of a pruned build). Close it when done."""
        from .toolworker import HostRunner, own_fp32

        path, cleanup, _ = own_fp32(self, model_path, session)
        model = self._model(path, threads)
        return HostRunner(model.run, cleanup + [model.close], runtime=self.runtime)

    def _convert(
        self, onnx_path, work, precision, specs, outputs, probe, threads, log, calib=None, extra=None, session=None
    ):
        import numpy as np

        from edgekit import toolenvs

        work.mkdir(parents=True, exist_ok=True)
        np.savez(work / "probe.npz", **probe)
        from edgekit.execution import reference_outputs

        np.savez(work / "probe_outputs.npz", **reference_outputs(onnx_path, [probe])[0])
        request = {
            "step": f"onnx2tf + ai-edge-quantizer ({precision})",
            "onnx": str(onnx_path),
            "precision": precision,
            "inputs": [{"name": s.name, "shape": s.shape} for s in specs],
            "outputs": [{"name": s.name} for s in outputs],
            "probe": str(work / "probe.npz"),
            "probe_outputs": str(work / "probe_outputs.npz"),
            "threads": threads,
        }
        if calib is not None:
            np.savez(
                work / "calib.npz", **{s.name: np.stack([np.asarray(x[s.name]) for x in calib.samples]) for s in specs}
            )
            request["calib"] = str(work / "calib.npz")
        request.update(extra or {})
        res = toolenvs.run_tool(self.toolenv, TOOLS / "tflite_convert.py", request, work, log=log)
        (work / IO_FILE).write_text(json.dumps(res["io"], indent=2))
        if session is not None:
            session.register_fp32(onnx_path, res["fp32"])
        return res

    def convert_fp32(self, onnx_path, workdir, session=None):
        """``onnx_path`` as an FP32 .tflite in ``workdir`` (for timing a reference this build did not convert)."""
        from edgekit.model import load_model

        src = load_model(onnx_path)
        res = self._convert(
            onnx_path,
            Path(workdir),
            "fp32",
            src.inputs,
            src.outputs,
            _structured_probe(src.inputs),
            _threads(None),
            log=None,
            session=session,
        )
        return Path(res["fp32"])

    # -- conversion -------------------------------------------------------------------
    def build(self, ctx):
        from edgekit import toolenvs

        if ctx.precision == "int8":
            ctx.require_calibration("int8 quantization", "fp32/fp16/int8-dynamic")
        work = Path(ctx.workdir) / "tflite"
        specs = ctx.source.inputs
        evaluation = getattr(ctx, "evaluation", None)
        real = (
            ctx.calib
            if ctx.calib is not None and not ctx.calib.synthetic
            else (evaluation if evaluation is not None and not evaluation.synthetic else None)
        )
        probe = real.samples[0] if real is not None else _structured_probe(specs)
        t0 = time.perf_counter()
        res = self._convert(
            ctx.reference_path,
            work,
            ctx.precision,
            specs,
            ctx.source.outputs,
            probe,
            _threads(ctx.profile.threads if ctx.profile.name == "host" else None),
            ctx.log,
            calib=ctx.calib if ctx.precision == "int8" else None,
            extra={"calibration_cache": str(work / "calibration.json")} if ctx.budget else None,
            session=ctx.session,
        )
        ctx.session.memo["tflite.converted"] = res
        seconds = round(time.perf_counter() - t0, 2)
        fp32, model_file = Path(res["fp32"]), Path(res["model"])
        ctx.check("fp32 (ONNX -> TFLite, onnx2tf)", fp32)
        quant = res.get("quantization")
        sections = {}
        if ctx.precision == "int8" and ctx.budget is not None:
            from edgekit.passes.mixed_precision import search

            model_file, sections["mixed_precision"] = search(self, ctx, plain=model_file)
            floats = sections["mixed_precision"]["float_layer_names"]
            quant = dict(quant or {}, float_ops=self._float_scopes(ctx, floats))
        if ctx.precision != "fp32":
            ctx.check(
                {
                    "fp16": "fp16 weights (ai-edge-quantizer)",
                    "int8-dynamic": "int8 dynamic range (ai-edge-quantizer)",
                    "int8": f"int8 full quantization (ai-edge-quantizer, {quant.get('calibration_samples')} "
                    "calibration samples)"
                    + (
                        f", {len(sections['mixed_precision']['float_layer_names'])} layer(s) kept float "
                        f"for --budget {ctx.budget}"
                        if sections
                        else ""
                    ),
                }[ctx.precision],
                model_file,
            )
        settings = ctx.profile.backend("tflite")
        runner_options = {"providers": list(settings.get("delegates") or ["xnnpack"]), "io": res["io"]}
        for key in ("delegate_libraries", "delegate_options"):
            if settings.get(key):
                runner_options[key] = settings[key]
        moved = [e["name"] for e in res["io"]["inputs"] + res["io"]["outputs"] if e["perm"]]
        sections.update(
            {
                "tflite": {
                    "converter": f"onnx2tf {res['versions'].get('onnx2tf')} (flatbuffer_direct, no TensorFlow) in the "
                    f"tflite tool environment (Python {res['versions'].get('python')})",
                    "tool_environment": toolenvs.state(self.toolenv)["path"],
                    "versions": res["versions"],
                    "layout": {
                        "bundle_inputs": "as the ONNX model (what you feed); the runner transposes to the .tflite's layout",
                        "transposed": moved,
                        "io": res["io"],
                    },
                    "delegates": runner_options["providers"],
                    "tool_seconds": seconds,
                    "tool_steps": res.get("steps", []),
                    "fp32_ops": res.get("fp32_ops"),
                },
            }
        )
        if quant:
            sections["quantization"] = quant
        warnings = list(res.get("warnings", [])) + list(sections.get("mixed_precision", {}).get("warnings", []))
        if ctx.precision == "int8-dynamic":
            warnings.append(
                "int8-dynamic quantizes activations at run time: on x86 it ran slower than fp32 under "
                "XNNPACK (measured); prefer int8 with --calib, or fp32"
            )
        ext = [(work / IO_FILE, "io_layout")]
        return BuildResult(
            model_file=model_file,
            extra_files=ext,
            runtime=self.runtime,
            runtime_version=self.runtime_version() or "",
            format="tflite",
            ops=res["ops"],
            sections=sections,
            warnings=warnings,
            runner_options=runner_options,
        )

    # -- mixed precision (--budget) ---------------------------------------------------
    def _weighted_ops(self, ctx):
        """The build's float32 .tflite weighted ops (converted now when called outside a build)."""
        res = ctx.session.memo.get("tflite.converted")
        if res is None:
            work = Path(ctx.workdir) / "tflite"
            res = self._convert(
                ctx.reference_path,
                work,
                "fp32",
                ctx.source.inputs,
                ctx.source.outputs,
                _structured_probe(ctx.source.inputs),
                _threads(None),
                ctx.log,
                session=ctx.session,
            )
            ctx.session.memo["tflite.converted"] = res
        return res

    def _scopes(self, ctx, layer):
        """The .tflite op scopes (ai-edge-quantizer's names: the op's output tensors) of one reference layer:
        the ops whose weights onnx2tf named after the layer's ONNX node (or after a node onnxsim fused it into,
        named by the output the layer is known by), else the ops that output one of the layer's tensors."""
        known = {layer.name, *layer.tensors}
        ops = self._weighted_ops(ctx).get("weighted_ops") or []
        found = [op["scope"] for op in ops if op.get("node") in known]
        if not found:
            found = [op["scope"] for op in ops if known & set(op.get("outputs") or [])]
        return found

    def layer_names(self, ctx, layers):
        """Reference layers -> the .tflite op scopes ai-edge-quantizer matches recipes against."""
        return {layer.name: " | ".join(self._scopes(ctx, layer)) or None for layer in layers}

    def _float_scopes(self, ctx, names):
        import onnx

        from edgekit.passes.mixed_precision import candidate_layers

        wanted = set(names)
        layers = [l for l in candidate_layers(onnx.load(str(ctx.reference_path))) if l.name in wanted]
        return sorted({s for l in layers for s in self._scopes(ctx, l)})

    def quantize(self, ctx, exclude=()):
        """Static INT8 of the build's float32 .tflite with the ops of ``exclude`` left float (ai-edge-quantizer
        recipe entries with algorithm no_quantize, matched on each op's scope); the calibration ranges of the
        build's plain int8 step are reused."""
        from edgekit import toolenvs
        from edgekit.errors import ConversionError

        ctx.require_calibration("int8 quantization", "fp32/fp16/int8-dynamic")
        res = self._weighted_ops(ctx)
        scopes, missing = [], []
        for layer in exclude:
            found = self._scopes(ctx, layer)
            scopes.extend(found)
            if not found:
                missing.append(layer.name)
        if missing:
            raise ConversionError(
                f"no .tflite op found for layer(s) {', '.join(missing)} of the reference model "
                "(onnx2tf renamed or fused them), so they cannot be kept float; build --precision "
                "int8 without --budget"
            )
        base = Path(ctx.workdir) / "tflite"
        work = base / f"mp{len(list(base.glob('mp*')))}"
        work.mkdir(parents=True)
        import numpy as np

        calib = base / "calib.npz"
        if not calib.is_file():
            np.savez(
                calib,
                **{s.name: np.stack([np.asarray(x[s.name]) for x in ctx.calib.samples]) for s in ctx.source.inputs},
            )
        request = {
            "step": f"ai-edge-quantizer (int8, {len(scopes)} op(s) float)",
            "precision": "int8",
            "requantize": {"fp32": res["fp32"], "io": res["io"]},
            "calib": str(calib),
            "calibration_cache": str(base / "calibration.json"),
            "float_scopes": sorted(set(scopes)),
            "threads": _threads(ctx.profile.threads if ctx.profile.name == "host" else None),
        }
        out = toolenvs.run_tool(self.toolenv, TOOLS / "tflite_convert.py", request, work, log=None)
        (work / IO_FILE).write_text(json.dumps(out["io"], indent=2))
        return Path(out["model"])


BACKEND = TFLiteBackend()
