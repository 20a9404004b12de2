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

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from edgekit_agent.runners.base import int8_products_saturate

from ..base import Backend, BuildContext, BuildResult
from .common import PRECISION_MARK, _ov, _present, _short_version, device_list
from .quantize import OpenVINOQuantization

if TYPE_CHECKING:
    from edgekit.converters.session import BuildSession
    from edgekit.execution import Execution, Feed
    from edgekit.model import SourceModel
    from edgekit.profiles import Profile

EXACT = "openvino.exact_int8"  # session memo: this build's int8 IRs are checked with FakeQuantize in fp32


class OpenVINOBackend(OpenVINOQuantization, Backend):
    name = "openvino"
    placement = "edgekit.converters.openvino.placement"  # its part of edgekit explain (edgekit.placement)
    install_hint = "Install it with: pip install 'edgekit[openvino]' (openvino and nncf)."

    def __init__(self) -> None:
        self._core = None

    def core(self) -> Any:
        if self._core is None:
            self._core = _ov().Core()
        return self._core

    def availability(self) -> tuple[bool, str]:
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
    def _nncf_detail() -> str:
        import importlib.util

        if importlib.util.find_spec("nncf") is None:
            return "nncf not installed (int8 and int8-weights need it: pip install nncf)"
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"nncf {version('nncf')}"
        except PackageNotFoundError:
            return "nncf (version unknown)"

    def runtime_version(self) -> str:
        return _short_version(_ov().__version__)

    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        for p in profile.backend("openvino").get("precisions", ["fp32"]):
            if p == "int8" and not have_calib:
                continue
            if p in self.precisions:
                return p
        return "fp32"

    def host_settings(self, arch: str, isa: list) -> dict | None:
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
    def _mark(self, model_path: str | Path) -> str | None:
        """The execution precision an IR asks for (rt_info), None for the device's default."""
        if Path(model_path).suffix == ".onnx":
            return "f32"  # the FP32 reference runs as an fp32 build does
        model = self.core().read_model(str(model_path))
        return model.get_rt_info(PRECISION_MARK).astype(str) if model.has_rt_info(PRECISION_MARK) else None

    def execution(
        self,
        model_path: str | Path,
        threads: int | None = None,
        session: BuildSession | None = None,
        inference_precision: str | None = "f32",
    ) -> Execution:
        """The agent's OpenVINO runner on this machine's CPU plugin, executing at ``inference_precision`` (fidelity:
        f32; None: the CPU's default), without a model cache beside the file."""
        from edgekit.execution import in_process

        manifest = self.manifest_for(model_path, session)
        options = dict(manifest.get("runner") or {}, device="CPU", model_cache=False)
        options["inference_precision"] = inference_precision
        if session is not None and session.memo.get(EXACT) and Path(model_path).suffix == ".xml":
            options["exact_int8"] = True
        return in_process(self.name, model_path, dict(manifest, runner=options), threads)

    def reference_outputs(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
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

    def predict(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        """Fidelity: built IRs executed at f32 by the agent's runner; an ONNX file is the reference."""
        if Path(model_path).suffix == ".onnx":
            return self.reference_outputs(model_path, samples, threads, session)
        return super().predict(model_path, samples, threads, session)

    def runner(self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None) -> Any:
        """The model as the device runs it (fp32 IRs at f32, others in the CPU's default), for timing."""
        return self.execution(model_path, threads, session, inference_precision=self._mark(model_path))

    # -- conversion ---------------------------------------------------------------
    def build(self, ctx: BuildContext) -> BuildResult:
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

        from ..onnx_tidy import if_condition_as_scalar

        onnx_path, _ = if_condition_as_scalar(ctx.reference_path, work / "tidy")  # its If takes rank 0 or 1 only
        try:
            model = ov.convert_model(str(onnx_path))
        except Exception as e:  # OpenVINO raises its own exception types with the frontend's message
            raise ConversionError(f"OpenVINO cannot convert the model: {str(e).strip().splitlines()[-1]}") from e
        self._name_tensors(model, ctx.source)
        fp32_xml = self._save(ov, model, work / "fp32", compress_to_fp16=False, precision="f32")
        ctx.check("ONNX -> OpenVINO IR (fp32)", fp32_xml)
        exec_precision: str | None
        final, exec_precision = fp32_xml, "f32"

        if ctx.precision == "fp16":
            final = self._save(ov, self.core().read_model(str(fp32_xml)), work / "fp16", compress_to_fp16=True)
            exec_precision = None
            ctx.check("fp16-compressed weights", final)
        elif ctx.precision == "int8":
            final, sections["quantization"] = self._int8(ov, ctx, fp32_xml, work / "int8", device)
            step = "int8 post-training quantization (NNCF)"
            if sections["quantization"]["overflow_fix"] == "disable" and int8_products_saturate():
                # built for a device whose int8 products do not saturate; this CPU's would: check it exactly
                ctx.session.memo[EXACT] = True
                sections["quantization"]["checked_in"] = "exact int8 arithmetic (FakeQuantize in fp32) on this host"
                step += ", checked in exact int8 arithmetic"
                warnings.append(
                    "checked in exact int8 arithmetic (OpenVINO's low-precision transformations off): this build "
                    "machine's CPU (x86-64 without VNNI) saturates u8 x s8 products, the target's does not"
                )
            if ctx.budget is not None:
                from edgekit.passes.mixed_precision import search

                final, sections["mixed_precision"] = search(self, ctx, plain=final)
                warnings.extend(sections["mixed_precision"].get("warnings", []))
                floats = len(sections["mixed_precision"]["float_layer_names"])
                step += f", {floats} layer(s) kept float for --budget {ctx.budget}"
                sections["quantization"]["ignored_scope"] = sections["mixed_precision"]["float_layer_names"]
            else:  # a detector's decoder tail in float where its task metric needs it
                final, tail = self._head_float(ov, ctx, fp32_xml, final, device, step)
                if tail is not None:
                    sections["kept_float"] = tail
                    if tail["kept"]:
                        step += f", {len(tail['nodes'])} node(s) of the {ctx.task.spec.family} tail kept float"  # type: ignore[attr-defined]
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
            ops_graph="the built OpenVINO IR's operations",
            sections=sections,
            warnings=warnings,
            runner_options={
                "device": device,
                "hint": hint,
                "inference_precision": exec_precision,
                "model_cache": True,
                # the runner warns when an int8 IR without NNCF's overflow fix runs on a CPU that saturates
                **({"int8_u8s8": True} if sections.get("quantization", {}).get("overflow_fix") == "disable" else {}),
            },
        )

    @staticmethod
    def _name_tensors(model: Any, source: SourceModel) -> None:
        """Each input/output tensor carries exactly the ONNX name, so outputs come back under it."""
        for ports, specs in ((model.inputs, source.inputs), (model.outputs, source.outputs)):
            for port, spec in zip(ports, specs):
                if spec.name in port.get_names():
                    port.get_tensor().set_names({spec.name})

    def _save(self, ov: Any, model: Any, outdir: Path, compress_to_fp16: bool, precision: str | None = None) -> Path:
        outdir.mkdir(parents=True, exist_ok=True)
        if precision:
            model.set_rt_info(precision, PRECISION_MARK)
        xml = outdir / "model.xml"
        ov.save_model(model, str(xml), compress_to_fp16=compress_to_fp16)
        return xml

    def _host_default_precision(self) -> str | None:
        try:
            return self.core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
        except Exception:  # an old CPU plugin without the property
            return None

    def _operator_support(self, model: Any, device: str, profile: Profile) -> dict[str, dict[str, Any]]:
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
    def _device_name(core: Any, dev: str) -> str:
        try:
            return core.get_property(dev, "FULL_DEVICE_NAME")
        except Exception:
            return dev

    @staticmethod
    def _plugin_detail(core: Any, dev: str, available: list[str]) -> str:
        try:
            core.get_versions(dev)
        except Exception as e:
            lines = [line for line in str(e).strip().splitlines() if line.strip()]
            return f"this OpenVINO cannot load its {dev} plugin ({lines[-1] if lines else type(e).__name__})"
        return (
            f"the {dev} plugin library loads but finds no {dev} device on this machine "
            f"(devices here: {', '.join(available) or 'none'})"
        )

    @staticmethod
    def _ops(model: Any) -> list[dict[str, Any]]:
        counts: dict[tuple[str, str], int] = {}
        for op in model.get_ops():
            info = op.get_type_info()
            key = (f"openvino.{info.version_id}" if info.version_id else "openvino", op.get_type_name())
            counts[key] = counts.get(key, 0) + 1
        return [{"domain": d, "op": o, "count": c} for (d, o), c in sorted(counts.items())]


BACKEND = OpenVINOBackend()
