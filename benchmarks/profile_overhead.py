"""What `edgekit profile` costs: each runtime's profiler against plain runs, and how well the per-node sum adds up.

For the PP-OCR text-line classifier (host, fp32, x=1,3,48,192) built for ONNX Runtime, OpenVINO and MNN and
deployed to a local agent, `edgekit.profile(..., runs=R)` `--rounds` times. Each profile alternates a plain run
and a profiled run R times in one fresh process on the device, so both see the same load; the agent reports the
median of each (`end_to_end_ms.p50`, `profiled_ms.p50`). Per backend the table gives the median over rounds of:

- the plain and the profiled median (ms), and their ratio (`profiler_overhead`): what the profiler costs a run;
- `node_sum_ratio`: the per-node medians summed against the plain median (docs/PROFILING.md says why it is not 1).

Goal: the profiler costs a run at most 1.5x (ONNX Runtime's trace, OpenVINO's counters); MNN's Python callbacks
per operator are allowed 3x. Threads 1.
"""

import argparse
import statistics
import sys

import _common as C

NAME = "profile_overhead"
GOAL = {"ort": 1.5, "openvino": 1.5, "mnn": 3.0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=50, help="plain and profiled runs per profile")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)

    import edgekit
    from edgekit.deployer import deploy

    work = C.workspace(NAME, args.keep_cache)
    dev = C.open_local_device(work / "device")
    rows, results = [], {"benchmark": NAME, "environment": C.environment(), "runs": args.runs, "backends": {}}
    for backend in GOAL:
        bundle = work / backend
        C.log(f"build {backend}")
        edgekit.build(C.PPOCR, "host", bundle, precision="fp32", backend=backend, input_shapes=C.PPOCR_SHAPE)
        deploy(bundle, dev, bench=False)
        plain, profiled, overhead, ratio = [], [], [], []
        for k in range(args.rounds):
            r = edgekit.profile(bundle, dev, runs=args.runs, warmup=5, threads=1)
            plain.append(r["end_to_end_ms"]["p50"])
            profiled.append(r["profiled_ms"]["p50"])
            overhead.append(r["profiler_overhead"])
            ratio.append(r["node_sum_ratio"])
            C.log(f"  {backend} round {k + 1}: plain {plain[-1]:.3f} ms, profiled {profiled[-1]:.3f} ms")
        med = {
            "plain_p50_ms": statistics.median(plain),
            "profiled_p50_ms": statistics.median(profiled),
            "profiler_overhead": statistics.median(overhead),
            "overhead_range": [min(overhead), max(overhead)],
            "node_sum_ratio": statistics.median(ratio),
            "runtime": f"{r['runtime']} {r['runtime_version']}",
            "goal": GOAL[backend],
        }
        med["meets_goal"] = med["profiler_overhead"] <= GOAL[backend]
        results["backends"][backend] = med
        rows.append(
            [
                backend,
                med["runtime"],
                f"{med['plain_p50_ms']:.3f}",
                f"{med['profiled_p50_ms']:.3f}",
                f"{med['profiler_overhead']:.2f} ({min(overhead):.2f}..{max(overhead):.2f})",
                f"<= {GOAL[backend]}",
                f"{med['node_sum_ratio']:.2f}",
            ]
        )
    C.write_results(NAME, results)
    print(
        C.table(
            ["backend", "runtime", "plain p50 ms", "profiled p50 ms", "overhead (range)", "goal", "node sum / e2e"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
