"""Shrinking that pays off: FP32, INT8, pruned + INT8 and the `--auto` winner against naive ONNX Runtime FP32.

For the PP-OCR cls model (accuracy on 400 rendered text lines, calibrated on 200 others)
and the MobileNetV2-sized model (random weights: cosine against FP32 on 64 inputs), on
the `host` profile, measured on this machine as the device:

- naive: the original .onnx in a plain onnxruntime InferenceSession, default options, in this process;
- every variant: deployed to a local agent and benchmarked there (fresh process, warm-up excluded);
- interleaved rounds (naive, then each variant, per round); p50 = median of the rounds' p50s.

Goals (the project's): >= 2.5x faster than naive FP32 with <= 1 point lost; pruned + INT8 >= 6x smaller.
"""

import argparse
import statistics
import time

import _common as C
import numpy as np

NAME = "shrink"


def naive_runner(model_path, feed):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feed)


def bare_p50(run, runs):
    for _ in range(5):
        run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def quality(report):
    steps = report["fidelity"]["steps"]
    out = next(iter(steps[-1]["outputs"].values()))
    if "accuracy" in out:
        return {"accuracy": round(out["accuracy"], 2), "accuracy_reference": round(out["accuracy_reference"], 2)}
    return {"cosine": round(out["cosine_mean"], 5)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--prune", type=float, default=0.3)
    ap.add_argument("--auto-backends", default="ort,openvino,mnn,tflite")
    ap.add_argument("--models", default="ppocr_cls,mobilenetv2")
    args = ap.parse_args(argv)

    from make_mobilenetv2 import make_mobilenetv2, random_inputs

    import edgekit
    from edgekit.auto import auto_build
    from edgekit.deployer import deploy

    work = C.workspace(NAME)
    env = C.environment()
    cal = C.textlines_npz(work / "calib.npz", 200, seed=1)
    val = C.textlines_npz(work / "val.npz", 400, seed=0)
    mnv2 = work / "mobilenetv2.onnx"
    make_mobilenetv2(mnv2, seed=0)
    mcal, mval = work / "mnv2_calib.npz", work / "mnv2_val.npz"
    np.savez(mcal, input=random_inputs(64, 1000))
    np.savez(mval, input=random_inputs(64, 2000))
    configs = {
        "ppocr_cls": (C.PPOCR, C.PPOCR_SHAPE, cal, val, "x"),
        "mobilenetv2": (mnv2, C.MNV2_SHAPE, mcal, mval, "input"),
    }
    dev = C.open_local_device(work / "device")
    import atexit
    import subprocess
    import sys

    atexit.register(
        lambda: subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from edgekit_agent import daemon; daemon.stop(sys.argv[1])",
                str(work / "auto-device"),
            ],
            timeout=60,
        )
    )
    results, rows = [], []
    for label in args.models.split(","):
        model, shape, calib, valid, input_name = configs[label]
        feed = {input_name: np.load(valid)[input_name][:1].astype(np.float32)}
        variants = {}
        common = dict(calib=calib, val=valid, input_shapes=shape)
        for key, tag, kw in (
            ("fp32", "fp32", dict(precision="fp32")),
            ("int8", "int8", dict(precision="int8")),
            (
                f"pruned {args.prune:g} + int8",
                "pruned-int8",
                dict(precision="int8", prune=args.prune, allow_degraded=True),
            ),
        ):
            C.log(f"{label}: building {key}")
            out = work / label / tag
            rep = edgekit.build(model, "host", out, backend="ort", name=f"{label}-{tag}", **kw, **common)
            variants[key] = (out, rep)
        C.log(f"{label}: --auto over {args.auto_backends}")
        auto_out = work / label / "auto"
        rep = auto_build(
            model,
            "host",
            auto_out,
            device_root=str(work / "auto-device"),
            name=f"{label}-auto",
            backends=[
                b
                for b in args.auto_backends.split(",")
                if b in edgekit.profiles.load("host").data["runtimes"]["ranked"]
            ],
            prune_levels=(0.0, args.prune),
            runs=30,
            rounds=3,
            log=C.log,
            **common,
        )
        variants[f"--auto winner ({rep['auto']['winner']})"] = (auto_out, rep)
        for out, _ in variants.values():
            deploy(out, dev, bench=False)
        naive = naive_runner(model, feed)
        p50s = {k: [] for k in ["naive"] + list(variants)}
        bench_meta = {}
        for r in range(args.rounds):
            p50s["naive"].append(bare_p50(naive, args.runs))
            for key, (_out, rep) in variants.items():
                b = dev.bench(rep["name"], runs=args.runs, warmup=5)
                p50s[key].append(b["latency_ms"]["p50"])
                bench_meta[key] = {
                    "accelerator": b["accelerator"],
                    "threads": b["threads"],
                    "runtime": f"{b['backend']} {b['runtime_version']}",
                }
            C.log(f"{label}: round {r + 1}/{args.rounds}")
        naive_p50 = statistics.median(p50s["naive"])
        src_size = model.stat().st_size
        entry = {
            "model": label,
            "naive_ort_fp32": {"p50_ms": naive_p50, "rounds": p50s["naive"], "size_bytes": src_size},
            "variants": [],
        }
        rows.append(
            [
                label,
                "naive ORT fp32 (original .onnx)",
                f"{src_size / 1024:.0f}",
                "1.0x",
                f"{naive_p50:.3f} ({min(p50s['naive']):.3f}-{max(p50s['naive']):.3f})",
                "1.00x",
                "reference",
                "-",
            ]
        )
        for key, (_out, rep) in variants.items():
            p = statistics.median(p50s[key])
            q = quality(rep)
            size = rep["model_size_bytes"]
            v = {
                "variant": key,
                "backend": rep["backend"],
                "precision": rep["precision"],
                "size_bytes": size,
                "smaller": src_size / size,
                "p50_ms": p,
                "rounds": p50s[key],
                "speedup_vs_naive": naive_p50 / p,
                "quality": q,
                "fidelity_passed": rep["fidelity"]["passed"],
                **bench_meta[key],
                "pruning": rep.get("pruning", {}).get("summary") if rep.get("pruning") else None,
            }
            entry["variants"].append(v)
            qtxt = (
                f"acc {q['accuracy']:.2f} % ({q['accuracy'] - q['accuracy_reference']:+.2f} pt)"
                if "accuracy" in q
                else f"cos {q['cosine']}"
            )
            rows.append(
                [
                    label,
                    key,
                    f"{size / 1024:.0f}",
                    f"{src_size / size:.1f}x",
                    f"{p:.3f} ({min(p50s[key]):.3f}-{max(p50s[key]):.3f})",
                    f"{naive_p50 / p:.2f}x",
                    qtxt + ("" if rep["fidelity"]["passed"] else " (below the gate)"),
                    f"{bench_meta[key]['runtime']}, {bench_meta[key]['accelerator']}, {bench_meta[key]['threads']} thr",
                ]
            )
        results.append(entry)
    print(
        C.table(
            ["model", "variant", "size KB", "smaller", "p50 ms (range over rounds)", "vs naive", "fidelity", "ran on"],
            rows,
        )
    )
    C.write_results(
        NAME, {"environment": env, "rounds": args.rounds, "runs": args.runs, "results": results, "method": __doc__}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
