"""ONNX Runtime backend: FP32, FP16, INT8 static (QDQ) and INT8 dynamic; ORT format.

Choices, and why:
- INT8 static uses the QDQ format with per-channel weights, U8 activations and S8
  weights: ONNX Runtime's CPU kernels fuse QDQ groups into integer convolutions. INT8
  dynamic (and the QOperator format) turn every Conv into ConvInteger, which runs
  10-20x slower than FP32 on CNNs, so it is only built on request, with a warning.
- On x86 without VNNI, U8S8 products can saturate; the profile asks for
  ``int8_reduce_range`` there and weights are quantized to 7 bits.
- The ORT format (``.ort``) is for mobile and minimal builds; the conversion targets
  the profile's architecture (``arm`` keeps QDQ int8 fusions, drops x86-only NCHWc).
"""

from pathlib import Path

from ..base import Backend, BuildResult
from .convert import OrtFormats
from .quantize import OrtQuantization

FLOAT_OPS_UNFRIENDLY_TO_DYNAMIC = {"Conv", "ConvTranspose"}


class OrtBackend(OrtQuantization, OrtFormats, Backend):
    name = "ort"
    placement = "edgekit.converters.ort.placement"  # its part of edgekit explain (edgekit.placement)
    install_hint = "Install it with: pip install 'edgekit[ort]' (or pip install onnxruntime)."

    def availability(self):
        try:
            import onnxruntime as ort
        except ImportError as e:
            return False, f"onnxruntime is not installed ({e})"
        return True, f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"

    def runtime_version(self):
        import onnxruntime as ort

        return ort.__version__

    def default_precision(self, profile, have_calib):
        wanted = profile.backend("ort").get("precisions", ["fp32"])
        for p in wanted:
            if p == "int8" and not have_calib:
                continue
            return p
        return "fp32"

    def host_settings(self, arch, isa):
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

    # -- conversion ---------------------------------------------------------------
    def build(self, ctx):
        import onnx

        settings = ctx.profile.backend("ort")
        fmt = settings.get("format", "onnx")
        warnings = []
        sections = {}
        work = ctx.workdir
        model_path = ctx.reference_path
        op_types = {n.op_type for n in ctx.source.proto.graph.node}

        if ctx.precision == "fp32":
            ctx.check("fp32 (shapes fixed)", model_path)
        elif ctx.precision == "fp16":
            model_path = self._fp16(ctx.reference_path, work / "model.fp16.onnx")
            ctx.check("fp16 weights and activations", model_path)
            if "fp16" not in settings.get("precisions", []):
                warnings.append(
                    f"profile {ctx.profile.name} does not list fp16 as fast for ONNX Runtime: its CPU provider "
                    "runs most fp16 ops through casts to fp32; expect it slower than fp32 here"
                )
        elif ctx.precision == "int8":
            reduce_range = bool(settings.get("int8_reduce_range", False))
            model_path = self._int8_static(ctx, work, reduce_range)
            if ctx.budget is not None:
                from edgekit.passes.mixed_precision import search

                model_path, sections["mixed_precision"] = search(self, ctx, plain=model_path)
                warnings.extend(sections["mixed_precision"].get("warnings", []))
            sections["quantization"] = {
                "method": "static",
                "format": "QDQ",
                "per_channel": True,
                "activations": "uint8",
                "weights": "int8",
                "reduce_range": reduce_range,
                "calibration": "minmax",
                "calibration_samples": len(ctx.calib),
            }
            floats = len(sections.get("mixed_precision", {}).get("float_layer_names", []))
            ctx.check(
                "int8 static quantization (QDQ, per-channel)"
                + (f", {floats} layer(s) kept float for --budget {ctx.budget}" if ctx.budget is not None else ""),
                model_path,
            )
        elif ctx.precision == "int8-dynamic":
            model_path = self._int8_dynamic(ctx.reference_path, work / "model.int8dyn.onnx")
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
            model_file, config = self._to_ort_format(final_onnx, work / "ortfmt", target_platform)
            ctx.check(f"ORT format (optimized for {target_platform})", model_file)
            sections["ort_format"] = {"target_platform": target_platform, "optimization": "all, fixed"}
        else:
            model_file = final_onnx
            config = work / "model.required_operators.config"
            config.write_text(self._required_ops_from_onnx(onnx.load(str(final_onnx))))
        required = config.read_text()
        sections["required_operators"] = {
            "file": "required_operators.config",
            "config": [l for l in required.splitlines() if l and not l.startswith("#")],
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
            sections=sections,
            warnings=warnings,
            runner_options={"providers": settings.get("providers", ["CPUExecutionProvider"])},
        )


BACKEND = OrtBackend()
