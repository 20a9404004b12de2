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

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from edgekit.errors import ConversionError
from edgekit.toolenvs import ToolEnvSpec

from ..base import BuildContext, BuildResult
from ..toolworker import ToolEnvBackend

if TYPE_CHECKING:
    from edgekit.converters.session import BuildSession
    from edgekit.model import TensorSpec
    from edgekit.profiles import Profile

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def _control_flow(onnx_path: str | Path, said: str) -> ConversionError | None:
    """The converter's "outside_input_node should has data" is its ONNX parser failing on an If/Loop body that
    reads a tensor of the outer graph: name the node and what to do."""
    import onnx

    from ..onnx_specialise import control_flow_advice

    if "outside_input_node" not in said:
        return None
    advice = control_flow_advice(onnx.load(str(onnx_path), load_external_data=False), "MindSpore Lite 2.0.0")
    return ConversionError(f"mindspore-lite: {advice}") if advice else None


class MindSporeLiteBackend(ToolEnvBackend):
    name = "mindspore-lite"
    install_hint = "edgekit creates its tool environment on first use: `edgekit backends install mindspore-lite`."
    toolenv = ToolEnvSpec(
        name="mindspore-lite",
        pythons=("3.7",),
        requirements=(
            "mindspore-lite==2.0.0",
            "numpy==1.21.6",
            "onnx==1.14.1",
            "protobuf==4.24.4",
            "typing_extensions==4.7.1",
        ),  # every package of the environment, pinned
        check="import mindspore_lite, onnx, numpy",
        purpose="ONNX -> MindSpore Lite .ms (converter), and the MindSpore Lite runtime for host checks",
        env=(("GLOG_v", "3"), ("PIP_NO_INDEX", "1")),
    )

    ready_detail = (
        "mindspore_lite 2.0.0 (tool environment ready: Python {python}, {path}); builds fp32 and fp16 "
        "(int8 and int8-weights are refused: such a .ms does not load)"
    )
    noise = ("[WARNING",)

    def runtime_version(self) -> str:
        return "2.0.0"

    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        for p in profile.backend("mindspore-lite").get("precisions", ["fp32"]):
            if p in ("fp32", "fp16"):
                return p
        return "fp32"

    def host_settings(self, arch: str, isa: list) -> dict | None:
        # the mindspore-lite wheel on PyPI is for Linux x86_64 (in a tool environment edgekit creates)
        return {"device": "cpu", "precisions": ["fp32", "fp16"]} if arch == "x86_64" else None

    # -- conversion -------------------------------------------------------------------
    def _convert(
        self,
        onnx_path: str | Path,
        work: Path,
        fp16: bool,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        settings: dict[str, Any],
        log: Callable[[str], Any] | None,
        session: BuildSession,
    ) -> tuple[Path, dict[str, Any], dict[str, Any]]:
        from edgekit import toolenvs

        from ..onnx_tidy import clip_bounds_as_max_min, drop_default_dilations

        onnx_path, _ = drop_default_dilations(onnx_path, work)  # the converter refuses dilations=[1, 1] on pooling
        onnx_path, _ = clip_bounds_as_max_min(onnx_path, work)  # it computes a Clip on a graph-computed bound wrong
        tag = "fp16" if fp16 else "fp32"
        request = {"step": f"ONNX -> .ms ({tag})", "onnx": str(onnx_path), "output": str(work / f"model.{tag}")}
        try:
            res = toolenvs.run_tool(
                self.toolenv, TOOLS / "mindspore_convert.py", dict(request, fp16=fp16), work, log=log
            )
        except ConversionError as e:
            known = _control_flow(onnx_path, str(e))
            if known is None:
                raise
            raise known from None
        layout = {}
        converted = {i["name"]: i for i in res["inputs"]}
        for k, spec in enumerate(inputs):  # by name; by position only where the converter renamed the input
            got = converted.get(spec.name) or (res["inputs"][k] if k < len(res["inputs"]) else None)
            want = list(spec.shape)
            if got and len(want) == 4 and got["shape"] != want and got["shape"] == [want[0], want[2], want[3], want[1]]:
                layout[spec.name] = "NHWC"
        options = {"device": settings.get("device", "cpu"), "input_layout": layout}
        if settings.get("precision_mode"):
            options["precision_mode"] = settings["precision_mode"]
        path = Path(res["model"])
        session.register(path, options, [s.to_dict() for s in inputs], [s.to_dict() for s in outputs])
        return path, res, options

    def convert_fp32(self, onnx_path: str | Path, workdir: str | Path, session: BuildSession | None = None) -> Path:
        from edgekit.model import load_model

        from ..session import BuildSession

        session = session if session is not None else BuildSession()
        src = load_model(onnx_path)
        work = Path(workdir) / "mindspore-fp32"
        path = self._convert(onnx_path, work, False, src.inputs, src.outputs, {}, log=None, session=session)[0]
        session.register_fp32(onnx_path, path)
        return path

    def build(self, ctx: BuildContext) -> BuildResult:
        import onnx

        from edgekit.model import operator_set

        self.refuse_unbuildable(ctx.precision)
        log = self.quiet(ctx.log)
        settings = ctx.profile.backend("mindspore-lite")

        def convert(fp16: bool) -> tuple[Path, dict[str, Any], dict[str, Any]]:
            return self._convert(
                ctx.reference_path,
                ctx.workdir / f"mindspore-{'fp16' if fp16 else 'fp32'}",
                fp16,
                ctx.source.inputs,
                ctx.source.outputs,
                settings,
                log,
                ctx.session,
            )

        fp32, res, options = convert(False)
        ctx.check("fp32 (ONNX -> MindSpore Lite .ms)", fp32)
        ctx.session.register_fp32(ctx.reference_path, fp32)
        model_file, flags = fp32, {"weight_fp16": False}
        if ctx.precision == "fp16":
            model_file, res, options = convert(True)
            flags = {"weight_fp16": True}
            ctx.check("fp16 weights (Converter.weight_fp16)", model_file)
        warnings = []
        if options["input_layout"]:
            warnings.append(
                "MindSpore Lite converted the input(s) %s to NHWC; the bundle keeps the source's NCHW and "
                "the runner transposes" % ", ".join(sorted(options["input_layout"]))
            )
        sections = {
            "mindspore_lite": {
                "converter": f"mindspore_lite {res['versions']['mindspore_lite']} Converter "
                f"(MINDIR_LITE, optimize general), {flags}",
                "runtime": f"mindspore_lite {res['versions']['mindspore_lite']}",
                "input_layout": {
                    s.name: options["input_layout"].get(s.name, s.layout or "as declared") for s in ctx.source.inputs
                },
                "converted_input_shapes": {i["name"]: i["shape"] for i in res["inputs"]},
                "hardsigmoid_rewritten": res["hardsigmoid_rewritten"],
                "rewritten": res.get("rewritten", {}),
                "host_checks": "MindSpore Lite CPU on this machine, through the agent's runner in the tool environment",
                "target": {"profile": ctx.profile.name, **options},
            }
        }
        from edgekit import toolenvs

        sections["mindspore_lite"]["tool_environment"] = toolenvs.state(self.toolenv)["path"]
        return BuildResult(
            model_file=model_file,
            runtime="mindspore_lite",
            runtime_version=res["versions"]["mindspore_lite"],
            format="ms",
            ops=operator_set(onnx.load(str(ctx.reference_path))),
            ops_graph="the ONNX graph given to the converter (its own graph is not read)",
            sections=sections,
            warnings=warnings,
            runner_options=options,
        )


BACKEND = MindSporeLiteBackend()
