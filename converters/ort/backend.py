"""ONNX Runtime backend: FP32, FP16, INT8 static (QDQ) and INT8 dynamic; ORT format.

Choices, and why:
- INT8 static uses the QDQ format with per-channel weights, U8 activations and S8
  weights: ONNX Runtime's CPU kernels fuse QDQ groups into integer convolutions. INT8
  dynamic (and the QOperator format) turn every Conv into ConvInteger, which runs
  10-20x slower than FP32 on CNNs, so it is only built on request, with a warning.
- On x86 without VNNI, U8S8 products can saturate; the profile asks for
  ``int8_reduce_range`` there and weights are quantized to 7 bits. An INT8 build for
  another device (no reduce_range: an ARM board's dot-product kernels do not saturate)
  checked on such a host is run with its QDQ groups unfused (exact int8 arithmetic, as
  the target computes it); its ``.ort`` file is shown to match that QDQ model under this
  host's own fused kernels, and the report says so.
- The ORT format (``.ort``) is for mobile and minimal builds; the conversion targets
  the profile's architecture (``arm`` keeps QDQ int8 fusions, drops x86-only NCHWc).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit_agent.runners.base import int8_products_saturate

from ..base import Backend, BuildContext, BuildResult
from .convert import OrtFormats
from .quantize import OrtQuantization, require_quantized

# execution providers that compile the part of the graph they take: they are offered ONNX operators only
COMPILING_EPS = ("NNAPIExecutionProvider", "CoreMLExecutionProvider", "QNNExecutionProvider")

if TYPE_CHECKING:
    from edgekit.converters.session import BuildSession
    from edgekit.profiles import Profile

FLOAT_OPS_UNFRIENDLY_TO_DYNAMIC = {"Conv", "ConvTranspose"}
EXACT = "ort.exact_int8"  # session memo: this build's int8 models are checked with QDQ unfused


class OrtBackend(OrtQuantization, OrtFormats, Backend):
    name = "ort"
    specialises_inputs = False  # ONNX Runtime runs If

    def specialises_for(self, profile: Any) -> bool:
        """Fix one-valued inputs in the graph only for the ORT format: its conversion cannot leave out the constant
        folding that breaks If branches once shapes are fixed (Silero VAD); plain ONNX runs If as it is."""
        return bool(profile.backend("ort").get("format") == "ort")

    placement = "edgekit.converters.ort.placement"  # its part of edgekit explain (edgekit.placement)
    install_hint = "Install it with: pip install 'edgekit[ort]' (or pip install onnxruntime)."

    def availability(self) -> tuple[bool, str]:
        try:
            import onnxruntime as ort
        except ImportError as e:
            return False, f"onnxruntime is not installed ({e})"
        return True, f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"

    def runtime_version(self) -> str:
        import onnxruntime as ort

        return ort.__version__

    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        wanted = profile.backend("ort").get("precisions", ["fp32"])
        for p in wanted:
            if p == "int8" and not have_calib:
                continue
            return p
        return "fp32"

    def host_settings(self, arch: str, isa: list) -> dict | None:
        """Always ranked first on the host (the reference runtime)."""
        providers = ["CPUExecutionProvider"]
        try:
            import onnxruntime

            available = onnxruntime.get_available_providers()
            providers = [p for p in available if p not in ("AzureExecutionProvider",)] or providers
        except ImportError:
            pass
        return {
            "providers": providers,
            # ORT format is for minimal/mobile builds; on a full runtime plain ONNX loads as fast or faster.
            "format": "onnx",
            "precisions": ["int8", "fp32"],
            "int8_reduce_range": arch == "x86_64" and not ({"avx512_vnni", "avx_vnni"} & set(isa)),
        }

    # host-side inference: the reference by edgekit.execution.reference_session, built models by the agent's
    # ONNX Runtime runner (Backend.execution), as the device runs them
    def manifest_for(self, model_path: str | Path, session: BuildSession | None = None) -> dict:
        entry = super().manifest_for(model_path, session)
        if session is not None and session.memo.get(EXACT) and str(model_path).endswith(".onnx"):
            entry = dict(entry, runner={**entry.get("runner", {}), "graph_optimization": "basic"})
        return entry

    def _ort_matches_qdq(
        self, ctx: BuildContext, qdq_path: Path, ort_path: Path, replay: bool = False
    ) -> dict[str, Any]:
        """The .ort file against its QDQ source, both under this host's own (fused) kernels: the conversion must
        not change what the model computes (``replay``: the file's saved runtime optimizations replayed, as the
        device runs a Runtime-style file). Returns the record for the report; raises ConversionError if not."""
        import numpy as np

        from edgekit.errors import ConversionError
        from edgekit.execution import in_process, predict

        samples = (ctx.evaluation if ctx.evaluation is not None else ctx.calib).samples[:32]  # type: ignore[union-attr]
        plain = {**(ctx.session.default_manifest() if ctx.session else {}), "runner": {}}
        qdq = predict(in_process("ort", qdq_path, plain), samples)
        ort = predict(
            in_process("ort", ort_path, {**plain, "runner": {"saved_runtime_optimizations": True} if replay else {}}),
            samples,
        )
        worst = max(
            float(np.max(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64))))
            for a, b in zip(qdq, ort)
            for k in a
        )
        scale = max(float(np.max(np.abs(np.asarray(a[k], np.float64)))) for a in qdq for k in a) or 1.0
        if not worst <= 1e-3 * scale:
            raise ConversionError(
                f"the ORT-format conversion changed what the int8 model computes: max|err| {worst:.3g} against its "
                "QDQ source under the same kernels"
            )
        return {"samples": len(samples), "max_abs_vs_qdq_same_kernels": worst}

    # -- conversion ---------------------------------------------------------------
    def build(self, ctx: BuildContext) -> BuildResult:
        import onnx

        settings = ctx.profile.backend("ort")
        fmt = settings.get("format", "onnx")
        compiling = [p for p in settings.get("providers", []) if p in COMPILING_EPS]
        warnings = []
        sections = {}
        work = ctx.workdir
        model_path = ctx.reference_path
        op_types = {n.op_type for n in ctx.source.proto.graph.node}

        if ctx.precision == "fp32":
            plan = getattr(ctx.source, "shapes", None)
            ctx.check("fp32 (dynamic shapes kept)" if plan and plan.dynamic else "fp32 (shapes fixed)", model_path)
        elif ctx.precision == "fp16":
            step = "fp16 weights and activations"
            model_path, sections["kept_float"] = self._fp16_in_range(ctx, work, step)
            kept = len(sections["kept_float"]["nodes"])
            ctx.check(step + (f", {kept} node(s) kept float32 (values beyond fp16's range)" * bool(kept)), model_path)
            if "fp16" not in settings.get("precisions", []):
                warnings.append(
                    f"profile {ctx.profile.name} does not list fp16 as fast for ONNX Runtime: its CPU provider "
                    "runs most fp16 ops through casts to fp32; expect it slower than fp32 here"
                )
        elif ctx.precision == "int8":
            reduce_range = bool(settings.get("int8_reduce_range", False))
            exact = not reduce_range and int8_products_saturate() and ctx.session is not None
            if exact:
                ctx.session.memo[EXACT] = True
                warnings.append(
                    "checked in exact int8 arithmetic (QDQ unfused): this build machine's CPU (x86-64 without "
                    "VNNI) saturates ONNX Runtime's fused uint8 x int8 products, the target's kernels do not"
                )
            model_path = self._int8_static(ctx, work, reduce_range)
            require_quantized(model_path, "int8")
            step = "int8 static quantization (QDQ, per-channel)"
            if ctx.budget is not None:
                from edgekit.passes.mixed_precision import search

                model_path, sections["mixed_precision"] = search(self, ctx, plain=model_path)
                warnings.extend(sections["mixed_precision"].get("warnings", []))
            else:  # a detector's decoder tail in float where its task metric needs it
                model_path, tail = self._head_float(ctx, work, reduce_range, model_path, step)
                if tail is not None:
                    sections["kept_float"] = tail
                    if tail["kept"]:
                        step += f", {len(tail['nodes'])} node(s) of the {ctx.task.spec.family} tail kept float"  # type: ignore[attr-defined]
            sections["quantization"] = {
                "method": "static",
                "format": "QDQ",
                "per_channel": True,
                "activations": "uint8",
                "weights": "int8",
                "reduce_range": reduce_range,
                "calibration": "minmax",
                "calibration_samples": len(ctx.calib),  # type: ignore[arg-type]
                **({"checked_in": "exact int8 arithmetic (QDQ unfused) on this host"} if exact else {}),
            }
            floats = len(sections.get("mixed_precision", {}).get("float_layer_names", []))
            ctx.check(
                step + (f", {floats} layer(s) kept float for --budget {ctx.budget}" if ctx.budget is not None else ""),
                model_path,
            )
        elif ctx.precision == "int8-dynamic":
            model_path = self._int8_dynamic(ctx.reference_path, work / "model.int8dyn.onnx")
            require_quantized(model_path, "int8-dynamic")
            sections["quantization"] = {"method": "dynamic", "format": "QOperator", "weights": "int8"}
            ctx.check("int8 dynamic quantization", model_path)
            if op_types & FLOAT_OPS_UNFRIENDLY_TO_DYNAMIC:
                warnings.append(
                    "int8-dynamic turns Conv into ConvInteger, which ONNX Runtime runs 10-20x slower than fp32 on "
                    "CNNs; use --precision int8 with --calib for a convolutional model"
                )
        else:
            raise ValueError(f"unsupported precision {ctx.precision}")

        final_onnx = work / "model.onnx"
        if model_path != final_onnx:
            final_onnx.write_bytes(Path(model_path).read_bytes())
        sections["mobile_usability"] = self._usability(final_onnx)
        if fmt == "ort":
            target_platform = "arm" if ctx.profile.arch in ("aarch64", "armv7l") else "amd64"
            model_file, config = self._to_ort_format(final_onnx, work / "ortfmt", target_platform, bool(compiling))
            sections["ort_format"] = {
                "target_platform": target_platform,
                "optimization": (
                    f"all, runtime style: basic optimizations in the file, the others saved and replayed at load on "
                    f"the nodes {', '.join(compiling)} leaves to the CPU (ONNX Runtime's advice for compiling EPs)"
                    if compiling
                    else "all, fixed"
                ),
            }
            if ctx.session is not None and ctx.session.memo.get(EXACT):
                # its fused kernels saturate here: show the file computes what its QDQ source computes under the
                # same kernels, and judge the int8 model by the QDQ source in exact arithmetic
                sections["ort_format"]["matches_qdq_source"] = self._ort_matches_qdq(
                    ctx, final_onnx, model_file, replay=bool(compiling)
                )
                ctx.check(
                    f"ORT format (optimized for {target_platform}; int8 judged exactly on its QDQ source, which the "
                    f"file matches under this host's kernels)",
                    final_onnx,
                )
            else:
                ctx.check(f"ORT format (optimized for {target_platform})", model_file)
        else:
            model_file = final_onnx
            config = work / "model.required_operators.config"
            config.write_text(self._required_ops_from_onnx(onnx.load(str(final_onnx))))
        required = config.read_text()
        sections["required_operators"] = {
            "file": "required_operators.config",
            "config": [line for line in required.splitlines() if line and not line.startswith("#")],
            "use": "build ONNX Runtime with --minimal_build --include_ops_by_config required_operators.config",
        }
        from edgekit.model import operator_set

        ops = operator_set(onnx.load(str(final_onnx)))
        return BuildResult(
            model_file=model_file,
            extra_files=[(config, "required_operators")],
            runtime="onnxruntime",
            runtime_version=self.runtime_version(),
            format=fmt,
            ops=ops,
            ops_graph="the built ONNX graph (before its conversion to the ORT format)",
            sections=sections,
            warnings=warnings,
            runner_options={
                "providers": settings.get("providers", ["CPUExecutionProvider"]),
                **({"saved_runtime_optimizations": True} if fmt == "ort" and compiling else {}),
                **(
                    {"int8_u8s8": True}
                    if ctx.precision == "int8" and not sections["quantization"]["reduce_range"]
                    else {}
                ),
            },
        )


BACKEND = OrtBackend()
