"""Pruning: parameters, file size, MACs, latency and fidelity at several ratios.

(a) PP-OCR mobile v2 text-line orientation classifier (x=1,3,48,192): calibration on 200
    rendered text lines (examples/textlines.py, seed 1), accuracy on 400 others (seed 0).
(b) The MobileNetV2 of examples/make_mobilenetv2.py (random weights, input=1,3,224,224):
    64 calibration samples (``random_inputs(64, 1000)``), cosine and top-1 agreement with the
    unpruned model on 64 others (``random_inputs(64, 2000)``). Random weights have no
    redundancy to remove, so its fidelity says little; its size and speed do.

Every row is ``edgekit.build(..., profile="host", backend="ort", precision="fp32", prune=R)``
(structured unless marked, calibration-based channel choice and bias correction), with
``allow_degraded=True`` so that builds below the fidelity gate are still measured; the
``gate`` column says whether the default pruned-build gate (cosine 0.98, top-1 0.9,
accuracy drop 2 points) passed. Latency: the bundles' model files in plain in-process ONNX
Runtime sessions (1 thread), all ratios of one model interleaved for R rounds; p50 = median
over rounds of each round's median; speed-up = unpruned p50 / pruned p50.
"""

import argparse
import sys
import time

import _common as C
import numpy as np

NAME = "prune"


def _session(path, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def fidelity_of(report):
    step = report["fidelity"]["steps"][-1]
    _, m = next(iter(step["outputs"].items()))
    return {
        "passed": step["passed"],
        "cosine_mean": m.get("cosine_mean"),
        "top1_agreement": m.get("top1_agreement"),
        "accuracy": m.get("accuracy"),
        "accuracy_reference": m.get("accuracy_reference"),
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ratios", default="0.1,0.2,0.3,0.5", help="structured ratios (default 0.1,0.2,0.3,0.5)")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)

    from make_mobilenetv2 import make_mobilenetv2, random_inputs

    import edgekit

    work = C.workspace(NAME, args.keep_cache)
    env = C.environment()
    cal = C.textlines_npz(work / "textlines_calib_200_seed1.npz", 200, seed=1)
    val = C.textlines_npz(work / "textlines_val_400_seed0.npz", 400, seed=0)
    mnv2 = work / "mobilenetv2.onnx"
    make_mobilenetv2(mnv2, seed=0)
    mcal, mval = work / "mnv2_calib_64.npz", work / "mnv2_val_64.npz"
    np.savez(mcal, input=random_inputs(64, 1000))
    np.savez(mval, input=random_inputs(64, 2000))
    ratios = [float(r) for r in args.ratios.split(",")]
    variants = [(None, None)] + [(r, "structured") for r in ratios] + [(0.5, "unstructured")]
    models = [("ppocr_cls", C.PPOCR, C.PPOCR_SHAPE, cal, val, 60), ("mobilenetv2", mnv2, C.MNV2_SHAPE, mcal, mval, 20)]

    results, rows = [], []
    for label, src, shapes, calib, vset, runs in models:
        built = []
        for ratio, mode in variants:
            tag = "unpruned" if ratio is None else f"{mode}-{ratio:g}"
            out = work / "bundles" / f"{label}_{tag}"
            t0 = time.perf_counter()
            rep = edgekit.build(
                src,
                "host",
                out,
                precision="fp32",
                calib=calib,
                val=vset,
                input_shapes=shapes,
                name=f"{label}_{tag}",
                prune=ratio,
                prune_mode=mode,
                allow_degraded=True,
            )
            seconds = time.perf_counter() - t0
            built.append((tag, ratio, mode, out / "model.onnx", rep, seconds))
            C.log(
                f"{label} {tag}: {rep['model_size_bytes'] / 1024:.1f} KB, {fidelity_text(fidelity_of(rep))}, "
                f"{seconds:.1f} s"
            )
        feed = dict(np.load(out / "sample_inputs.npz"))  # one real sample, batch 1
        sessions = [_session(b[3], args.threads) for b in built]
        for s in sessions:
            for _ in range(5):
                s.run(None, feed)
        p50 = [[] for _ in built]
        for r in range(args.rounds):
            order = list(range(len(built))) if r % 2 == 0 else list(reversed(range(len(built))))
            for i in order:
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    sessions[i].run(None, feed)
                    times.append((time.perf_counter() - t0) * 1000)
                p50[i].append(float(np.median(times)))
            C.log(f"{label} round {r + 1}: " + ", ".join(f"{b[0]} {p[-1]:.3f}" for b, p in zip(built, p50)))
        base = float(np.median(p50[0]))
        for (tag, ratio, mode, _path, rep, seconds), times in zip(built, p50):
            pr = rep.get("pruning") or {}
            fid = fidelity_of(rep)
            med = float(np.median(times))
            entry = {
                "model": label,
                "variant": tag,
                "ratio": ratio,
                "mode": mode,
                "params_before": pr.get("params_before"),
                "params_after": pr.get("params_after"),
                "macs_before": pr.get("macs_before"),
                "macs_after": pr.get("macs_after"),
                "size_bytes": rep["model_size_bytes"],
                "source_size_bytes": rep["source_size_bytes"],
                "compressed_bytes": (pr.get("size_after") or {}).get("compressed_bytes"),
                "sparsity": pr.get("sparsity"),
                "channels_removed": pr.get("channels_removed"),
                "channels_prunable": pr.get("channels_prunable"),
                "skipped": pr.get("skipped"),
                "p50_ms": med,
                "p50_per_round_ms": times,
                "speedup": base / med,
                "fidelity": fid,
                "gate_passed": fid["passed"],
                "build_seconds": seconds,
            }
            results.append(entry)
            params = f"{pr['params_after']:,}" if pr else "–"
            macs = f"{pr['macs_after'] / pr['macs_before']:.0%}" if pr.get("macs_before") else "–"
            rows.append(
                [
                    label,
                    tag,
                    params,
                    f"{rep['model_size_bytes'] / 1024:.1f}",
                    f"{entry['compressed_bytes'] / 1024:.1f}" if entry["compressed_bytes"] else "–",
                    macs,
                    f"{med:.3f} ({C.pct(times, 10):.3f}–{C.pct(times, 90):.3f})",
                    f"{entry['speedup']:.2f}×",
                    fidelity_text(fid),
                    "pass" if fid["passed"] else "fail",
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
        f"### Pruning ({args.rounds} interleaved rounds, {args.threads} thread(s), onnxruntime {env['onnxruntime']}, "
        f"{env['cpu_count']}-core {env['machine']} host)\n"
    )
    print(
        C.table(
            [
                "model",
                "pruning",
                "params",
                "size KB",
                "zlib KB",
                "MACs",
                "p50 ms (p10–p90 of rounds)",
                "speed-up",
                "fidelity vs unpruned",
                "gate",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
