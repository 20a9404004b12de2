"""OpenVINO backend: ONNX -> OpenVINO IR (model.xml + model.bin) in FP32, FP16, INT8, INT8 weights.

Choices, and why:
- ``fp32``: ``openvino.convert_model`` + ``save_model(compress_to_fp16=False)``. On CPUs with
  bf16 (AVX512-BF16, AMX) OpenVINO executes in bf16 *by default*, even an FP32 IR (max error
  ~1e-2..1e-1 on PP-OCR's probabilities instead of ~1e-5). An fp32 build therefore asks for
  ``INFERENCE_PRECISION_HINT=f32``: in ``runner_options`` for the device, and in the IR's
  rt_info (``edgekit/inference_precision``) so host-side timing runs it the same way.
- ``fp16``: FP16-compressed weights (``compress_to_fp16=True``); the device executes in its
  default precision (fp16 on ARM CPUs with fp16 arithmetic, GPUs, NPUs; bf16 or f32 on x86).
- ``int8``: NNCF post-training quantization (MinMax + fast bias correction) over the user's
  calibration samples. Models with non-ReLU activations (HardSwish, Sigmoid, GELU, ...) get
  NNCF's MIXED preset (asymmetric activations), as NNCF recommends; ReLU models PERFORMANCE.
- ``int8-weights``: ``nncf.compress_weights`` (8-bit asymmetric, per output channel), weights
  only: activations stay floating point, no calibration data needed.

Fidelity: the reference is run by ONNX Runtime when it is installed (an independent reading of
the ONNX file), otherwise by OpenVINO itself at f32. Every IR is run on this machine's CPU
plugin at ``INFERENCE_PRECISION_HINT=f32`` (the IR's own arithmetic, the same on any host);
what the device executes in is reported by the agent (``inference_precision``) and the
device compares its outputs with this machine's when the bundle is installed.

Telemetry: OpenVINO's model conversion API (imported by ``import openvino``) and NNCF send
usage data to Google Analytics through ``openvino_telemetry`` unless a consent file says no.
edgekit never lets them: :func:`no_telemetry` runs before any OpenVINO/NNCF import and makes
``import openvino_telemetry`` fail, which both packages handle by using their no-op stubs.
"""

import contextlib
import io
import logging
import warnings as _warnings
from pathlib import Path

from .base import Backend, BuildResult

# Activations NNCF's docs recommend the MIXED preset (asymmetric activation quantization) for.
NON_RELU_ACTIVATIONS = {
    "HardSwish",
    "HardSigmoid",
    "Sigmoid",
    "Elu",
    "Selu",
    "PRelu",
    "LeakyRelu",
    "Gelu",
    "Mish",
    "Tanh",
    "Softplus",
    "Swish",
    "Celu",
}
PRECISION_MARK = ["edgekit", "inference_precision"]  # rt_info key: the precision an IR must execute in
AUTO_DEFAULT = ("GPU", "CPU")  # OpenVINO's AUTO default priority (the NPU is only used when listed)


# One implementation of the telemetry block, shared with the agent's runner (which must stay stdlib-only).
from edgekit_agent.runners.openvino import no_telemetry  # noqa: E402


def _ov():
    no_telemetry()
    import openvino

    return openvino


def _short_version(v):
    return str(v).split("-")[0]


def device_list(spec):
    """``CPU`` -> [CPU]; ``AUTO:NPU,GPU,CPU`` -> [NPU, GPU, CPU]; ``AUTO`` -> OpenVINO's default order."""
    spec = (spec or "CPU").strip()
    if spec == "AUTO":
        return list(AUTO_DEFAULT)
    if spec.startswith(("AUTO:", "HETERO:")):
        return [d for d in spec.split(":", 1)[1].split(",") if d]
    return [spec]


def _present(device, available):
    return any(a == device or a.split(".")[0] == device for a in available)


@contextlib.contextmanager
def _quiet():
    """NNCF logs and draws progress bars on stdout; keep edgekit's stdout (and --json) clean."""
    buf = io.StringIO()
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.ERROR)
    try:
        with _warnings.catch_warnings(), contextlib.redirect_stdout(buf):
            _warnings.simplefilter("ignore")
            yield buf
    finally:
        nncf_logger.setLevel(level)


