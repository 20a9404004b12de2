"""ONNX Runtime formats: the ORT format, the required-operators config, ORT's mobile usability check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit_agent.runners.ort import constant_folding_failed

from .common import _quiet

if TYPE_CHECKING:
    import onnx


class OrtFormats:
    """Format methods of the ONNX Runtime backend (mixed into :class:`.backend.OrtBackend`)."""

    def _to_ort_format(
        self, onnx_path: Path, outdir: Path, target_platform: str, runtime_style: bool = False
    ) -> tuple[Path, Path]:
        """``model.ort`` and its required-operators config. ``runtime_style``: ONNX Runtime's "Runtime"
        optimization style, its advice for NNAPI and Core ML: only basic optimizations are applied to the file,
        the others are saved and replayed at load on the nodes the CPU runs (the runner enables that), so the
        compiling EP is offered ONNX operators, not the contrib kernels (FusedConv...) it cannot take."""
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
                    optimization_styles=[OptimizationStyle.Runtime if runtime_style else OptimizationStyle.Fixed],
                    target_platform=target_platform,
                )
        except Exception as e:
            if constant_folding_failed(e):
                raise ConversionError(
                    "conversion to ORT format failed: with the inputs' shapes fixed, ONNX Runtime's constant folding "
                    "breaks this model's If branches, and the ORT-format conversion cannot leave that optimizer out "
                    f"({str(e).splitlines()[0][:160]}). Build it for a profile whose ort backend ships ONNX (host: its "
                    "runner loads the model with constant folding disabled)"
                ) from None
            raise ConversionError(f"conversion to ORT format failed: {e}") from e
        tag = ".with_runtime_opt" if runtime_style else ""  # the converter's own file names
        ort_file = outdir / f"model{tag}.ort"
        config = outdir / f"model.required_operators{tag}.config"
        if not ort_file.exists() or not config.exists():
            raise ConversionError(f"ORT format conversion wrote no model.ort/config in {outdir}")
        return ort_file, config

    @staticmethod
    def _required_ops_from_onnx(proto: onnx.ModelProto) -> str:
        from edgekit.model import operator_set

        opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
        by_domain: dict[str, set[str]] = {}
        for op in operator_set(proto):  # subgraphs (If, Loop) included
            by_domain.setdefault(op["domain"], set()).add(op["op"])
        lines = ["# required operators of the ONNX model (domain;opset;ops)"]
        for domain in sorted(by_domain):
            lines.append(f"{domain};{opsets.get(domain, 1)};{','.join(sorted(by_domain[domain]))}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _usability(onnx_path: str | Path) -> dict[str, Any]:
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
                    try:
                        optimize_model(Path(onnx_path), optimized, use_external_initializers=True)
                    except Exception as e:  # onnxruntime's Fail
                        if not constant_folding_failed(e):
                            raise
                        _optimize_without_folding(Path(onnx_path), optimized)  # as the runner loads such a model
                model = onnx.shape_inference.infer_shapes(onnx.load(str(optimized)))
            except Exception as e:  # report, don't fail the build: it is advice about other providers
                return {"error": f"ORT's usability checker could not analyse the model: {e}"}
        checks = {
            "NNAPI": lambda m: uc.check_nnapi_partitions(m, True),
            "CoreML MLProgram": lambda m: uc.check_coreml_partitions(m, True, "coreml_supported_mlprogram_ops.md"),
        }
        out: dict[str, dict[str, Any]] = {}
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


def _optimize_without_folding(model_path: Path, output_path: Path) -> None:
    """ORT's basic optimizations with constant folding left out, written to ``output_path`` (what
    ``onnxruntime.tools.onnx_model_utils.optimize_model`` does, for a model whose If branches folding breaks)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.optimized_model_filepath = str(output_path.resolve())
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "external_data.pb")
    ort.InferenceSession(
        str(model_path.resolve(strict=True)),
        so,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["ConstantFolding"],
    )
