"""OpenVINO runner: the profile's device (with its fallback order), threads, hint, model cache.

What it reports is what ran, read back from the compiled model: ``EXECUTION_DEVICES`` (the
device that executes) and ``INFERENCE_PRECISION_HINT`` (the precision it executes in: on
CPUs with bf16 OpenVINO's default is bf16, so an fp32 bundle asks for f32 and the report
says whether it got it). Devices are tried one at a time in the profile's order
(``AUTO:NPU,GPU,CPU`` -> NPU, then GPU, then CPU; plain ``AUTO`` -> GPU, then CPU, as
OpenVINO's AUTO does) instead of handing the list to OpenVINO's AUTO plugin, which starts
on the CPU while an accelerator compiles and cannot report its execution precision. A
device that is missing or fails to compile the model is skipped with a warning; the CPU is
the last resort. Compiled models are cached (``CACHE_DIR``) under the agent's root.

Python 3.7 syntax; ``openvino`` is imported lazily, and never with its usage telemetry.
"""

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .base import Runner, RunnerFault, RuntimeMissing, int8_products_saturate

AUTO_DEFAULT = ["GPU", "CPU"]  # OpenVINO's AUTO default priority; the NPU is used only when listed


def no_telemetry() -> None:
    """Keep OpenVINO and NNCF from sending usage data (and from writing ~/intel) in this process.

    ``import openvino`` imports its model conversion API, which sends usage data to Google
    Analytics through ``openvino_telemetry`` unless a consent file declines; NNCF does the same.
    Both import it inside ``try/except ImportError`` and fall back to a stub that sends nothing
    (``openvino/tools/ovc/telemetry_stub.py``, ``nncf.telemetry.wrapper``): a ``None`` entry in
    ``sys.modules`` makes that import fail. If something in this process imported and configured
    it already, its singleton's consent is turned off. There is no environment variable for it
    (only CI detection), and its opt-out API itself sends a "declined" event."""
    mod = sys.modules.get("openvino_telemetry")
    if mod is None:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
        return
    instance = getattr(getattr(mod, "Telemetry", None), "_SingletonMetaClass__single_instance", None)
    if instance is not None:
        instance.consent = False
    else:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # nobody configured it: OpenVINO and NNCF take their stubs


def _import_openvino() -> Any:
    no_telemetry()
    import openvino

    return openvino


def _core_class(ov: Any) -> Any:
    core = getattr(ov, "Core", None)
    if core is None:  # OpenVINO 2022.1-2023.0
        from openvino.runtime import Core as core  # type: ignore[no-redef]
    return core


def _version(ov: Any) -> str:
    v = getattr(ov, "__version__", None)
    if not v:
        try:
            from openvino.runtime import get_version

            v = get_version()
        except ImportError:
            v = "unknown"
    return str(v).split("-")[0]


def device_list(spec: str) -> List[str]:
    spec = (spec or "CPU").strip()
    if spec == "AUTO":
        return list(AUTO_DEFAULT)
    if spec.startswith("AUTO:"):
        return [d for d in spec[5:].split(",") if d]
    return [spec]  # CPU, GPU, GPU.1, NPU, HETERO:GPU,CPU: one compile target


def _present(device: str, available: List[str]) -> bool:
    if device.startswith("HETERO:"):
        return all(_present(d, available) for d in device[7:].split(",") if d)
    return any(a == device or a.split(".")[0] == device for a in available)


def _precision_name(value: Any) -> str:
    name = getattr(value, "get_type_name", None)
    return name() if name else str(value)


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


