"""Per-request overhead of the agent's local HTTP API.

The tiny 16x16 CNN of tests/harness/models.py (``tiny_cnn``, fp32, host) is deployed to a local
agent (temp dir) and loaded with 1 thread. Then N (default 500) requests of each kind,
binary and JSON alternating, each timed on the client around the whole call:

* binary: ``AgentClient.infer(name, {"input": x}, with_meta=True)``
  (``application/x-edgekit-tensors``); the response header carries ``inference_ms``;
* JSON: ``AgentClient.infer_json(name, {"input": {"dtype", "shape", "data"}})``;
  the response body carries ``inference_ms``.

overhead = client wall time - the agent's own ``inference_ms`` for the same request
(HTTP, encoding/decoding on both sides, input checks, dispatch). Reported: p50 / p90.
Goal: binary p50 <= 0.3 ms.
"""

import argparse
import sys
import time

import _common as C
import numpy as np

NAME = "api_overhead"
GOAL_MS = 0.3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500, help="requests of each kind (default 500)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of the loaded model (default 1)")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)

    from harness.models import tiny_calib, tiny_cnn

    import edgekit
    from edgekit.deployer import deploy

    work = C.workspace(NAME, args.keep_cache)
    env = C.environment()
    model = tiny_cnn(work / "tiny_cnn.onnx")
    calib = tiny_calib(work / "tiny_calib.npz")
    out = work / "bundle"
    edgekit.build(model, "host", out, precision="fp32", calib=calib, input_shapes=["input=1,3,16,16"], name="tiny")
    dev = C.open_local_device(work / "device")
    deploy(out, dev, bench=False)
    client = dev.client
    client.load("tiny", threads=args.threads)

    with np.load(out / "sample_inputs.npz", allow_pickle=False) as z:
        x = np.ascontiguousarray(z["input"])
    json_inputs = {"input": {"dtype": "float32", "shape": list(x.shape), "data": x.ravel().tolist()}}

    # Warm-up, and check both paths give the same answer.
    for _ in range(args.warmup):
        outs, meta = client.infer("tiny", {"input": x}, with_meta=True)
        j = client.infer_json("tiny", json_inputs)
    np.testing.assert_allclose(
        np.asarray(j["outputs"]["probs"]["data"], np.float32).reshape(outs["probs"].shape), outs["probs"], rtol=1e-6
    )

    clock = time.perf_counter
    rec = {"binary": {"total": [], "inference": [], "queue": []}, "json": {"total": [], "inference": [], "queue": []}}
    # Blocks of 50 requests per encoding, alternating: one request of the other kind in between
    # (a JSON body is ~100x larger) would otherwise tax every measured request with its cache misses.
    block = 50
    order = [
        (kind, i)
        for b in range(0, args.n, block)
        for kind in (("binary", "json") if (b // block) % 2 == 0 else ("json", "binary"))
        for i in range(b, min(b + block, args.n))
    ]
    for kind, _ in order:
        if kind == "binary":
            t0 = clock()
            _, meta = client.infer("tiny", {"input": x}, with_meta=True)
            t1 = clock()
        else:
            t0 = clock()
            meta = client.infer_json("tiny", json_inputs)
            t1 = clock()
        r = rec[kind]
        r["total"].append((t1 - t0) * 1000.0)
        r["inference"].append(meta["inference_ms"])
        r["queue"].append(meta["queue_ms"])

    results, rows = {}, []
    for kind, r in rec.items():
        total, inf = np.asarray(r["total"]), np.asarray(r["inference"])
        over = total - inf
        results[kind] = {
            "overhead_ms": C.summary(over),
            "total_ms": C.summary(total),
            "inference_ms": C.summary(inf),
            "server_queue_ms": C.summary(r["queue"]),
            "requests": len(total),
        }
        o = results[kind]["overhead_ms"]
        rows.append(
            [
                kind,
                len(total),
                f"**{o['p50']:.3f}**",
                f"{o['p90']:.3f}",
                f"{results[kind]['total_ms']['p50']:.3f}",
                f"{results[kind]['inference_ms']['p50']:.3f}",
                f"{results[kind]['server_queue_ms']['p50']:.3f}",
                ("yes" if o["p50"] <= GOAL_MS else "no") if kind == "binary" else "–",
            ]
        )

    C.write_results(
        NAME,
        {
            "benchmark": NAME,
            "environment": env,
            "goal_ms": GOAL_MS,
            "threads": args.threads,
            "input_shape": list(x.shape),
            "results": results,
            "meets_goal": results["binary"]["overhead_ms"]["p50"] <= GOAL_MS,
        },
    )
    print(
        f"### Agent API overhead per request (tiny 16x16 CNN, {args.n} requests each, interleaved; "
        f"{env['cpu_count']}-core {env['machine']}, Python {env['python']})\n"
    )
    print(
        C.table(
            [
                "encoding",
                "requests",
                "overhead p50 ms",
                "overhead p90 ms",
                "client total p50 ms",
                "agent inference_ms p50",
                "agent queue_ms p50",
                "≤ 0.3 ms",
            ],
            rows,
        )
    )
    print(
        "\noverhead = client wall time of the call − the agent's reported inference_ms for the same request; "
        "queue_ms = agent time from handler start to inference start (body read, decode, input checks)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
