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

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from edgekit.errors import ConversionError

from ..base import Backend, BuildContext, BuildResult
from .common import IO_FILE, TOOLENV, TOOLS, _runner_module, _structured_probe, _threads
from .quantize import TFLiteQuantization

if TYPE_CHECKING:
    from edgekit.converters.session import BuildSession
    from edgekit.converters.toolworker import HostRunner
    from edgekit.data import Dataset
    from edgekit.execution import Feed
    from edgekit.model import TensorSpec
    from edgekit.profiles import Profile
    from edgekit_agent.runners.tflite import TFLiteRunner


class TFLiteBackend(TFLiteQuantization, Backend):
    name = "tflite"
    placement = "edgekit.converters.tflite.placement"  # its part of edgekit explain (edgekit.placement)
    install_hint = (
        "The host needs the LiteRT runtime for fidelity checks: pip install 'edgekit[tflite]' "
        "(ai-edge-litert); the converter lives in a tool environment edgekit creates "
        "(`edgekit backends install tflite`)."
    )
    toolenv = TOOLENV

    # per-build state lives in ctx.session: the FP32 .tflite of each reference (host timing) and, in
    # memo["tflite.converted"], the tool's result for the build's conversion (mixed precision)

    def availability(self) -> tuple[bool, str]:
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

    def explain_unavailable(self, detail: str) -> str:
        # the install hint is for a missing LiteRT; a missing interpreter for the tool environment says its own fix
        return f"{detail}. {self.install_hint}" if _runner_module()._interpreter_module() is None else detail

    def runtime_version(self) -> str | None:
        found = _runner_module()._interpreter_module()
        return found[2] if found else None

    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        for p in profile.backend("tflite").get("precisions", ["fp32"]):
            if p == "int8" and not have_calib:
                continue
            if p in self.precisions:
                return p
        return "fp32"

    def host_settings(self, arch: str, isa: list) -> dict | None:
        import importlib.util

        if importlib.util.find_spec("ai_edge_litert") is None and importlib.util.find_spec("tflite_runtime") is None:
            return None
        # XNNPACK: static int8 ~2x faster than fp32 on x86; dynamic-range int8 slower than fp32 (measured).
        return {"delegates": ["xnnpack"], "precisions": ["int8", "fp32"]}

    # -- host-side inference (fidelity, timing) -------------------------------------
    def _model(self, model_path: str | Path, threads: int | None, specs_from: Any = None) -> TFLiteRunner:
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

    def reference_threads(self, threads: int | None) -> int:
        return _threads(threads)

    def execution(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> TFLiteRunner:
        """The agent's LiteRT runner, in this Python."""
        return self._model(model_path, threads)

    def predict(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        if str(model_path).endswith(".onnx"):  # the reference: ONNX Runtime, so the FP32 step tests onnx2tf
            return self.reference_outputs(model_path, samples, threads, session)
        return super().predict(model_path, samples, threads, session)

    def runner(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> HostRunner:
        """Timing on the host: an ONNX reference is timed as its FP32 .tflite (LiteRT against LiteRT): the one this
        build made, else one converted now (e.g. the unpruned model of a pruned build). Close it when done."""
        from ..toolworker import HostRunner, own_fp32

        path, cleanup, _ = own_fp32(self, model_path, session)
        model = self._model(path, threads)
        return HostRunner(model.run, cleanup + [model.close], runtime=self.runtime)

    def _convert(
        self,
        onnx_path: str | Path,
        work: Path,
        precision: str,
        specs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        probe: Feed,
        threads: int | None,
        log: Callable[[str], Any] | None,
        calib: Dataset | None = None,
        extra: dict[str, Any] | None = None,
        session: BuildSession | None = None,
    ) -> dict[str, Any]:
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
                work / "calib.npz",
                **{s.name: np.stack([np.asarray(x[s.name]) for x in calib.samples]) for s in specs},  # type: ignore[arg-type]
            )
            request["calib"] = str(work / "calib.npz")
        request.update(extra or {})
        try:
            res = toolenvs.run_tool(self.toolenv, TOOLS / "tflite_convert.py", request, work, log=log)
        except ConversionError as e:
            if "ONNX_IF" not in str(e) and "ONNX_LOOP" not in str(e):
                raise
            import onnx

            from ..onnx_specialise import control_flow_advice

            advice = control_flow_advice(onnx.load(str(onnx_path), load_external_data=False), "onnx2tf")
            if advice is None:
                raise
            raise ConversionError(f"tflite: {advice}; onnx2tf left it as an unresolved custom op") from None
        (work / IO_FILE).write_text(json.dumps(res["io"], indent=2))
        if session is not None:
            session.register_fp32(onnx_path, res["fp32"])
        return res

    def convert_fp32(self, onnx_path: str | Path, workdir: str | Path, session: BuildSession | None = None) -> Path:
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
    def build(self, ctx: BuildContext) -> BuildResult:
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
        quant: Any = res.get("quantization")
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
                        "bundle_inputs": (
                            "as the ONNX model (what you feed); the runner transposes to the .tflite's layout"
                        ),
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
            ops_graph="the built .tflite model's operators",
            sections=sections,
            warnings=warnings,
            runner_options=runner_options,
        )


BACKEND = TFLiteBackend()
