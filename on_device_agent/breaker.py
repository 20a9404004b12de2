"""A circuit breaker per served version: stop sending traffic to a version that fails or is slow.

Each version's outcomes (failed or not, latency) over a sliding window are kept. When, with at least
``min_requests`` in the window, its error rate reaches ``error_rate`` or its p99 latency exceeds ``p99_ms``
(0: latency not checked), the breaker opens: requests go to the other side of the split or the previous
version. After ``cooldown_s`` it is half-open: one request is let through; success closes it, failure opens
it again for another cool-down.
"""

import collections
import math
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import AgentError

DEFAULTS = {"error_rate": 0.5, "p99_ms": 0.0, "window_s": 30.0, "min_requests": 20, "cooldown_s": 30.0}
BOUNDS = {
    "error_rate": (0.0, 1.0),
    "p99_ms": (0.0, 3600000.0),
    "window_s": (0.1, 3600.0),
    "min_requests": (1, 100000),
    "cooldown_s": (0.0, 86400.0),
}
MAX_WINDOW = 10000  # outcomes kept per version at most, whatever the window


def check_limits(limits: Any, base: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``limits`` merged over ``base`` (or the defaults), each value checked against its bound (else 400)."""
    out = dict(base or DEFAULTS)
    if limits is None:
        return out
    if not isinstance(limits, dict):
        raise AgentError(400, "breaker limits must be an object with some of: %s" % ", ".join(sorted(DEFAULTS)))
    for key, value in limits.items():
        if key not in DEFAULTS:
            raise AgentError(400, "unknown breaker limit %r (known: %s)" % (str(key)[:50], ", ".join(sorted(DEFAULTS))))
        low, high = BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise AgentError(400, "breaker %s must be a number from %s to %s, got %r" % (key, low, high, value))
        if not low <= value <= high or (key == "min_requests" and value != int(value)):
            raise AgentError(400, "breaker %s must be from %s to %s, got %r" % (key, low, high, value))
        out[key] = int(value) if key == "min_requests" else float(value)
    return out


def parse_spec(spec: str) -> Dict[str, Any]:
    """``error_rate=0.5,p99_ms=200,...`` (the agent's ``--breaker`` option) -> checked limits."""
    limits = {}  # type: Dict[str, Any]
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            limits[key.strip()] = float(value)
        except ValueError:
            raise ValueError("--breaker takes KEY=NUMBER pairs separated by commas, got %r" % part) from None
    try:
        return check_limits(limits)
    except AgentError as e:
        raise ValueError(str(e)) from None


class Breaker(object):
    """One version's breaker; ``clock`` is ``time.monotonic`` unless a test gives another."""

    def __init__(self, limits: Dict[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.state = "closed"
        self.reason = ""
        self.opened_at = 0.0
        self.trial = 0.0  # when the half-open trial request went out (0: none is out)
        self.window = collections.deque()  # type: Any  # (t, failed, ms)

    def allow(self) -> bool:
        """May a request go to this version now? (In half-open, only one trial at a time.)"""
        if self.state == "closed":
            return True
        if self.state == "open" and self.clock() - self.opened_at >= self.limits["cooldown_s"]:
            self.state = "half_open"
        now = self.clock()
        if self.state == "half_open" and (not self.trial or now - self.trial > max(self.limits["cooldown_s"], 1.0)):
            self.trial = now  # (a trial that never reported back, e.g. refused as bad input, is replaced)
            return True
        return False

    def _trim(self, now: float) -> None:
        while self.window and (now - self.window[0][0] > self.limits["window_s"] or len(self.window) > MAX_WINDOW):
            self.window.popleft()

    def stats(self) -> Dict[str, Any]:
        self._trim(self.clock())
        n = len(self.window)
        errors = sum(1 for _, failed, _ in self.window if failed)
        times = sorted(ms for _, failed, ms in self.window if not failed and ms is not None)
        p99 = times[min(len(times) - 1, int(math.ceil(0.99 * len(times))) - 1)] if times else None
        return {
            "state": self.state,
            "reason": self.reason,
            "requests": n,
            "error_rate": round(errors / n, 4) if n else 0.0,
            "p99_ms": None if p99 is None else round(p99, 3),
        }

    def observe(self, failed: bool, ms: Optional[float]) -> Optional[Tuple[str, str]]:
        """Record one outcome; returns ``(new_state, reason)`` when the state changed, else None."""
        now = self.clock()
        if self.state == "half_open" and self.trial:
            self.trial = 0.0
            if failed or (self.limits["p99_ms"] and ms is not None and ms > self.limits["p99_ms"]):
                return self._open(now, "trial request %s" % ("failed" if failed else "took %.1f ms" % (ms or 0.0)))
            self.state, self.reason = "closed", ""
            self.window.clear()
            return ("closed", "trial request succeeded")
        self.window.append((now, failed, ms))
        if self.state != "closed":
            return None
        s = self.stats()
        if s["requests"] < self.limits["min_requests"]:
            return None
        if self.limits["error_rate"] < 1.0 and s["error_rate"] >= max(self.limits["error_rate"], 1e-9):
            return self._open(now, "error rate %.2f >= %.2f" % (s["error_rate"], self.limits["error_rate"]))
        if self.limits["p99_ms"] and s["p99_ms"] is not None and s["p99_ms"] > self.limits["p99_ms"]:
            return self._open(now, "p99 %.1f ms > %.1f ms" % (s["p99_ms"], self.limits["p99_ms"]))
        return None

    def _open(self, now: float, reason: str) -> Tuple[str, str]:
        self.state, self.reason, self.opened_at = "open", reason, now
        self.window.clear()
        return ("open", reason)


class Breakers(object):
    """All breakers of an agent, keyed by (model, version); limits per model over the agent's defaults."""

    def __init__(self, limits: Optional[Dict[str, Any]] = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.defaults = check_limits(limits)
        self.clock = clock
        self._limits = {}  # type: Dict[str, Dict[str, Any]]
        self._breakers = {}  # type: Dict[Tuple[str, str], Breaker]
        self._lock = threading.Lock()

    def configure(self, name: str, limits: Any) -> Dict[str, Any]:
        """Set ``name``'s limits (merged over the agent's); ``{}`` or None goes back to the agent's."""
        merged = check_limits(limits or None, self.defaults)
        with self._lock:
            if limits:
                self._limits[name] = merged
            else:
                self._limits.pop(name, None)
            for key, b in self._breakers.items():
                if key[0] == name:
                    b.limits = merged
        return merged

    def limits(self, name: str) -> Dict[str, Any]:
        with self._lock:
            return dict(self._limits.get(name, self.defaults))

    def _get(self, name: str, version: str) -> Breaker:
        b = self._breakers.get((name, version))
        if b is None:
            b = self._breakers[(name, version)] = Breaker(self._limits.get(name, self.defaults), self.clock)
        return b

    def allow(self, name: str, version: str) -> bool:
        with self._lock:
            b = self._breakers.get((name, version))
            return True if b is None else b.allow()

    def observe(self, name: str, version: str, failed: bool, ms: Optional[float]) -> Optional[Tuple[str, str]]:
        with self._lock:
            return self._get(name, version).observe(failed, ms)

    def states(self, name: str) -> Dict[str, Dict[str, Any]]:
        with self._lock:
            return dict((k[1], b.stats()) for k, b in self._breakers.items() if k[0] == name)

    def open_flags(self) -> Dict[Tuple[str, str], int]:
        with self._lock:
            return dict((k, int(b.state != "closed")) for k, b in self._breakers.items())

    def choose(self, name: str, picked: str, current: Optional[str], split: Optional[Dict[str, int]], kept: Any) -> str:
        """The version a request goes to: ``picked`` unless its breaker is open; then the other side of the
        split (largest weight first), else the kept versions installed before it (newest first), else
        ``picked`` all the same. ``kept()``: the kept versions in install order."""
        if self.allow(name, picked):
            return picked
        weights = split or {}
        others = sorted((v for v, w in weights.items() if w > 0 and v != picked), key=lambda v: -weights[v])
        installs = kept()
        older = list(reversed(installs[: installs.index(picked)] if picked in installs else installs))
        for version in others + older + [v for v in [current] if v and v != picked]:
            if self.allow(name, version):
                return version
        return picked

    def render(self) -> str:
        """``/metrics`` lines: 1 while a version's breaker is open or half-open."""
        out = [
            "# HELP edgekit_breaker_open 1 while a version's circuit breaker keeps traffic away from it.",
            "# TYPE edgekit_breaker_open gauge",
        ]
        for (model, version), flag in sorted(self.open_flags().items()):
            out.append('edgekit_breaker_open{model="%s",version="%s"} %d' % (model, version, flag))
        return "\n".join(out) + "\n"

    def forget(self, name: str) -> None:
        with self._lock:
            self._limits.pop(name, None)
            for key in [k for k in self._breakers if k[0] == name]:
                del self._breakers[key]
