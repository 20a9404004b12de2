"""Agent bench vs a bare in-process ONNX Runtime loop on the same model file.

For the PP-OCR text-line classifier (host, fp32, x=1,3,48,192) and the MobileNetV2 of
examples/make_mobilenetv2.py (host, fp32, input=1,3,224,224): deploy the bundle to a
local device (agent in a temp dir), then alternate

    agent: Device.bench(name, runs=N, warmup=W, threads=T)  (fresh process on the device)
    bare:  InferenceSession(bundle/model.onnx, intra_op=T, inter_op=1), 1 + W untimed runs,
           N timed runs of sess.run on the bundle's sample_inputs.npz

for R rounds each (15 for PP-OCR, 7 for MobileNetV2; the order inside a round alternates, so a drift in the machine's
load hits both sides alike), and report the ratio of the medians (median over rounds of
each round's p50) agent/bare, and the median of the per-round ratios. Goal: <= 1.02.
"""

import argparse
import sys
import time

import _common as C
import numpy as np

NAME = "agent_overhead"


def bare_bench(model_path, feeds, runs, warmup, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), sess_options=so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    sess.run(names, feeds)  # the agent's "first inference", not counted either
    for _ in range(warmup):
        sess.run(names, feeds)
    clock = time.perf_counter
    times = []
    for _ in range(runs):
        t0 = clock()
        sess.run(names, feeds)
        times.append((clock() - t0) * 1000.0)
    del sess
    return C.summary(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, help="rounds per model and thread count (default: 15 PP-OCR, 7 MobileNetV2)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="intra-op threads to compare at")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)

    from make_mobilenetv2 import make_mobilenetv2

    import edgekit
    from edgekit.deployer import deploy

    work = C.workspace(NAME, args.keep_cache)
    env = C.environment()
    C.log(f"workspace {work}")

    mnv2 = work / "mobilenetv2.onnx"
    make_mobilenetv2(mnv2, seed=0)
    models = [
        # name, source, shapes, runs, warmup, rounds
        ("ppocr_cls", C.PPOCR, C.PPOCR_SHAPE, 400, 40, args.rounds or 15),
        ("mobilenetv2", mnv2, C.MNV2_SHAPE, 100, 10, args.rounds or 7),
    ]
    dev = C.open_local_device(work / "device")
    bundles = {}
    for name, src, shapes, *_ in models:
        out = work / "bundles" / name
        edgekit.build(src, "host", out, precision="fp32", input_shapes=shapes, name=name)
        deploy(out, dev, bench=False)
        bundles[name] = out
        C.log(f"built and deployed {name}")

    results, rows = [], []
    for name, _, _, runs, warmup, n_rounds in models:
        out = bundles[name]
        with np.load(out / "sample_inputs.npz", allow_pickle=False) as z:
            feeds = {k: z[k] for k in z.files}
        for threads in args.threads:
            agent_p50, bare_p50, rounds = [], [], []
            for r in range(n_rounds):
                if r % 2 == 0:
                    rep = dev.bench(name, runs=runs, warmup=warmup, threads=threads)
                    b = bare_bench(out / "model.onnx", feeds, runs, warmup, threads)
                else:
                    b = bare_bench(out / "model.onnx", feeds, runs, warmup, threads)
                    rep = dev.bench(name, runs=runs, warmup=warmup, threads=threads)
                assert rep["threads"] == threads and rep["runs"] == runs, rep
                a = rep["latency_ms"]
                agent_p50.append(a["p50"])
                bare_p50.append(b["p50"])
                rounds.append(
                    {
                        "agent": {k: a[k] for k in ("p50", "p90", "iqr", "min", "mean")},
                        "bare": {k: b[k] for k in ("p50", "p90", "iqr", "min")},
                        "ratio": a["p50"] / b["p50"],
                    }
                )
                C.log(f"{name} T={threads} round {r + 1}: agent p50 {a['p50']:.3f} ms, bare p50 {b['p50']:.3f} ms")
            a_med, b_med = float(np.median(agent_p50)), float(np.median(bare_p50))
            ratio = a_med / b_med
            per_round = [x["ratio"] for x in rounds]
            a_iqr = float(np.median([x["agent"]["iqr"] for x in rounds]))
            b_iqr = float(np.median([x["bare"]["iqr"] for x in rounds]))
            paired = float(np.median(per_round))
            results.append(
                {
                    "model": name,
                    "threads": threads,
                    "runs": runs,
                    "warmup": warmup,
                    "rounds": n_rounds,
                    "agent_p50_ms": a_med,
                    "bare_p50_ms": b_med,
                    "agent_iqr_ms": a_iqr,
                    "bare_iqr_ms": b_iqr,
                    "ratio": ratio,
                    "ratio_per_round": per_round,
                    "median_paired_ratio": paired,
                    "paired_ratio_p10_p90": [C.pct(per_round, 10), C.pct(per_round, 90)],
                    "goal": 1.02,
                    "meets_goal": ratio <= 1.02,
                    "per_round": rounds,
                }
            )
            rows.append(
                [
                    name,
                    threads,
                    f"{runs}/{warmup}",
                    n_rounds,
                    f"{a_med:.3f} ({a_iqr:.3f})",
                    f"{b_med:.3f} ({b_iqr:.3f})",
                    f"**{ratio:.3f}**",
                    f"{paired:.3f} ({C.pct(per_round, 10):.3f}–{C.pct(per_round, 90):.3f})",
                    "yes" if ratio <= 1.02 else "no",
                ]
            )

    C.write_results(NAME, {"benchmark": NAME, "environment": env, "results": results})
    print(
        f"### Agent bench vs bare ONNX Runtime (interleaved rounds, "
        f"{env['cpu_count']}-core {env['machine']}, onnxruntime {env['onnxruntime']})\n"
    )
    print(
        C.table(
            [
                "model",
                "threads",
                "runs/warm-up",
                "rounds",
                "agent p50 ms (IQR)",
                "bare ORT p50 ms (IQR)",
                "ratio of medians agent/bare",
                "median per-round ratio (p10–p90)",
                "≤ 1.02",
            ],
            rows,
        )
    )
    print(
        "\np50 = median over rounds of each run's p50; IQR = median over rounds of each run's IQR; "
        "the goal applies to the ratio of medians."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
