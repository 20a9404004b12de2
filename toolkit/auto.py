"""``edgekit build --auto``: build every candidate the profile supports, measure the ones
that keep fidelity on the device, and keep the Pareto front of latency, size and accuracy.

    candidates = backend x precision x pruning level   (what the profile lists and this machine can build)
      -> build in parallel (the build cache makes a second run cheap)
      -> drop what fails fidelity (the same gate as a single build)
      -> deploy the survivors to the device, benchmark them there in interleaved rounds
      -> reject a compression measured slower than its parent (same backend, fp32 / unpruned)
      -> Pareto front (p50 latency, model size, accuracy or cosine) -> the winner, and why

The winner's bundle is written to OUTPUT under the model's own name; every candidate's
bundle stays in ``OUTPUT-candidates/``. Nothing is decided by a rule of thumb: a candidate
is rejected only because it failed fidelity or was measured slower.

The steps: :mod:`.auto_candidates` (plan, build), :mod:`.auto_measure` (deploy, benchmark through
:func:`edgekit.execution.on_device`), :mod:`.auto_choose` (the choice).
"""

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from . import bundle as bundle_mod
from . import profiles
from .auto_candidates import DEFAULT_PRUNE_LEVELS, NEEDS_CALIB, build_all, label, plan  # noqa: F401
from .auto_choose import SLOWER, choose  # noqa: F401
from .auto_measure import measure
from .errors import FidelityError, ProfileError
from .report import write_report


