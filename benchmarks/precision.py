"""FP32 vs INT8 (static QDQ): model size, latency and fidelity.

(a) PP-OCR mobile v2 text-line orientation classifier (examples/ppocr_mobile_v2_cls.onnx,
    x=1,3,48,192), for the profiles ``host`` (.onnx) and ``raspberrypi5`` (.ort):
    calibration on 200 rendered text lines (examples/textlines.py, seed 1), fidelity and
    accuracy on 400 other lines (seed 0) passed as ``val=``; the build report's last
    fidelity step carries ``accuracy`` and ``accuracy_reference`` (the FP32 source model).
(b) The MobileNetV2 of examples/make_mobilenetv2.py (random weights, input=1,3,224,224),
    profile ``host``: 64 calibration samples (``random_inputs(64, 1000)``), fidelity on 64
    other samples (``random_inputs(64, 2000)``): cosine similarity and top-1 agreement.

Latency: every bundle is deployed to a local agent (temp dir) and benchmarked with
``Device.bench`` (a fresh process per run); FP32 and INT8 of one model/profile alternate
for R rounds. p50 = median over rounds of each run's p50, IQR likewise; speed-up = FP32
p50 / INT8 p50. Everything runs on this machine: the raspberrypi5 .ort bundles are timed
on this x86 host, not on a Pi.
"""

import argparse
import sys

import _common as C
import numpy as np

NAME = "precision"


def fidelity_of(report):
    step = report["fidelity"]["steps"][-1]
    name, m = next(iter(step["outputs"].items()))
    return {
        "step": step["step"],
        "output": name,
        "passed": step["passed"],
        "samples": step["samples"],
        "cosine_mean": m.get("cosine_mean"),
        "cosine_min": m.get("cosine_min"),
        "top1_agreement": m.get("top1_agreement"),
        "accuracy": m.get("accuracy"),
        "accuracy_reference": m.get("accuracy_reference"),
        "max_abs": m.get("max_abs"),
    }


