"""TFLite / LiteRT runner: ``ai_edge_litert`` (or ``tflite_runtime`` where that is all the device has).

CPU inference goes through XNNPACK, the interpreter's default delegate on x86 and Arm. A profile
may list hardware delegates (``[runtimes.tflite] delegates = ["gpu", ...]``); each is loaded with
``load_delegate`` from its shared library, and one that fails to load or to take the graph falls
back to the CPU: describe() and its warnings say so. With a hardware delegate, XNNPACK is left out
(the op resolver without default delegates), so each delegate partition in ``placement`` is the
hardware delegate's and the rest is counted as "cpu".

Layout: the bundle's inputs and outputs are the ONNX model's (what the user feeds, e.g. NCHW);
onnx2tf made 4-D tensors channels-last, so ``manifest["runner"]["io"]`` holds, per input and
output, the tflite tensor name and the permutation measured at build time. Quantized inputs and
outputs (full int8) are quantized/dequantized here with the tensor's scale and zero point.
"""

import time
from typing import Any, Dict, List, Optional, Tuple

from .base import Runner, RunnerFault, RuntimeMissing
from .quiet import CaptureStdout

# Shared-library names the delegates ship as (a profile's ``delegate_libraries`` overrides them).
DELEGATE_LIBRARIES = {
    "gpu": "libtensorflowlite_gpu_delegate.so",
    "hexagon": "libhexagon_delegate.so",
    "nnapi": "libnnapi_delegate.so",
}
CPU_NAMES = ("xnnpack", "cpu")


def _interpreter_module() -> Optional[Tuple[str, Any, Optional[str]]]:
    """``(pip name, module, version)`` of the first LiteRT interpreter importable here, or None."""
    try:
        with CaptureStdout(echo=False):  # some LiteRT builds print MNN's CPU feature banner on import
            import ai_edge_litert
            from ai_edge_litert import interpreter as mod

        return "ai-edge-litert", mod, getattr(ai_edge_litert, "__version__", None) or _dist_version("ai-edge-litert")
    except ImportError:
        pass
    try:
        with CaptureStdout(echo=False):
            import tflite_runtime
            from tflite_runtime import interpreter as mod

        return "tflite-runtime", mod, getattr(tflite_runtime, "__version__", None) or _dist_version("tflite-runtime")
    except ImportError:
        return None


def _dist_version(name: str) -> Optional[str]:
    try:
        from importlib.metadata import version
    except ImportError:  # Python 3.7
        try:
            import pkg_resources

            return pkg_resources.get_distribution(name).version
        except Exception:
            return None
    try:
        return version(name)
    except Exception:
        return None


def _transpose(a: Any, perm: Optional[List[int]]) -> Any:
    return a.transpose(perm) if perm else a