class OpenVINOBackend(Backend):
    name = "openvino"
    install_hint = "Install it with: pip install 'edgekit[openvino]' (openvino and nncf)."

    def __init__(self):
        self._core = None

    def core(self):
        if self._core is None:
            self._core = _ov().Core()
        return self._core

    def availability(self):
        try:
            ov = _ov()
        except ImportError as e:
            return False, f"openvino is not installed ({e})"
        try:
            devices = ", ".join(self.core().available_devices) or "none"
        except Exception as e:  # a broken plugin: report it, doctor shows the line
            devices = f"unknown ({e})"
        return True, f"openvino {_short_version(ov.__version__)}, devices: {devices}, {self._nncf_detail()}"

    @staticmethod
    def _nncf_detail():
        import importlib.util

        if importlib.util.find_spec("nncf") is None:
            return "nncf not installed (int8 and int8-weights need it: pip install nncf)"
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"nncf {version('nncf')}"
        except PackageNotFoundError:
            return "nncf (version unknown)"

    def runtime_version(self):
        return _short_version(_ov().__version__)

    def default_precision(self, profile, have_calib):
        for p in profile.backend("openvino").get("precisions", ["fp32"]):
            if p == "int8" and not have_calib:
                continue
            if p in self.precisions:
                return p
        return "fp32"

    def host_settings(self, arch, isa):
        import importlib.util

        if importlib.util.find_spec("openvino") is None:
            return None
        # bf16-capable x86 CPUs execute in bf16 by default: fp32 builds ask for f32 explicitly (see the backend),
        # and fp16 builds run there in bf16, the fastest OpenVINO build of PP-OCR on such a CPU (measured).
        bf16 = bool({"avx512_bf16", "amx_bf16"} & set(isa))
        return {
            "device": "CPU",
            "precisions": ["int8", "fp16", "fp32"] if bf16 else ["int8", "fp32"],
            "hint": "LATENCY",
        }

    # -- host-side inference ------------------------------------------------------
    def _mark(self, model_path):
        """The execution precision an IR asks for (rt_info), None for the device's default."""
        if Path(model_path).suffix == ".onnx":
            return "f32"  # the FP32 reference runs as an fp32 build does
        model = self.core().read_model(str(model_path))
        return model.get_rt_info(PRECISION_MARK).astype(str) if model.has_rt_info(PRECISION_MARK) else None

    def execution(self, model_path, threads=None, session=None, inference_precision="f32"):
        """The agent's OpenVINO runner on this machine's CPU plugin, executing at ``inference_precision`` (fidelity:
        f32; None: the CPU's default), without a model cache beside the file."""
        from edgekit.execution import in_process

        manifest = self.manifest_for(model_path, session)
        options = dict(manifest.get("runner") or {}, device="CPU", model_cache=False)
        options["inference_precision"] = inference_precision
        return in_process(self.name, model_path, dict(manifest, runner=options), threads)

    def reference_outputs(self, model_path, samples, threads=None, session=None):
        """ONNX Runtime reads the ONNX file independently of OpenVINO's frontend, when installed; else OpenVINO."""
        from edgekit.execution import predict

        try:
            import onnxruntime

            outputs = super().reference_outputs(model_path, samples, threads)
            who = f"onnxruntime {onnxruntime.__version__} (CPU, FP32)"
        except Exception:  # not installed, or it cannot run this model: OpenVINO runs the reference
            outputs = predict(self.execution(model_path, threads, session), samples)
            who = f"openvino {self.runtime_version()} (CPU, INFERENCE_PRECISION_HINT=f32)"
        if session is not None:
            session.notes["reference_runtime"] = who
        return outputs

    def predict(self, model_path, samples, threads=None, session=None):
        """Fidelity: built IRs executed at f32 by the agent's runner; an ONNX file is the reference."""
        if Path(model_path).suffix == ".onnx":
            return self.reference_outputs(model_path, samples, threads, session)
        return super().predict(model_path, samples, threads, session)

    def runner(self, model_path, threads=None, session=None):
        """The model as the device runs it (fp32 IRs at f32, others in the CPU's default), for timing."""
        return self.execution(model_path, threads, session, inference_precision=self._mark(model_path))

    # -- conversion ---------------------------------------------------------------
    def build(self, ctx):
        from edgekit.errors import ConversionError

        if ctx.precision not in self.precisions:
            raise ValueError(f"unsupported precision {ctx.precision}")
        if ctx.precision == "int8":
            ctx.require_calibration("int8 post-training quantization", "fp32/fp16/int8-weights")
        ov = _ov()
        settings = ctx.profile.backend("openvino")
        device = settings.get("device", "CPU")
        hint = settings.get("hint", "LATENCY")
        work = ctx.workdir / "openvino"
        warnings, sections = [], {}

        try:
            model = ov.convert_model(str(ctx.reference_path))
        except Exception as e:  # OpenVINO raises its own exception types with the frontend's message
            raise ConversionError(f"OpenVINO cannot convert the model: {str(e).strip().splitlines()[-1]}") from e
        self._name_tensors(model, ctx.source)
        fp32_xml = self._save(ov, model, work / "fp32", compress_to_fp16=False, precision="f32")
        ctx.check("ONNX -> OpenVINO IR (fp32)", fp32_xml)
        final, exec_precision = fp32_xml, "f32"

        if ctx.precision == "fp16":
            final = self._save(ov, self.core().read_model(str(fp32_xml)), work / "fp16", compress_to_fp16=True)
            exec_precision = None
            ctx.check("fp16-compressed weights", final)
        elif ctx.precision == "int8":
            final, sections["quantization"] = self._int8(ov, ctx, fp32_xml, work / "int8", device)
            step = "int8 post-training quantization (NNCF)"
            if ctx.budget is not None:
                from edgekit.passes.mixed_precision import search

                final, sections["mixed_precision"] = search(self, ctx, plain=final)
                warnings.extend(sections["mixed_precision"].get("warnings", []))
                floats = len(sections["mixed_precision"]["float_layer_names"])
                step += f", {floats} layer(s) kept float for --budget {ctx.budget}"
                sections["quantization"]["ignored_scope"] = sections["mixed_precision"]["float_layer_names"]
            exec_precision = None
            ctx.check(step, final)
        elif ctx.precision == "int8-weights":
            final, sections["quantization"] = self._int8_weights(ov, fp32_xml, work / "int8w")
            exec_precision = None
            ctx.check("int8 weight compression (NNCF, weights only)", final)

        listed = settings.get("precisions", [])
        if ctx.precision not in listed:
            warnings.append(
                f"profile {ctx.profile.name} does not list {ctx.precision} as fast for OpenVINO on "
                f"{device} (it lists: {', '.join(listed) or 'nothing'}); expect no speed-up there"
            )
        final_model = self.core().read_model(str(final))
        support = self._operator_support(final_model, device, ctx.profile)
        sections["operator_support"] = support
        for dev, s in support.items():
            if s.get("checked") and s["unsupported_ops"]:
                warnings.append(
                    f"OpenVINO's {dev} plugin does not support {s['nodes'] - s['supported_nodes']} node(s) "
                    f"({', '.join(s['unsupported_ops'])}); the runner will not run the model on {dev}"
                )
        host_default = self._host_default_precision()
        sections["openvino"] = {
            "ir": {"xml": "model.xml", "weights": "model.bin"},
            "weights": {
                "fp32": "fp32",
                "fp16": "fp16 (decompressed at load)",
                "int8": "int8 (FakeQuantize, NNCF)",
                "int8-weights": "int8 asymmetric, per output channel (NNCF)",
            }[ctx.precision],
            "device": device,
            "devices_in_order": device_list(device),
            "performance_hint": hint,
            "inference_precision": exec_precision or "device default",
            "fidelity_reference": ctx.session.notes.get("reference_runtime"),
            "fidelity_executed_at": "f32 (INFERENCE_PRECISION_HINT) on this machine's CPU plugin",
            "this_cpu_default_precision": host_default,
        }
        if exec_precision is None and ctx.profile.name == "host" and host_default not in (None, "f32"):
            warnings.append(
                f"OpenVINO executes this {ctx.precision} build in {host_default} on this CPU (its default "
                "here); the fidelity above was measured at f32. The agent's bench reports the "
                "inference_precision that ran and compares its outputs with this machine's"
            )

        return BuildResult(
            model_file=final,
            extra_files=[(final.with_suffix(".bin"), "weights")],
            runtime="openvino",
            runtime_version=self.runtime_version(),
            format="openvino-ir",
            ops=self._ops(final_model),
            sections=sections,
            warnings=warnings,
            runner_options={"device": device, "hint": hint, "inference_precision": exec_precision, "model_cache": True},
        )

    @staticmethod
    def _name_tensors(model, source):
        """Each input/output tensor carries exactly the ONNX name, so outputs come back under it."""
        for ports, specs in ((model.inputs, source.inputs), (model.outputs, source.outputs)):
            for port, spec in zip(ports, specs):
                if spec.name in port.get_names():
                    port.get_tensor().set_names({spec.name})

    def _save(self, ov, model, outdir, compress_to_fp16, precision=None):
        outdir.mkdir(parents=True, exist_ok=True)
        if precision:
            model.set_rt_info(precision, PRECISION_MARK)
        xml = outdir / "model.xml"
        ov.save_model(model, str(xml), compress_to_fp16=compress_to_fp16)
        return xml

    @staticmethod
    def _nncf():
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
    def _fp32_ir(self, ctx):
        """The fp32 IR ``build`` wrote (converted again when called outside a build)."""
        xml = ctx.workdir / "openvino" / "fp32" / "model.xml"
        if not xml.is_file():
            ov = _ov()
            model = ov.convert_model(str(ctx.reference_path))
            self._name_tensors(model, ctx.source)
            self._save(ov, model, xml.parent, compress_to_fp16=False, precision="f32")
        return xml

    def layer_names(self, ctx, layers):
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

        def find(op, hops=4):
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

    def quantize(self, ctx, exclude=()):
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

    def _int8(self, ov, ctx, fp32_xml, outdir, device, ignored=()):
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
    def _overflow_fix(profile, device):
        """x86 CPUs without VNNI multiply u8 x s8 with VPMADDUBSW, whose 16-bit sums saturate: NNCF's
        default overflow fix (7-bit weights in the first layer) guards against that. VNNI/AMX, ARM
        dot products, GPUs and NPUs do not saturate, and full 8-bit weights keep more accuracy."""
        isa = set(profile.data["cpu"].get("isa", []))
        if profile.arch == "x86_64" and "CPU" in device_list(device) and not isa & {"avx512_vnni", "avx_vnni", "amx"}:
            return "FIRST_LAYER", f"{profile.name}'s x86 CPU has no VNNI: u8s8 products can saturate"
        return "DISABLE", (
            f"{profile.name} computes int8 products without 16-bit saturation "
            f"({'VNNI' if profile.arch == 'x86_64' else profile.arch + ' dot products'} or a GPU/NPU)"
        )

    def _int8_weights(self, ov, fp32_xml, outdir):
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

    def _host_default_precision(self):
        try:
            return self.core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
        except Exception:  # an old CPU plugin without the property
            return None

    def _operator_support(self, model, device, profile):
        """``Core.query_model`` for each device the profile names, where this machine has it."""
        import platform

        core = self.core()
        available = list(core.available_devices)
        host_arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
        ops = list(model.get_ops())
        out = {}
        for dev in device_list(device):
            if not _present(dev, available):
                out[dev] = {
                    "checked": False,
                    "status": f"not checked: no {dev} plugin here",
                    "detail": self._plugin_detail(core, dev, available),
                }
                continue
            supported = core.query_model(model, dev)
            missing = sorted({op.get_type_name() for op in ops if op.get_friendly_name() not in supported})
            entry = {
                "checked": True,
                "supported_nodes": sum(1 for op in ops if op.get_friendly_name() in supported),
                "nodes": len(ops),
                "unsupported_ops": missing,
                "checked_with": f"{dev} plugin on this machine ({self._device_name(core, dev)})",
                "status": "supported" if not missing else f"{len(missing)} op type(s) unsupported",
            }
            if dev == "CPU" and profile.arch != host_arch:
                entry["note"] = (
                    f"checked with this machine's {host_arch} CPU plugin; the device's {profile.arch} "
                    "CPU plugin is a different implementation and can differ"
                )
            out[dev] = entry
        return out

    @staticmethod
    def _device_name(core, dev):
        try:
            return core.get_property(dev, "FULL_DEVICE_NAME")
        except Exception:
            return dev

    @staticmethod
    def _plugin_detail(core, dev, available):
        try:
            core.get_versions(dev)
        except Exception as e:
            lines = [l for l in str(e).strip().splitlines() if l.strip()]
            return f"this OpenVINO cannot load its {dev} plugin ({lines[-1] if lines else type(e).__name__})"
        return (
            f"the {dev} plugin library loads but finds no {dev} device on this machine "
            f"(devices here: {', '.join(available) or 'none'})"
        )

    @staticmethod
    def _ops(model):
        counts = {}
        for op in model.get_ops():
            info = op.get_type_info()
            key = (f"openvino.{info.version_id}" if info.version_id else "openvino", op.get_type_name())
            counts[key] = counts.get(key, 0) + 1
        return [{"domain": d, "op": o, "count": c} for (d, o), c in sorted(counts.items())]


BACKEND = OpenVINOBackend()
