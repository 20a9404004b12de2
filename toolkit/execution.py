"""Running models: the reference, and built models with the code the device runs.

One interface, :class:`Execution` (``run(feed) -> {output: array}``, ``describe``, ``close()``),
for a built model wherever it runs:

- :func:`in_process`: the agent's own runner (``edgekit_agent.runners``) in this Python;
- :func:`in_toolenv`: the same runner in a tool environment's Python, through a worker process
  (:class:`edgekit.converters.toolworker.RunnerWorker`; its pipe carries the agent's tensor encoding);
- :func:`on_device`: a model installed on a device, through the agent's HTTP API (``run``; ``bench``, the
  agent's own benchmark).

Fidelity checks, host timing, ``--budget``, pruning statistics and ``--auto`` run built models
through these. The reference (an ONNX file or model bytes, FP32) is run by ONNX Runtime on the
CPU, and :func:`reference_session` is the one place that session is made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol, Sequence

from edgekit_agent.runners.ort import constant_folding_failed

Feed = dict  # {input name: ndarray}


class Execution(Protocol):
    """A loaded model: ``run`` one feed, ``close`` when done."""

    runtime: str
    describe: dict

    def run(self, feed: Feed) -> dict: ...

    def close(self) -> None: ...


# -- the reference ---------------------------------------------------------------------------------------
def reference_session(model: str | Path | bytes, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session for a reference model (a path, or serialized ModelProto bytes).

    ``threads``: intra-op threads (None: ONNX Runtime's default). Raises ImportError without onnxruntime.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = int(threads)
    source = model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(source, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's Fail
        if not constant_folding_failed(e):
            raise
        # see constant_folding_failed: the graph is the same, only the optimizer's folding is left out
        return ort.InferenceSession(
            source, sess_options=so, providers=["CPUExecutionProvider"], disabled_optimizers=["ConstantFolding"]
        )


def session_outputs(sess: Any, samples: Sequence[Feed]) -> list[dict]:
    """Every output of ``sess`` for each sample: a list of ``{output: array}``."""
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(names, feed))) for feed in samples]


def reference_outputs(model: str | Path | bytes, samples: Sequence[Feed], threads: int | None = None) -> list[dict]:
    """The reference's outputs for each sample, run by ONNX Runtime on the CPU."""
    return session_outputs(reference_session(model, threads), samples)


# -- built models ------------------------------------------------------------------------------------------
class InProcess:
    """A built model loaded by the agent's runner for ``backend`` in this Python."""

    def __init__(self, backend: str, model_path: str | Path, manifest: dict, threads: int | None = None) -> None:
        from edgekit_agent import runners

        model_path = Path(model_path)
        self.runner = runners.get(backend)(str(model_path.parent), dict(manifest, model=model_path.name), threads)
        self.runner.load()
        self.runtime = self.runner.runtime or backend
        self.describe = self.runner.describe()

    def run(self, feed: Feed) -> dict:
        return self.runner.run(feed)

    __call__ = run

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_process(backend: str, model_path: str | Path, manifest: dict, threads: int | None = None) -> InProcess:
    """Load ``model_path`` with the agent's runner for ``backend`` here (its runtime imports in this Python)."""
    return InProcess(backend, model_path, manifest, threads)


def in_toolenv(
    spec: Any, backend: str, model_path: str | Path, manifest: dict, threads: int | None = None, log: Any = None
) -> Any:
    """Load ``model_path`` with the agent's runner for ``backend`` in the tool environment ``spec``."""
    from edgekit.converters.toolworker import RunnerWorker

    return RunnerWorker(spec, backend, model_path, manifest, threads, log=log)


class OnDevice:
    """A model installed on a device, run through the agent's API.

    ``device``: an :class:`edgekit.device.Device` (each call reports its step and turns the agent's and the
    connection's failures into edgekit errors) or an ``edgekit_sdk.AgentClient``. The agent loads the model (with
    ``threads``) on the first :meth:`run` or read of ``describe``; :meth:`bench` has the agent benchmark it in a
    fresh process on the device (nothing is loaded into the serving agent).
    """

    def __init__(self, device: Any, name: str, threads: int | None = None) -> None:
        from edgekit.device import Device

        self.device = device if isinstance(device, Device) else None
        self.client = device.client if self.device is not None else device
        self.name, self.threads = name, threads
        self._describe: dict | None = None

    def _call(self, step: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.device is None:
            return fn(*args, **kwargs)
        return self.device.call(step, fn, *args, **kwargs)

    @property
    def describe(self) -> dict:
        if self._describe is None:
            self._describe = self._call(f"loading {self.name}", self.client.load, self.name, threads=self.threads) or {}
        return self._describe

    @property
    def runtime(self) -> str:
        return (self.describe.get("runner") or self.describe).get("runtime", "")

    def run(self, feed: Feed) -> dict:
        self.describe  # noqa: B018  (loaded first, with self.threads)
        return self._call(f"running {self.name}", self.client.infer, self.name, feed)

    __call__ = run

    def bench(self, runs: int = 100, warmup: int = 10, providers: list[str] | None = None) -> dict:
        """The agent's benchmark of the model (latency percentiles, accelerator, threads: its bench report)."""
        if self.device is not None:
            return self.device.bench(self.name, runs=runs, warmup=warmup, threads=self.threads, providers=providers)
        return self.client.bench(
            self.name, runs=runs, warmup=warmup, threads=self.threads, providers=providers, timeout=900
        )

    def close(self) -> None:
        pass


def on_device(device: Any, name: str, threads: int | None = None) -> OnDevice:
    """Model ``name`` installed on ``device`` (a Device or an AgentClient), run through the agent's API."""
    return OnDevice(device, name, threads)


def predict(execution: Execution, samples: Sequence[Feed]) -> list[dict]:
    """``execution`` run on each sample, then closed."""
    try:
        return [execution.run(feed) for feed in samples]
    finally:
        execution.close()


def manifest_beside(model_path: str | Path, registered: dict | None = None) -> dict:
    """What a runner needs about a model (inputs, outputs, runner options): registered by the build that made
    it (``registered``: resolved path -> entry), else the bundle's ``manifest.json`` beside it."""
    key = str(Path(model_path).resolve())
    if registered and key in registered:
        return registered[key]
    manifest = Path(model_path).parent / "manifest.json"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        return {"inputs": m["inputs"], "outputs": m["outputs"], "runner": m.get("runner", {})}
    from edgekit.errors import ConversionError

    raise ConversionError(
        f"{model_path}: no manifest.json beside it and not built in this process: cannot tell its "
        "inputs and runner options"
    )


__all__ = [
    "Execution",
    "InProcess",
    "OnDevice",
    "in_process",
    "in_toolenv",
    "manifest_beside",
    "on_device",
    "predict",
    "reference_outputs",
    "reference_session",
    "session_outputs",
]
