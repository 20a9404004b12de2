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

import contextlib
import io
import logging
from pathlib import Path

from .base import Backend, BuildResult

FLOAT_OPS_UNFRIENDLY_TO_DYNAMIC = {"Conv", "ConvTranspose"}


@contextlib.contextmanager
def _quiet():
    """ORT's tools print progress to stdout; keep edgekit's stdout (and --json) clean."""
    buf = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buf):
            yield buf
    finally:
        logging.disable(logging.NOTSET)


class _Reader:
    """onnxruntime.quantization CalibrationDataReader over a Dataset."""

    def __init__(self, dataset):
        self._it = iter(dataset.samples)

    def get_next(self):
        return next(self._it, None)


class OrtBackend(Backend):
    name = "ort"
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

    def _fp16(self, src, dst):
        import onnx

        try:
            from onnxconverter_common import float16
        except ImportError:
            from edgekit.errors import BackendUnavailable

            raise BackendUnavailable(
                "fp16 conversion needs onnxconverter-common: pip install 'edgekit[fp16]'"
            ) from None
        from edgekit.errors import ConversionError

        try:
            with _quiet():
                m = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        except Exception as e:  # onnxconverter-common raises plain exceptions
            raise ConversionError(f"fp16 conversion failed: {type(e).__name__}: {e}") from e
        onnx.save(m, str(dst))
        return dst

    def _int8_static(self, ctx, work, reduce_range, exclude=(), out=None):
        """Static QDQ int8; ``exclude``: node names of the pre-processed model kept in float."""
        import inspect

        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        from edgekit.errors import ConversionError

        pre = self._preprocessed(ctx, work)
        out = out or work / "model.int8.onnx"
        options = {}
        if "calibration_cache_path" in inspect.signature(quantize_static).parameters:
            # mixed-precision searches quantize many times: calibrate once per build (ranges do not depend on exclude)
            options["calibration_cache_path"] = str(work / "model.int8.calibration.json")
        try:
            with _quiet():
                quantize_static(
                    str(pre),
                    str(out),
                    _Reader(ctx.calib),
                    quant_format=QuantFormat.QDQ,
                    per_channel=True,
                    reduce_range=reduce_range,
                    activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax,
                    nodes_to_exclude=list(exclude) or None,
                    **options,
                )
        except Exception as e:  # ORT raises bare Exceptions with its own messages
            raise ConversionError(f"ONNX Runtime static quantization failed: {type(e).__name__}: {e}") from e
        return out

    def _preprocessed(self, ctx, work):
        """The model int8 quantization starts from (opset >= 13, ORT's pre-processing), once per build."""
        from onnxruntime.quantization.shape_inference import quant_pre_process

        from edgekit.errors import ConversionError

        ctx.require_calibration("int8 static quantization", "fp32/fp16")
        pre = work / "model.pre.onnx"
        if pre.is_file():
            return pre
        source = self._ensure_opset(ctx, 13, work)
        try:
            with _quiet():
                # Shapes are static by now, so ONNX's own shape inference suffices; ORT's symbolic
                # inference asserts on some real models (PP-OCR's Concat) and needs sympy.
                quant_pre_process(str(source), str(pre), skip_symbolic_shape=True)
        except Exception as e:  # ORT raises bare Exceptions with its own messages
            pre.unlink(missing_ok=True)
            raise ConversionError(f"ONNX Runtime static quantization failed: {type(e).__name__}: {e}") from e
        self._name_nodes(pre)
        return pre

    @staticmethod
    def _name_nodes(path):
        """ORT excludes nodes from quantization by name: give unnamed nodes unique names (semantics unchanged)."""
        import onnx

        model = onnx.load(str(path))
        unnamed = [n for n in model.graph.node if not n.name]
        if unnamed:
            taken = {n.name for n in model.graph.node}
            for k, n in enumerate(unnamed):
                name = f"{n.op_type}_edgekit_{k}"
                while name in taken:
                    name += "_"
                n.name = name
                taken.add(name)
            onnx.save(model, str(path))

    # -- mixed precision (--budget) ---------------------------------------------------
    def layer_names(self, ctx, layers):
        """Reference layers -> node names in ORT's pre-processed model (found by their output tensors)."""
        import onnx

        pre = onnx.load(str(self._preprocessed(ctx, ctx.workdir)), load_external_data=False)
        by_output = {
            n.output[0]: n.name
            for n in pre.graph.node
            if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and n.output and n.name
        }
        return {
            layer.name: next((by_output[t] for t in reversed(layer.tensors) if t in by_output), None)
            for layer in layers
        }

    def quantize(self, ctx, exclude=()):
        """A layer kept float takes its element-wise tail with it (activations, pooling, residual Add: every node
        up to the next weighted layer): otherwise the QDQ pair on the next node's input quantizes its output anyway."""
        import onnx

        settings = ctx.profile.backend("ort")
        names = self.layer_names(ctx, exclude) if exclude else {}
        heads = {n for n in names.values() if n}
        nodes = set()
        if heads:
            graph = onnx.load(str(self._preprocessed(ctx, ctx.workdir)), load_external_data=False).graph
            consumers = {}
            for n in graph.node:
                for i in n.input:
                    consumers.setdefault(i, []).append(n)
            stack = [n for n in graph.node if n.name in heads]
            while stack:
                n = stack.pop()
                if n.name in nodes:
                    continue
                nodes.add(n.name)
                for out in n.output:
                    stack.extend(
                        c
                        for c in consumers.get(out, [])
                        if c.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul")
                    )
        nodes = sorted(nodes)
        tag = f"{len(nodes)}f{len(list(ctx.workdir.glob('model.int8-mp*.onnx')))}"
        return self._int8_static(
            ctx,
            ctx.workdir,
            bool(settings.get("int8_reduce_range", False)),
            nodes,
            out=ctx.workdir / f"model.int8-mp{tag}.onnx",
        )

    def _ensure_opset(self, ctx, minimum, work):
        """Per-channel QDQ needs DequantizeLinear's axis (opset 13): upgrade older models, checked."""
        import onnx
        from onnx import version_converter

        from edgekit.errors import ConversionError

        current = ctx.source.opset.get("ai.onnx", minimum)
        if current >= minimum:
            return ctx.reference_path
        try:
            upgraded = version_converter.convert_version(onnx.load(str(ctx.reference_path)), minimum)
        except Exception as e:  # the converter raises RuntimeError/ValueError/ConvertError
            raise ConversionError(
                f"cannot upgrade the model from opset {current} to {minimum} for int8 "
                f"quantization: {e}; re-export the model with opset >= {minimum}"
            ) from e
        path = work / f"model.opset{minimum}.onnx"
        onnx.save(upgraded, str(path))
        ctx.check(f"opset upgrade {current} -> {minimum}", path)
        return path

    def _int8_dynamic(self, src, dst):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        from edgekit.errors import ConversionError

        try:
            with _quiet():
                quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        except Exception as e:
            raise ConversionError(f"ONNX Runtime dynamic quantization failed: {type(e).__name__}: {e}") from e
        return dst

    def _to_ort_format(self, onnx_path, outdir, target_platform):
        from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

        from edgekit.errors import ConversionError

        outdir.mkdir(parents=True, exist_ok=True)
        src_dir = outdir / "src"
        src_dir.mkdir(exist_ok=True)
        src = src_dir / "model.onnx"
        src.write_bytes(onnx_path.read_bytes())
        try:
            with _quiet():
                convert_onnx_models_to_ort(
                    src,
                    output_dir=outdir,
                    optimization_styles=[OptimizationStyle.Fixed],
                    target_platform=target_platform,
                )
        except Exception as e:
            raise ConversionError(f"conversion to ORT format failed: {e}") from e
        ort_file = outdir / "model.ort"
        config = outdir / "model.required_operators.config"
        if not ort_file.exists() or not config.exists():
            raise ConversionError(f"ORT format conversion wrote no model.ort/config in {outdir}")
        return ort_file, config

    @staticmethod
    def _required_ops_from_onnx(proto):
        from edgekit.model import operator_set

        opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
        by_domain = {}
        for op in operator_set(proto):  # subgraphs (If, Loop) included
            by_domain.setdefault(op["domain"], set()).add(op["op"])
        lines = ["# required operators of the ONNX model (domain;opset;ops)"]
        for domain in sorted(by_domain):
            lines.append(f"{domain};{opsets.get(domain, 1)};{','.join(sorted(by_domain[domain]))}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _usability(onnx_path):
        """ONNX Runtime's own NNAPI / Core ML partitioning check (the mobile usability checker)."""
        import tempfile

        try:
            import onnx
            from onnxruntime.tools.mobile_helpers import usability_checker as uc
            from onnxruntime.tools.onnx_model_utils import optimize_model
        except ImportError as e:
            return {"error": f"ORT usability checker unavailable: {e}"}
        # As ORT's checker does: basic optimizations first (constant folding), as a mobile session would.
        with tempfile.TemporaryDirectory() as tmp:
            optimized = Path(tmp) / "basic.onnx"
            try:
                with _quiet():
                    optimize_model(Path(onnx_path), optimized, use_external_initializers=True)
                model = onnx.shape_inference.infer_shapes(onnx.load(str(optimized)))
            except Exception as e:  # report, don't fail the build: it is advice about other providers
                return {"error": f"ORT's usability checker could not analyse the model: {e}"}
        checks = {
            "NNAPI": lambda m: uc.check_nnapi_partitions(m, True),
            "CoreML MLProgram": lambda m: uc.check_coreml_partitions(m, True, "coreml_supported_mlprogram_ops.md"),
        }
        out = {}
        for ep, fn in checks.items():
            try:
                with _quiet():
                    info = fn(model)
            except Exception as e:  # the checker asserts on graphs it does not understand
                out[ep] = {"error": str(e)}
                continue
            out[ep] = {
                "supported_nodes": info.num_supported_nodes,
                "nodes": info.num_nodes,
                "partitions": info.num_partitions,
                "unsupported_ops": sorted(info.unsupported_ops),
                "nodes_unsupported_due_to_dynamic_input": info.nodes_unsupported_due_to_dynamic_input,
                "suitability": info.suitability().name,
            }
        return out


BACKEND = OrtBackend()
