"""MNN runner: the backend (CPU / VULKAN / OPENCL / METAL / CUDA / NN) and the precision, power and
memory modes come from the profile (the bundle's ``runner`` options); threads from the agent.

What MNN does that this module has to handle (measured with MNN 3.6.1, the PyPI wheel):

- Asking for a backend that is not compiled in does not fail: MNN prints ``Can't Find type=7
  backend, use 0 instead`` and runs on the CPU. The session itself records what it runs on
  (``getSessionInfo(session, BACKENDS)``: 0, or 13 for the x86 CPU extension, is the CPU);
  ``describe()`` reports that as the accelerator and warns when it differs from the request.
- MNN's C++ code prints to stdout (the CPU feature line on import, fallbacks and precision notes
  when a session is created). Those calls run with file descriptor 1 pointed at a temporary file
  (C stdio flushed before it is put back), so a ``--json`` caller's stdout stays one JSON object;
  the text is echoed on stderr and parsed (CPU features, fallbacks).
- ``Tensor.getNumpyData()`` (like ``expr.Var.read()``) returns a numpy *view* of the tensor's
  memory, which dies with the tensor: outputs are copied while their host tensor is alive.
- Only ``import MNN`` is used, never ``MNN.tools``: importing those wrappers runs ``pip install``
  for a logging SDK and sends usage data to a cloud log service.

Python 3.7 syntax; MNN and numpy are imported lazily.
"""

import re
from typing import Any, Dict, List, Optional, Tuple

from .base import Runner, RunnerError, RunnerFault, RuntimeMissing, as_declared
from .quiet import CaptureStdout

# MNNForwardType values (MNN/MNNForwardType.h). 13 is MNN_FORWARD_CPU_EXTENSION: the CPU backend
# with x86 SIMD kernels, which is what a CPU session reports on x86.
FORWARD_TYPES = {0: "CPU", 1: "METAL", 2: "CUDA", 3: "OPENCL", 4: "AUTO", 5: "NN", 6: "OPENGL", 7: "VULKAN", 13: "CPU"}
BACKENDS = ("CPU", "VULKAN", "OPENCL", "METAL", "CUDA", "NN", "OPENGL")
MODES = ("normal", "high", "low")
BACKENDS_INFO = 2  # Interpreter::SessionInfoCode::BACKENDS

_FALLBACK_RE = re.compile(r"Can't Find type=(\d+) backend, use (\d+) instead")
_FEATURES_RE = re.compile(r"The device supports:([^\n]*)")

_state: Dict[str, Any] = {"module": None, "import_output": ""}


def import_mnn() -> Any:
    """``import MNN`` (never ``MNN.tools``) with its C++ prints kept off stdout; cached."""
    if _state["module"] is None:
        with CaptureStdout(echo=False) as cap:  # the CPU feature banner: parsed by cpu_features(), not shown
            import MNN
        _state["module"] = MNN
        _state["import_output"] = cap.text
    return _state["module"]


def cpu_features() -> Optional[Dict[str, bool]]:
    """MNN's own view of the CPU, from the line it prints on import: ``{"i8sdot": False, ...}`` or None."""
    m = _FEATURES_RE.search(_state["import_output"] or "")
    if not m:
        return None
    out = {}
    for part in m.group(1).split(","):
        if ":" in part:
            k, v = part.split(":", 1)
            try:
                out[k.strip()] = bool(int(v.strip()))
            except ValueError:
                pass
    return out or None


def _np_dtype(MNN: Any, halide_type: Any) -> Tuple[Any, Any]:
    import numpy as np

    table = [
        ("Halide_Type_Float", np.float32),
        ("Halide_Type_Int", np.int32),
        ("Halide_Type_Int64", np.int64),
        ("Halide_Type_Uint8", np.uint8),
        ("Halide_Type_Double", np.float64),
    ]
    for attr, dtype in table:
        if hasattr(MNN, attr) and halide_type == getattr(MNN, attr):
            return getattr(MNN, attr), dtype
    return MNN.Halide_Type_Float, np.float32