class OpenVINORunner(Runner):
    backend = "openvino"
    runtime = "openvino"
    install_hint = "pip install openvino (its wheel has the CPU, GPU and NPU plugins; GPU and NPU need Intel's drivers)"

    def __init__(
        self,
        bundle_dir: str,
        manifest: Dict[str, Any],
        threads: Optional[int] = None,
        providers: Optional[List[str]] = None,
    ) -> None:
        Runner.__init__(self, bundle_dir, manifest, threads=threads, providers=providers)
        opts = manifest.get("runner") or {}
        self.options = opts
        # --provider on the bench command names OpenVINO devices here, in order; else the profile's.
        self.device_spec = ",".join(providers) if providers else opts.get("device") or "CPU"
        self.requested = list(providers) if providers else device_list(self.device_spec)
        self.hint = opts.get("hint") or "LATENCY"
        self.precision = opts.get("inference_precision")
        self.warnings: List[str] = []
        self.compiled: Any = None

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        try:
            ov = _import_openvino()
        except ImportError:
            return None
        return _version(ov)

    def _ov(self) -> Any:
        try:
            return _import_openvino()
        except ImportError as e:
            raise RuntimeMissing(
                "openvino is not installed for this device's Python (%s): %s" % (e, self.install_hint)
            ) from e

    # -- model cache ----------------------------------------------------------
    def cache_dir(self) -> Optional[str]:
        """ROOT/cache/openvino for bundles in the agent's store (ROOT/models/NAME/versions/ID),
        else .openvino-cache beside the bundle; None while staged, where the directory is not
        writable, or when the bundle turns caching off."""
        if self.options.get("model_cache") is False:
            return None
        parts = os.path.abspath(self.bundle_dir).split(os.sep)
        in_store = len(parts) >= 5 and parts[-4] == "models"
        if in_store and parts[-2] == "staging":
            return None  # the install check: OpenVINO keys cached blobs by file path, and this one moves
        if in_store and parts[-2] == "versions":
            path = os.path.join(os.sep.join(parts[:-4]) or os.sep, "cache", "openvino")
        else:
            path = os.path.join(os.path.dirname(os.path.abspath(self.bundle_dir)), ".openvino-cache")
        try:
            if not os.path.isdir(path):
                os.makedirs(path)
        except OSError as e:
            self.warnings.append("no model cache: cannot create %s (%s)" % (path, e.strerror))
            return None
        if not os.access(path, os.W_OK):
            self.warnings.append("no model cache: %s is not writable" % path)
            return None
        return path

    # -- loading --------------------------------------------------------------
    def _config(self, core: Any, device: str, cache: Optional[str] = None, perf_count: bool = False) -> Dict[str, Any]:
        try:
            supported = set(core.get_property(device, "SUPPORTED_PROPERTIES"))
        except Exception:  # HETERO and old plugins: pass what every plugin takes
            supported = None

        def ok(key: str) -> bool:
            return supported is None or key in supported

        config = {}
        if self.hint and ok("PERFORMANCE_HINT"):
            config["PERFORMANCE_HINT"] = self.hint
        if device.split(".")[0] == "CPU" and ok("INFERENCE_NUM_THREADS"):
            config["INFERENCE_NUM_THREADS"] = int(self.threads)
        if self.precision:
            if supported is not None and "INFERENCE_PRECISION_HINT" not in supported:
                self._warn_once(
                    "%s takes no inference precision hint: %s was asked for, it runs in its own precision"
                    % (device, self.precision)
                )
            else:
                config["INFERENCE_PRECISION_HINT"] = self.precision
        if cache:
            config["CACHE_DIR"] = cache
        if self.options.get("exact_int8") and device.split(".")[0] == "CPU":
            # low-precision transformations off: FakeQuantize runs in fp32, i.e. the int8 model's arithmetic
            # without this CPU's saturating u8 x s8 kernels (slower; used to check builds for other devices)
            config["LP_TRANSFORMS_MODE"] = "NO"
        if perf_count:
            config["PERF_COUNT"] = True
        return config

    def _warn_once(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def load(self) -> None:
        ov = self._ov()
        self.version = _version(ov)
        t0 = time.perf_counter()
        core = _core_class(ov)()
        self.core = core
        available = list(core.available_devices)
        order = list(self.requested) + ([] if any(d.split(".")[0] == "CPU" for d in self.requested) else ["CPU"])
        cache = self.cache_dir()
        before = set(os.listdir(cache)) if cache else set()
        skipped = []
        for device in order:
            if not _present(device, available):
                skipped.append(
                    "%s was requested but this machine's OpenVINO finds no %s device (it has: %s)"
                    % (device, device, ", ".join(available) or "none")
                )
                continue
            try:
                self.compiled = core.compile_model(self.model_path(), device, self._config(core, device, cache))
            except Exception as e:  # the plugin's own exception: this device cannot take the model
                skipped.append("%s could not compile the model (%s)" % (device, _first_line(e)))
                continue
            self.device = device
            break
        older = self._older_runtime()
        if self.compiled is None:
            raise RunnerFault(
                "OpenVINO %s could not load the model on any of %s: %s%s"
                % (self.version, ", ".join(order), "; ".join(skipped), "; " + older if older else "")
            )
        if older:
            self.warnings.append(older)
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        for message in skipped:
            self.warnings.append(message + "; it ran on " + self.device + " instead")
        if cache:
            written = set(os.listdir(cache)) - before
            self.model_cache: Dict[str, Optional[str]] = {"dir": cache, "state": "written" if written else "reused"}
        else:
            self.model_cache = {"dir": None, "state": "off"}
        wanted = dict((s["name"], i) for i, s in enumerate(self.manifest.get("outputs") or []))
        self.outputs = []
        for port in self.compiled.outputs:
            names = [n for n in port.get_names() if n in wanted]
            self.outputs.append((names[0] if names else port.get_any_name(), port))
        self.request = self.compiled.create_infer_request()
        self.active = self._execution_devices()
        self.inference_precision = self._property("INFERENCE_PRECISION_HINT", _precision_name)
        if self.precision and self.inference_precision and self.inference_precision != self.precision:
            self.warnings.append(
                "%s execution was asked for; %s runs this model in %s"
                % (self.precision, self.device, self.inference_precision)
            )
        if (
            self.options.get("int8_u8s8")
            and not self.options.get("exact_int8")
            and self.device.split(".")[0] == "CPU"
            and int8_products_saturate()
        ):
            self.warnings.append(
                "this CPU (x86-64 without VNNI) computes u8 x s8 products with saturation: this int8 model was "
                "quantized for a device that does not (no NNCF overflow fix), so its outputs here are less "
                "accurate than there; build with --profile host for this machine"
            )

    def _older_runtime(self) -> Optional[str]:
        """A note when this device's OpenVINO is older than the one the bundle was built with."""
        built = str((self.manifest.get("runtime") or {}).get("version") or "")

        def key(v: str) -> Optional[Tuple[int, ...]]:
            try:
                return tuple(int(x) for x in v.split(".")[:3])
            except ValueError:
                return None

        if key(built) and key(self.version) and key(self.version) < key(built):  # type: ignore[operator]
            return (
                "the bundle was built with OpenVINO %s and this device has %s: IRs and quantized models from a "
                "newer OpenVINO may not load or may run differently on an older one" % (built, self.version)
            )
        return None

    def _property(self, key: str, convert: Callable[[Any], Any] = lambda v: v) -> Any:
        try:
            return convert(self.compiled.get_property(key))
        except Exception:  # the plugin does not report it
            return None

    def _execution_devices(self) -> List[str]:
        devices = self._property("EXECUTION_DEVICES") or [self.device]
        return [str(d).strip("()") for d in devices]

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        result = self.request.infer(feeds)
        return dict((name, result[port]) for name, port in self.outputs)

    def describe(self) -> Dict[str, Any]:
        threads = self._property("INFERENCE_NUM_THREADS") if self.device.split(".")[0] == "CPU" else None
        info = {
            "runtime": "openvino",
            "runtime_version": self.version,
            "accelerators_requested": list(self.requested),
            "accelerators_active": list(self.active),
            "accelerator": self.active[0],
            "threads": int(threads) if threads else self.threads,
            "inference_precision": self.inference_precision,
            "inference_precision_requested": self.precision or "device default",
            "performance_hint": self._property("PERFORMANCE_HINT", str) or self.hint,
            "device_name": self._device_name(),
            "model_cache": self.model_cache,
            "warnings": list(self.warnings),
        }
        return info

    def _device_name(self) -> str:
        try:
            return self.core.get_property(self.device, "FULL_DEVICE_NAME")
        except Exception:
            return self.device

    def placement(self, feeds: Dict[str, Any]) -> Optional[Dict[str, int]]:
        """Run once with OpenVINO's per-node profiling: ``{device: nodes executed}``."""
        compiled = self.core.compile_model(
            self.model_path(), self.device, self._config(self.core, self.device, perf_count=True)
        )
        request = compiled.create_infer_request()
        request.infer(feeds)
        executed = 0
        for node in request.get_profiling_info():
            status = getattr(node.status, "name", str(node.status))
            if status.endswith("EXECUTED"):
                executed += 1
        return {self.active[0]: executed} if executed else None

    def close(self) -> None:
        self.request = None
        self.compiled = None


RUNNER = OpenVINORunner
