"""Paddle Lite runner: a ``.nb`` model (``paddlelite.lite.MobileConfig``).

Inputs are copied into the predictor with ``Tensor.set_float_data`` / ``set_int32_data`` from a
memoryview of the array: ``Tensor.from_numpy`` of the paddlelite 2.13rc0 wheel does not reach the
predictor's input (measured: the model reads zeros, freed memory, or the last input set otherwise,
also with the array kept alive). An ``.nb`` file is optimized for one target
(arm, x86, opencl); run on another CPU it crashes or computes garbage, which the install-time
comparison with the build machine's outputs catches; this runner says so in its warnings.
"""

import platform
import sys
from typing import Any, Dict, Optional

from .base import Runner, RunnerError, RunnerFault, RuntimeMissing

_ARCH = {
    "x86_64": "x86",
    "amd64": "x86",
    "i686": "x86",
    "aarch64": "arm",
    "arm64": "arm",
    "armv7l": "arm",
    "armv8l": "arm",
}


def _version() -> str:
    try:
        from importlib import metadata  # Python 3.8+
    except ImportError:
        metadata = None  # type: ignore[assignment]
    if metadata is not None:
        try:
            return metadata.version("paddlelite")
        except Exception:
            pass
    try:  # Python 3.7
        import pkg_resources

        return pkg_resources.get_distribution("paddlelite").version
    except Exception:
        return "unknown"


class PaddleLiteRunner(Runner):
    backend = "paddlelite"
    runtime = "paddlelite"
    install_hint = (
        "pip install paddlelite==2.13rc0 (wheels for Python 3.7-3.10; on other devices build Paddle Lite's "
        "Python API for that device)"
    )

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        try:
            import paddlelite.lite  # noqa: F401
        except ImportError:
            return None
        return _version()

    def _lite(self) -> Any:
        try:
            import paddlelite.lite as lite
        except ImportError as e:
            raise RuntimeMissing(
                "paddlelite is not installed for this device's Python (%s): %s" % (e, self.install_hint)
            ) from e
        return lite

    def load(self) -> None:
        import time

        lite = self._lite()
        opts = self.manifest.get("runner", {})
        self.target = opts.get("target", "arm")
        self.warnings = []
        here = _ARCH.get(platform.machine().lower(), platform.machine().lower())
        cpu = self.target.split(",")[-1]
        if cpu in ("arm", "x86") and here != cpu:
            msg = (
                "this .nb was optimized for %s but this device is %s (%s): Paddle Lite crashes or computes "
                "garbage here" % (self.target, here, platform.machine())
            )
            self.warnings.append(msg)
            sys.stderr.write("paddlelite runner: %s\n" % msg)
            sys.stderr.flush()
        config = lite.MobileConfig()
        config.set_model_from_file(self.model_path())
        # The x86 Python wheel's MobileConfig has no thread or power settings: the runtime chooses.
        self.threads_applied = False
        if hasattr(config, "set_threads"):
            config.set_threads(self.threads)
            self.threads_applied = True
        if hasattr(config, "set_power_mode") and opts.get("power_mode"):
            config.set_power_mode(getattr(lite.PowerMode, opts["power_mode"]))
        t0 = time.perf_counter()
        try:
            self.predictor = lite.create_paddle_predictor(config)
        except Exception as e:
            raise RunnerFault("Paddle Lite could not load %s: %s" % (self.manifest["model"], e)) from e
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        names = list(self.predictor.get_input_names())
        wanted = opts.get("inputs") or {}
        self.input_map = []
        for k, spec in enumerate(self.manifest["inputs"]):
            nb_name = wanted.get(spec["name"]) or (names[k] if k < len(names) else None)
            if nb_name not in names:
                raise RunnerFault("the .nb has inputs %s; no match for %r" % (names, spec["name"]))
            self.input_map.append((spec["name"], nb_name))
        out_names = list(self.predictor.get_output_names())
        self.output_map = [
            (spec["name"], out_names[k])
            for k, spec in enumerate(self.manifest.get("outputs") or [])
            if k < len(out_names)
        ] or [(n, n) for n in out_names]
        self.version = self.runtime_version()

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        import numpy as np

        for name, nb_name in self.input_map:
            a = np.ascontiguousarray(feeds[name])
            t = self.predictor.get_input_by_name(nb_name)
            t.resize([int(d) for d in a.shape])
            # a memoryview is a sequence the binding copies from directly (no Python list first: measured ~0.4 ms
            # instead of ~0.65 ms for PP-OCR's 1x3x48x192 input on x86)
            if a.dtype == np.float32:
                t.set_float_data(memoryview(a.reshape(-1)))  # type: ignore[arg-type]
            elif a.dtype == np.int32:
                t.set_int32_data(memoryview(a.reshape(-1)))  # type: ignore[arg-type]
            elif a.dtype == np.uint8:
                t.set_uint8_data(memoryview(a.reshape(-1)))  # type: ignore[arg-type]
            else:
                raise RunnerError(
                    "input %r is %s; the Paddle Lite runner feeds float32, int32 or uint8 (its Python binding has no "
                    "int64 or bool setter): export the model with int32 inputs, or choose another backend "
                    "(ort, openvino, mnn, tflite and mindspore-lite take it)" % (name, a.dtype)
                )
        self.predictor.run()
        return dict(
            (name, np.array(self.predictor.get_output_by_name(nb_name).numpy(), copy=True))
            for name, nb_name in self.output_map
        )

    def describe(self) -> Dict[str, Any]:
        place = {
            "x86": "X86 CPU",
            "arm": "ARM CPU",
            "opencl,arm": "OpenCL GPU (ARM CPU fallback)",
            "opencl,x86": "OpenCL GPU (X86 CPU fallback)",
        }.get(self.target, self.target)
        warnings = list(self.warnings)
        if not self.threads_applied:
            warnings.append(
                "this paddlelite build's MobileConfig has no set_threads: Paddle Lite chose the thread "
                "count itself (%d was asked for)" % self.threads
            )
        return {
            "runtime": "paddlelite",
            "runtime_version": self.version,
            "accelerators_requested": [place],
            "accelerators_active": [place],
            "accelerator": place,
            "target": self.target,
            "threads": self.threads,
            "threads_applied": self.threads_applied,
            "warnings": warnings,
        }


RUNNER = PaddleLiteRunner
