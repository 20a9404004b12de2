"""MNN backend: ONNX -> ``.mnn`` in FP32, FP16 weights, weight-only INT8/INT4, and full INT8 calibrated
with the user's data.

Choices, and why (measured with MNN 3.6.1, the PyPI wheel, on x86 and the PP-OCR cls model):

- The converter and the quantizer are MNN's compiled ``_tools`` module (``mnnconvert(argv)``,
  ``mnnquant(argv)``), run in a child Python. MNN's Python wrappers (``MNN.tools.*``, the ``mnnconvert``
  and ``mnnquant`` commands) are never imported: on import they ``pip install`` a logging SDK and send
  usage data to a cloud log service; and the ``mnnquant`` command passes its arguments to
  ``_tools.mnnquant`` as three strings where it takes one argv list (it dies with ``std::length_error``).
  The child also gets ``PIP_NO_INDEX`` so that nothing it might start could fetch packages.
  A child process also keeps a converter crash (the quantizer segfaults on some inputs) from taking
  edgekit down, and keeps MNN's progress prints off edgekit's stdout.
- Every step is checked on the host with MNN itself (:mod:`edgekit_agent.runners.mnn`, the same code
  the agent runs): first the plain FP32 conversion against the ONNX reference (run by onnxruntime when
  it is installed), then the precision step.
- Full INT8 uses MNN's quantization tool with raw-tensor samples (``input_type: sequence``: one
  directory per sample, one text file per input). Its calibration is fragile: on PP-OCR cls its KL
  method clips the first layers (35 % of values overflow, cosine to FP32 0.72) and ADMM over a large
  batch mis-scales the logits (200 samples: cosine 0.86; 32 samples: 0.99). edgekit runs both
  calibrations (ADMM on 32 samples, KL on up to 64) side by side and keeps the one whose outputs are
  closest to the FP32 MNN model on the calibration samples; the report lists every candidate.
- MNN's INT8 kernels are written for Arm (sdot / i8mm); on x86 an INT8 model runs slower than FP32. The
  default precision follows the profile's ``[runtimes.mnn] precisions`` (the ``host`` profile on x86
  lists fp32 only), never the file size.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..base import Backend, BuildContext, BuildResult
from .quantize import MNNQuantization
from .tools import CONVERT_FLAGS, _run_tool, _runner_module

if TYPE_CHECKING:
    from edgekit.converters.session import BuildSession
    from edgekit.execution import Feed
    from edgekit.profiles import Profile
    from edgekit_agent.runners.mnn import MNNModel


class MNNBackend(MNNQuantization, Backend):
    name = "mnn"
    placement = "edgekit.converters.mnn.placement"  # its part of edgekit explain (edgekit.placement)
    install_hint = "Install it with: pip install 'edgekit[mnn]' (or pip install MNN)."

    # per-build state lives in ctx.session.memo: "mnn.int8_plan" (the feature method, weight method and sample
    # count plain int8 chose) and "mnn.weighted_ops" (the FP32 .mnn's weighted op names)

    def availability(self) -> tuple[bool, str]:
        import importlib.util

        if importlib.util.find_spec("MNN") is None:
            return False, "MNN is not installed"
        if importlib.util.find_spec("_tools") is None:
            return False, "MNN is installed without its compiled converter/quantizer module (_tools)"
        try:
            mnn = _runner_module()
            version = mnn.import_mnn().version()
        except Exception as e:  # a broken wheel raises whatever its extension raises
            return False, f"MNN does not import: {e}"
        feats = mnn.cpu_features()
        cpu = (
            ", CPU features per MNN: "
            f"{', '.join(k for k, v in feats.items() if v) or 'none of sdot/fp16/i8mm/sve2/sme2'}"
            if feats is not None
            else ""
        )
        return True, (
            f"MNN {version}{cpu}; converter and quantizer: the compiled _tools module in a child "
            "process (MNN.tools wrappers, which pip-install and phone home, are not used)"
        )

    def runtime_version(self) -> str:
        return _runner_module().import_mnn().version()

    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        wanted = profile.backend("mnn").get("precisions", ["fp32"])
        for p in wanted:
            if p == "int8" and not have_calib:
                continue
            if p in self.precisions:
                return p
        return "fp32"

    def host_settings(self, arch: str, isa: list) -> dict | None:
        import importlib.util

        if importlib.util.find_spec("MNN") is None:
            return None
        # MNN's int8 kernels target ARM; on x86 they are slower than fp32.
        return {
            "backend": "CPU",
            "precisions": ["fp32"] if arch == "x86_64" else ["int8", "fp32"],
            "precision_mode": "normal",
        }

    # -- host-side inference (fidelity, timing) -------------------------------------
    @staticmethod
    def _threads(threads: int | None) -> int:
        return threads or min(4, os.cpu_count() or 1)

    def _model(self, model_path: str | Path, threads: int | None, feed: Feed | None = None) -> MNNModel:
        mnn = _runner_module()
        shapes = {k: list(v.shape) for k, v in (feed or {}).items()}
        return mnn.MNNModel(str(model_path), "CPU", self._threads(threads), "normal", input_shapes=shapes).load()

    def _onnx_as_mnn(self, onnx_path: str | Path, threads: int | None, feed: Feed) -> MNNModel:
        """An ONNX file converted to MNN FP32 in a temporary directory and loaded (MNN reads it whole)."""
        with tempfile.TemporaryDirectory(prefix="edgekit-mnn-") as tmp:
            out = Path(tmp) / "model.mnn"
            self._convert(Path(onnx_path), out, [], Path(tmp))
            return self._model(out, threads, feed)

    def reference_threads(self, threads: int | None) -> int:
        return self._threads(threads)

    def reference_outputs(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        """onnxruntime runs the reference when installed, so the FP32 step really tests MNN's converter."""
        try:
            return super().reference_outputs(model_path, samples, threads, session)
        except ImportError:
            model = self._onnx_as_mnn(model_path, threads, samples[0])
            return [model.run(feed) for feed in samples]

    def predict(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        """A built .mnn run by the agent's MNN runner code (its MNNModel); an ONNX file is the reference."""
        if str(model_path).endswith(".onnx"):
            return self.reference_outputs(model_path, samples, threads, session)
        from edgekit_agent.runners.base import as_declared

        model = self._model(model_path, threads, samples[0])
        manifest = self.manifest_for(model_path, session)  # MNN computes bool outputs as int32: the declared dtypes
        try:
            return [as_declared(model.run(feed), manifest) for feed in samples]
        finally:
            model.close()

    def runner(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> Callable[[Feed], dict[str, Any]]:
        """Timing on the host: an ONNX reference is timed as MNN FP32, so the comparison is MNN against MNN."""
        state = {}

        def run(feed: Feed) -> dict[str, Any]:
            if "model" not in state:
                state["model"] = (
                    self._onnx_as_mnn(model_path, threads, feed)
                    if str(model_path).endswith(".onnx")
                    else self._model(model_path, threads, feed)
                )
            return state["model"].run(feed)

        return run

    # -- conversion -------------------------------------------------------------------
    def _convert(self, src: str | Path, dst: Path, flags: Sequence[str], cwd: str | Path) -> Path:
        argv = [
            "mnnconvert",
            "-f",
            "ONNX" if str(src).endswith(".onnx") else "MNN",
            "--modelFile",
            str(src),
            "--MNNModel",
            str(dst),
            "--bizCode",
            "edgekit",
            *flags,
        ]
        _run_tool("convert", argv, cwd, dst)
        return dst

    def _mnn_ops(self, model_file: str | Path, work: Path) -> dict[str, Any]:
        """MNN's own operator list for a .mnn file (the converter's JSON dump)."""
        dump = work / (Path(model_file).stem + ".ops.json")
        try:
            _run_tool(
                "convert",
                ["mnnconvert", "-f", "MNN", "--modelFile", str(model_file), "--JsonFile", str(dump)],
                work,
                dump,
            )
            net = json.loads(dump.read_text())
        except Exception as e:  # advice for the report, not a reason to fail the build
            return {"error": f"MNN's JSON dump failed: {e}"}
        finally:
            dump.unlink(missing_ok=True)
        counts: dict[str, int] = {}
        ops = list(net.get("oplists") or [])
        for sub in net.get("subgraphs") or []:
            ops.extend(sub.get("nodes") or [])
        for op in ops:
            counts[op.get("type", "?")] = counts.get(op.get("type", "?"), 0) + 1
        return dict(sorted(counts.items()))

    def build(self, ctx: BuildContext) -> BuildResult:
        import onnx

        from edgekit.model import operator_set

        settings = ctx.profile.backend("mnn")
        work = ctx.workdir
        warnings: list[str] = []
        sections: dict[str, Any] = {}
        runs_fast = list(settings.get("precisions", ["fp32"]))
        x86 = ctx.profile.arch in ("x86_64", "amd64", "i686", "x86")

        fp32 = self._convert(ctx.reference_path, work / "model.fp32.mnn", [], work)
        ctx.check("fp32 (ONNX -> MNN)", fp32)
        flags = []
        if ctx.precision == "fp32":
            model_file = fp32
        elif ctx.precision in ("fp16", "int8-weights", "int4-weights"):
            flags = CONVERT_FLAGS[ctx.precision]
            model_file = self._convert(ctx.reference_path, work / f"model.{ctx.precision}.mnn", flags, work)
            if ctx.precision == "fp16":
                ctx.check("fp16 weights (MNNConvert --fp16)", model_file)
            else:
                bits = int(flags[1])
                sections["quantization"] = {
                    "method": "weight-only",
                    "weights": f"int{bits}",
                    "granularity": "per output channel",
                    "symmetric": True,
                    "activations": "float",
                    "tool": "MNNConvert --weightQuantBits",
                    "runtime": "MNN dequantizes the weights when it loads the model (a smaller file, fp32 speed); "
                    "MNN documents dynamic int8 activation quantization for such models with memory_mode low",
                }
                ctx.check(f"int{bits} weight-only quantization (MNNConvert --weightQuantBits {bits})", model_file)
        elif ctx.precision == "int8":
            model_file, sections["quantization"] = self._int8(ctx, fp32, work)
            q = sections["quantization"]["chosen"]
            step = f"int8 full quantization (MNN quantization tool, {q['feature_method']} on {q['samples']} samples)"
            if ctx.budget is not None:
                from edgekit.passes.mixed_precision import search

                model_file, sections["mixed_precision"] = search(self, ctx, plain=model_file)
                warnings.extend(sections["mixed_precision"].get("warnings", []))
                skipped = self._skip_names(ctx, sections["mixed_precision"]["float_layer_names"])
                sections["mixed_precision"]["calibration"] = (
                    f"{q['feature_method']}/{q['weight_method']} on {q['samples']} samples: the calibration plain "
                    "int8 chose, used for every candidate (the others are not searched)"
                )
                sections["quantization"]["skip_quant_op_names"] = skipped
                step += f", {len(skipped)} layer(s) kept float for --budget {ctx.budget}"
            ctx.check(step, model_file)
        else:
            raise ValueError(f"unsupported precision {ctx.precision}")

        if ctx.precision not in runs_fast:
            why = ""
            if ctx.precision == "int8" and x86:
                why = ": MNN's int8 kernels are written for Arm (sdot/i8mm); on x86 int8 runs slower than fp32"
            elif ctx.precision == "fp16":
                why = ": on a CPU without fp16 arithmetic MNN expands fp16 weights to fp32 (a smaller file, fp32 speed)"
            warnings.append(
                f"profile {ctx.profile.name} does not list {ctx.precision} as fast for MNN (it lists "
                f"{', '.join(runs_fast)}){why}"
            )

        backend = settings.get("backend", "CPU")
        runner_options = {
            "backend": backend,
            "precision_mode": settings.get("precision_mode", "normal"),
            "power_mode": settings.get("power_mode", "normal"),
            "memory_mode": settings.get("memory_mode", "normal"),
        }
        try:
            import onnxruntime

            reference_runtime = f"onnxruntime {onnxruntime.__version__}"
        except ImportError:
            reference_runtime = "MNN (onnxruntime is not installed: the fp32 step cannot catch converter errors)"
        sections["mnn"] = {
            "converter": f"MNN {self.runtime_version()} _tools.mnnconvert (compiled tool, in a child process)",
            "convert_flags": flags,
            "model_ops": self._mnn_ops(model_file, work),
            "reference_runtime": reference_runtime,
            "host_checks": "MNN CPU backend, precision normal (fp32 arithmetic) on this machine",
            "target": {
                "profile": ctx.profile.name,
                "arch": ctx.profile.arch,
                "runs_fast": runs_fast,
                **runner_options,
                "note": (
                    "MNN's int8 kernels target Arm (sdot/i8mm): on x86, int8 is slower than fp32"
                    if x86
                    else f"{ctx.profile.name} runs {', '.join(runs_fast)} fast with MNN"
                ),
            },
        }
        return BuildResult(
            model_file=model_file,
            runtime="MNN",
            runtime_version=self.runtime_version(),
            format="mnn",
            ops=operator_set(onnx.load(str(ctx.reference_path))),
            ops_graph="the ONNX graph given to the converter (its own graph is not read)",
            sections=sections,
            warnings=warnings,
            runner_options=runner_options,
        )


BACKEND = MNNBackend()
