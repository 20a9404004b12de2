"""Timing a built model against its FP32 reference on this machine (the target of the ``host`` profile).

The two are run interleaved, round by round, after a warm-up, and each round's median is kept; the result is the
median over rounds, with the runtimes and threads that really ran written beside it.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

SLOWER = 0.95  # a shrunk build under 0.95x the reference's speed counts as measured slower


def time_on_host(
    be: Any,
    reference_path: Path,
    built_path: Path,
    feed: Dict[str, Any],
    threads: Optional[int],
    rounds: int = 3,
    runs: int = 30,
    session: Any = None,
) -> Dict[str, Any]:
    """Interleaved p50s of the reference and the built model on this machine; median over rounds."""
    ref = be.runner(reference_path, threads, session=session)
    try:
        built = be.runner(built_path, threads, session=session)
        try:
            measured = _interleaved(ref, built, feed, rounds, runs)
        finally:
            getattr(built, "close", lambda: None)()  # runners holding a worker process or a temporary build
    finally:
        getattr(ref, "close", lambda: None)()
    r, b = measured
    return {
        "reference_p50_ms": round(r, 4),
        "built_p50_ms": round(b, 4),
        "speedup": round(r / b, 3),
        "runtimes": {
            "reference": getattr(ref, "runtime", None) or be.runtime,
            "built": getattr(built, "runtime", None) or be.runtime,
        },
        "threads": threads,
        "rounds": rounds,
        "runs_per_round": runs,
        "note": "measured on the build machine, which is the target for the host profile",
    }


def _interleaved(
    ref: Callable[[Dict[str, Any]], Any],
    built: Callable[[Dict[str, Any]], Any],
    feed: Dict[str, Any],
    rounds: int,
    runs: int,
) -> Tuple[float, float]:
    for fn in (ref, built):
        for _ in range(5):
            fn(feed)
    p50: Dict[str, list] = {"ref": [], "built": []}
    for _ in range(rounds):
        for key, fn in (("ref", ref), ("built", built)):
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                fn(feed)
                times.append((time.perf_counter() - t0) * 1000)
            p50[key].append(statistics.median(times))
    return statistics.median(p50["ref"]), statistics.median(p50["built"])
