"""MindSpore Lite runner: a ``.ms`` model (``mindspore_lite.Model``, MINDIR_LITE).

MindSpore Lite's converter turns an NCHW ONNX input into NHWC. The bundle keeps the user's
layout (its declared inputs and ``sample_inputs.npz`` are NCHW, as the source model's);
the build records the converted layout per input in ``runner.input_layout`` and this runner
transposes NCHW -> NHWC before feeding, so apps send what the source model took.
"""

import time
from typing import Any, Dict, Optional

from .base import Runner, RunnerFault, RuntimeMissing, as_declared, fit_dtype


class MindSporeLiteRunner(Runner):
    backend = "mindspore-lite"
    runtime = "mindspore_lite"
    install_hint = "pip install mindspore-lite==2.0.0 (the PyPI wheel is for Python 3.7, Linux x86_64)"

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        try:
            import mindspore_lite
        except ImportError:
            return None
        return getattr(mindspore_lite, "__version__", "unknown")

    def _ms(self) -> Any:
        try:
            import mindspore_lite
        except ImportError as e:
            raise RuntimeMissing(
                "mindspore_lite is not installed for this device's Python (%s): %s" % (e, self.install_hint)
            ) from e
        return mindspore_lite

    def load(self) -> None:
        ms = self._ms()
        opts = self.manifest.get("runner", {})
        self.device = opts.get("device", "cpu")
        ctx = ms.Context()
        ctx.target = [self.device] if self.device == "cpu" else [self.device, "cpu"]
        ctx.cpu.thread_num = self.threads
        self.precision_mode = opts.get("precision_mode")
        if self.precision_mode and hasattr(ctx.cpu, "precision_mode"):
            ctx.cpu.precision_mode = self.precision_mode
        self.model = ms.Model()
        t0 = time.perf_counter()
        try:
            self.model.build_from_file(self.model_path(), ms.ModelType.MINDIR_LITE, ctx)
        except Exception as e:
            raise RunnerFault("MindSpore Lite could not load %s: %s" % (self.manifest["model"], e)) from e
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        self.inputs = self.model.get_inputs()
        layouts = opts.get("input_layout") or {}
        by_name = dict((t.name, t) for t in self.inputs)
        self.feed_plan = []
        for k, spec in enumerate(self.manifest["inputs"]):
            t = by_name.get(spec["name"]) or (self.inputs[k] if k < len(self.inputs) else None)
            if t is None:
                raise RunnerFault(
                    "the .ms model has inputs %s; no match for %r" % ([x.name for x in self.inputs], spec["name"])
                )
            self.feed_plan.append((spec["name"], t, layouts.get(spec["name"]) == "NHWC"))
        self.output_names = [o["name"] for o in self.manifest.get("outputs") or []]
        self.version = self.runtime_version()

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        import numpy as np

        for name, tensor, nhwc in self.feed_plan:
            a = feeds[name]
            if nhwc and a.ndim == 4:
                a = a.transpose(0, 2, 3, 1)
            takes = str(tensor.dtype).rsplit(".", 1)[-1].lower()  # DataType.INT32: the converter narrows int64
            if takes in ("int32", "int64", "float32", "float16", "uint8", "int8", "bool") and takes != str(a.dtype):
                a = fit_dtype(name, a, takes, "MindSpore Lite")
            tensor.set_data_from_numpy(np.ascontiguousarray(a))
        outs = self.model.predict(self.inputs)
        result = {}
        for k, o in enumerate(outs):
            name = (
                o.name
                if o.name in self.output_names or not self.output_names
                else (self.output_names[k] if k < len(self.output_names) else o.name)
            )
            result[name] = np.array(o.get_data_to_numpy(), copy=True)
        return as_declared(result, self.manifest)

    def describe(self) -> Dict[str, Any]:
        warnings = []
        if any(nhwc for _, _, nhwc in self.feed_plan):
            warnings.append("the .ms model takes NHWC; this runner transposes the NCHW inputs the bundle declares")
        return {
            "runtime": "mindspore_lite",
            "runtime_version": self.version,
            "accelerators_requested": [self.device.upper()],
            "accelerators_active": [self.device.upper()],
            "accelerator": self.device.upper(),
            "precision_mode": self.precision_mode or "default",
            "threads": self.threads,
            "warnings": warnings,
        }


RUNNER = MindSporeLiteRunner
