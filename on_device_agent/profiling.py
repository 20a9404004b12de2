"""Per-layer profile of a bundle where it runs: each runtime's own profiler, per node (or fused kernel).

One function per runtime reads what that runtime measures itself:

- ONNX Runtime: ``SessionOptions.enable_profiling`` and the trace ``end_profiling()`` writes (node events:
  ``op_name``, ``provider``, ``dur`` in microseconds, ``input_type_shape``);
- OpenVINO: ``PERF_COUNT`` and ``InferRequest.get_profiling_info()`` (executed nodes' ``real_time`` and
  ``exec_type``), with input shapes and the fused layers from the compiled runtime model;
- MNN: ``Interpreter.runSessionWithCallBackInfo``, the wall time between each operator's before and after
  callbacks (it includes the callbacks' own Python overhead);
- LiteRT, Paddle Lite, MindSpore Lite: their Python APIs expose no per-operator timing; the report says
  "not available from <runtime> <version>" and why, with the end-to-end latency and memory still measured.

Each node's time is its median over the profiled runs. The end-to-end latency comes from the same number of
runs without the profiler, so ``node_sum_ratio`` (sum of the nodes' medians / end-to-end median) shows what
the profiler leaves out (input and output copies, scheduling) or adds (its own overhead).

Memory: the process's peak RSS after loading and after the plain runs (before a profiled session is made),
and the size of the bundle's model and weight files. Run in a fresh process (``edgekit-agent profile``, as
:func:`edgekit_agent.childproc.one_shot_profile` does) so neither a profiler nor its memory touches serving.

Python 3.7 syntax, stdlib only; runtimes are imported by the runners.
"""

import json
import os
import re
import shutil
import tempfile
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple

from .bench import device_info, load_inputs, peak_rss_mb, rss_mb, stats

SCHEMA = "edgekit.profile/1"
MAX_RUNS = 200


class NotAvailable(Exception):
    """The runtime exposes no per-node timing here; the message says which runtime and why."""


