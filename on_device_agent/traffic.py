"""Several versions of one model served at once: each request goes to a version drawn by weight (A/B, canary).

The current version is served as always; a split names other kept versions and their shares, for
example ``{"v1": 90, "v2": 10}``. Each version's requests are recorded under its own version, in
telemetry and in ``/metrics``, so the two can be compared in the field.
"""

import random
import threading
from typing import Any, Dict, List, Optional

from .errors import AgentError

MAX_VERSIONS = 4


class TrafficSplit(object):
    def __init__(self) -> None:
        self._weights = {}  # type: Dict[str, List[Any]]
        self._models = {}  # type: Dict[Any, Any]
        self._lock = threading.Lock()
        self._rng = random.Random()

    def set(self, name: str, versions: Any, available: List[str]) -> Dict[str, int]:
        """Validate and set ``{version: weight}`` (weights are integers >= 0, at least one above 0)."""
        if not isinstance(versions, dict) or not 0 < len(versions) <= MAX_VERSIONS:
            raise AgentError(400, "versions must map 1 to %d kept versions to integer weights" % MAX_VERSIONS)
        weights = []
        for version, weight in versions.items():
            if version not in available:
                raise AgentError(
                    404, "model %r keeps no version %r (kept: %s)" % (name, version, ", ".join(available) or "none")
                )
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 1000000:
                raise AgentError(400, "weight of %s must be an integer from 0 to 1000000, got %r" % (version, weight))
            weights.append((version, weight))
        if not sum(w for _, w in weights):
            raise AgentError(400, "at least one weight must be above 0")
        with self._lock:
            self._weights[name] = weights
            stale = [k for k in self._models if k[0] == name and k[1] not in versions]
            closing = [self._models.pop(k) for k in stale]
        for model in closing:
            with model.lock:
                model.runner.close()
        return dict(weights)

    def clear(self, name: str) -> None:
        with self._lock:
            self._weights.pop(name, None)
            closing = [self._models.pop(k) for k in list(self._models) if k[0] == name]
        for model in closing:
            with model.lock:
                model.runner.close()

    def get(self, name: str) -> Optional[Dict[str, int]]:
        with self._lock:
            weights = self._weights.get(name)
        return dict(weights) if weights else None

    def pick(self, name: str) -> Optional[str]:
        """The version this request goes to (None: no split, serve the current version)."""
        with self._lock:
            weights = self._weights.get(name)
        if not weights:
            return None
        x = self._rng.uniform(0, sum(w for _, w in weights))
        for version, weight in weights:
            x -= weight
            if x < 0:
                return version
        return weights[-1][0]

    def model(self, name: str, version: str) -> Any:
        with self._lock:
            return self._models.get((name, version))

    def put(self, name: str, version: str, model: Any) -> None:
        with self._lock:
            self._models[(name, version)] = model
