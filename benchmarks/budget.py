"""Plain INT8 vs INT8 under an accuracy budget (mixed precision, ``--budget``), ONNX Runtime, profile ``host``.

(a) PP-OCR cls (x=1,3,48,192): calibration on 200 rendered text lines (seed 1), the budget and
    the fidelity measured on 400 others (seed 0, labelled): budgets ``1pt`` and ``top1=0.98``.
(b) The MobileNetV2 of examples/make_mobilenetv2.py (random weights, no labels): 64 calibration
    inputs (``random_inputs(64, 1000)``), budget ``cos=0.9999`` measured on 64 others
    (``random_inputs(64, 2000)``).

Per build: accuracy / cosine / top-1 against the FP32 source (the build report's last fidelity
step), layers kept float, evaluations the search used, model size, build time. Latency: host
p50 of each model file run by the backend's own runner on this machine (1 thread), FP32 and
the INT8 builds interleaved for R rounds of N runs after a warm-up; p50 = median over rounds,
spread = IQR over rounds.
"""

import argparse
import statistics
import sys
import time

import _common as C
import numpy as np

NAME = "budget"


def fidelity_of(report):
    step = report["fidelity"]["steps"][-1]
    _, m = next(iter(step["outputs"].items()))
    return {
        "cosine_mean": m.get("cosine_mean"),
        "top1_agreement": m.get("top1_agreement"),
        "accuracy": m.get("accuracy"),
        "accuracy_reference": m.get("accuracy_reference"),
    }


def text(f):
    parts = []
    if f["accuracy"] is not None:
        parts.append(f"acc {f['accuracy']:.2f}% (fp32 {f['accuracy_reference']:.2f}%)")
    parts.append(f"cos {f['cosine_mean']:.5f}")
    if f["top1_agreement"] is not None:
        parts.append(f"top-1 {100 * f['top1_agreement']:.1f}%")
    return ", ".join(parts)


def time_models(be, paths, feed, rounds, runs, warmup=20):
    fns = {k: be.runner(p, threads=1) for k, p in paths.items()}
    for fn in fns.values():
        for _ in range(warmup):
            fn(feed)
    p50 = {k: [] for k in fns}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(list(fns)))
        for k in order:
            t = []
            for _ in range(runs):
                t0 = time.perf_counter()
                fns[k](feed)
                t.append((time.perf_counter() - t0) * 1000)
            p50[k].append(statistics.median(t))
    return {
        k: {"p50_ms": float(np.median(v)), "iqr_ms": C.pct(v, 75) - C.pct(v, 25), "per_round": v}
        for k, v in p50.items()
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-evaluations", type=int, default=8)
    ap.add_argument("--skip-mnv2", action="store_true")
    args = ap.parse_args(argv)

    from make_mobilenetv2 import make_mobilenetv2, random_inputs

    import edgekit
    from edgekit import converters
    from edgekit.passes.mixed_precision import Budget

    work = C.workspace(NAME)
    env = C.environment()
    cal = C.textlines_npz(work / "textlines_calib_200_seed1.npz", 200, seed=1)
    val = C.textlines_npz(work / "textlines_val_400_seed0.npz", 400, seed=0)
    configs = [("ppocr_cls", C.PPOCR, C.PPOCR_SHAPE, cal, val, ["1pt", "top1=0.98"], 300)]
    if not args.skip_mnv2:
        mnv2 = work / "mobilenetv2.onnx"
        make_mobilenetv2(mnv2, seed=0)
        mcal, mval = work / "mnv2_calib_64.npz", work / "mnv2_val_64.npz"
        np.savez(mcal, input=random_inputs(64, 1000))
        np.savez(mval, input=random_inputs(64, 2000))
        configs.append(("mobilenetv2", mnv2, C.MNV2_SHAPE, mcal, mval, ["cos=0.9999"], 60))

    be = converters.get("ort")
    results, rows = [], []
    for label, src, shapes, calib, vset, budgets, runs in configs:
        builds = {}
        for variant in ["fp32", "int8"] + budgets:
            out = work / "bundles" / f"{label}-{variant.replace('=', '')}"
            t0 = time.perf_counter()
            try:
                rep = edgekit.build(
                    src,
                    "host",
                    out,
                    precision="fp32" if variant == "fp32" else "int8",
                    calib=None if variant == "fp32" else calib,
                    val=vset,
                    input_shapes=shapes,
                    budget=None
                    if variant in ("fp32", "int8")
                    else Budget.parse(variant, max_evaluations=args.max_evaluations),
                    use_cache=False,
                    log=C.log,
                )
            except edgekit.errors.FidelityError as e:
                C.log(f"{label} {variant}: {e}")
                results.append(
                    {"model": label, "variant": variant, "error": str(e), "search": getattr(e, "report", None)}
                )
                rows.append([label, variant, "–", "–", "–", "–", "not met (see results)"])
                continue
            mp = rep.get("mixed_precision")
            builds[variant] = {
                "path": out / rep["files"][0]["name"],
                "report": rep,
                "seconds": time.perf_counter() - t0,
            }
            C.log(
                f"built {label} {variant}: {rep['model_size_bytes'] / 1024:.1f} KB, {text(fidelity_of(rep))}"
                + (f", {len(mp['float_layer_names'])} float layer(s)" if mp else "")
            )
        timing = time_models(
            be,
            {k: b["path"] for k, b in builds.items()},
            {k: v[:1] for k, v in np.load(vset).items() if k != "labels"},
            args.rounds,
            runs,
        )
        for variant, b in builds.items():
            rep, mp = b["report"], b["report"].get("mixed_precision")
            f = fidelity_of(rep)
            entry = {
                "model": label,
                "variant": variant,
                "precision": rep["precision"],
                "size_bytes": rep["model_size_bytes"],
                "fidelity": f,
                "float_layers": mp["float_layer_names"] if mp else None,
                "candidates": mp["candidates"] if mp else None,
                "evaluations": mp["evaluations"] if mp else None,
                "budget_met": mp["final"]["met"] if mp else None,
                "search_seconds": mp["seconds"] if mp else None,
                "build_seconds": round(b["seconds"], 2),
                "host_p50_ms": timing[variant]["p50_ms"],
                "host_iqr_ms": timing[variant]["iqr_ms"],
                "host_p50_per_round_ms": timing[variant]["per_round"],
                "speed_vs_fp32": timing["fp32"]["p50_ms"] / timing[variant]["p50_ms"],
            }
            results.append(entry)
            floats = (
                "–" if not mp else f"{len(mp['float_layer_names'])} of {mp['candidates']} ({mp['evaluations']} eval.)"
            )
            rows.append(
                [
                    label,
                    variant,
                    f"{entry['size_bytes'] / 1024:.1f}",
                    f"{entry['host_p50_ms']:.3f} ({entry['host_iqr_ms']:.3f})",
                    f"{entry['speed_vs_fp32']:.2f}×",
                    floats,
                    text(f),
                ]
            )

    C.write_results(
        NAME,
        {
            "benchmark": NAME,
            "environment": env,
            "rounds": args.rounds,
            "max_evaluations": args.max_evaluations,
            "results": results,
        },
    )
    print(
        f"### Plain INT8 vs INT8 under a budget (ONNX Runtime, host, 1 thread, {args.rounds} interleaved rounds, "
        f"{env['cpu_count']}-core {env['machine']})\n"
    )
    print(
        C.table(
            [
                "model",
                "build",
                "size KB",
                "host p50 ms (IQR)",
                "speed vs fp32",
                "float layers",
                "fidelity vs fp32 source",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
