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
"""

import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import bundle as bundle_mod
from . import converters, profiles, progress
from .errors import EdgekitError, FidelityError, ProfileError
from .report import write_report

SLOWER = 0.95  # measured below 0.95x its parent's speed: rejected as slower
DEFAULT_PRUNE_LEVELS = (0.0, 0.25)
NEEDS_CALIB = ("int8",)


def plan(profile, backends=None, precisions=None, prune_levels=DEFAULT_PRUNE_LEVELS, have_calib=False):
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


def _label(c):
    return f"{c['backend']}-{c['precision']}" + (f"-p{round(c['prune'] * 100)}" if c["prune"] else "")


def _quality(report):
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


def _build_all(model, prof, cands, workdir, build_kwargs, jobs, log):
    from .builder import build

    def one(c):
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

        def counted(c):
            try:
                return one(c)
            finally:
                step.advance()

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(counted, cands))


def _measure(built, device_url, prof, runs, warmup, rounds, device_python, device_root, log):
    """Deploy every built candidate, then benchmark them round-robin so drift hits all alike.

    One connection to the device serves every candidate; only on the local machine does a
    backend whose runtime lives in a tool environment get its own agent (its own Python).
    Candidates are removed from the device afterwards (the winner is deployed by the user).
    """
    from .deployer import deploy, open_device
    from .transports import parse_url

    kind, target, opts = parse_url(device_url)
    devices = {}

    def device_for(c):
        key = c["backend"] if kind == "local" else "-"
        if key not in devices:
            devices[key] = open_device(
                kind,
                target,
                profile=prof,
                device_python=device_python,
                device_root=device_root,
                backend=c["backend"] if kind == "local" else None,
                **opts,
            )
        return devices[key]

    description = device_url
    prog = progress.of(log)
    try:
        deploying = prog.step(f"--auto: deploying {len(built)} candidates", total=len(built))
        for c in built:
            deploying.advance()
            try:
                dev = device_for(c)
                description = dev.transport.description
                deploy(c["bundle"], dev, bench=False)
                c["deployed_to"] = dev
            except EdgekitError as e:
                c.update(status="failed", reason=f"deploy failed: {e}")
        deploying.done()
        p50s = {c["label"]: [] for c in built}
        last = {}
        measuring = prog.step(f"--auto: benchmarking on {device_url}", total=rounds * len(built))
        for r in range(rounds):
            for c in built:
                measuring.advance()
                if c["status"] != "built":
                    continue  # failed in an earlier round: not measured again
                try:
                    rep = c["deployed_to"].bench(c["name"], runs=runs, warmup=warmup)
                except EdgekitError as e:
                    c.update(status="failed", reason=f"benchmark failed on the device: {e}")
                    continue
                p50s[c["label"]].append(rep["latency_ms"]["p50"])
                last[c["label"]] = rep
            log(f"  round {r + 1}/{rounds} measured")
        measuring.done()
        for c in built:
            if c["status"] != "built" or not p50s[c["label"]]:
                continue
            rep = last[c["label"]]
            vals = p50s[c["label"]]
            c.update(
                status="measured",
                p50_ms=round(statistics.median(vals), 4),
                p50_range_ms=[round(min(vals), 4), round(max(vals), 4)],
                p90_ms=rep["latency_ms"].get("p90"),
                accelerator=rep.get("accelerator"),
                runtime=f"{rep.get('backend', c['backend'])} {rep.get('runtime_version', '')}".strip(),
                threads=rep.get("threads"),
            )
        for c in built:
            dev = c.pop("deployed_to", None)
            if dev is not None:
                try:
                    dev.remove(c["name"])
                except EdgekitError as e:
                    log(f"  could not remove candidate {c['name']} from the device: {e}")
        return description
    finally:
        for c in built:
            c.pop("deployed_to", None)
        for dev in devices.values():
            dev.close()


def _parent(c, by_key):
    if c["prune"]:
        return by_key.get((c["backend"], c["precision"], 0.0))
    if c["precision"] != "fp32":
        return by_key.get((c["backend"], "fp32", 0.0))
    return None


def _dominates(a, b):
    qa, qb = a.get("quality") or 0.0, b.get("quality") or 0.0
    no_worse = a["p50_ms"] <= b["p50_ms"] and a["size_bytes"] <= b["size_bytes"] and qa >= qb
    better = a["p50_ms"] < b["p50_ms"] or a["size_bytes"] < b["size_bytes"] or qa > qb
    return no_worse and better


def choose(cands):
    """Reject compressions measured slower than their parent; return ``(front, winner, reason)``."""
    by_key = {(c["backend"], c["precision"], c["prune"]): c for c in cands if c["status"] == "measured"}
    for c in list(by_key.values()):
        parent = _parent(c, by_key)
        if parent is not None:
            c["speedup_vs_parent"] = round(parent["p50_ms"] / c["p50_ms"], 3)
            if c["speedup_vs_parent"] < SLOWER:
                c.update(
                    status="rejected",
                    reason=f"measured slower than its parent {parent['label']} on the device "
                    f"({c['p50_ms']:.3f} vs {parent['p50_ms']:.3f} ms p50)",
                )
    alive = [c for c in cands if c["status"] == "measured"]
    if not alive:
        return [], None, "no candidate passed fidelity and ran on the device"
    front = [c for c in alive if not any(_dominates(o, c) for o in alive if o is not c)]
    for c in front:
        c["pareto"] = True
    fastest = min(front, key=lambda c: c["p50_ms"])
    # within the measurement's noise of the fastest (5 %), prefer the smaller model
    close = [c for c in front if c["p50_ms"] <= fastest["p50_ms"] / SLOWER]
    winner = min(close, key=lambda c: (c["size_bytes"], c["p50_ms"]))
    base = by_key.get((winner["backend"], "fp32", 0.0))
    if winner is fastest:
        lead = f"fastest on the device among the {len(alive)} candidates that kept fidelity"
    else:
        lead = (
            f"the smallest of the front's candidates within 5 % of the fastest ({fastest['label']}, "
            f"{fastest['p50_ms']:.3f} ms) on the device, among {len(alive)} that kept fidelity"
        )
    reason = f"{winner['label']}: {lead} ({winner['p50_ms']:.3f} ms p50"
    if base is not None and base is not winner:
        reason += f", {base['p50_ms'] / winner['p50_ms']:.2f}x {base['label']}"
    reason += f"; {winner['size_bytes'] / 1024:.0f} KB; {winner['quality_metric']} {winner['quality']})"
    return front, winner, reason


def auto_build(
    model,
    profile,
    output,
    device="local://",
    calib=None,
    val=None,
    preprocess=None,
    input_shapes=None,
    name=None,
    budget=None,
    backends=None,
    precisions=None,
    prune_levels=DEFAULT_PRUNE_LEVELS,
    jobs=None,
    runs=50,
    warmup=5,
    rounds=3,
    device_python=None,
    device_root=None,
    use_cache=True,
    log=None,
    **gates,
):
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
        c["label"] = _label(c)
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
    _build_all(model, prof, cands, workdir, build_kwargs, jobs, log)
    built = [c for c in cands if c["status"] == "built"]
    log(f"--auto: {len(built)} of {len(cands)} kept fidelity; measuring them on {device}")
    description = (
        _measure(built, device, prof, runs, warmup, rounds, device_python, device_root, log) if built else device
    )
    front, winner, reason = choose(cands)
    if winner is None:
        raise FidelityError(
            f"--auto found nothing to ship for {prof.name}: "
            + "; ".join(f"{c['label']}: {c.get('reason', c['status'])}" for c in cands)
        )

    def as_winner(staged):
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


def auto_text(report):
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
