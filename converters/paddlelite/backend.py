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

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from edgekit.errors import ConversionError
from edgekit.toolenvs import ToolEnvSpec

from ..base import BuildContext, BuildResult
from ..toolworker import ToolEnvBackend

if TYPE_CHECKING:
    from edgekit.converters.session import BuildSession
    from edgekit.profiles import Profile

TOOLS = Path(__file__).resolve().parent.parent / "tools"
HOST_TARGET = {"x86_64": "x86", "amd64": "x86", "aarch64": "arm", "arm64": "arm"}


OTHERS = "choose another backend (ort, openvino, mnn, tflite or mindspore-lite)"


def x2paddle_limitation(onnx_path: str | Path, said: str) -> ConversionError | None:
    """A ConversionError naming the node X2Paddle 1.6 failed on and why, for the failures it is known to have;
    None for any other (the converter's own message then stands)."""
    import onnx

    from edgekit.errors import ConversionError

    nodes = onnx.load(str(onnx_path), load_external_data=False).graph.node
    named = {op: [n.name or n.output[0] for n in nodes if n.op_type == op] for op in ("If", "LSTM")}
    if named["LSTM"] and "in previous layers, the layers should be make by topological sort" in said:
        return ConversionError(
            f"paddlelite: X2Paddle 1.6.0 cannot convert the LSTM node {named['LSTM'][0]!r} of this graph (its LSTM "
            "mapping loses the node's outputs: \"Couldn't find ... in previous layers\"; edgekit writes an LSTM of "
            f"one step with fixed shapes as its cell, not this one): {OTHERS}"
        )
    if named["If"] and ("If" in said or "Traceback" in said):
        from ..onnx_specialise import control_flow_advice

        model = onnx.load(str(onnx_path), load_external_data=False)
        return ConversionError(f"paddlelite: {control_flow_advice(model, 'X2Paddle 1.6.0')}")
    return None


def opt_limitation(said: str, ops: list[dict[str, Any]]) -> ConversionError | None:
    """The error naming the Paddle op(s) opt has no kernel for, each with its output var (``ops``: the program's
    ``{type, outputs}``); None when opt said something else."""
    import re

    found = re.search(r"not supported on '([^']+)'\. These unsupported ops are: ([^.\n]+)", said)
    if not found:
        return None
    named = []
    for op in re.findall(r"'([^']+)'", found.group(2)):
        outs = [o["outputs"][0] for o in ops if o["type"] == op and o["outputs"]]
        named.append(f"{op} (output {outs[0]!r})" if outs else op)
    return ConversionError(
        f"paddlelite: opt (paddlelite 2.13rc0) has no {found.group(1)} kernel for the Paddle op(s) "
        f"{'; '.join(named)}: replace the op in the model, or {OTHERS} (they take the model through its ONNX export)"
    )


