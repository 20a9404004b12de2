"""Reports: the JSON schema version and the text renderings of build and bench reports.

The JSON shapes are described in ``report_schema.json`` (package data, versioned by
``SCHEMA_VERSION``); every backend fills the same fields.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

from . import shape_text as shape_lines

SCHEMA_VERSION = 1


def schema() -> dict[str, Any]:
    return json.loads(resources.files("edgekit").joinpath("report_schema.json").read_text())


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MB"


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _intake_lines(r: dict[str, Any]) -> list[str]:
    """Where the model came from when it was not an ONNX file: the PyTorch export, or a file taken as given."""
    ex = r.get("export")
    if ex:
        dims = ", ".join(f"{n} axes {sorted(d)}" for n, d in ex["dynamic_dims"].items() if isinstance(d, dict))
        framework = ex.get("framework", "PyTorch")
        into = f"ONNX opset {ex['opset']}" if "opset" in ex else "TFLite"
        version = ex.get("framework_version") or (
            f"torch {ex['torch']}" if "torch" in ex else f"TensorFlow {ex.get('tensorflow')}"
        )
        return [
            f"  export     {framework} {ex['from']}{' ' + Path(ex['file']).name if ex.get('file') else ''} -> {into} "
            f"by {ex['exporter'].split(':')[0]} ({version}) in {ex['export_seconds']} s"
            + (f"; dynamic: {dims}" if dims else "")
        ] + ([f"             fallback: {ex['fallback']}"] if ex.get("fallback") else [])
    given = r.get("taken_as_given")
    if given:
        return [f"  source     {Path(given['file']).name} taken as given (no conversion), sha256 {given['sha256']}"]
    return []


def build_text(r: dict[str, Any]) -> str:
    from .fidelity import summary

    lines = [
        f"edgekit build report: {r['name']} for {r['profile']}",
        f"  backend    {r['backend']} ({r['runtime']['name']} {r['runtime']['version']}), "
        f"format {r['format']}, precision {r.get('precision_detail') or r['precision']}",
        f"  bundle id  {r['bundle_id']}",
        f"  size       {_kb(r['model_size_bytes'])} (source {_kb(r['source_size_bytes'])})",
        *(
            [
                f"  source     {r['source_nodes']} nodes in the ONNX graph "
                f"{'exported' if r.get('export') else 'as given'} ({r['source']['file']})"
            ]
            if "source_nodes" in r
            else []
        ),
        *_intake_lines(r),
        *[f"  specialised {note}" for note in (r.get("specialised") or {}).get("notes", [])],
        "  files:",
    ]
    lines += [f"    {f['name']:<28} {_kb(f['size']):>10}  sha256 {f['sha256'][:16]}..." for f in r["files"]]
    fid = r["fidelity"]
    if r.get("task"):
        t = r["task"]
        lines.append(f"  task       {t['spec']} ({t['reason']}); gate: {t['gate']}")
    lines.append(
        f"  fidelity on {fid['data']['samples']} samples from {fid['data']['source']}: "
        f"{'PASSED' if fid['passed'] else 'DEGRADED (allowed)' if fid['degraded_allowed'] else 'FAILED'}"
    )
    if r.get("stream"):
        st = r["stream"]
        pairs = ", ".join(f"{o} -> {i}" for i, o in st["state"].items())
        lines.append(
            f"  stream     {pairs}: {st['sequences']} sequences, {st['steps']} steps, each run on its own state"
        )
    for s in fid["steps"]:
        lines.append(f"    {s['step']}: {summary(s) or s.get('note', '')}")
        lines += [f"      ! {f}" for f in s["failures"]]
        for i, d in s.get("stream", {}).get("state_drift", {}).items():
            lines.append(
                f"      state {i}: max|err| {d['max_abs_error_at_end']:.3g} at the end of a sequence, "
                f"{d['max_abs_error_any_step']:.3g} at any step (reference max |{i}| {d['reference_max_abs']:.3g})"
            )
        lines += shape_lines.step(s, summary)
    lines += shape_lines.plan(r.get("shapes"))
    ops = r.get("ops", [])
    lines.append(
        f"  operators of {r.get('ops_graph') or 'the built model'}: {sum(o['count'] for o in ops)} nodes, "
        f"{len(ops)} types: " + ", ".join(f"{o['op']}x{o['count']}" for o in ops)
    )
    usability = r.get("mobile_usability") or {}
    for ep, u in usability.items():
        if not isinstance(u, dict):  # the checker could not run at all: {"error": "..."}
            lines.append(f"  mobile usability check: {u}")
        elif "error" in u:
            lines.append(f"  {ep} check: {u['error']}")
        else:
            extra = f", unsupported: {', '.join(u['unsupported_ops'])}" if u["unsupported_ops"] else ""
            lines.append(
                f"  {ep} check (ONNX Runtime's usability checker): {u['supported_nodes']}/{u['nodes']} nodes of "
                f"the built ONNX graph supported, in {u['partitions']} partition(s), "
                f"suitability {u['suitability']}{extra}"
            )
    support = r.get("operator_support") or {}
    for device, info in support.items():
        if isinstance(info, dict):
            if info.get("checked") and "nodes" in info:
                unsupported = info.get("unsupported_ops") or []
                detail = f"{info['supported_nodes']}/{info['nodes']} nodes" + (
                    f", unsupported: {', '.join(unsupported)}" if unsupported else ""
                )
            else:
                detail = None
            detail = (
                detail
                or info.get("summary")
                or info.get("status")
                or ", ".join(f"{k}: {v}" for k, v in info.items() if not isinstance(v, (list, dict)))
            )
            lines.append(f"  {device} operator support: {detail}")
        else:
            lines.append(f"  {device} operator support: {info}")
    from .placement import summary_lines

    lines += summary_lines(r.get("placement"))
    req = r.get("required_operators")
    if req:
        lines.append(f"  minimal build: {req['file']} ({len(req['config'])} line(s)); {req['use']}")
    hl = r.get("host_latency")
    if hl:
        lines.append(
            f"  on this machine: {hl['built_p50_ms']:.3f} ms p50 vs fp32 reference {hl['reference_p50_ms']:.3f} ms "
            f"({hl['speedup']:.2f}x, {hl['threads']} threads)"
        )
        lines += shape_lines.host(hl)
    if r.get("pruning"):
        from .passes.prune import summary as pruning_summary

        lines.append(f"  pruning: {pruning_summary(r['pruning'])}")
    choice = r.get("precision_choice")
    if choice:
        lines.append(f"  precision: auto chose {choice['chosen']}: {choice['reason']}")
    mp = r.get("mixed_precision")
    if mp:
        final = mp["final"]
        lines.append(
            f"  budget {mp['budget']}: {'met' if final['met'] else 'NOT met'} with "
            f"{len(mp['float_layer_names'])} of {mp['candidates']} layer(s) kept float "
            f"({', '.join(mp['float_layer_names']) or 'none'}); {mp['metric']} {_g(final['value'])} "
            f"(all-int8 {_g(mp['all_int8']['value'])}), {mp['evaluations']} evaluation(s)"
        )
    kept = r.get("kept_float")
    if kept:
        lines.append(f"  kept float: {kept['reason']}")
    for w in r.get("warnings", []):
        lines.append(f"  warning: {w}")
    lines.append(f"  built in {r['build_seconds']:.2f} s{' (cache hit)' if r['cache']['hit'] else ''} -> {r['output']}")
    return "\n".join(lines) + "\n"


def bench_text(r: dict[str, Any]) -> str:
    lat = r["latency_ms"]
    dev = r.get("device", {})
    lines = [
        f"edgekit bench: {r['name']} ({r['bundle_id']}) on {dev.get('hostname', '?')} "
        f"[{dev.get('machine', '?')}, {dev.get('system', '?')}, python {dev.get('python', '?')}]",
        f"  profile      {r['profile']}   backend {r['backend']} {r['runtime_version']}   precision {r['precision']}",
        f"  accelerator  {r['accelerator']}   (requested: {', '.join(r.get('accelerators_requested', []))})"
        + (f"   executing in {r['inference_precision']}" if r.get("inference_precision") else ""),
    ]
    placement = r.get("placement") or {}
    if placement:
        lines.append("  placement    " + ", ".join(f"{k}: {v} nodes" for k, v in placement.items()))
    lines += [
        f"  threads      {r['threads']}",
        f"  init         {r['init_ms']:.2f} ms   first inference {r['first_inference_ms']:.2f} ms",
        f"  warm-up      {r['warmup']} runs (not counted)",
        f"  latency      p50 {lat['p50']:.3f} ms  p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}  "
        f"(min {lat['min']:.3f}, max {lat['max']:.3f}, mean {lat['mean']:.3f} ± {lat['stdev']:.3f}) "
        f"over {r['runs']} runs",
        f"  peak RSS     {r['peak_rss_mb']:.1f} MB",
        f"  inputs       {'synthetic random' if r.get('inputs_synthetic') else 'real sample from the build data'}",
    ]
    lines += shape_lines.bench(r)
    for w in r.get("warnings", []):
        lines.append(f"  warning: {w}")
    return "\n".join(lines) + "\n"


def write_report(bundle_dir: str | Path, report: dict[str, Any]) -> None:
    """Write the build report into a bundle directory: ``report.json`` and its text form ``report.txt``."""
    from pathlib import Path

    from .bundle import REPORT_JSON, REPORT_TXT, write_json

    write_json(Path(bundle_dir) / REPORT_JSON, report)
    (Path(bundle_dir) / REPORT_TXT).write_text(build_text(report))
