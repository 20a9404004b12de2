"""The backend interface: one class per runtime, each in its own module.

A backend turns the reference ONNX model into the files its runtime loads, for one
profile and precision, and checks every step it takes with ``ctx.check`` (which runs
the step's output on the host and compares it with the reference; see
:mod:`edgekit.fidelity`). It never writes the bundle itself: it returns a
:class:`BuildResult` and the build pipeline assembles, hashes and writes the bundle.

To add a backend: subclass :class:`Backend`, implement the abstract methods, end the module
with ``BACKEND = MyBackend()``, write its runner (``edgekit_agent.runners``) and add one row
to the backend table (:mod:`edgekit_agent.runners.table`): its precisions, refused precisions
and runtime package come from that row.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from edgekit_agent.runners.table import TABLE, Row

from .session import BuildSession

if TYPE_CHECKING:
    from edgekit.data import Dataset
    from edgekit.execution import Execution, Feed
    from edgekit.model import SourceModel
    from edgekit.passes.mixed_precision import Budget, Layer
    from edgekit.profiles import Profile
    from edgekit.toolenvs import ToolEnvSpec


@dataclass
class BuildContext:
    """What a backend gets: everything is already loaded and validated."""

    source: SourceModel  # shapes fixed
    reference_path: Path  # the source saved as ONNX, FP32, shapes fixed
    profile: Profile
    precision: str  # resolved: fp32 | fp16 | int8 | int8-dynamic
    calib: Dataset | None
    workdir: Path
    check: Callable[..., Any]  # check(step_name, model_path) -> fidelity record; raises FidelityError
    log: Callable[[str], Any] = print  # log(message) for progress lines
    budget: Budget | None = None  # int8 with layers kept float until it holds
    evaluation: Dataset | None = None  # the Dataset the fidelity checks run on (--val, else the calibration data)
    allow_degraded: bool = False  # a budget that cannot be met is written anyway (marked), not refused
    session: BuildSession = field(default_factory=BuildSession)  # what this build remembers (never shared)
    task: object = None  # edgekit.tasks.Inference judging the build (None: the generic gate)
    metric: object = None  # edgekit.tasks.UserMetric (--metric) or None
    keep_head_float: bool = True  # int8: a head's decoder tail may stay float when the task metric needs it
    # trial(step, model_path) -> the fidelity record of a candidate, neither recorded nor refused; a following
    # check(step, model_path) of the same unchanged file reuses its outputs
    trial: object = None
    exported: object = None  # edgekit.intake's exported source (the original model, in its framework), or None

    def require_calibration(self, what: str, instead: str) -> None:
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
    ops_graph: str = ""  # what ``ops`` counts the nodes of, e.g. "the built ONNX graph"
    sections: dict = field(default_factory=dict)  # backend-specific report sections
    warnings: list = field(default_factory=list)
    runner_options: dict = field(default_factory=dict)  # defaults the agent's runner uses


class Backend(abc.ABC):
    name = ""  # its row in the backend table (edgekit_agent.runners.table) says the rest
    install_hint = ""  # how to get the runtime
    toolenv: "ToolEnvSpec | None" = None  # where the converter runs in its own environment
    # import name of its placement module (accelerator checks, selective build; edgekit.placement)
    placement: str | None = None
    # an input the data give one value is fixed in the graph it converts when that removes an If
    # (edgekit.build_specialise); False for a runtime that runs the graph's control flow as it is
    specialises_inputs = True

    @property
    def row(self) -> Row:
        row = TABLE.get(self.name)
        if row is None:
            raise LookupError(f"backend {self.name!r} has no row in the backend table (edgekit_agent.runners.table)")
        return row

    @property
    def runtime(self) -> str:
        """The runtime's Python package, on host and device."""
        return self.row.runtime

    @property
    def precisions(self) -> tuple:
        """Every precision the command line accepts for it (some may be refused, with the reason)."""
        return self.row.precisions

    def refuse_unbuildable(self, precision: str) -> None:
        """Raise ConversionError with the table's reason where this release refuses to build ``precision``."""
        reason = self.row.refused.get(precision)
        if reason is not None:
            from edgekit.errors import ConversionError

            raise ConversionError(f"{self.name} {precision} refused: {reason}")

    @abc.abstractmethod
    def availability(self) -> tuple[bool, str]:
        """``(ok: bool, detail: str)`` for ``edgekit doctor``: version, or why not."""

    def ensure_available(self) -> None:
        from edgekit.errors import BackendUnavailable

        ok, detail = self.availability()
        if not ok:
            raise BackendUnavailable(f"backend {self.name!r} is not usable here: {self.explain_unavailable(detail)}")

    def explain_unavailable(self, detail: str) -> str:
        """What to tell when ``availability()`` said no: its detail, plus how to install the runtime where the
        runtime is what is missing (a backend whose detail already says what to do overrides this)."""
        return f"{detail}. {self.install_hint}" if self.install_hint else detail

    @abc.abstractmethod
    def runtime_version(self) -> str | None:
        """The runtime version the build targets (written into the manifest)."""

    @abc.abstractmethod
    def default_precision(self, profile: Profile, have_calib: bool) -> str:
        """What the profile's device runs fast, given whether calibration data exists."""

    @abc.abstractmethod
    def build(self, ctx: BuildContext) -> BuildResult:
        """Convert and shrink ``ctx.reference_path``; return a BuildResult."""

    # -- running models on the host (edgekit.execution) -------------------------------
    def reference_threads(self, threads: int | None) -> int | None:
        """Intra-op threads ONNX Runtime runs the reference with for this backend (None: its default)."""
        return threads

    def reference_outputs(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        """The ONNX reference run by ONNX Runtime on the CPU: list of output dicts, one per sample."""
        from edgekit.execution import reference_outputs

        return reference_outputs(model_path, samples, self.reference_threads(threads))

    def manifest_for(self, model_path: str | Path, session: BuildSession | None = None) -> dict:
        """What the agent's runner needs about ``model_path``: registered by the build (``session``), else the
        bundle's manifest beside it, else the source's inputs and outputs (a file of this build, unregistered),
        else nothing (a runner that reads what it needs from the model file)."""
        from edgekit.errors import ConversionError
        from edgekit.execution import manifest_beside

        entry = session.manifest_for(model_path) if session is not None else None
        if entry is not None:
            return entry
        try:
            return manifest_beside(model_path)
        except ConversionError:
            return session.default_manifest() if session is not None else {"inputs": [], "outputs": [], "runner": {}}

    def execution(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> Execution:
        """``model_path`` loaded as the device runs it (an :class:`edgekit.execution.Execution`): by default the
        agent's own runner in this Python. A backend whose runtime lives in a tool environment overrides this."""
        from edgekit.execution import in_process

        return in_process(self.name, model_path, self.manifest_for(model_path, session), threads)

    def predict(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        """Run a built model on the host with the device's runner: list of output dicts, one per sample."""
        from edgekit.execution import predict

        return predict(self.execution(model_path, threads, session), samples)

    def runner(self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None) -> Any:
        """A callable ``run(feed)`` for the built model on the host (for timing), with ``close()``."""
        return self.execution(model_path, threads, session)

    def host_settings(self, arch: str, isa: list) -> dict | None:
        """This backend's section of the detected ``host`` profile, or None where it does not run here.

        The default: runs here when its runtime package imports, with no settings."""
        import importlib.util

        try:
            found = importlib.util.find_spec(self.runtime) is not None
        except (ImportError, ValueError):
            found = False
        return {} if found else None

    def local_device_python(self) -> str | None:
        """The Python that runs the agent for ``deploy --local`` when the runtime lives in a tool environment
        (the host Python cannot import it), or None for the host's own Python."""
        return None

    # -- mixed precision (optional) ------------------------------------------------
    def quantize(self, ctx: BuildContext, exclude: Iterable[Layer] = ()) -> Path:
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

    def layer_names(self, ctx: BuildContext, layers: Iterable[Layer]) -> dict[str, str | None]:
        """``{layer.name: the backend's name for it, or None where its graph has no such layer}``."""
        return {layer.name: layer.name for layer in layers}

    def supports_mixed_precision(self) -> bool:
        return type(self).quantize is not Backend.quantize
