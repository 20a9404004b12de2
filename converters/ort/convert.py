"""ONNX Runtime formats: the ORT format, the required-operators config, ORT's mobile usability check."""

from __future__ import annotations

from pathlib import Path

from .common import _quiet


class OrtFormats:
    """Format methods of the ONNX Runtime backend (mixed into :class:`.backend.OrtBackend`)."""

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
