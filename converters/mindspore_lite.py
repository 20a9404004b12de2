"""MindSpore Lite backend: ONNX -> ``.ms`` (MINDIR_LITE) with FP32 or FP16 weights.

The converter and runtime live in a tool environment (:mod:`edgekit.toolenvs`): the only
``mindspore-lite`` on PyPI (2.0.0) is a Python 3.7 wheel for Linux x86_64. Choices, and why
(measured with that wheel on x86_64):

- Inputs: the converter makes NCHW inputs NHWC. The bundle keeps the source model's NCHW
  inputs (declared shapes and ``sample_inputs.npz``); ``runner.input_layout`` records which
  inputs became NHWC and the runner transposes, so apps send what the source model took.
- ONNX ``HardSigmoid`` is converted as ``relu6(x + 3) / 6`` whatever its alpha/beta; the
  converter script rewrites such nodes first (see ``tools/mindspore_convert.py``).
- Weight-quantized ``.ms`` files convert but do not load ("Prepare kernels failed"), so
  int8-weights is refused; full int8 (calibrated) is refused too: it could not be checked here.
- Every step runs on this host with MindSpore Lite itself (the agent's runner, in the tool
  environment) and is compared with the ONNX reference run by onnxruntime.
"""

from pathlib import Path

from .base import Backend, BuildResult
from edgekit.toolenvs import ToolEnvSpec

TOOLS = Path(__file__).resolve().parent / "tools"
REFUSED = {
    "int8-weights": "MindSpore Lite 2.0.0 (the PyPI wheel) converts weight-quantized models, but the .ms does not "
                    "load (\"Prepare kernels failed\"): edgekit does not ship a model that cannot run. Use "
                    "--precision fp16 (half the size) or fp32",
    "int8": "full int8 needs MindSpore Lite's post-training quantization with a calibration config, which this "
            "release's Python converter could not produce in a form that loads; use --precision fp16 or fp32",
}


