"""Paddle Lite backend: ONNX -> Paddle inference model (x2paddle) -> ``.nb`` (Paddle Lite's ``opt``).

The converters and the runtime live in a tool environment (:mod:`edgekit.toolenvs`, Python 3.10:
paddlelite's wheels stop there; x2paddle needs paddlepaddle 2.6, whose saved format ``opt``
reads, where 3.x's is not). Choices, and why (measured with paddlelite 2.13rc0 on x86_64):

- An ``.nb`` is optimized for one target. Run elsewhere it does not fail cleanly: an ARM ``.nb``
  on x86 segfaults (PP-OCR cls) or returns garbage (MobileNetV2: values ~1e-19). So the build
  always makes the ``.nb`` for this host's CPU too and checks *that* with ``ctx.check`` (it proves
  the converted graph); when the profile's target is another CPU, that target's ``.nb`` is shipped
  and marked not validated here. The expected outputs in the bundle come from the validated host
  build; the agent compares its own outputs with them when the bundle is installed, on the device.
- FP32 only. Paddle Lite's fp16 and int8 ``.nb`` run on ARM kernels only (this host cannot
  check them); quantized x86 ``.nb`` files return NaN or garbage. Those precisions are refused
  with the reason rather than shipped unchecked.
- x2paddle's usage report is disabled (see ``tools/paddle_convert.py``).
"""

import platform
from pathlib import Path

from .base import Backend, BuildResult
from edgekit.toolenvs import ToolEnvSpec

TOOLS = Path(__file__).resolve().parent / "tools"
HOST_TARGET = {"x86_64": "x86", "amd64": "x86", "aarch64": "arm", "arm64": "arm"}
REFUSED = {
    "fp16": "Paddle Lite's fp16 .nb runs only on ARM CPUs with fp16 arithmetic (opt enable_fp16): this x86 host "
            "cannot check a single output of it, so edgekit does not ship it; build fp32",
    "int8": "Paddle Lite runs int8 only from a model quantized in Paddle (PaddleSlim); on this host's x86 kernels "
            "quantized .nb files returned NaN or garbage when measured, so no int8 build could be checked; build fp32",
}


