"""The request path of the agent's service: which version serves a request (traffic split, circuit breaker),
backpressure, and the inference itself (one by one, or in a dynamic batch).

:class:`Serving` is a part of :class:`~.service.AgentService` (its state: the store, the loaded models,
the traffic split, the breakers, the telemetry recorder); it is kept apart to keep each file small.
"""

import time
from typing import Any, Dict, Optional, Tuple

from .errors import AgentError
from .store import check_name

OUTCOMES = {400: "bad_request", 404: "unknown_model", 500: "error", 501: "runtime_missing", 503: "overloaded"}


class Serving(object):
    """Request-path methods of :class:`~.service.AgentService`."""

    # Set by AgentService (its state and the methods of its other parts this one calls):
    store: Any
    traffic: Any
    breakers: Any
    recorder: Any
    max_queue: int
    _lock: Any
    _load: Any
    _load_lock: Any
    _get_loaded: Any
    _record: Any
    sessions: Any

    def _pick(self, name: str) -> Optional[str]:
        """The version this request goes to: the current one or the split's draw, unless its breaker is open."""
        current = self.store.current_version(check_name("model name", name))
        if current is None:
            return None
        split = self.traffic.get(name)
        picked = self.traffic.pick(name) or current
        return self.breakers.choose(name, picked, current, split, lambda: self.store.kept_installs(name))

    def _observe(self, name: str, version: Optional[str], failed: bool, ms: Optional[float] = None) -> None:
        change = self.breakers.observe(name, version, failed, ms)
        if change and self.recorder:
            self.recorder.event("breaker", name, version, {"state": change[0], "reason": change[1]})

    def set_breaker(self, name: str, limits: Any) -> Dict[str, Any]:
        """Circuit-breaker limits for one model (over the agent's ``--breaker``); ``{}`` goes back to those."""
        self.store.current(check_name("model name", name))
        merged = self.breakers.configure(name, limits)
        return {"name": name, "limits": merged, "breakers": self.breakers.states(name)}

    def _serving(self, name: str, version: Optional[str] = None) -> Any:
        """The model this request goes to: the current version, or the version a traffic split draws."""
        if version is None or version == self.store.current_version(check_name("model name", name)):
            return self._get_loaded(name)
        model = self.traffic.model(name, version)
        if model is None:
            with self._load_lock(name):
                model = self.traffic.model(name, version) or self._load(name, version=version)
        return model

    def set_split(self, name: str, versions: Any) -> Dict[str, Any]:
        """Serve several kept versions at once, ``{version: weight}``; an empty mapping ends the split."""
        check_name("model name", name)
        self.store.current(name)
        if versions in ({}, None):
            self.traffic.clear(name)
            split = None
        else:
            split = self.traffic.set(name, versions, self.store.versions(name))
        if self.recorder:
            self.recorder.event("split", name, self.store.current_version(name), {"versions": split})
        return {"name": name, "split": split}

    def _enter(self, model: Any) -> None:
        """Backpressure: a model takes at most ``max_queue`` requests at once; beyond, 503 with Retry-After."""
        with self._lock:
            if model.pending >= self.max_queue:
                busy = AgentError(
                    503,
                    "model %r already has %d requests running or waiting (the agent's --max-queue); retry shortly"
                    % (model.name, model.pending),
                )
                busy.headers = {"Retry-After": "1"}  # type: ignore[attr-defined]
                raise busy
            model.pending += 1

    def infer(
        self,
        name: str,
        feeds: Dict[str, Any],
        t_arrive: float,
        pre_ms: Optional[float] = None,
        session: Optional[str] = None,
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Run ``feeds`` on the model; returns ``(outputs, meta)``. ``t_arrive``: perf_counter at arrival.
        ``session``: a stream's session id; its stored state is fed and the new one kept (``sessions.py``)."""
        model = version = slot = None
        try:
            version = self._pick(name)
            model = self._serving(name, version)
            if session is not None:
                slot = self.sessions.open(name, session, model.version, model.runner.manifest)
                feeds = slot.feeds(feeds)
            feeds = model.runner.drop_fixed(feeds)
            model.runner.check_feeds(feeds)
            self._enter(model)
            try:
                if model.batcher is not None:
                    outputs, t0, t1, batch = model.batcher.run(model, feeds)
                else:
                    with model.lock:
                        t0 = time.perf_counter()
                        outputs = model.runner.run(feeds)
                        t1 = time.perf_counter()
                        model.requests += 1
                    batch = 1
            finally:
                with self._lock:
                    model.pending -= 1
            if slot is not None:
                outputs = slot.keep(outputs)
        except Exception as e:
            status = getattr(e, "status", 500)
            if version is not None and status not in (400, 404, 503):  # the version failed, not the request
                self._observe(name, version, True)
            self._record(name, model, OUTCOMES.get(status, "error"), error=str(e)[:300])
            raise
        finally:
            if slot is not None:
                slot.release()
        infer_ms, queue_ms = (t1 - t0) * 1000.0, (t0 - t_arrive) * 1000.0
        self._observe(name, model.version, False, infer_ms)
        shape = ";".join("x".join(str(d) for d in a.shape) for a in feeds.values())[:256]
        rid = self._record(name, model, "ok", queue_ms, infer_ms, shape, pre_ms=pre_ms)
        meta = {
            "model": name,
            "version": model.version,
            "inference_ms": infer_ms,
            "queue_ms": queue_ms,
            "batch": batch,
            "request_id": rid,
        }
        if slot is not None:
            meta["session"] = slot.meta()
        return outputs, meta

    def end_session(self, name: str, session: Any) -> Dict[str, Any]:
        """Forget a stream's session: its next request starts from the initial state."""
        self.store.current(check_name("model name", name))
        return self.sessions.delete(name, session)

    def list_sessions(self, name: str) -> Dict[str, Any]:
        self.store.current(check_name("model name", name))
        return {"name": name, "sessions": self.sessions.list(name), **self.sessions.stats()}