class MNNModel(object):
    """One .mnn file loaded in one MNN session (the agent's runner and the host's fidelity checks share it)."""

    def __init__(
        self,
        path: str,
        backend: str = "CPU",
        threads: Optional[int] = 1,
        precision: str = "normal",
        power: str = "normal",
        memory: str = "normal",
        input_shapes: Optional[Dict[str, List[Any]]] = None,
        output_names: Optional[List[str]] = None,
    ) -> None:
        self.path = path
        self.backend = backend
        self.threads = int(threads or 1)
        self.precision, self.power, self.memory = precision, power, memory
        self.input_shapes = dict(input_shapes or {})
        self.wanted_outputs = list(output_names or [])
        self.messages = ""
        self.fallbacks: List[Tuple[str, str]] = []

    def config(self) -> Dict[str, Any]:
        return {
            "backend": self.backend,
            "numThread": self.threads,
            "precision": self.precision,
            "power": self.power,
            "memory": self.memory,
        }

    def load(self) -> "MNNModel":
        MNN = import_mnn()
        with CaptureStdout() as cap:
            self.interpreter = MNN.Interpreter(self.path)
            self.session = self.interpreter.createSession(self.config())
            resized = False
            for name, shape in self.input_shapes.items():
                t = self.interpreter.getSessionInput(self.session, name)
                shape = [d if isinstance(d, int) else 1 for d in shape]
                if list(t.getShape()) != shape:
                    self.interpreter.resizeTensor(t, tuple(shape))
                    resized = True
            if resized:
                self.interpreter.resizeSession(self.session)
        self.messages = cap.text
        self.fallbacks = []
        for a, b in _FALLBACK_RE.findall(cap.text):
            pair = (FORWARD_TYPES.get(int(a), a), FORWARD_TYPES.get(int(b), b))
            if pair not in self.fallbacks:
                self.fallbacks.append(pair)
        code = self.interpreter.getSessionInfo(self.session, BACKENDS_INFO)
        try:
            code = int(code)
        except (TypeError, ValueError):
            code = -1
        self.active = FORWARD_TYPES.get(code, "MNN forward type %d" % code)
        self._refresh_io()
        return self

    def _refresh_io(self) -> None:
        self.inputs = dict(self.interpreter.getSessionInputAll(self.session))
        have = list(self.interpreter.getSessionOutputAll(self.session))
        wanted = [n for n in self.wanted_outputs if n in have]
        self.output_names = wanted if len(wanted) == len(self.wanted_outputs) and wanted else have

    def _feed(self, feeds: Dict[str, Any]) -> None:
        import numpy as np

        MNN = _state["module"]
        resized = False
        for name, arr in feeds.items():
            t = self.inputs.get(name)
            if t is None:
                raise RunnerError("the MNN model has no input %r (it has: %s)" % (name, ", ".join(sorted(self.inputs))))
            if list(t.getShape()) != list(arr.shape):
                self.interpreter.resizeTensor(t, tuple(int(d) for d in arr.shape))
                resized = True
        if resized:
            self.interpreter.resizeSession(self.session)
            self._refresh_io()
        for name, arr in feeds.items():
            t = self.inputs[name]
            htype, dtype = _np_dtype(MNN, t.getDataType())
            data = np.ascontiguousarray(arr, dtype=dtype)
            host = MNN.Tensor(tuple(data.shape), htype, data, MNN.Tensor_DimensionType_Caffe)
            t.copyFromHostTensor(host)

    def _outputs(self) -> Dict[str, Any]:
        import numpy as np

        MNN = _state["module"]
        out = {}
        for name in self.output_names:
            t = self.interpreter.getSessionOutput(self.session, name)
            host = MNN.Tensor(t, MNN.Tensor_DimensionType_Caffe)
            t.copyToHostTensor(host)
            # getNumpyData() is a view of host's memory, freed with host: copy while host is alive.
            out[name] = np.array(host.getNumpyData(), copy=True).reshape(tuple(host.getShape()))
        return out

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        self._feed(feeds)
        code = self.interpreter.runSession(self.session)
        if code not in (0, None):
            raise RunnerFault("MNN runSession failed with error code %s%s" % (code, self._why(code)))
        return self._outputs()

    def _why(self, code: int) -> str:
        """What MNN's code means and, for a shape error, the op it names: MNN prints "Compute Shape Error for
        OP" on stdout when the session is resized, so the resize is repeated with fds 1 and 2 captured."""
        meaning = ERROR_CODES.get(code, "")
        if code != 3:
            return " (%s)" % meaning if meaning else ""
        with CaptureStdout(echo=False) as cap:
            self.interpreter.resizeSession(self.session)
        op = re.search(r"Compute Shape Error for (\S+)", cap.text)
        where = " of its op %r" % op.group(1) if op else ""
        return " (%s: MNN could not compute the output shape%s for these input shapes)" % (meaning, where)

    def count_ops(self, feeds: Dict[str, Any]) -> int:
        """Run once with MNN's per-operator callbacks; how many operators executed."""
        self._feed(feeds)
        executed = [0]

        def before(tensors: Any, info: Any) -> bool:
            return True

        def after(tensors: Any, info: Any) -> bool:
            executed[0] += 1
            return True

        self.interpreter.runSessionWithCallBackInfo(self.session, before, after)
        return executed[0]

    def close(self) -> None:
        self.session = None
        self.interpreter = None