class PaddleLiteBackend(Backend):
    name = "paddlelite"
    runtime = "paddlelite"
    install_hint = "edgekit creates its tool environment on first use: `edgekit backends install paddlelite`."
    precisions = ("fp32", "fp16", "int8")
    toolenv = ToolEnvSpec(
        name="paddlelite",
        pythons=("3.10",),
        requirements=("paddlelite==2.13rc0", "paddlepaddle==2.6.2", "x2paddle==1.6.0", "onnx==1.17.0", "numpy==2.2.6",
                      "protobuf==7.36.2", "six==1.17.0", "requests==2.34.2"),
        check="import paddlelite.lite, x2paddle.convert, paddle, onnx",
        purpose="ONNX -> Paddle (x2paddle) -> Paddle Lite .nb (opt), and the Paddle Lite runtime for host checks",
        env=(("GLOG_minloglevel", "2"), ("FLAGS_call_stack_level", "0"), ("PIP_NO_INDEX", "1")),
    )

    def __init__(self):
        self._registered = {}  # built model path -> inputs, outputs, runner options (for the host worker)
        self._fp32_of = {}     # reference path -> this runtime's fp32 build of it (host timing)

    def availability(self):
        from edgekit import toolenvs

        st = toolenvs.state(self.toolenv)
        if st["ready"]:
            return True, (f"paddlelite 2.13rc0 (tool environment ready: Python {st['python_version']}, {st['path']}); "
                          "builds fp32 (fp16 and int8 are refused: this host cannot check them)")
        if st.get("interpreter_missing"):
            return False, st["detail"]
        return True, st["detail"]

    def runtime_version(self):
        return "2.13rc0"

    def default_precision(self, profile, have_calib):
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
    @staticmethod
    def host_target():
        return HOST_TARGET.get(platform.machine().lower())

    def build(self, ctx):
        import onnx

        from edgekit import toolenvs
        from edgekit.errors import ConversionError
        from edgekit.model import operator_set

        if ctx.precision in REFUSED:
            raise ConversionError(f"paddlelite {ctx.precision} refused: {REFUSED[ctx.precision]}")
        settings = ctx.profile.backend("paddlelite")
        target = settings.get("target") or HOST_TARGET.get(ctx.profile.arch, "arm")
        host = self.host_target()
        targets = [host] if host and host == target else [t for t in (host, target) if t]
        work = ctx.workdir / "paddlelite"
        res = toolenvs.run_tool(self.toolenv, TOOLS / "paddle_convert.py",
                                {"step": "ONNX -> Paddle -> .nb", "onnx": str(ctx.reference_path), "outdir": str(work),
                                 "targets": targets}, work, log=_quiet(ctx.log))
        inputs = [s.to_dict() for s in ctx.source.inputs]
        outputs = [s.to_dict() for s in ctx.source.outputs]
        runner_options = {"target": target, "inputs": res["inputs"], "power_mode": settings.get("power_mode")}
        for t, nb in res["nb"].items():
            self._registered[str(Path(nb).resolve())] = {"inputs": inputs, "outputs": outputs,
                                                         "runner": dict(runner_options, target=t)}
        if host is None:
            raise ConversionError(f"this host ({platform.machine()}) runs no Paddle Lite target edgekit knows (x86, arm): "
                                  "the converted model could not be checked")
        ctx.check(f"fp32 (ONNX -> x2paddle -> opt, {host} .nb on this host)", Path(res["nb"][host]))
        self._fp32_of[str(Path(ctx.reference_path).resolve())] = Path(res["nb"][host])
        shipped = Path(res["nb"][target])
        if target == host:
            validated = "yes (this host runs the shipped .nb)"
            warnings = []
        else:
            validated = (f"no (cross-target: {target} .nb cannot run on this {host} host; the {host} build of the same "
                         "graph was validated)")
            warnings = [f"the shipped {target} .nb was not run here: the {host} .nb of the same Paddle graph passed the "
                        "fidelity check, and the device compares its own outputs with this machine's when the bundle "
                        "is installed"]
        runner_options["validated"] = validated
        tail = res["tailoring"].get(target, {})
        extra = [(Path(tail[k]), role) for k, role in (("ops", "tailored_ops"), ("kernels", "tailored_kernels"))
                 if k in tail]
        sections = {"paddlelite": {
            "converter": f"x2paddle {res['versions']['x2paddle']} (usage report disabled) with paddlepaddle "
                         f"{res['versions']['paddlepaddle']}, then opt (paddlelite {res['versions']['paddlelite']})",
            "runtime": f"paddlelite {res['versions']['paddlelite']} (MobileConfig)",
            "tool_environment": toolenvs.state(self.toolenv)["path"],
            "target": target, "built_targets": list(res["nb"]), "host_target": host,
            "validated": validated,
            "renamed_tensors": res["renamed"],
            "model_ops": res["ops"].get(target, []),
            "kernels": res["kernels"].get(target, []),
            "tailoring": "the tailored op and kernel lists (opt record_model_info) are in the bundle for a selective "
                         "build of Paddle Lite",
            "seconds": res["seconds"],
        }}
        return BuildResult(
            model_file=shipped,
            extra_files=extra,
            runtime="paddlelite",
            runtime_version=res["versions"]["paddlelite"],
            format="nb",
            ops=operator_set(onnx.load(str(ctx.reference_path))),
            sections=sections,
            warnings=warnings,
            runner_options=runner_options,
        )


def _quiet(log):
    """Tool output on the log without x2paddle's per-node progress."""
    def out(line):
        if line.strip() and not any(k in line for k in ("Converting node", "INFO]", "=====", "warnings.warn", "UserWarning", "full_graph=True")):
            log(f"    {line}")
    return out


BACKEND = PaddleLiteBackend()