class PaddleLiteBackend(ToolEnvBackend):
    name = "paddlelite"
    placement = "edgekit.converters.paddlelite.placement"  # its part of edgekit explain (edgekit.placement)
    install_hint = "edgekit creates its tool environment on first use: `edgekit backends install paddlelite`."
    toolenv = ToolEnvSpec(
        name="paddlelite",
        pythons=("3.10",),
        requirements=(  # every package of the environment (resolved on Python 3.10), pinned
            "paddlelite==2.13rc0",
            "paddlepaddle==2.6.2",
            "x2paddle==1.6.0",
            "paddle2onnx==1.2.11",  # a Paddle inference model -> ONNX for the other backends (edgekit.intake_paddle)
            "onnx==1.17.0",
            "anyio==4.16.0",
            "astor==0.8.1",
            "certifi==2026.10.19.post1",
            "charset-normalizer==3.5.3",
            "decorator==5.3.1",
            "exceptiongroup==1.3.2",
            "h11==0.16.0",
            "httpcore==1.0.9",
            "httpx==0.28.1",
            "idna==3.20",
            "mpmath==1.3.0",
            "numpy==2.2.6",
            "opt-einsum==3.3.0",
            "packaging==26.4",
            "pillow==12.3.0",
            "protobuf==7.36.2",
            "requests==2.34.2",
            "six==1.17.0",
            "sympy==1.14.0",
            "typing_extensions==4.16.0",
            "urllib3==2.8.0",
        ),
        check="import paddlelite.lite, x2paddle.convert, paddle, paddle2onnx, onnx",
        purpose="ONNX -> Paddle (x2paddle) -> Paddle Lite .nb (opt), Paddle -> ONNX (paddle2onnx), and the Paddle Lite "
        "runtime for host checks",
        env=(("GLOG_minloglevel", "2"), ("FLAGS_call_stack_level", "0"), ("PIP_NO_INDEX", "1")),
    )
    ready_detail = (
        "paddlelite 2.13rc0 (tool environment ready: Python {python}, {path}); builds fp32 (fp16 and int8 "
        "are refused: this host cannot check them)"
    )
    noise = ("Converting node", "INFO]", "=====", "warnings.warn", "UserWarning", "full_graph=True")

    def runtime_version(self) -> str:
        return "2.13rc0"

    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        return "fp32"

    def host_settings(self, arch: str, isa: list) -> dict | None:
        # its runtime lives in a tool environment edgekit creates on first use
        return {"target": "x86" if arch == "x86_64" else "arm", "precisions": ["fp32"]}

    # -- conversion -------------------------------------------------------------------
    @staticmethod
    def host_target() -> str | None:
        return HOST_TARGET.get(platform.machine().lower())

    @staticmethod
    def _no_host_target() -> ConversionError:
        from edgekit.errors import ConversionError

        return ConversionError(
            f"this host ({platform.machine()}) runs no Paddle Lite target edgekit knows (x86, arm): "
            "a converted model could not be checked here"
        )

    def _convert(
        self,
        onnx_path: str | Path,
        work: Path,
        targets: list[str],
        inputs: list[dict[str, Any]],
        outputs: list[dict[str, Any]],
        runner_options: dict[str, Any],
        log: Callable[[str], Any] | None,
        session: BuildSession,
        paddle: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """ONNX -> Paddle -> one .nb per target (``paddle``: a Paddle inference model given, opt reads it as it
        is); each registered for the host worker."""
        from edgekit import toolenvs

        from ..onnx_lstm_cell import lstm_steps_as_cells
        from ..onnx_tidy import (
            drop_default_dilations,
            pad_rank2_as_rank4,
            prelu_for_x2paddle,
            unsqueeze_as_reshape,
        )

        if paddle:
            request = {
                "step": "Paddle -> .nb",
                "outdir": str(work),
                "targets": targets,
                "pdmodel": (paddle.get("for_opt") or paddle)["model"],
                "pdiparams": (paddle.get("for_opt") or paddle)["params"],
                "input_names": paddle["input_names"],
                "output_names": [o["name"] for o in outputs],
            }
            try:
                res = toolenvs.run_tool(self.toolenv, TOOLS / "paddle_convert.py", request, work, log=log)
            except ConversionError as e:
                raise opt_limitation(str(e), paddle.get("ops") or []) or e from None
            for t, nb in res["nb"].items():
                session.register(nb, dict(runner_options, inputs=res["inputs"], target=t), inputs, outputs)
            return res
        onnx_path, _ = drop_default_dilations(onnx_path, work)  # X2Paddle refuses dilations=[1, 1] on pooling
        onnx_path, _ = unsqueeze_as_reshape(onnx_path, work)  # its Unsqueeze mapping loses static shapes
        onnx_path, _ = lstm_steps_as_cells(onnx_path, work)  # its LSTM mapping loses Y_h and Y_c
        onnx_path, _ = pad_rank2_as_rank4(onnx_path, work)  # Paddle's reflect padding takes rank 3 to 5
        onnx_path, _ = prelu_for_x2paddle(onnx_path, work)  # its PRelu maps a [C, 1, 1] slope on axis 1 only
        try:
            res = toolenvs.run_tool(
                self.toolenv,
                TOOLS / "paddle_convert.py",
                {"step": "ONNX -> Paddle -> .nb", "onnx": str(onnx_path), "outdir": str(work), "targets": targets},
                work,
                log=log,
            )
        except Exception as e:
            known = x2paddle_limitation(onnx_path, str(e))
            if known is None:
                raise
            raise known from None
        for t, nb in res["nb"].items():
            session.register(nb, dict(runner_options, inputs=res["inputs"], target=t), inputs, outputs)
        return res

    def convert_fp32(self, onnx_path: str | Path, workdir: str | Path, session: BuildSession | None = None) -> Path:
        from edgekit.model import load_model

        from ..session import BuildSession

        session = session if session is not None else BuildSession()
        host = self.host_target()
        if host is None:
            raise self._no_host_target()
        src = load_model(onnx_path)
        res = self._convert(
            onnx_path,
            Path(workdir),
            [host],
            [s.to_dict() for s in src.inputs],
            [s.to_dict() for s in src.outputs],
            {"target": host},
            log=None,
            session=session,
        )
        nb = Path(res["nb"][host])
        session.register_fp32(onnx_path, nb)
        return nb

    def build(self, ctx: BuildContext) -> BuildResult:
        import onnx

        from edgekit import toolenvs
        from edgekit.model import operator_set

        self.refuse_unbuildable(ctx.precision)
        host = self.host_target()
        if host is None:  # before converting: nothing built here could be checked
            raise self._no_host_target()
        settings = ctx.profile.backend("paddlelite")
        target = settings.get("target") or HOST_TARGET.get(ctx.profile.arch, "arm")
        targets = [host] if host == target else [host, target]
        inputs = [s.to_dict() for s in ctx.source.inputs]
        outputs = [s.to_dict() for s in ctx.source.outputs]
        paddle = getattr(ctx.exported, "paddle", None)  # a Paddle model given: opt converts it, not the ONNX export
        res = self._convert(
            ctx.reference_path,
            ctx.workdir / "paddlelite",
            targets,
            inputs,
            outputs,
            {"target": target, "power_mode": settings.get("power_mode")},
            log=self.quiet(ctx.log),
            session=ctx.session,
            paddle=paddle,
        )
        runner_options = {"target": target, "inputs": res["inputs"], "power_mode": settings.get("power_mode")}
        chain = "Paddle inference model -> opt" if paddle else "ONNX -> x2paddle -> opt"
        ctx.check(f"fp32 ({chain}, {host} .nb on this host)", Path(res["nb"][host]))
        ctx.session.register_fp32(ctx.reference_path, res["nb"][host])
        shipped = Path(res["nb"][target])
        if target == host:
            validated = "yes (this host runs the shipped .nb)"
            warnings = []
        else:
            validated = (
                f"no (cross-target: {target} .nb cannot run on this {host} host; the {host} build of the same "
                "graph was validated)"
            )
            warnings = [
                f"the shipped {target} .nb was not run here: the {host} .nb of the same Paddle graph passed the "
                "fidelity check, and the device compares its own outputs with this machine's when the bundle "
                "is installed"
            ]
        runner_options["validated"] = validated
        tail = res["tailoring"].get(target, {})
        extra = [
            (Path(tail[k]), role) for k, role in (("ops", "tailored_ops"), ("kernels", "tailored_kernels")) if k in tail
        ]
        sections = {
            "paddlelite": {
                "converter": f"opt (paddlelite {res['versions']['paddlelite']}) on the Paddle inference model as given"
                if paddle
                else f"x2paddle {res['versions']['x2paddle']} (usage report disabled) with paddlepaddle "
                f"{res['versions']['paddlepaddle']}, then opt (paddlelite {res['versions']['paddlelite']})",
                "runtime": f"paddlelite {res['versions']['paddlelite']} (MobileConfig)",
                "tool_environment": toolenvs.state(self.toolenv)["path"],
                "target": target,
                "built_targets": list(res["nb"]),
                "host_target": host,
                "validated": validated,
                "renamed_tensors": res["renamed"],
                "model_ops": res["ops"].get(target, []),
                "kernels": res["kernels"].get(target, []),
                "tailoring": "the tailored op and kernel lists (opt record_model_info) are in the bundle for a "
                "selective build of Paddle Lite",
                "seconds": res["seconds"],
            }
        }
        if paddle:  # the .nb was checked against the original itself (edgekit.intake_paddle)
            sections["paddlelite"]["judged_against"] = getattr(ctx.exported, "section", {}).get("reference")
        return BuildResult(
            model_file=shipped,
            extra_files=extra,
            runtime="paddlelite",
            runtime_version=res["versions"]["paddlelite"],
            format="nb",
            ops=operator_set(onnx.load(str(ctx.reference_path))),
            ops_graph="the ONNX export of the Paddle model (opt read the Paddle model itself)"
            if paddle
            else "the ONNX graph given to the converter (its own graph is not read)",
            sections=sections,
            warnings=warnings,
            runner_options=runner_options,
        )


BACKEND = PaddleLiteBackend()