def median(values: List[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def _node(
    name: str, op: str, accelerator: str, times_ms: List[float], shapes: Any, precision: Optional[str]
) -> Dict[str, Any]:
    return {
        "name": name,
        "op": op,
        "accelerator": accelerator,
        "time_ms": median(times_ms),
        "runs": len(times_ms),
        "input_shapes": shapes,
        "precision": precision,
    }


# -- ONNX Runtime --------------------------------------------------------------------------------------------
def parse_ort_trace(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """ORT's profiling trace -> nodes in execution order with the median over runs (a node that runs more than
    once in a run, e.g. in a loop, counts the sum of that run). Runs are told apart by the ``model_run`` events."""
    runs = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("name") == "model_run")
    per_node = OrderedDict()  # type: OrderedDict
    for e in events:
        args = e.get("args") or {}
        name = e.get("name") or ""
        if e.get("cat") != "Node" or not name.endswith("_kernel_time") or "provider" not in args:
            continue
        node = name[: -len("_kernel_time")]
        run = next((i for i, (a, b) in enumerate(runs) if a <= e.get("ts", 0) <= b), -1)
        rec = per_node.setdefault(node, {"args": args, "by_run": OrderedDict()})
        rec["by_run"][run] = rec["by_run"].get(run, 0.0) + float(e.get("dur", 0)) / 1000.0
    out = []
    for node, rec in per_node.items():
        args = rec["args"]
        shapes = []  # type: List[Any]
        precision = None
        for item in args.get("input_type_shape") or []:
            for dtype, shape in item.items():
                shapes.append(shape)
                precision = precision or dtype
        out.append(
            _node(node, args.get("op_name", ""), args["provider"], list(rec["by_run"].values()), shapes, precision)
        )
    return out


def profile_ort(runner: Any, feeds: Dict[str, Any]) -> Tuple[Callable[[], Any], Callable[[int], Any]]:
    ort = runner._ort()
    tmp = tempfile.mkdtemp(prefix="edgekit-prof-")
    try:
        sess = ort.InferenceSession(
            runner.model_path(),
            sess_options=runner._session_options(ort, os.path.join(tmp, "p")),
            providers=runner.providers,
            **({"disabled_optimizers": ["ConstantFolding"]} if getattr(runner, "folding_disabled", False) else {}),
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    def finish(runs: int) -> Tuple[List[Dict[str, Any]], str]:
        try:
            with open(sess.end_profiling()) as f:
                events = json.load(f)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
        if len(model_runs) > runs:  # the warm-up runs are in the same trace: keep the nodes of the timed runs
            t0 = model_runs[-runs]["ts"]
            events = [e for e in events if e.get("ts", 0) >= t0]
        return parse_ort_trace(events), "onnxruntime %s SessionOptions.enable_profiling (kernel time)" % runner.version

    return lambda: sess.run(None, feeds), finish


# -- OpenVINO ------------------------------------------------------------------------------------------------
def _exec_precision(exec_type: str) -> Optional[str]:
    """``jit_avx2_FP32`` / ``brgconv_avx2_f32`` -> ``FP32`` / ``F32``; None when the kernel name carries none."""
    tail = exec_type.rsplit("_", 1)[-1].upper()
    return tail if re.match(r"^(FP|F|BF|I|U)\d+$", tail) else None


def parse_ov_counters(
    per_run: List[List[Dict[str, Any]]], device: str, layers: Optional[Dict[str, Dict[str, Any]]] = None
) -> List[Dict[str, Any]]:
    """OpenVINO's profiling info of each run (``[{node_name, node_type, exec_type, real_time_ms, status}]``) ->
    executed nodes with the median ``real_time`` over runs; ``layers``: the runtime model's input shapes and
    the original layers fused into each node, by name."""
    times = OrderedDict()  # type: OrderedDict
    for run in per_run:
        for c in run:
            if str(c["status"]).upper().rsplit(".", 1)[-1] != "EXECUTED":
                continue  # NOT_RUN, OPTIMIZED_OUT
            rec = times.setdefault(c["node_name"], {"c": c, "t": []})
            rec["t"].append(float(c["real_time_ms"]))
    out = []
    for name, rec in times.items():
        c = rec["c"]
        extra = (layers or {}).get(name, {})
        precision = extra.get("precision") or _exec_precision(c["exec_type"])
        node = _node(name, c["node_type"], device, rec["t"], extra.get("input_shapes"), precision)
        node["kernel"] = c["exec_type"]
        if extra.get("fused"):
            node["fused"] = extra["fused"]
        out.append(node)
    return out


def _ov_layers(compiled: Any) -> Dict[str, Dict[str, Any]]:
    """Input shapes and ``originalLayersNames`` of each node of the compiled (runtime) model, by name."""
    out = {}  # type: Dict[str, Dict[str, Any]]
    try:
        ops = compiled.get_runtime_model().get_ordered_ops()
    except Exception:  # a plugin without a runtime model: shapes unknown
        return out
    for op in ops:
        shapes = []  # type: List[Any]
        for port in op.inputs():
            try:
                shapes.append([int(d) for d in port.get_shape()])
            except Exception:  # dynamic
                shapes.append(str(port.get_partial_shape()))
        rt = op.get_rt_info()
        fused = rt["originalLayersNames"].astype(str) if "originalLayersNames" in rt else ""
        precision = rt["runtimePrecision"].astype(str) if "runtimePrecision" in rt else None
        fused_list = [n for n in fused.split(",") if n and n != op.get_friendly_name()]
        out[op.get_friendly_name()] = {"input_shapes": shapes, "fused": fused_list, "precision": precision}
    return out


def profile_openvino(runner: Any, feeds: Dict[str, Any]) -> Tuple[Callable[[], Any], Callable[[int], Any]]:
    compiled = runner.core.compile_model(
        runner.model_path(), runner.device, runner._config(runner.core, runner.device, perf_count=True)
    )
    request = compiled.create_infer_request()
    per_run = []  # type: List[List[Dict[str, Any]]]

    def run() -> None:
        request.infer(feeds)
        per_run.append(
            [
                {
                    "node_name": p.node_name,
                    "node_type": p.node_type,
                    "exec_type": p.exec_type,
                    "real_time_ms": p.real_time.total_seconds() * 1000.0,
                    "status": getattr(p.status, "name", str(p.status)),
                }
                for p in request.get_profiling_info()
            ]
        )

    def finish(runs: int) -> Tuple[List[Dict[str, Any]], str]:
        nodes = parse_ov_counters(per_run[-runs:], runner.active[0], _ov_layers(compiled))
        return nodes, "OpenVINO %s PERF_COUNT (InferRequest.get_profiling_info real_time)" % runner.version

    return run, finish


# -- MNN -----------------------------------------------------------------------------------------------------
def profile_mnn(runner: Any, feeds: Dict[str, Any]) -> Tuple[Callable[[], Any], Callable[[int], Any]]:
    model = runner.model
    if model.active != "CPU":
        raise NotAvailable(
            "not available from MNN %s on %s: its callbacks time operators on the host while a GPU backend "
            "runs asynchronously" % (runner.version, model.active)
        )
    clock = time.perf_counter
    per_run = []  # type: List[OrderedDict]
    started = {}  # type: Dict[str, float]

    def before(tensors: Any, info: Any) -> bool:
        name = info.getName()
        if name not in per_run[-1]:
            shapes = []  # type: List[Any]
            for t in tensors:
                try:
                    shapes.append([int(d) for d in t.getShape()])
                except Exception:  # a tensor MNN cannot describe here
                    shapes.append(None)
            per_run[-1][name] = {"op": info.getType(), "shapes": shapes, "ms": 0.0}
        started[name] = clock()
        return True

    def after(tensors: Any, info: Any) -> bool:
        t = clock()
        name = info.getName()
        per_run[-1][name]["ms"] += (t - started.get(name, t)) * 1000.0
        return True

    def run() -> None:
        per_run.append(OrderedDict())
        model._feed(feeds)
        model.interpreter.runSessionWithCallBackInfo(model.session, before, after)

    def finish(runs: int) -> Tuple[List[Dict[str, Any]], str]:
        precision = (runner.manifest.get("precision") or "").split("-")[0] or None
        nodes = []
        timed = per_run[-runs:]
        for name, rec in timed[0].items() if timed else ():
            times = [r[name]["ms"] for r in timed if name in r]
            nodes.append(_node(name, rec["op"], "CPU", times, rec["shapes"], precision))
        return nodes, (
            "MNN %s runSessionWithCallBackInfo (wall time between each operator's callbacks, with their Python "
            "overhead; precision: the bundle's)" % runner.version
        )

    return run, finish


# -- runtimes without a per-node profiler in Python ------------------------------------------------------------
def _unavailable(runtime: str, why: str) -> Callable[..., Any]:
    def profile(runner: Any, feeds: Dict[str, Any]) -> Any:
        raise NotAvailable("not available from %s %s: %s" % (runtime, runner.runtime_version() or "?", why))

    return profile


PROFILERS = {
    "ort": profile_ort,
    "openvino": profile_openvino,
    "mnn": profile_mnn,
    "tflite": _unavailable(
        "LiteRT",
        "its Python Interpreter returns no per-operator times (invoke() only; experimental_force_delegate_node_"
        "profiling has no Python reader, and _get_ops_details lists operators without time)",
    ),
    "paddlelite": _unavailable("Paddle Lite", "its Python LightPredictor has only run(), no per-operator timing"),
    "mindspore-lite": _unavailable(
        "MindSpore Lite", "its Python Model.predict(inputs) takes no per-operator callbacks"
    ),
}  # type: Dict[str, Callable[..., Any]]


def weight_bytes(bundle_dir: str, manifest: Dict[str, Any]) -> int:
    """Size of the bundle's model and weight files."""
    total = 0
    for f in manifest.get("files") or []:
        if f.get("role") in ("model", "weights"):
            path = os.path.join(bundle_dir, f["name"])
            total += os.path.getsize(path) if os.path.isfile(path) else int(f.get("size") or 0)
    return total


def run_profile(
    bundle_dir: str,
    manifest: Dict[str, Any],
    runs: int = 20,
    warmup: int = 3,
    threads: Optional[int] = None,
    providers: Optional[List[str]] = None,
) -> Dict[str, Any]:
    import sys

    from . import runners

    runs, warmup = max(1, min(int(runs), MAX_RUNS)), max(0, min(int(warmup), MAX_RUNS))
    runner_cls = runners.get(manifest["backend"])
    if runner_cls.runtime_version() is None:
        raise runners.RuntimeMissing(
            "%s is not installed for this device's Python (%s): %s"
            % (runner_cls.runtime, sys.executable, runner_cls.install_hint)
        )
    runner = runner_cls(bundle_dir, manifest, threads=threads, providers=providers)
    feeds, synthetic = load_inputs(bundle_dir, manifest)
    rss_before = rss_mb()
    runner.load()
    peak_load = peak_rss_mb()
    for _ in range(max(1, warmup)):
        runner.run(feeds)
    peak_infer = peak_rss_mb()  # before a profiled session adds its own memory
    described = runner.describe()
    profiler = PROFILERS.get(manifest["backend"]) or _unavailable(
        str(runner_cls.runtime or manifest["backend"]), "edgekit has no profiler for this backend"
    )
    profiled, finish, unavailable = None, None, ""  # type: Optional[Callable[[], Any]], Optional[Callable[[int], Any]], str
    try:
        profiled, finish = profiler(runner, feeds)
    except NotAvailable as e:
        unavailable = str(e)
    for _ in range(warmup):
        if profiled:
            profiled()
    times, profiled_times = [], []  # type: List[float], List[float]
    for _ in range(runs):  # plain and profiled runs alternate: both see the same load on the device
        t0 = time.perf_counter()
        runner.run(feeds)
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1000.0)
        if profiled:
            profiled()
            profiled_times.append((time.perf_counter() - t1) * 1000.0)
    report = OrderedDict(
        [
            ("schema", SCHEMA),
            ("name", manifest.get("name")),
            ("bundle_id", manifest.get("id")),
            ("backend", manifest["backend"]),
            ("precision", manifest.get("precision")),
            ("runs", runs),
            ("warmup", warmup),
            ("end_to_end_ms", stats(times)),
            ("inputs_synthetic", synthetic),
            ("input_shapes", dict((k, list(getattr(v, "shape", ()))) for k, v in feeds.items())),
            (
                "memory",
                {
                    "rss_before_load_mb": rss_before,
                    "peak_rss_load_mb": peak_load,
                    "peak_rss_inference_mb": peak_infer,
                    "weights_bytes": weight_bytes(bundle_dir, manifest),
                },
            ),
        ]
    )  # type: Dict[str, Any]
    for key in ("runtime", "runtime_version", "accelerator", "accelerators_active", "threads", "warnings"):
        report[key] = described.get(key)
    if finish is None:
        report["profiler"] = {"available": False, "reason": unavailable}
        report["nodes"] = []
    else:
        nodes, source = finish(runs)
        total = sum(n["time_ms"] for n in nodes)
        for n in nodes:
            n["share"] = n["time_ms"] / total if total else 0.0
        report["profiler"] = {"available": True, "source": source}
        report["nodes"] = nodes
        report["node_sum_ms"] = total
        e2e = report["end_to_end_ms"]["p50"]
        report["node_sum_ratio"] = total / e2e if e2e else None
        if profiled_times:  # what the profiler itself costs: the profiled runs against the plain ones
            report["profiled_ms"] = stats(profiled_times)
            report["profiler_overhead"] = report["profiled_ms"]["p50"] / e2e if e2e else None
    report["device"] = device_info()
    report["measured_by"] = "edgekit-agent one-shot profile (fresh process)"
    runner.close()
    return report


def main_profile(
    bundle_dir: str, runs: int, warmup: int, threads: Optional[int], providers: Optional[List[str]]
) -> int:
    with open(os.path.join(bundle_dir, "manifest.json")) as f:
        manifest = json.load(f)
    print(json.dumps(run_profile(bundle_dir, manifest, runs, warmup, threads, providers)))
    return 0
