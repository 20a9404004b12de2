"""Per-session state for streaming models (a bundle built with ``--stream``; its manifest's ``stream``).

An app names a session (``X-Edgekit-Session`` header, or ``"session"`` in a JSON infer body) and sends only the
data inputs: the agent feeds the state this session's last request output (zeros at the first), keeps the new
state and answers the other outputs. The table is bounded: at most ``max_sessions`` (the least recently used
is dropped), each forgotten after ``ttl_s`` idle seconds. A session belongs to one model and one installed version:
a request served by another version (an update, a rollback, a traffic split's draw) starts from the initial
state again, and the answer says so. Requests of one session run one at a time (a second waits for the first).
"""

import re
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional

from .errors import AgentError

SESSION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_SESSIONS = 1024
TTL_S = 600.0


def check_session(session: Any) -> str:
    if not isinstance(session, str) or not SESSION_ID.match(session):
        raise AgentError(
            400, "session must be 1-128 characters of letters, digits and . _ : - (got %r)" % (str(session)[:140],)
        )
    return session


class Session(object):
    def __init__(self, model: str, session_id: str) -> None:
        self.model, self.id = model, session_id
        self.lock = threading.Lock()
        self.version = None  # type: Optional[str]  # the version whose state this holds
        self.state = {}  # type: Dict[str, Any]  # state input -> array
        self.steps = 0
        self.created = self.used = time.time()


class Slot(object):
    """One request's use of a session: :meth:`feeds` before the run, :meth:`keep` after, :meth:`release` always."""

    def __init__(self, session: Session, version: str, manifest: Dict[str, Any]) -> None:
        self.session, self.version = session, version
        self.pairs = stream_pairs(manifest)
        self.specs = dict((s["name"], s) for s in manifest.get("inputs", []))
        self.reset = None  # type: Optional[str]

    def feeds(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        """The request's data inputs with this session's state (the given state inputs win: an app may seed it)."""
        s = self.session
        if s.version is not None and s.version != self.version:
            self.reset = "version %s serves this request; the state of version %s was dropped" % (
                self.version,
                s.version,
            )
            s.state, s.steps = {}, 0
        full = dict(feeds)
        for name in self.pairs:
            if name not in full:
                full[name] = s.state[name] if name in s.state else zero_state(self.specs.get(name), name)
        return full

    def keep(self, outputs: Dict[str, Any]) -> Dict[str, Any]:
        """Store the new state; return the outputs that are not state."""
        s = self.session
        missing = [o for o in self.pairs.values() if o not in outputs]
        if missing:
            raise AgentError(500, "the model did not output the state %s its manifest's stream names" % missing)
        s.state = dict((i, outputs[o]) for i, o in self.pairs.items())
        s.version, s.steps, s.used = self.version, s.steps + 1, time.time()
        state_outputs = set(self.pairs.values())
        return dict((k, v) for k, v in outputs.items() if k not in state_outputs)

    def meta(self) -> Dict[str, Any]:
        out = {"id": self.session.id, "step": self.session.steps}
        if self.reset:
            out["reset"] = self.reset
        return out

    def release(self) -> None:
        self.session.used = time.time()
        self.session.lock.release()


def stream_pairs(manifest: Dict[str, Any]) -> Dict[str, str]:
    return dict(((manifest.get("stream") or {}).get("state") or {}).items())


def zero_state(spec: Optional[Dict[str, Any]], name: str) -> Any:
    """The initial state: zeros, a dynamic dimension at 1 (as the build's sequences start); an app that wants
    other sizes sends the state with the session's first request."""
    import numpy as np

    if spec is None:
        raise AgentError(500, "the manifest's stream names %r, which is not one of the model's inputs" % name)
    shape = [d if isinstance(d, int) else 1 for d in spec.get("shape", [])]
    return np.zeros(shape, np.dtype(spec["dtype"]))


class SessionTable(object):
    """The agent's sessions, keyed by (model, session id); bounded by count (LRU) and idle time."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, ttl_s: float = TTL_S) -> None:
        self.max_sessions, self.ttl_s = max_sessions, ttl_s
        self._table = OrderedDict()  # type: OrderedDict
        self._lock = threading.Lock()
        self.evicted = 0
        self.expired = 0

    def _sweep(self, now: float) -> None:
        for key in [k for k, s in self._table.items() if now - s.used > self.ttl_s and not s.lock.locked()]:
            del self._table[key]
            self.expired += 1

    def open(self, model: str, session_id: Any, version: str, manifest: Dict[str, Any]) -> Slot:
        """The session's slot for one request, its lock held (release it); 400 for a model without a stream."""
        check_session(session_id)
        if not stream_pairs(manifest):
            raise AgentError(
                400,
                "model %r keeps no state between requests (its bundle declares no stream): drop the session, or "
                "build it with --stream INPUT=OUTPUT" % model,
            )
        key = (model, session_id)
        with self._lock:
            now = time.time()
            self._sweep(now)
            s = self._table.get(key)
            if s is None:
                s = self._table[key] = Session(model, session_id)
                while len(self._table) > self.max_sessions:
                    self._table.popitem(last=False)
                    self.evicted += 1
            self._table.move_to_end(key)
            s.used = now
        s.lock.acquire()
        return Slot(s, version, manifest)

    def delete(self, model: str, session_id: Any) -> Dict[str, Any]:
        """Forget one session (the next request with its id starts from the initial state)."""
        check_session(session_id)
        with self._lock:
            s = self._table.pop((model, session_id), None)
        if s is None:
            raise AgentError(404, "model %r has no session %r (ended, expired or never started)" % (model, session_id))
        return {"model": model, "session": session_id, "deleted": True, "steps": s.steps}

    def forget(self, model: str) -> int:
        """Drop every session of ``model`` (it was removed)."""
        with self._lock:
            keys = [k for k in self._table if k[0] == model]
            for k in keys:
                del self._table[k]
        return len(keys)

    def list(self, model: str) -> List[Dict[str, Any]]:
        now = time.time()
        with self._lock:
            self._sweep(now)
            rows = [s for (m, _), s in self._table.items() if m == model]
        return [
            {"id": s.id, "version": s.version, "steps": s.steps, "idle_s": round(now - s.used, 3)}
            for s in sorted(rows, key=lambda s: s.id)
        ]

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            n = len(self._table)
        return {
            "kept": n,
            "max_sessions": self.max_sessions,
            "ttl_s": self.ttl_s,
            "evicted": self.evicted,
            "expired": self.expired,
        }