def _inverse(perm: List[int]) -> List[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


class TFLiteRunner(Runner):
    backend = "tflite"
    runtime = "ai-edge-litert"
    install_hint = "pip install ai-edge-litert (or tflite-runtime where the device has only that)"

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        found = _interpreter_module()
        return found[2] if found else None

    def _delegates(self, mod: Any) -> List[Any]:
        """Load each requested hardware delegate; failures become warnings (CPU fallback)."""
        libs = dict(DELEGATE_LIBRARIES)
        libs.update(self.manifest.get("runner", {}).get("delegate_libraries") or {})
        options = self.manifest.get("runner", {}).get("delegate_options") or {}
        loaded, self.fallback = [], []
        for name in self.requested:
            if name in CPU_NAMES:
                continue
            lib = libs.get(name)
            if lib is None:
                self.fallback.append(
                    (name, "no shared library is known for it (set delegate_libraries in the profile)")
                )
                continue
            try:
                import ctypes

                # dlopen first: LiteRT's Delegate object, when its own load fails, raises again at
                # garbage collection (AttributeError in __del__)
                ctypes.CDLL(lib)
                loaded.append((name, mod.load_delegate(lib, options.get(name) or {})))
            except (ValueError, OSError, RuntimeError) as e:
                self.fallback.append(
                    (name, "%s failed to load (%s)" % (lib, str(e).strip().splitlines()[0] if str(e) else e))
                )
        return loaded

    def load(self) -> None:
        found = _interpreter_module()
        if found is None:
            raise RuntimeMissing(
                "no TFLite interpreter (ai_edge_litert or tflite_runtime) for this device's Python: %s"
                % self.install_hint
            )
        self.runtime_name, mod, self.version = found
        io: Dict[str, Any] = self.manifest.get("runner", {}).get("io") or {}
        t0 = time.perf_counter()
        delegates = self._delegates(mod)
        self.active = [n for n, _ in delegates]
        # With a hardware delegate, XNNPACK (the default delegate) is left out, so that every delegate partition
        # is the hardware delegate's and placement can say so; the nodes it does not take run on the builtin CPU
        # kernels. Where the interpreter cannot leave XNNPACK out, partitions are reported unattributed.
        extra: Dict[str, Any] = {}
        self.xnnpack: Optional[bool] = True
        if delegates:
            resolver = getattr(getattr(mod, "OpResolverType", None), "BUILTIN_WITHOUT_DEFAULT_DELEGATES", None)
            if resolver is not None:
                extra["experimental_op_resolver_type"] = resolver
            self.xnnpack = False if resolver is not None else None
        try:
            self.interp = mod.Interpreter(
                model_path=self.model_path(),
                num_threads=self.threads,
                experimental_delegates=[d for _, d in delegates] or None,
                **extra,
            )
            self.interp.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            if not delegates:
                raise RunnerFault("LiteRT cannot load %s: %s" % (self.model_path(), e)) from e
            for n in self.active:
                self.fallback.append((n, "it could not take the graph (%s)" % (str(e).strip().splitlines() or [""])[0]))
            self.active, self.xnnpack = [], True
            self.interp = mod.Interpreter(model_path=self.model_path(), num_threads=self.threads)
            self.interp.allocate_tensors()
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        details_in = self.interp.get_input_details()
        details_out = self.interp.get_output_details()
        by_in = dict((d["name"], d) for d in details_in)
        by_out = dict((d["name"], d) for d in details_out)
        self.inputs = []
        for k, spec in enumerate(self.manifest["inputs"]):
            m = self._io_entry(io.get("inputs"), spec["name"], k)
            d = by_in.get(m.get("tensor", spec["name"])) or by_in.get(spec["name"]) or details_in[k]
            self.inputs.append((spec["name"], d, m.get("perm")))
        self.outputs = []
        for k, spec in enumerate(self.manifest["outputs"]):
            m = self._io_entry(io.get("outputs"), spec["name"], k)
            d = by_out.get(m.get("tensor", spec["name"])) or by_out.get(spec["name"]) or details_out[k]
            self.outputs.append((spec["name"], d, m.get("perm")))

    @staticmethod
    def _io_entry(entries: Optional[List[Dict[str, Any]]], name: str, k: int) -> Dict[str, Any]:
        for e in entries or []:
            if e.get("name") == name:
                return e
        return {}

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        import numpy as np

        for name, d, perm in self.inputs:
            a = _transpose(feeds[name], perm)
            scale, zero = d.get("quantization", (0.0, 0))
            if d["dtype"] not in (np.float32, np.float16) and scale:
                info = np.iinfo(d["dtype"])
                a = np.clip(np.round(a / scale + zero), info.min, info.max)
            self.interp.set_tensor(d["index"], np.ascontiguousarray(a, dtype=d["dtype"]))
        try:
            self.interp.invoke()
        except (RuntimeError, ValueError) as e:
            raise RunnerFault("LiteRT failed to run the model: %s" % e) from e
        out = {}
        for name, d, perm in self.outputs:
            a = self.interp.get_tensor(d["index"])
            scale, zero = d.get("quantization", (0.0, 0))
            if a.dtype != np.float32 and scale:
                a = (a.astype(np.float32) - zero) * scale
            out[name] = np.ascontiguousarray(_transpose(a, perm))
        return out

    def _partitions(self) -> Optional[int]:
        """How many delegate partitions the interpreter made (None if it cannot tell)."""
        try:
            return sum(1 for o in self.interp._get_ops_details() if o.get("op_name") == "DELEGATE")
        except Exception:
            return None

    def _delegated_name(self) -> str:
        """Whose the delegate partitions are."""
        if not self.active:
            return "xnnpack"
        if self.xnnpack is False:
            return self.active[0] if len(self.active) == 1 else "+".join(self.active)
        return "delegated (unattributed: %s or xnnpack)" % "/".join(self.active)

    def describe(self) -> Dict[str, Any]:
        xnnpack_ran = self.xnnpack is not False and not (not self.active and self._partitions() == 0)
        if self.xnnpack is False:
            cpu = "the builtin CPU kernels (XNNPACK left out so that delegate partitions are the hardware delegate's)"
        else:
            cpu = "XNNPACK (the interpreter's default CPU delegate)"
        info: Dict[str, Any] = {
            "runtime": self.runtime_name,
            "runtime_version": self.version,
            "accelerators_requested": self.requested or ["xnnpack"],
            "accelerators_active": self.active + (["xnnpack"] if xnnpack_ran else []) or ["cpu"],
            "accelerator": self.active[0] if self.active else ("xnnpack" if xnnpack_ran else "cpu"),
            "cpu_path": cpu,
            "threads": self.threads,
            "layout": dict((n, "transposed %s" % list(p)) for n, _, p in self.inputs + self.outputs if p) or None,
            "warnings": [],
        }
        for name, why in self.fallback:
            info["warnings"].append("delegate %s was requested but %s; it runs on the CPU (%s)" % (name, why, cpu))
        return info

    def placement(self, feeds: Dict[str, Any]) -> Optional[Dict[str, int]]:
        """``{delegate: nodes}``: the graph's nodes inside delegate partitions, and those left to the builtin
        CPU kernels ("cpu"). A partition's nodes are found by walking back from its outputs to its inputs."""
        try:
            ops = self.interp._get_ops_details()
        except Exception:
            return None
        delegates = [o for o in ops if o.get("op_name") == "DELEGATE"]
        nodes = [o for o in ops if o.get("op_name") != "DELEGATE"]
        producer = {}
        for o in nodes:
            for t in o.get("outputs", []):
                producer[int(t)] = o
        covered = set()
        for d in delegates:
            stop = set(int(t) for t in d.get("inputs", []))
            stack = [int(t) for t in d.get("outputs", [])]
            while stack:
                t = stack.pop()
                n = producer.get(t)
                if t in stop or n is None or n["index"] in covered:
                    continue
                covered.add(n["index"])
                stack.extend(int(x) for x in n.get("inputs", []) if int(x) >= 0)
        counts = {}
        if covered:
            counts[self._delegated_name()] = len(covered)
        if len(nodes) - len(covered):
            counts["cpu"] = len(nodes) - len(covered)
        return counts


RUNNER = TFLiteRunner
