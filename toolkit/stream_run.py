"""Running a candidate over whole sequences, and the stream's metrics (see :mod:`edgekit.stream`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .stream import StreamSpec, _as_state


class _Reference:
    """An ONNX file run by ONNX Runtime on the CPU, as an Execution (``run(feed)``, ``close()``)."""

    def __init__(self, model_path: Any, threads: int | None) -> None:
        from .execution import reference_session

        self.sess = reference_session(model_path, threads)
        self.names = [o.name for o in self.sess.get_outputs()]

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.sess.run(self.names, feed)))

    def close(self) -> None:
        self.sess = None


class StreamBackend:
    """A backend whose ``predict`` runs the fidelity samples as the sequences they are (everything else: the
    backend's own). The state inputs of a sequence's first step are its initial state; at every later step the
    candidate's own state output of the step before replaces the reference's."""

    def __init__(self, backend: Any, spec: StreamSpec, lengths: Sequence[int]) -> None:
        self.backend, self.spec, self.lengths = backend, spec, list(lengths)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def _execution(self, model_path: Any, threads: int | None, session: Any) -> Any:
        # An ONNX file checked by a backend that converts to its own format is the reference (the backends'
        # own predict does the same); the ONNX Runtime backend runs its .onnx builds with its runner.
        if str(model_path).endswith(".onnx") and self.backend.name != "ort":
            return _Reference(model_path, self.backend.reference_threads(threads))
        return self.backend.execution(model_path, threads, session)

    def predict(self, model_path: Any, samples: list, threads: int | None = None, session: Any = None) -> list:
        if len(samples) != sum(self.lengths):  # not the stream's samples: independent feeds
            return self.backend.predict(model_path, samples, threads, session)
        execution = self._execution(model_path, threads, session)
        outputs = []
        try:
            start = 0
            for n in self.lengths:
                state: dict[str, np.ndarray] = {}
                for feed in samples[start : start + n]:
                    out = execution.run({**feed, **state})
                    outputs.append(out)
                    state = {i: _as_state(out[o], feed[i]) for i, o in self.spec.pairs.items()}
                start += n
        finally:
            execution.close()
        return outputs


def stream_metrics(
    spec: StreamSpec, lengths: Sequence[int], reference: Sequence[dict], candidate: Sequence[dict]
) -> dict[str, Any]:
    """Drift of each state over the sequences: the largest absolute difference from the reference's state at the
    end of a sequence and at any step, next to the reference state's own largest magnitude."""
    ends = list(np.cumsum(lengths) - 1)
    drift = {}
    for name, out in spec.pairs.items():
        errors = [
            float(np.max(np.abs(np.asarray(c[out], np.float64) - np.asarray(r[out], np.float64))))
            if np.asarray(r[out]).size
            else 0.0
            for r, c in zip(reference, candidate, strict=True)
        ]
        scale = max(
            (float(np.max(np.abs(np.asarray(r[out], np.float64)))) for r in reference if r[out].size), default=0
        )
        drift[name] = {
            "output": out,
            "max_abs_error_at_end": max(errors[e] for e in ends),
            "max_abs_error_any_step": max(errors),
            "reference_max_abs": scale,
        }
    return {"sequences": len(lengths), "steps": int(sum(lengths)), "state_drift": drift}
