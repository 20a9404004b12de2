"""The backend interface: one class per runtime, each in its own module.

A backend turns the reference ONNX model into the files its runtime loads, for one
profile and precision, and checks every step it takes with ``ctx.check`` (which runs
the step's output on the host and compares it with the reference; see
:mod:`edgekit.fidelity`). It never writes the bundle itself: it returns a
:class:`BuildResult` and the build pipeline assembles, hashes and writes the bundle.

To add a backend: subclass :class:`Backend`, implement the abstract methods, and add
it to ``BACKEND_MODULES`` in :mod:`edgekit.converters` (the module ends with
``BACKEND = MyBackend()``). The agent side is a runner with the
same ``name`` in ``edgekit_agent.runners``.
"""

import abc
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BuildContext:
    """What a backend gets: everything is already loaded and validated."""

    source: object  # edgekit.model.SourceModel (shapes fixed)
    reference_path: Path  # the source saved as ONNX, FP32, shapes fixed
    profile: object  # edgekit.profiles.Profile
    precision: str  # resolved: fp32 | fp16 | int8 | int8-dynamic
    calib: object  # edgekit.data.Dataset or None
    workdir: Path
    check: object  # check(step_name, model_path) -> fidelity record; raises FidelityError
    log: object = print  # log(message) for progress lines
    budget: object = None  # edgekit.passes.mixed_precision.Budget: int8 with layers kept float until it holds
    evaluation: object = None  # the Dataset the fidelity checks run on (--val, else the calibration data)
    allow_degraded: bool = False  # a budget that cannot be met is written anyway (marked), not refused

    def require_calibration(self, what, instead):
        """Refuse calibrated quantization without real data from the user's domain."""
        if self.calib is None or self.calib.synthetic:
            from edgekit.errors import DataError

            raise DataError(
                f"{what} needs calibration data from your domain: pass --calib data.npz (arrays named "
                f"like the model's inputs, ~100-300 samples), or use --precision {instead}"
            )


@dataclass
class BuildResult:
    model_file: Path  # the file the runner loads
    extra_files: list = field(default_factory=list)  # [(path, role)]
    runtime: str = ""
    runtime_version: str = ""
    format: str = ""
    ops: list = field(default_factory=list)
    sections: dict = field(default_factory=dict)  # backend-specific report sections
    warnings: list = field(default_factory=list)
    runner_options: dict = field(default_factory=dict)  # defaults the agent's runner uses


class Backend(abc.ABC):
    name = ""
    runtime = ""  # the runtime's Python package, on host and device
    install_hint = ""  # how to get the runtime
    precisions = ()  # precisions this backend can build
    toolenv = None  # an edgekit.toolenvs.ToolEnvSpec where the converter runs in its own environment

    @abc.abstractmethod
    def availability(self):
        """``(ok: bool, detail: str)`` for ``edgekit doctor``: version, or why not."""

    def ensure_available(self):
        from edgekit.errors import BackendUnavailable

        ok, detail = self.availability()
        if not ok:
            raise BackendUnavailable(f"backend {self.name!r} is not usable here: {self.explain_unavailable(detail)}")

    def explain_unavailable(self, detail):
        """What to tell when ``availability()`` said no: its detail, plus how to install the runtime where the
        runtime is what is missing (a backend whose detail already says what to do overrides this)."""
        return f"{detail}. {self.install_hint}" if self.install_hint else detail

    @abc.abstractmethod
    def runtime_version(self):
        """The runtime version the build targets (written into the manifest)."""

    @abc.abstractmethod
    def default_precision(self, profile, have_calib):
        """What the profile's device runs fast, given whether calibration data exists."""

    @abc.abstractmethod
    def build(self, ctx):
        """Convert and shrink ``ctx.reference_path``; return a BuildResult."""

    @abc.abstractmethod
    def predict(self, model_path, samples, threads=None):
        """Run a built model on the host: list of output dicts, one per sample."""

    @abc.abstractmethod
    def runner(self, model_path, threads=None):
        """A callable ``run(feed)`` for the built model on the host (for timing)."""

    def local_device_python(self):
        """The Python that runs the agent for ``deploy --local`` when the runtime lives in a tool environment
        (the host Python cannot import it), or None for the host's own Python."""
        return None

    # -- mixed precision (optional) ------------------------------------------------
    def quantize(self, ctx, exclude=()):
        """INT8-quantize ``ctx.reference_path`` with the layers in ``exclude`` kept in float; return the file.

        ``exclude`` holds :class:`edgekit.passes.mixed_precision.Layer` objects: weighted layers of the
        reference ONNX model, each with the tensor names (``layer.tensors``) its output is known by once
        a following BatchNormalization or bias Add is folded in, so a backend can find the layer in its
        own graph. Each call writes a new file in ``ctx.workdir``; it does not call ``ctx.check`` (the
        search and the build's final step do). A backend whose format cannot keep single layers in float
        keeps this default, and ``--budget`` is refused for it.
        """
        from edgekit.errors import ConversionError

        raise ConversionError(
            f"backend {self.name!r} cannot keep layers in float (no mixed int8/float models): "
            "--budget is not available for it; build --precision int8 without --budget, "
            "or --precision fp16"
        )

    def layer_names(self, ctx, layers):
        """``{layer.name: the backend's name for it, or None where its graph has no such layer}``."""
        return {layer.name: layer.name for layer in layers}

    def supports_mixed_precision(self):
        return type(self).quantize is not Backend.quantize
