"""ONNX Runtime quantization: fp16, int8 static (QDQ) and dynamic, and the layers --budget keeps float."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from .common import _quiet

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext
    from edgekit.data import Dataset
    from edgekit.passes.mixed_precision import Layer


class OrtQuantization:
    """Quantization methods of the ONNX Runtime backend (mixed into :class:`.backend.OrtBackend`)."""

    def _fp16(self, src: Any, dst: Path, block: Iterable[str] = ()) -> Path:
        """FP16 with the converter's default op block list, and the nodes named in ``block`` kept in float32."""
        import warnings

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
            with _quiet(), warnings.catch_warnings():
                # it warns of every constant it clamps; the ones that matter are kept float32 (edgekit's block list)
                warnings.simplefilter("ignore", UserWarning)
                model = src if isinstance(src, onnx.ModelProto) else onnx.load(str(src))
                m = float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=list(block) or None)
        except Exception as e:  # onnxconverter-common raises plain exceptions
            raise ConversionError(f"fp16 conversion failed: {type(e).__name__}: {e}") from e
        onnx.save(m, str(dst))
        return dst

    def _fp16_in_range(self, ctx: BuildContext, work: Path, step: str) -> tuple[Path, dict[str, Any]]:
        """FP16 with the nodes whose values leave fp16's range kept in float32 (:mod:`..fp16_range`), widened while
        the step fails its gate (at most ``len(HEADROOMS)`` tries). Returns the model file and the report section."""
        import onnx

        from .. import fp16_range as fr

        model = fr.name_nodes(onnx.load(str(ctx.reference_path)))
        data = ctx.calib if ctx.calib is not None else ctx.evaluation
        found = fr.scan(model, data.samples if data is not None else [])
        blocked, path, rounds = [], None, 0
        for headroom in fr.HEADROOMS:
            wider = fr.block_list(model, found, headroom)
            if path is not None and wider == blocked:
                continue  # nothing new within this headroom
            blocked, rounds = wider, rounds + 1
            path = self._fp16(fr.prepare(model, blocked), work / f"model.fp16-{rounds}.onnx", [b.node for b in blocked])
            if ctx.trial is None or headroom == fr.HEADROOMS[-1] or ctx.trial(step, path)["passed"]:
                break
        section = fr.section(blocked, found, headroom, rounds)
        ctx.log(f"  fp16: {section['reason']}")
        return path, section  # type: ignore[return-value]  # HEADROOMS is not empty

    def _int8_static(
        self,
        ctx: BuildContext,
        work: Path,
        reduce_range: bool,
        exclude: Iterable[str] = (),
        out: Path | None = None,
    ) -> Path:
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

        def run(extra: dict[str, Any]) -> None:
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
                    extra_options=extra,
                    **options,
                )

        try:
            try:
                run({})
            except ValueError as e:
                if not _raised_in(e, "_adjust_weight_scale_for_int32_bias"):
                    raise
                # ORT's widening of weight scales for int32 biases fails on some bias/scale shapes (a per-tensor
                # weight scale with a vector bias): quantize without that adjustment; fidelity judges the result
                ctx.log("  int8: ONNX Runtime's int32-bias scale adjustment failed here; quantizing without it")
                run({"QDQDisableWeightAdjustForInt32Bias": True})
        except Exception as e:  # ORT raises bare Exceptions with its own messages
            raise ConversionError(f"ONNX Runtime static quantization failed: {type(e).__name__}: {e}") from e
        return out

    def _head_float(
        self, ctx: BuildContext, work: Path, reduce_range: bool, plain: Path, step: str
    ) -> tuple[Path, dict[str, Any] | None]:
        """``plain``, or INT8 again with the decoder tail of a detector in float (:mod:`..heads`); and the section."""
        import onnx

        from ..heads import keep_tail_float

        def rebuild(nodes: tuple[str, ...]) -> Path:
            return self._int8_static(ctx, work, reduce_range, nodes, out=work / "model.int8-tail.onnx")

        def graph() -> onnx.GraphProto:
            return onnx.load(str(self._preprocessed(ctx, work)), load_external_data=False).graph

        return keep_tail_float(ctx, plain, graph, rebuild, step)

    def _preprocessed(self, ctx: BuildContext, work: Path) -> Path:
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
    def _name_nodes(path: Path) -> None:
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
    def layer_names(self, ctx: BuildContext, layers: Iterable[Layer]) -> dict[str, str | None]:
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

    def quantize(self, ctx: BuildContext, exclude: Iterable[Layer] = ()) -> Path:
        """A layer kept float takes its element-wise tail with it (activations, pooling, residual Add: every node
        up to the next weighted layer): otherwise the QDQ pair on the next node's input quantizes its output anyway."""
        import onnx

        settings = ctx.profile.backend("ort")
        names = self.layer_names(ctx, exclude) if exclude else {}
        heads = {n for n in names.values() if n}
        nodes = set()
        if heads:
            graph = onnx.load(str(self._preprocessed(ctx, ctx.workdir)), load_external_data=False).graph
            consumers: dict[str, list[onnx.NodeProto]] = {}
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
        nodes = sorted(nodes)  # type: ignore[assignment]
        tag = f"{len(nodes)}f{len(list(ctx.workdir.glob('model.int8-mp*.onnx')))}"
        return self._int8_static(
            ctx,
            ctx.workdir,
            bool(settings.get("int8_reduce_range", False)),
            nodes,
            out=ctx.workdir / f"model.int8-mp{tag}.onnx",
        )

    def _ensure_opset(self, ctx: BuildContext, minimum: int, work: Path) -> Path:
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

    def _int8_dynamic(self, src: Path, dst: Path) -> Path:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        from edgekit.errors import ConversionError

        try:
            with _quiet():
                quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        except Exception as e:
            raise ConversionError(f"ONNX Runtime dynamic quantization failed: {type(e).__name__}: {e}") from e
        return dst


class _Reader:
    """onnxruntime.quantization CalibrationDataReader over a Dataset."""

    def __init__(self, dataset: Dataset) -> None:
        self._it = iter(dataset.samples)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)


def _raised_in(exc: BaseException, function: str) -> bool:
    """Whether ``exc`` was raised inside a function named ``function`` (anywhere in its traceback)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function:
            return True
        tb = tb.tb_next
    return False


QUANTIZED_OPS = frozenset(
    {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"}
)


def require_quantized(path: Path, precision: str) -> None:
    """Raise ConversionError when ONNX Runtime's quantizer left every node of ``path`` in float: an "int8" build
    that computes in float must not pass as one (its quantizer does not enter If/Loop subgraphs)."""
    import onnx

    from edgekit.errors import ConversionError
    from edgekit.model import all_nodes

    graph = onnx.load(str(path), load_external_data=False).graph
    ops = [n.op_type for n in all_nodes(graph)]
    if any(op in QUANTIZED_OPS for op in ops):
        return
    inside = len(ops) - len(graph.node)
    where = (
        f"; {inside} of its {len(ops)} nodes sit inside If/Loop subgraphs, which the quantizer does not enter"
        if inside
        else ""
    )
    raise ConversionError(
        f"{precision}: ONNX Runtime's quantizer quantized no node of this model{where}, so the build would compute "
        "in float while calling itself int8. Build --precision fp32 (or fp16) for ONNX Runtime, or use a backend "
        "that fixes the branch first (e.g. --backend openvino with --input-value for the input that selects it)"
    )