def fidelity_text(f):
    parts = []
    if f["accuracy"] is not None:
        parts.append(f"acc {f['accuracy']:.2f}% (ref {f['accuracy_reference']:.2f}%)")
    parts.append(f"cos {f['cosine_mean']:.4f}")
    if f["top1_agreement"] is not None:
        parts.append(f"top-1 {100 * f['top1_agreement']:.1f}%")
    return ", ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="inference threads for the agent bench (default 1)")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)

    from make_mobilenetv2 import make_mobilenetv2, random_inputs

    import edgekit
    from edgekit.deployer import deploy

    work = C.workspace(NAME, args.keep_cache)
    env = C.environment()
    C.log(f"workspace {work}")

    cal = C.textlines_npz(work / "textlines_calib_200_seed1.npz", 200, seed=1)
    val = C.textlines_npz(work / "textlines_val_400_seed0.npz", 400, seed=0)
    mnv2 = work / "mobilenetv2.onnx"
    make_mobilenetv2(mnv2, seed=0)
    mcal = work / "mnv2_calib_64.npz"
    mval = work / "mnv2_val_64.npz"
    np.savez(mcal, input=random_inputs(64, 1000))
    np.savez(mval, input=random_inputs(64, 2000))

    # (model label, source, shapes, profile, calib, val, runs, warmup)
    configs = [
        ("ppocr_cls", C.PPOCR, C.PPOCR_SHAPE, "host", cal, val, 300, 30),
        ("ppocr_cls", C.PPOCR, C.PPOCR_SHAPE, "raspberrypi5", cal, val, 300, 30),
        ("mobilenetv2", mnv2, C.MNV2_SHAPE, "host", mcal, mval, 80, 10),
    ]
    dev = C.open_local_device(work / "device")
    builds = {}
    for label, src, shapes, profile, calib, vset, _, _ in configs:
        for precision in ("fp32", "int8"):
            name = f"{label}_{profile}_{precision}"
            out = work / "bundles" / name
            rep = edgekit.build(
                src,
                profile,
                out,
                precision=precision,
                calib=calib if precision == "int8" else None,
                val=vset,
                input_shapes=shapes,
                name=name,
            )
            deploy(out, dev, bench=False)
            builds[name] = {
                "report": rep,
                "fidelity": fidelity_of(rep),
                "size_bytes": rep["model_size_bytes"],
                "format": rep["format"],
                "build_seconds": rep["build_seconds"],
                "warnings": rep["warnings"],
            }
            C.log(
                f"built + deployed {name}: {rep['model_size_bytes'] / 1024:.1f} KB {rep['format']}, "
                f"{fidelity_text(builds[name]['fidelity'])}, {rep['build_seconds']:.1f} s"
            )

    results, rows = [], []
    for label, _, _, profile, _, _, runs, warmup in configs:
        names = {p: f"{label}_{profile}_{p}" for p in ("fp32", "int8")}
        p50 = {"fp32": [], "int8": []}
        iqr = {"fp32": [], "int8": []}
        for r in range(args.rounds):
            order = ("fp32", "int8") if r % 2 == 0 else ("int8", "fp32")
            for p in order:
                rep = dev.bench(names[p], runs=runs, warmup=warmup, threads=args.threads)
                p50[p].append(rep["latency_ms"]["p50"])
                iqr[p].append(rep["latency_ms"]["iqr"])
            C.log(f"{label} {profile} round {r + 1}: fp32 {p50['fp32'][-1]:.3f} ms, int8 {p50['int8'][-1]:.3f} ms")
        med = {p: float(np.median(p50[p])) for p in p50}
        per_round = [a / b for a, b in zip(p50["fp32"], p50["int8"])]
        for p in ("fp32", "int8"):
            b = builds[names[p]]
            speedup = med["fp32"] / med[p]
            entry = {
                "model": label,
                "profile": profile,
                "precision": p,
                "format": b["format"],
                "size_bytes": b["size_bytes"],
                "size_kb": b["size_bytes"] / 1024,
                "threads": args.threads,
                "runs": runs,
                "warmup": warmup,
                "p50_ms": med[p],
                "iqr_ms": float(np.median(iqr[p])),
                "p50_per_round_ms": p50[p],
                "speedup_vs_fp32": speedup,
                "speedup_per_round": per_round if p == "int8" else None,
                "fidelity": b["fidelity"],
                "build_seconds": b["build_seconds"],
                "warnings": b["warnings"],
            }
            results.append(entry)
            sp = (
                "1.00×"
                if p == "fp32"
                else (f"**{speedup:.2f}×** ({C.pct(per_round, 10):.2f}–{C.pct(per_round, 90):.2f})")
            )
            rows.append(
                [
                    label,
                    f"{profile} (.{b['format']})",
                    p,
                    f"{b['size_bytes'] / 1024:.1f}",
                    f"{med[p]:.3f} ({entry['iqr_ms']:.3f})",
                    sp,
                    fidelity_text(b["fidelity"]),
                ]
            )

    C.write_results(
        NAME,
        {
            "benchmark": NAME,
            "environment": env,
            "rounds": args.rounds,
            "threads": args.threads,
            "data": {
                "ppocr_calib": "make_textlines(200, seed=1)",
                "ppocr_val": "make_textlines(400, seed=0)",
                "mnv2_calib": "random_inputs(64, 1000)",
                "mnv2_val": "random_inputs(64, 2000)",
            },
            "results": results,
        },
    )
    print(
        f"### FP32 vs INT8 static QDQ ({args.rounds} interleaved rounds, {args.threads} thread(s), measured on this "
        f"{env['cpu_count']}-core {env['machine']} host, onnxruntime {env['onnxruntime']})\n"
    )
    print(
        C.table(
            [
                "model",
                "profile",
                "precision",
                "size KB",
                "p50 ms (IQR)",
                "speed-up vs fp32 (p10–p90 of rounds)",
                "accuracy / cosine / top-1 vs fp32 source",
            ],
            rows,
        )
    )
    print(
        "\nPP-OCR: accuracy on 400 rendered text lines (seed 0), calibration on 200 others (seed 1); "
        "MobileNetV2 (random weights): cosine and top-1 agreement with the FP32 source on 64 random inputs, "
        "calibration on 64 others. raspberrypi5 bundles (.ort, optimized for arm) are timed on this x86 host."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
