"""OpenVINO quantization with NNCF: int8 post-training, int8 weights, and the layers --budget keeps float."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from .common import NON_RELU_ACTIVATIONS, _ov, _quiet, device_list, no_telemetry

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext
    from edgekit.model import SourceModel
    from edgekit.passes.mixed_precision import Layer
    from edgekit.profiles import Profile


class OpenVINOQuantization:
    """Quantization methods of the OpenVINO backend (mixed into :class:`.backend.OpenVINOBackend`)."""

    if TYPE_CHECKING:  # what the backend provides

        def core(self) -> Any: ...
        @staticmethod
        def _name_tensors(model: Any, source: SourceModel) -> None: ...
        def _save(
            self, ov: Any, model: Any, outdir: Path, compress_to_fp16: bool, precision: str | None = None
        ) -> Path: ...

    @staticmethod
    def _nncf() -> Any:
        from edgekit.errors import BackendUnavailable

        no_telemetry()
        try:
            with _quiet():
                import nncf
        except ImportError:
            raise BackendUnavailable(
                "int8 builds with OpenVINO need NNCF: pip install 'edgekit[openvino]' (or pip install nncf)"
            ) from None
        return nncf

    # -- mixed precision (--budget) ---------------------------------------------------
    def _fp32_ir(self, ctx: BuildContext) -> Path:
        """The fp32 IR ``build`` wrote (converted again when called outside a build)."""
        xml = ctx.workdir / "openvino" / "fp32" / "model.xml"
        if not xml.is_file():
            ov = _ov()
            model = ov.convert_model(str(ctx.reference_path))
            self._name_tensors(model, ctx.source)
            self._save(ov, model, xml.parent, compress_to_fp16=False, precision="f32")
        return xml

    def layer_names(self, ctx: BuildContext, layers: Iterable[Layer]) -> dict[str, str | None]:
        """Reference layers -> OpenVINO op names (NNCF's ignored scope): the Convolution/MatMul that produces
        the layer's output tensor, directly or through the Add/Multiply a folded BatchNormalization became."""
        model = self.core().read_model(str(self._fp32_ir(ctx)))
        weighted = {
            "Convolution",
            "GroupConvolution",
            "ConvolutionBackpropData",
            "GroupConvolutionBackpropData",
            "MatMul",
        }
        by_tensor = {}
        for op in model.get_ordered_ops():
            for out in op.outputs():
                for name in out.get_names():
                    by_tensor[name] = op

        def find(op: Any, hops: int = 4) -> str | None:
            while op is not None and hops >= 0:
                if op.get_type_name() in weighted:
                    return op.get_friendly_name()
                if op.get_type_name() not in ("Add", "Multiply", "Subtract") or op.get_input_size() == 0:
                    return None
                op = op.input_value(0).get_node()
                hops -= 1
            return None

        return {
            layer.name: next((find(by_tensor[t]) for t in layer.tensors if t in by_tensor and find(by_tensor[t])), None)
            for layer in layers
        }

    def quantize(self, ctx: BuildContext, exclude: Iterable[Layer] = ()) -> Path:
        settings = ctx.profile.backend("openvino")
        names = sorted(n for n in (self.layer_names(ctx, exclude) if exclude else {}).values() if n)
        tag = f"{len(names)}f{len(list((ctx.workdir / 'openvino').glob('int8-mp*')))}"
        xml, _ = self._int8(
            _ov(),
            ctx,
            self._fp32_ir(ctx),
            ctx.workdir / "openvino" / f"int8-mp{tag}",
            settings.get("device", "CPU"),
            ignored=names,
        )
        return xml

    def _head_float(
        self, ov: Any, ctx: BuildContext, fp32_xml: Path, plain: Path, device: str, step: str
    ) -> tuple[Path, dict[str, Any] | None]:
        """``plain``, or INT8 again with a detector's decoder tail in NNCF's ignored scope (:mod:`..heads`): the
        tail is found in the reference ONNX graph and its nodes named in the IR by the tensors they produce."""
        import onnx

        from ..heads import keep_tail_float

        def graph() -> onnx.GraphProto:
            return onnx.load(str(ctx.reference_path), load_external_data=False).graph

        def rebuild(nodes: tuple[str, ...]) -> Path:
            produces = {n.name: list(n.output) for n in graph().node}
            by_tensor = {
                name: op.get_friendly_name()
                for op in self.core().read_model(str(fp32_xml)).get_ordered_ops()
                for out in op.outputs()
                for name in out.get_names()
            }
            names = sorted({by_tensor[t] for n in nodes for t in produces.get(n, ()) if t in by_tensor})
            xml, _ = self._int8(ov, ctx, fp32_xml, ctx.workdir / "openvino" / "int8-tail", device, ignored=names)
            return xml

        return keep_tail_float(ctx, plain, graph, rebuild, step)

    def _int8(
        self, ov: Any, ctx: BuildContext, fp32_xml: Path, outdir: Path, device: str, ignored: Iterable[str] = ()
    ) -> tuple[Path, dict[str, Any]]:
        from edgekit.errors import ConversionError

        nncf = self._nncf()
        target = {"CPU": nncf.TargetDevice.CPU, "GPU": nncf.TargetDevice.GPU, "NPU": nncf.TargetDevice.NPU}
        target_device = target.get(device, nncf.TargetDevice.ANY)
        op_types = {n.op_type for n in ctx.source.proto.graph.node}
        mixed = sorted(op_types & NON_RELU_ACTIVATIONS)
        preset = nncf.QuantizationPreset.MIXED if mixed else nncf.QuantizationPreset.PERFORMANCE
        samples = list(ctx.calib.samples)
        overflow_fix, overflow_reason = self._overflow_fix(ctx.profile, device)
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

        advanced = AdvancedQuantizationParameters(overflow_fix=getattr(OverflowFix, overflow_fix))
        try:
            with _quiet():
                quantized = nncf.quantize(
                    self.core().read_model(str(fp32_xml)),
                    nncf.Dataset(samples),
                    preset=preset,
                    target_device=target_device,
                    subset_size=len(samples),
                    advanced_parameters=advanced,
                    **({"ignored_scope": nncf.IgnoredScope(names=list(ignored))} if ignored else {}),
                )
        except Exception as e:  # NNCF raises its own and OpenVINO's exception types
            raise ConversionError(f"NNCF post-training quantization failed: {type(e).__name__}: {e}") from e
        section = {
            "method": "static",
            "tool": f"nncf {nncf.__version__}",
            "algorithm": "post-training quantization: MinMax ranges + fast bias correction",
            "preset": preset.value,
            "preset_reason": (
                f"non-ReLU activations ({', '.join(mixed)}): asymmetric activations"
                if mixed
                else "ReLU-family activations: symmetric activations"
            ),
            "weights": "int8 symmetric, per output channel",
            "activations": "int8 (uint8 where asymmetric)",
            "overflow_fix": overflow_fix.lower(),
            "overflow_fix_reason": overflow_reason,
            "target_device": target_device.value,
            "calibration_samples": len(samples),
        }
        return self._save(ov, quantized, outdir, compress_to_fp16=False), section

    @staticmethod
    def _overflow_fix(profile: Profile, device: str) -> tuple[str, str]:
        """x86 CPUs without VNNI multiply u8 x s8 with VPMADDUBSW, whose 16-bit sums saturate: NNCF's
        overflow fix (7-bit weights) guards against that, on every layer (measured on PP-OCR cls with an
        AVX2-only CPU: the first layer alone, NNCF's default, 88.0 % against 94.0 % FP32; every layer 92.5 %).
        VNNI/AMX, ARM dot products, GPUs and NPUs do not saturate, and full 8-bit weights keep more accuracy."""
        isa = set(profile.data["cpu"].get("isa", []))
        if profile.arch == "x86_64" and "CPU" in device_list(device) and not isa & {"avx512_vnni", "avx_vnni", "amx"}:
            return "ENABLE", f"{profile.name}'s x86 CPU has no VNNI: u8s8 products can saturate"
        return "DISABLE", (
            f"{profile.name} computes int8 products without 16-bit saturation "
            f"({'VNNI' if profile.arch == 'x86_64' else profile.arch + ' dot products'} or a GPU/NPU)"
        )

    def _int8_weights(self, ov: Any, fp32_xml: Path, outdir: Path) -> tuple[Path, dict[str, Any]]:
        from edgekit.errors import ConversionError

        nncf = self._nncf()
        try:
            with _quiet():
                compressed = nncf.compress_weights(
                    self.core().read_model(str(fp32_xml)), mode=nncf.CompressWeightsMode.INT8_ASYM
                )
        except Exception as e:
            raise ConversionError(f"NNCF weight compression failed: {type(e).__name__}: {e}") from e
        section = {
            "method": "weights-only",
            "tool": f"nncf {nncf.__version__}",
            "mode": "int8_asym",
            "per_channel": True,
            "activations": "floating point (the device's precision)",
            "calibration_samples": 0,
        }
        return self._save(ov, compressed, outdir, compress_to_fp16=False), section
