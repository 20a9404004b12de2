"""Bounds of the knobs a request may set (load, bench): each outside its bound is a 400 that names it."""

import math
import os
from typing import Any, List, Optional, Tuple

from .errors import AgentError

MAX_WARMUP = 1000  # inferences on load
MAX_WARMUP_S = 30.0  # and seconds: a load (which holds the model's load lock) ends in bounded time
MAX_RUNS = 100000
MAX_TIMEOUT_S = 3600.0


def max_threads() -> int:
    return max(4, 4 * (os.cpu_count() or 1))


def _int(knob: str, value: Any, low: int, high: int, default: Optional[int] = None) -> Optional[int]:
    """A request knob: an integer in [low, high] (None -> default), else 400 saying which and why."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise AgentError(400, "%s must be an integer from %d to %d, got %r" % (knob, low, high, value))
    try:
        n = int(value)
        if float(value) != n:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise AgentError(
            400, "%s must be an integer from %d to %d, got %r" % (knob, low, high, str(value)[:50])
        ) from None
    if not low <= n <= high:
        raise AgentError(400, "%s must be from %d to %d, got %d" % (knob, low, high, n))
    return n


def check_knobs(
    threads: Any = None, providers: Any = None, warmup: Any = None, runs: Any = None, timeout_s: Any = None
) -> Tuple[Optional[int], Optional[List[str]], Optional[int], Optional[int], Optional[float]]:
    """Validate request knobs; returns them normalised. Every bound is documented in openapi.json."""
    threads = _int("threads", threads, 1, max_threads()) if threads not in (None, 0) else None
    if providers is not None:
        if (
            not isinstance(providers, list)
            or len(providers) > 16
            or not all(isinstance(p, str) and 0 < len(p) <= 128 for p in providers)
        ):
            raise AgentError(400, "providers must be a list of at most 16 accelerator names (strings)")
        providers = providers or None
    warmup = _int("warmup", warmup, 0, MAX_WARMUP)
    runs = _int("runs", runs, 1, MAX_RUNS)
    if timeout_s is not None:
        try:
            if isinstance(timeout_s, bool):
                raise ValueError
            timeout_s = float(timeout_s)
        except (TypeError, ValueError):
            raise AgentError(400, "timeout_s must be a number of seconds, got %r" % str(timeout_s)[:50]) from None
        if not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
            raise AgentError(400, "timeout_s must be a finite number of seconds in (0, %d]" % MAX_TIMEOUT_S)
    return threads, providers, warmup, runs, timeout_s
