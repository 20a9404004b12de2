"""Benchmark a bundle where it runs: init, first inference, warm-up, timed runs, memory.

Timings use ``time.perf_counter``; warm-up runs are excluded from the statistics;
peak RSS is the process's high-water mark (``VmHWM``), so a benchmark runs in a fresh
process (the one-shot ``bench`` command) to measure one model alone.
"""

import json
import math
import os
import platform
import socket
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

from . import taskcheck


def percentile(sorted_values: List[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats(values_ms: List[float]) -> Dict[str, Any]:
    v = sorted(values_ms)
    n = len(v)
    mean = sum(v) / n
    var = sum((x - mean) ** 2 for x in v) / (n - 1) if n > 1 else 0.0
    return {
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "p99": percentile(v, 99),
        "mean": mean,
        "min": v[0],
        "max": v[-1],
        "stdev": math.sqrt(var),
        "iqr": percentile(v, 75) - percentile(v, 25),
    }


def _proc_status(key: str) -> Optional[float]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_mb() -> Optional[float]:
    return _proc_status("VmRSS")


def peak_rss_mb() -> Optional[float]:
    peak = _proc_status("VmHWM")
    if peak is None:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak / (1024.0 * 1024.0) if platform.system() == "Darwin" else peak / 1024.0
    return peak


def device_info() -> Dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def load_inputs(bundle_dir: str, manifest: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """The bundle's real sample (``sample_inputs.npz``) if it has one, else random data."""
    import numpy as np

    path = os.path.join(bundle_dir, "sample_inputs.npz")
    if os.path.isfile(path):
        with np.load(path, allow_pickle=False) as z:
            feeds = dict((k, z[k]) for k in z.files)
        return feeds, bool(manifest.get("sample_inputs_synthetic", False))
    rng = np.random.RandomState(0)
    feeds = {}
    for s in manifest["inputs"]:
        shape = [d if isinstance(d, int) else 1 for d in s["shape"]]
        feeds[s["name"]] = (
            rng.standard_normal(shape).astype(s["dtype"])
            if s["dtype"].startswith("float")
            else rng.randint(0, 10, shape).astype(s["dtype"])
        )
    return feeds, True


def compare_expected(
    bundle_dir: str, outputs: Dict[str, Any], min_cosine: float = 0.99, task: Optional[Dict[str, Any]] = None
) -> Optional[Dict[str, Any]]:
    """The device's outputs for the bundle's sample against what the build machine computed with the same
    model file: catches runtimes that quietly compute garbage (kernels for another CPU, broken delegates).

    With the build's ``task`` (the manifest's), the decoded answers decide (:mod:`edgekit_agent.taskcheck`:
    boxes after NMS, the mask at its threshold, the CTC string...) instead of the cosine; NaN/Inf and missing or
    resized outputs always fail."""
    import numpy as np

    path = os.path.join(bundle_dir, "expected_outputs.npz")
    if not os.path.isfile(path):
        return None
    worst_cos, worst_abs, problems = 1.0, 0.0, []
    pairs = []
    with np.load(path, allow_pickle=False) as z:
        for name in z.files:
            want = z[name].astype(np.float64).ravel()
            if name not in outputs:
                problems.append("output %s missing" % name)
                continue
            got = np.asarray(outputs[name]).astype(np.float64).ravel()
            if got.shape != want.shape:
                problems.append("output %s has %d values, expected %d" % (name, got.size, want.size))
                continue
            if not np.all(np.isfinite(got)):
                problems.append("output %s has NaN/Inf" % name)
                continue
            na, nb = np.linalg.norm(got), np.linalg.norm(want)
            cos = 1.0 if na == nb == 0 else (float(np.dot(got, want) / (na * nb)) if na and nb else 0.0)
            worst_cos = min(worst_cos, cos)
            worst_abs = max(worst_abs, float(np.max(np.abs(got - want))) if got.size else 0.0)
            if z[name].dtype.kind == "f":
                shape = list(z[name].shape)
                pairs.append((name, (want.tolist(), shape), (got.tolist(), shape)))
    result = {"cosine": worst_cos, "max_abs": worst_abs, "min_cosine": min_cosine}  # type: Dict[str, Any]
    judged = False
    if not problems and task is not None and taskcheck.supported(task) and pairs:
        chosen = task.get("params", {}).get("output")
        pairs.sort(key=lambda p: p[0] != chosen)
        try:
            name, value, minimum = taskcheck.score(task, [p[1] for p in pairs], [p[2] for p in pairs])
        except (ValueError, IndexError, ZeroDivisionError) as e:
            result["task_check"] = "not used (%s): %s" % (task.get("spec"), e)
        else:
            judged = True
            result["task"] = {"task": task.get("spec"), "metric": name, "value": value, "min": minimum}
            if value < minimum:
                problems.append(
                    "task %s: %s %.4f < %s (the decoded answers differ from the build machine's)"
                    % (task.get("spec"), name, value, minimum)
                )
    if not judged and worst_cos < min_cosine:
        problems.append("cosine %.6f to the build machine's outputs (< %s)" % (worst_cos, min_cosine))
    result["passed"] = not problems
    result["detail"] = "; ".join(problems) or "matches the build machine's outputs" + (
        " (%s %.4f)" % (result["task"]["metric"], result["task"]["value"]) if judged else ""
    )
    return result


def bench_shapes(runner: Any, bundle_dir: str, runs: int, warmup: int) -> List[Dict[str, Any]]:
    """Timings at each declared shape the build checked besides the sample's (``shape_samples.npz``, keys
    ``LABEL.INPUT``): ``[{"label", "shapes", "runs", "latency_ms"}]``, or [] for a bundle of one shape."""
    import numpy as np

    path = os.path.join(bundle_dir, "shape_samples.npz")
    if not os.path.isfile(path):
        return []
    points = OrderedDict()  # type: OrderedDict
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            label, _, name = key.partition(".")
            points.setdefault(label, {})[name] = z[key]
    out = []
    for label, feeds in points.items():
        for _ in range(max(0, warmup)):
            runner.run(feeds)
        times = []
        for _ in range(max(1, runs)):
            t0 = time.perf_counter()
            runner.run(feeds)
            times.append((time.perf_counter() - t0) * 1000.0)
        shapes = dict((k, list(v.shape)) for k, v in feeds.items())
        out.append({"label": label, "shapes": shapes, "runs": len(times), "latency_ms": stats(times)})
    return out


def run_bench(
    bundle_dir: str,
    manifest: Dict[str, Any],
    runs: int = 100,
    warmup: int = 10,
    threads: Optional[int] = None,
    providers: Optional[List[str]] = None,
    placement: bool = True,
) -> Dict[str, Any]:
    import sys

    from . import runners
    from .variants import VariantRunner, make_runner

    runner_cls = runners.get(manifest["backend"])
    if runner_cls.runtime_version() is None:
        raise runners.RuntimeMissing(
            "%s is not installed for this device's Python (%s): %s"
            % (runner_cls.runtime, sys.executable, runner_cls.install_hint)
        )
    runner = make_runner(runner_cls, bundle_dir, manifest, threads=threads, providers=providers)
    feeds, synthetic = load_inputs(bundle_dir, manifest)
    rss_before = rss_mb()
    runner.load()
    t0 = time.perf_counter()
    first_outputs = runner.run(feeds)
    first_ms = (time.perf_counter() - t0) * 1000.0
    for _ in range(max(0, warmup)):
        runner.run(feeds)
    times = []
    clock = time.perf_counter
    for _ in range(max(1, runs)):
        t0 = clock()
        runner.run(feeds)
        times.append((clock() - t0) * 1000.0)
    report = {
        "schema": "edgekit.bench-report",
        "schema_version": 1,
        "name": manifest.get("name"),
        "bundle_id": manifest.get("id"),
        "backend": manifest["backend"],
        "precision": manifest.get("precision"),
        "profile": manifest.get("profile"),
        "init_ms": runner.load_ms,
        "first_inference_ms": first_ms,
        "warmup": warmup,
        "runs": len(times),
        "latency_ms": stats(times),
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_load_mb": rss_before,
        "inputs_synthetic": synthetic,
        "input_shapes": dict((k, list(getattr(v, "shape", ()))) for k, v in feeds.items()),
        "device": device_info(),
        "measured_by": "edgekit-agent one-shot bench (fresh process)",
    }
    report.update(runner.describe())
    if isinstance(runner, VariantRunner):
        runner.load_all()  # one model per declared shape: each is timed at its shape below
    by_shape = bench_shapes(runner, bundle_dir, runs, warmup)
    if by_shape:
        report["by_shape"] = by_shape
    check = compare_expected(bundle_dir, first_outputs, task=manifest.get("task"))
    if check is not None:
        report["device_fidelity"] = check
        if not check["passed"]:
            report["warnings"] = report.get("warnings", []) + [
                "the device's outputs differ from the build machine's for the same model and input: " + check["detail"]
            ]
    if placement:
        counts = runner.placement(feeds)
        if counts:
            report["placement"] = counts
            report["accelerator"] = max(counts.items(), key=lambda kv: kv[1])[0]
    runner.close()
    return report


def main_bench(
    bundle_dir: str,
    runs: int,
    warmup: int,
    threads: Optional[int],
    providers: Optional[List[str]],
    as_json: bool,
    placement: bool = True,
) -> int:
    with open(os.path.join(bundle_dir, "manifest.json")) as f:
        manifest = json.load(f)
    report = run_bench(bundle_dir, manifest, runs, warmup, threads, providers, placement)
    if as_json:
        print(json.dumps(report))
    else:
        lat = report["latency_ms"]
        print(
            "%s on %s (%s, %d threads): p50 %.3f ms, p90 %.3f, p99 %.3f, init %.1f ms, first %.2f ms, peak RSS %.1f MB"
            % (
                report["name"],
                report["accelerator"],
                report["runtime_version"],
                report["threads"],
                lat["p50"],
                lat["p90"],
                lat["p99"],
                report["init_ms"],
                report["first_inference_ms"],
                report["peak_rss_mb"],
            )
        )
    return 0
