"""A build's fidelity checks: every step a backend writes is run on the fidelity data and judged against the
reference's outputs (the task metric, the generic figures, the stream's state, each declared shape).

A backend calls ``check(step, model_path)`` for each model it keeps (recorded; a failing one refuses the build
unless degraded builds are allowed) and ``trial(step, model_path)`` for a candidate it may discard (judged, neither
recorded nor refused; a following ``check`` of the same unchanged file reuses its outputs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from . import fidelity, progress, tasks
from .build_prepare import Prepared
from .errors import ConversionError, EdgekitError
from .input_support import cannot_run

GENERIC_GATE = ("classification", "generic")  # inferred task families judged by the generic gate


class StepChecker:
    """The reference's outputs, what judges them, and the record of every checked step."""

    def __init__(self, p: Prepared, reference_outputs: List[dict], inferred: Any, session: Any) -> None:
        self.p = p
        self.reference_outputs = reference_outputs
        self.session = session
        self.inferred = inferred
        # the task's own metric decides where the generic gate is known to be wrong (detections, maps, sequences...);
        # a classifier inferred as such keeps the generic gate (cosine, top-1, accuracy), which is its metric
        self.judged_by = inferred if not (inferred.inferred and inferred.spec.family in GENERIC_GATE) else None
        self.steps: List[Dict[str, Any]] = []
        self.last_outputs: List[dict] = reference_outputs
        self._tried: Dict[str, List[dict]] = {}  # model file -> its outputs, from trial()

    def task_section(self) -> Dict[str, Any]:
        """The report's ``task``: what the model is for, why, and what judges it."""
        um = self.p.user_metric
        return {
            **self.inferred.to_dict(),
            "gate": "task metric" if self.judged_by is not None else "generic (cosine, top-1 on class axes, accuracy)",
            **({"metric": {"name": um.name, "sha256": um.sha256}} if um else {}),
        }

    def _run(self, step: str, model_path: Path, verb: str) -> List[dict]:
        p = self.p
        with progress.of(p.log).step(f"{verb} {step} on {len(p.fid_ds)} samples"):
            try:
                return p.runs.predict(model_path, p.fid_ds.samples, session=self.session)
            except EdgekitError:
                raise
            except Exception as e:  # RunnerError, or the runtime's own (onnxruntime's Fail when a model won't load)
                raise ConversionError(
                    cannot_run(p.opts.backend, step, p.src.inputs, e, p.precision, p.src.path)
                ) from None

    def judge(self, step: str, outputs: List[dict], degraded_ok: bool) -> Dict[str, Any]:
        p = self.p
        record = fidelity.check_step(
            step,
            self.reference_outputs,
            outputs,
            p.fid_ds.labels,
            p.thresholds,
            degraded_ok,
            task=self.judged_by,
            metric=p.user_metric,
        )
        streamed = p.plan.metrics(self.reference_outputs, outputs, p.fid_ds) if p.plan else None
        if streamed:
            record["stream"] = streamed
        return record

    def trial(self, step: str, model_path: Path) -> Dict[str, Any]:
        self._tried[str(model_path)] = self._run(step, model_path, "trying")
        return self.judge(step, self._tried[str(model_path)], True)  # neither recorded nor refused

    def check(self, step: str, model_path: Path) -> Dict[str, Any]:
        p = self.p
        outputs = self._tried.pop(str(model_path), None)
        self._tried.clear()  # the candidates a backend tried and did not keep
        if outputs is None:
            outputs = self._run(step, model_path, "checking")
        self.last_outputs = outputs
        record = self.judge(step, outputs, p.opts.allow_degraded)
        record = p.points.check(
            step,
            model_path,
            record,
            lambda path, samples: p.be.predict(path, samples, session=self.session),
            lambda name, ref, out: fidelity.check_step(
                name, ref, out, None, p.thresholds, p.opts.allow_degraded, task=self.judged_by, metric=p.user_metric
            ),
            p.log,
        )
        self.steps.append(record)
        p.log(f"  {step}: {'ok' if record['passed'] else 'DEGRADED'} - {fidelity.summary(record)}")
        return record

    @property
    def degraded(self) -> bool:
        return any(not s["passed"] for s in self.steps)


def resolve(p: Prepared, reference_path: Path, reference_outputs: List[dict]) -> Any:
    """What the model is for (``--task``, else inferred from the reference's outputs), with the reason."""
    return tasks.resolve_task(p.opts.task, reference_path, reference_outputs[0], p.fid_ds.samples[0])