class MindSporeLiteBackend(Backend):
    name = "mindspore-lite"
    runtime = "mindspore_lite"
    install_hint = "edgekit creates its tool environment on first use: `edgekit backends install mindspore-lite`."
    precisions = ("fp32", "fp16", "int8-weights", "int8")
    toolenv = ToolEnvSpec(
        name="mindspore-lite",
        pythons=("3.7",),
        requirements=("mindspore-lite==2.0.0", "numpy==1.21.6", "onnx==1.14.1", "protobuf==4.24.4"),
        check="import mindspore_lite, onnx, numpy",
        purpose="ONNX -> MindSpore Lite .ms (converter), and the MindSpore Lite runtime for host checks",
        env=(("GLOG_v", "3"), ("PIP_NO_INDEX", "1")),
    )

    def __init__(self):
        self._registered = {}  # built model path -> inputs, outputs, runner options (for the host worker)
        self._fp32_of = {}     # reference path -> this runtime's fp32 build of it (host timing)

    def availability(self):
        from edgekit import toolenvs

        st = toolenvs.state(self.toolenv)
        if st["ready"]:
            return True, (f"mindspore_lite 2.0.0 (tool environment ready: Python {st['python_version']}, {st['path']}); "
                          "builds fp32 and fp16 (int8 and int8-weights are refused: such a .ms does not load)")
        if st.get("interpreter_missing"):
            return False, st["detail"]
        return True, st["detail"]

    def runtime_version(self):
        return "2.0.0"

    def default_precision(self, profile, have_calib):
        for p in profile.backend("mindspore-lite").get("precisions", ["fp32"]):
            if p in ("fp32", "fp16"):
                return p
        return "fp32"

    def local_device_python(self):
        """``deploy --local``: the agent runs under the tool environment's Python (created if missing)."""
        from edgekit import toolenvs

        return toolenvs.ensure(self.toolenv, log=None)

    # -- host-side inference ---------------------------------------------------------
    def _worker(self, model_path, threads):
        from .toolworker import RunnerWorker, model_manifest

        return RunnerWorker(self.toolenv, self.name, model_path, model_manifest(model_path, self._registered), threads)

    def predict(self, model_path, samples, threads=None):
        if str(model_path).endswith(".onnx"):
            from .toolworker import onnx_predict

            return onnx_predict(model_path, samples, threads)[2]
        worker = self._worker(model_path, threads)
        try:
            return [worker.run(feed) for feed in samples]
        finally:
            worker.close()

    def runner(self, model_path, threads=None):
        """For timing on the host. The ONNX reference is timed as this runtime's own fp32 build of it (made by
        this build), so a comparison is runtime against runtime; without one, onnxruntime runs it."""
        if str(model_path).endswith(".onnx"):
            fp32 = self._fp32_of.get(str(Path(model_path).resolve()))
            if fp32 is not None:
                return self._worker(fp32, threads).run
            from .toolworker import onnx_predict

            state = {}

            def run_onnx(feed):
                if "sess" not in state:
                    state["sess"], state["names"], _ = onnx_predict(model_path, [], threads)
                return state["sess"].run(state["names"], feed)

            return run_onnx
        return self._worker(model_path, threads).run

    # -- conversion -------------------------------------------------------------------
    def _convert(self, ctx, fp16, log):
        from edgekit import toolenvs

        tag = "fp16" if fp16 else "fp32"
        work = ctx.workdir / f"mindspore-{tag}"
        res = toolenvs.run_tool(self.toolenv, TOOLS / "mindspore_convert.py",
                                {"step": f"ONNX -> .ms ({tag})", "onnx": str(ctx.reference_path),
                                 "output": str(work / f"model.{tag}"), "fp16": fp16}, work, log=log)
        layout = {}
        for spec, got in zip(ctx.source.inputs, res["inputs"]):
            want = list(spec.shape)
            if len(want) == 4 and got["shape"] != want and got["shape"] == [want[0], want[2], want[3], want[1]]:
                layout[spec.name] = "NHWC"
        settings = ctx.profile.backend("mindspore-lite")
        options = {"device": settings.get("device", "cpu"), "input_layout": layout}
        if settings.get("precision_mode"):
            options["precision_mode"] = settings["precision_mode"]
        path = Path(res["model"])
        self._registered[str(path.resolve())] = {"inputs": [s.to_dict() for s in ctx.source.inputs],
                                                 "outputs": [s.to_dict() for s in ctx.source.outputs],
                                                 "runner": options}
        return path, res, options

    def build(self, ctx):
        import onnx

        from edgekit.errors import ConversionError
        from edgekit.model import operator_set

        if ctx.precision in REFUSED:
            raise ConversionError(f"mindspore-lite {ctx.precision} refused: {REFUSED[ctx.precision]}")
        log = _quiet(ctx.log)
        fp32, res, options = self._convert(ctx, False, log)
        ctx.check("fp32 (ONNX -> MindSpore Lite .ms)", fp32)
        self._fp32_of[str(Path(ctx.reference_path).resolve())] = fp32
        model_file, flags = fp32, {"weight_fp16": False}
        if ctx.precision == "fp16":
            model_file, res, options = self._convert(ctx, True, log)
            flags = {"weight_fp16": True}
            ctx.check("fp16 weights (Converter.weight_fp16)", model_file)
        warnings = []
        if options["input_layout"]:
            warnings.append("MindSpore Lite converted the input(s) %s to NHWC; the bundle keeps the source's NCHW and "
                            "the runner transposes" % ", ".join(sorted(options["input_layout"])))
        sections = {"mindspore_lite": {
            "converter": f"mindspore_lite {res['versions']['mindspore_lite']} Converter (MINDIR_LITE, optimize general), "
                         f"{flags}",
            "runtime": f"mindspore_lite {res['versions']['mindspore_lite']}",
            "input_layout": {s.name: options["input_layout"].get(s.name, s.layout or "as declared")
                             for s in ctx.source.inputs},
            "converted_input_shapes": {i["name"]: i["shape"] for i in res["inputs"]},
            "hardsigmoid_rewritten": res["hardsigmoid_rewritten"],
            "host_checks": "MindSpore Lite CPU on this machine, through the agent's runner in the tool environment",
            "target": {"profile": ctx.profile.name, **options},
        }}
        from edgekit import toolenvs

        sections["mindspore_lite"]["tool_environment"] = toolenvs.state(self.toolenv)["path"]
        return BuildResult(
            model_file=model_file,
            runtime="mindspore_lite",
            runtime_version=res["versions"]["mindspore_lite"],
            format="ms",
            ops=operator_set(onnx.load(str(ctx.reference_path))),
            sections=sections,
            warnings=warnings,
            runner_options=options,
        )


def _quiet(log):
    def out(line):
        if line.strip() and not line.startswith("[WARNING"):
            log(f"    {line}")
    return out


BACKEND = MindSporeLiteBackend()