def auto_build(
    model: str | Path,
    profile: profiles.Profile | str,
    output: str | Path,
    device: str = "local://",
    calib: str | Path | None = None,
    val: str | Path | None = None,
    preprocess: str | None = None,
    input_shapes: dict[str, list[Any]] | list[str] | tuple[str, ...] | None = None,
    name: str | None = None,
    budget: str | None = None,
    backends: list[str] | None = None,
    precisions: list[str] | None = None,
    prune_levels: tuple[float, ...] | list[float] = DEFAULT_PRUNE_LEVELS,
    jobs: int | None = None,
    runs: int = 50,
    warmup: int = 5,
    rounds: int = 3,
    device_python: str | None = None,
    device_root: str | None = None,
    use_cache: bool = True,
    log: Callable[[str], Any] | None = None,
    **gates: Any,
) -> dict[str, Any]:
    """Build the candidate grid, measure it on ``device`` (a URL: local://, ssh://..., adb://...) and write
    the winner to ``output``; return the winner's build report with an ``auto`` section."""
    log = log or (lambda m: None)
    t0 = time.perf_counter()
    prof = profile if isinstance(profile, profiles.Profile) else profiles.load(profile)
    if prof.build_only:
        raise ProfileError(
            f"profile {prof.name} is build-only: --auto measures candidates on the device, "
            "which needs an edgekit agent there"
        )
    bundle_mod.check_output(output)
    from .model import load_model, parse_input_shapes

    if isinstance(input_shapes, (list, tuple)):
        input_shapes = parse_input_shapes(input_shapes)
    from .shape_hints import data_reader

    # a model every candidate would refuse is refused once, here
    load_model(model, input_shapes, data_reader([calib, val], preprocess), keep_dynamic=True)  # each build decides
    output = Path(output)
    base = name or Path(model).stem
    cands, skipped = plan(prof, backends, precisions, prune_levels, have_calib=bool(calib))
    for c in cands:
        c["label"] = label(c)
        c["name"] = f"{base}-{c['label']}"
        c["status"] = "planned"
    workdir = output.with_name(output.name + "-candidates")
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or max(1, min(len(cands), os.cpu_count() or 1))
    log(
        f"--auto: {len(cands)} candidates for {prof.name} ({', '.join(c['label'] for c in cands)}), {jobs} in parallel"
        + (
            "; skipped: "
            + ", ".join(s["backend"] + ("/" + s["precision"] if "precision" in s else "") for s in skipped)
            if skipped
            else ""
        )
    )
    build_kwargs = dict(
        calib=calib,
        val=val,
        preprocess=preprocess,
        input_shapes=input_shapes,
        budget=budget,
        use_cache=use_cache,
        **gates,
    )
    build_all(model, prof, cands, workdir, build_kwargs, jobs, log)
    built = [c for c in cands if c["status"] == "built"]
    log(f"--auto: {len(built)} of {len(cands)} kept fidelity; measuring them on {device}")
    description = (
        measure(built, device, prof, runs, warmup, rounds, device_python, device_root, log) if built else device
    )
    front, winner, reason = choose(cands)
    if winner is None:
        raise FidelityError(
            f"--auto found nothing to ship for {prof.name}: "
            + "; ".join(f"{c['label']}: {c.get('reason', c['status'])}" for c in cands)
        )

    def as_winner(staged: Path) -> dict[str, Any]:
        manifest = bundle_mod.load(staged)
        manifest["name"] = base  # the version id does not depend on the name: the files are the same
        bundle_mod.write_json(staged / bundle_mod.MANIFEST, manifest)
        report = json.loads((staged / bundle_mod.REPORT_JSON).read_text())
        report["name"] = base
        report["output"] = str(output)
        report["auto"] = {
            "device": description,
            "winner": winner["label"],
            "reason": reason,
            "measurement": {
                "runs": runs,
                "warmup": warmup,
                "rounds": rounds,
                "note": "p50 is the median of the rounds' p50s; candidates were measured round-robin",
            },
            "candidates": [
                {
                    k: c.get(k)
                    for k in (
                        "label",
                        "backend",
                        "precision",
                        "prune",
                        "status",
                        "reason",
                        "size_bytes",
                        "quality_metric",
                        "quality",
                        "p50_ms",
                        "p50_range_ms",
                        "p90_ms",
                        "speedup_vs_parent",
                        "accelerator",
                        "runtime",
                        "threads",
                        "pareto",
                        "bundle",
                        "cache_hit",
                    )
                }
                for c in cands
            ],
            "skipped": skipped,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        write_report(staged, report)
        return report

    return bundle_mod.publish_copy(winner["bundle"], output, as_winner)


def auto_text(report: dict[str, Any]) -> str:
    """The text form of an ``--auto`` report: every candidate, the front, the winner and why."""
    a = report["auto"]
    lines = [
        f"--auto on {a['device']} ({a['measurement']['rounds']} rounds x {a['measurement']['runs']} runs, "
        f"{a['seconds']} s)",
        f"{'candidate':<28} {'status':<9} {'size KB':>8} {'quality':>16} {'p50 ms':>9} {'range':>17} {'vs parent':>9}",
    ]
    for c in a["candidates"]:
        q = f"{c['quality_metric'][:3]} {c['quality']}" if c.get("quality") is not None else "-"
        size = f"{c['size_bytes'] / 1024:.0f}" if c.get("size_bytes") else "-"
        p50 = f"{c['p50_ms']:.3f}" if c.get("p50_ms") else "-"
        rng = f"{c['p50_range_ms'][0]:.3f}-{c['p50_range_ms'][1]:.3f}" if c.get("p50_range_ms") else "-"
        sp = f"{c['speedup_vs_parent']:.2f}x" if c.get("speedup_vs_parent") else "-"
        mark = "*" if c["label"] == a["winner"] else ("+" if c.get("pareto") else " ")
        lines.append(f"{mark}{c['label']:<27} {c['status']:<9} {size:>8} {q:>16} {p50:>9} {rng:>17} {sp:>9}")
        if c.get("reason") and c["status"] != "measured":
            lines.append(f"   {c['reason'][:150]}")
    for s in a["skipped"]:
        lines.append(
            f" skipped {s['backend']}" + (f" {s['precision']}" if "precision" in s else "") + f": {s['reason'][:120]}"
        )
    lines.append("* winner, + Pareto front (latency, size, quality)")
    lines.append(f"winner: {a['reason']}")
    lines.append(f"written to {report['output']}; every candidate is in {report['output']}-candidates/")
    return "\n".join(lines) + "\n"
