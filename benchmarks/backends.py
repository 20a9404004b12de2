"""Every backend and precision on the PP-OCR cls model, measured in one run on this host.

For each (backend, precision) the host can build: bundle size, fidelity against the FP32
ONNX reference (accuracy on 400 rendered text lines, calibrated on 200 others), the
agent's benchmark p50 on this machine (1 thread, fresh process, warm-up excluded), and
the agent-vs-bare-runtime ratio: the same model file run by the backend's own runtime in
a plain loop in this process, same input and threads, interleaved rounds (goal <= 1.02).
"""

import argparse
import statistics
import sys
import time

import _common as C
import numpy as np

NAME = "backends"
PRECISIONS = {
    "ort": ["fp32", "fp16", "int8"],
    "openvino": ["fp32", "fp16", "int8", "int8-weights"],
    "mnn": ["fp32", "fp16", "int8-weights", "int4-weights", "int8"],
    "tflite": ["fp32", "fp16", "int8-dynamic", "int8"],
}


def bare_p50(be, model_path, feed, threads, runs):
    run = be.runner(model_path, threads)
    for _ in range(10):
        run(feed)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(feed)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("--backends", default="ort,openvino,mnn,tflite")
    ap.add_argument("--results", default=NAME, help="results file name (benchmarks/results/NAME.json)")
    args = ap.parse_args(argv)

    import edgekit
    from edgekit import converters
    from edgekit.deployer import deploy

    work = C.workspace(NAME)
    env = C.environment()
    calib = C.textlines_npz(work / "calib.npz", 200, 1)
    val = C.textlines_npz(work / "val.npz", 400, 0)
    dev = C.open_local_device(work / "device")
    rows, results = [], []
    for backend in args.backends.split(","):
        try:
            be = converters.get(backend)
            be.ensure_available()
        except edgekit.EdgekitError as e:
            C.log(f"skipping {backend}: {e}")
            continue
        for precision in PRECISIONS[backend]:
            out = work / f"{backend}-{precision}"
            C.log(f"build {backend} {precision}")
            try:
                r = edgekit.build(
                    C.PPOCR,
                    "host",
                    out,
                    backend=backend,
                    precision=precision,
                    calib=calib,
                    val=val,
                    input_shapes=C.PPOCR_SHAPE,
                    name=f"ppocr-{backend}-{precision}",
                    allow_degraded=True,
                )
            except edgekit.EdgekitError as e:
                C.log(f"  {backend} {precision} failed: {e}")
                results.append({"backend": backend, "precision": precision, "error": str(e)})
                rows.append([backend, precision, "–", "–", "–", "–", f"build failed: {str(e).splitlines()[0][:60]}"])
                continue
            deploy(out, dev, bench=False)
            model_path = out / r["files"][0]["name"]
            with np.load(out / "sample_inputs.npz") as z:
                feed = {k: z[k] for k in z.files}
            agent, bare = [], []
            for i in range(args.rounds):
                pair = [("agent", None), ("bare", None)] if i % 2 == 0 else [("bare", None), ("agent", None)]
                for kind, _ in pair:
                    if kind == "agent":
                        rep = dev.bench(r["name"], runs=args.runs, warmup=20, threads=1)
                        agent.append(rep["latency_ms"]["p50"])
                    else:
                        bare.append(bare_p50(be, model_path, feed, 1, args.runs))
            step = r["fidelity"]["steps"][-1]["outputs"]
            m = next(iter(step.values()))
            a, b = statistics.median(agent), statistics.median(bare)
            paired = sorted(x / y for x, y in zip(agent, bare))
            ratio = statistics.median(paired)
            results.append(
                {
                    "backend": backend,
                    "precision": precision,
                    "size_bytes": r["model_size_bytes"],
                    "agent_p50_ms": a,
                    "bare_p50_ms": b,
                    "ratio": ratio,
                    "paired_ratios": paired,
                    "ratio_of_medians": a / b,
                    "agent_rounds": agent,
                    "bare_rounds": bare,
                    "accuracy": m.get("accuracy"),
                    "accuracy_reference": m.get("accuracy_reference"),
                    "top1_agreement": m.get("top1_agreement"),
                    "fidelity_passed": r["fidelity"]["passed"],
                    "accelerator": rep.get("accelerator"),
                    "inference_precision": rep.get("inference_precision"),
                    "warnings": rep.get("warnings"),
                }
            )
            rows.append(
                [
                    backend,
                    precision,
                    f"{r['model_size_bytes'] / 1024:.1f}",
                    f"{a:.3f} ({min(agent):.3f}–{max(agent):.3f})",
                    f"{b:.3f}",
                    f"**{ratio:.3f}** ({paired[0]:.2f}–{paired[-1]:.2f})",
                    f"acc {m.get('accuracy', float('nan')):.2f}% "
                    f"(fp32 {m.get('accuracy_reference', float('nan')):.2f}%)"
                    f", top-1 {100 * m.get('top1_agreement', float('nan')):.1f}%"
                    + ("" if r["fidelity"]["passed"] else ", BELOW GATE"),
                ]
            )
    C.write_results(args.results, {"benchmark": NAME, "environment": env, "results": results})
    print(
        f"### PP-OCR cls per backend and precision (host profile, 1 thread, {env['cpu_count']}-core "
        f"{env['machine']}, {args.rounds} interleaved rounds of {args.runs} runs; "
        "a round pairs one agent bench with one bare loop)\n"
    )
    print(
        C.table(
            [
                "backend",
                "precision",
                "size KB",
                "agent p50 ms (range)",
                "bare runtime p50 ms",
                "agent / bare, median of paired rounds (range)",
                "fidelity (400 rendered lines)",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