# MNN's ErrorCode (include/MNN/ErrorCode.hpp)
ERROR_CODES = {
    1: "OUT_OF_MEMORY",
    2: "NOT_SUPPORT",
    3: "COMPUTE_SIZE_ERROR",
    4: "NO_EXECUTION",
    5: "INVALID_VALUE",
    10: "INPUT_DATA_ERROR",
    11: "CALL_BACK_STOP",
    20: "TENSOR_NOT_SUPPORT",
    21: "TENSOR_NEED_DIVIDE",
}


class MNNRunner(Runner):
    backend = "mnn"
    runtime = "MNN"
    install_hint = (
        "pip install MNN (the PyPI wheel has the CPU backend only; GPU/NPU backends need an MNN built with them)"
    )

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        try:
            MNN = import_mnn()
        except ImportError:
            return None
        return MNN.version()

    def _mnn(self) -> Any:
        try:
            return import_mnn()
        except ImportError as e:
            raise RuntimeMissing(
                "MNN is not installed for this device's Python (%s): %s" % (e, self.install_hint)
            ) from e

    def _settings(self) -> Tuple[str, Dict[str, str]]:
        opts = self.manifest.get("runner") or {}
        backend = (self.requested[0] if self.requested else opts.get("backend") or "CPU").upper()
        if backend not in BACKENDS:
            raise RunnerError("unknown MNN backend %r; MNN backends are %s" % (backend, ", ".join(BACKENDS)))
        modes = {}
        for key in ("precision_mode", "power_mode", "memory_mode"):
            v = str(opts.get(key) or "normal").lower()
            if v not in MODES:
                raise RunnerError("MNN %s must be one of %s, got %r" % (key, ", ".join(MODES), v))
            modes[key] = v
        return backend, modes

    def load(self) -> None:
        import time

        MNN = self._mnn()
        self.version = MNN.version()
        self.requested_backend, self.modes = self._settings()
        shapes = dict((s["name"], s["shape"]) for s in self.manifest.get("inputs", []))
        outputs = [s["name"] for s in self.manifest.get("outputs", [])]
        t0 = time.perf_counter()
        self.model = MNNModel(
            self.model_path(),
            self.requested_backend,
            self.threads,
            self.modes["precision_mode"],
            self.modes["power_mode"],
            self.modes["memory_mode"],
            shapes,
            outputs,
        ).load()
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        self.output_names = self.model.output_names

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        return as_declared(self.model.run(feeds), self.manifest)  # MNN computes bool outputs as int32

    def describe(self) -> Dict[str, Any]:
        active = self.model.active
        warnings = []
        if active != self.requested_backend:
            said = ['MNN printed "Can\'t Find type=%s backend"' % n for n, _ in self.model.fallbacks]
            warnings.append(
                "%s was requested but this MNN build does not have it%s; it ran on %s"
                % (self.requested_backend, " (%s)" % "; ".join(said) if said else "", active)
            )
        features = cpu_features()
        precision = self.manifest.get("precision")
        if active == "CPU" and features is not None:
            if precision == "int8" and not (features.get("i8sdot") or features.get("i8mm")):
                warnings.append(
                    "this CPU has neither the Arm dot-product (sdot) nor i8mm instructions MNN's int8 "
                    "kernels are made for (MNN reports i8sdot:0, i8mm:0): int8 runs slower than fp32 here"
                )
            if self.modes["precision_mode"] == "low" and not features.get("fp16"):
                warnings.append(
                    "precision_mode low asks for fp16 arithmetic, which this CPU lacks (MNN reports "
                    "fp16:0): MNN computes in fp32 here"
                )
        return {
            "runtime": "mnn",
            "runtime_version": self.version,
            "accelerators_requested": [self.requested_backend],
            "accelerators_active": [active] + (["CPU"] if active != "CPU" else []),
            "accelerator": active,
            "threads": self.threads,
            "warnings": warnings,
        }

    def placement(self, feeds: Dict[str, Any]) -> Optional[Dict[str, int]]:
        """On the CPU backend every operator runs there: count them from one run with MNN's callbacks.
        A GPU session runs the operators its backend lacks on the CPU, which MNN does not report per
        operator: None there rather than a guess."""
        if self.model.active != "CPU":
            return None
        n = self.model.count_ops(feeds)
        return {"CPU": n} if n else None

    def close(self) -> None:
        model = getattr(self, "model", None)
        if model is not None:
            model.close()


RUNNER = MNNRunner
