"""``--auto``'s candidates: the grid a profile supports and this machine can build, built in parallel."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import converters, profiles, progress
from .errors import EdgekitError, FidelityError, ProfileError

DEFAULT_PRUNE_LEVELS = (0.0, 0.25)
NEEDS_CALIB = ("int8",)
Candidate = dict[str, Any]


def plan(
    profile: profiles.Profile | str,
    backends: list[str] | None = None,
    precisions: list[str] | None = None,
    prune_levels: tuple[float, ...] | list[float] = DEFAULT_PRUNE_LEVELS,
    have_calib: bool = False,
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """``(candidates, skipped)``: the grid the profile supports and this machine can build."""
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load(profile)
    ranked = prof.data["runtimes"]["ranked"]
    available = converters.all_backends()
    if backends:
        unknown = [b for b in backends if b not in ranked]
        if unknown:
            raise ProfileError(f"profile {prof.name} does not run {', '.join(unknown)}; it runs: {', '.join(ranked)}")
        ranked = [b for b in ranked if b in backends]
    candidates, skipped = [], []
    for name in ranked:
        be = available.get(name)
        if be is None:
            skipped.append({"backend": name, "reason": "this edgekit has no such backend"})
            continue
        ok, detail = be.availability()
        if not ok:
            skipped.append({"backend": name, "reason": f"not usable here: {detail}"})
            continue
        listed = prof.data["runtimes"].get(name, {}).get("precisions") or list(be.precisions)
        wanted = [p for p in (precisions or listed) if p in be.precisions]
        if "fp32" in be.precisions and "fp32" not in wanted:
            wanted.insert(0, "fp32")  # every compression is measured against its parent
        for precision in wanted:
            if precision in NEEDS_CALIB and not have_calib:
                skipped.append({"backend": name, "precision": precision, "reason": "needs --calib data"})
                continue
            for prune in prune_levels:
                candidates.append({"backend": name, "precision": precision, "prune": float(prune)})
    if not candidates:
        raise ProfileError(
            f"no candidate can be built for {prof.name} here: "
            + "; ".join(f"{s['backend']}: {s['reason']}" for s in skipped)
        )
    return candidates, skipped


def label(c: Candidate) -> str:
    """A candidate's label: ``backend-precision`` and ``-pNN`` when pruned."""
    return f"{c['backend']}-{c['precision']}" + (f"-p{round(c['prune'] * 100)}" if c["prune"] else "")


def _quality(report: dict[str, Any]) -> tuple[str | None, float | None]:
    """``(metric name, value)`` of the final fidelity step: accuracy where labels exist, else cosine mean."""
    steps = report.get("fidelity", {}).get("steps") or []
    if not steps:
        return None, None
    outs = steps[-1]["outputs"]
    accs = [m["accuracy"] for m in outs.values() if "accuracy" in m]
    if accs:
        return "accuracy", round(min(accs), 3)
    coss = [m["cosine_mean"] for m in outs.values() if "cosine_mean" in m]
    return ("cosine", round(min(coss), 6)) if coss else (None, None)


def build_all(
    model: str | Path,
    prof: profiles.Profile,
    cands: list[Candidate],
    workdir: Path,
    build_kwargs: dict[str, Any],
    jobs: int,
    log: Callable[[str], Any],
) -> list[Candidate]:
    """Build every candidate into ``workdir/<label>``, ``jobs`` at a time; each gets its status (built, dropped
    for failing fidelity, failed) and, when built, its bundle, size and quality."""
    from .builder import build

    def one(c: Candidate) -> Candidate:
        out = workdir / c["label"]
        kwargs = dict(build_kwargs)
        if c["precision"] != "int8" or not kwargs.get("budget"):
            kwargs.pop("budget", None)
        t0 = time.perf_counter()
        try:
            report = build(
                model,
                prof,
                out,
                backend=c["backend"],
                precision=c["precision"],
                prune=c["prune"] or None,
                name=c["name"],
                log=lambda m: None,
                **kwargs,
            )
        except FidelityError as e:
            c.update(status="dropped", reason=f"failed fidelity: {e}")
            return c
        except EdgekitError as e:
            c.update(status="failed", reason=str(e))
            return c
        c.update(
            status="built",
            bundle=str(out),
            size_bytes=report["model_size_bytes"],
            build_seconds=round(time.perf_counter() - t0, 2),
            cache_hit=report["cache"]["hit"],
        )
        c["quality_metric"], c["quality"] = _quality(report)
        log(
            f"  built {c['label']}: {c['size_bytes'] / 1024:.0f} KB, {c['quality_metric']} {c['quality']}"
            + (" (cached)" if c["cache_hit"] else "")
        )
        return c

    with progress.of(log).step(f"--auto: building {len(cands)} candidates", total=len(cands)) as step:

        def counted(c: Candidate) -> Candidate:
            try:
                return one(c)
            finally:
                step.advance()

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(counted, cands))
