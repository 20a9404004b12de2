"""Paddle Lite and MindSpore Lite (tool-environment backends) on PP-OCR cls and MobileNetV2, on this host.

Per (model, backend, precision): bundle size, fidelity against the FP32 ONNX reference (PP-OCR: 400
rendered text lines with labels; MobileNetV2: synthetic inputs), the build's host latency p50 (the
runtime driven through the host worker's pipe), the agent's benchmark p50 (``deploy --local``: the
agent under the tool environment's Python, fresh process, warm-up excluded) and the agent-vs-bare
ratio: the same model file run by the runtime's own Python API in a plain loop under the same
interpreter, same input, interleaved rounds.
"""

import argparse
import json
import statistics
import subprocess
import sys

import _common as C

NAME = "paddle_mindspore"
CONFIGS = [("paddlelite", "fp32"), ("mindspore-lite", "fp32"), ("mindspore-lite", "fp16")]

# A bare loop with the runtime's own API (the same calls the agent's runner makes, nothing else).
BARE = r"""
import json, sys, time
import numpy as np
model, sample, backend = sys.argv[1], sys.argv[2], sys.argv[5]
runs, threads, layout = int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[6])
with np.load(sample) as z:
    feed = {k: z[k] for k in z.files}
if backend == "paddlelite":
    from paddlelite.lite import MobileConfig, create_paddle_predictor
    c = MobileConfig(); c.set_model_from_file(model); p = create_paddle_predictor(c)
    names = list(p.get_input_names())
    def run():
        for k, (n, a) in enumerate(sorted(feed.items())):
            t = p.get_input_by_name(layout.get(n, names[k]))
            t.resize(list(a.shape)); t.set_float_data(a.ravel().tolist())
        p.run()
        return [p.get_output(i).numpy() for i in range(len(p.get_output_names()))]
else:
    import mindspore_lite as ms
    ctx = ms.Context(); ctx.target = ["cpu"]; ctx.cpu.thread_num = threads
    m = ms.Model(); m.build_from_file(model, ms.ModelType.MINDIR_LITE, ctx); ins = m.get_inputs()
    def run():
        for t, (n, a) in zip(ins, sorted(feed.items())):
            t.set_data_from_numpy(np.ascontiguousarray(a.transpose(0, 2, 3, 1) if layout.get(n) == "NHWC" else a))
        return [o.get_data_to_numpy() for o in m.predict(ins)]
for _ in range(20):
    run()
times = []
for _ in range(runs):
    t0 = time.perf_counter(); run(); times.append((time.perf_counter() - t0) * 1000)
times.sort()
print(json.dumps({"p50": times[len(times) // 2]}))
sys.stdout.flush()
import os; os._exit(0)
"""


def bare_p50(py, model_path, sample, runs, threads, backend, layout):
    p = subprocess.run(
        [py, "-I", "-c", BARE, str(model_path), str(sample), str(runs), str(threads), backend, json.dumps(layout)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if p.returncode != 0:
        raise RuntimeError(f"bare loop failed: {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["p50"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import edgekit
    from edgekit import converters, toolenvs
    from edgekit.deployer import open_device

    work = C.workspace(NAME)
    env = C.environment()
    val = C.textlines_npz(work / "val.npz", 400, 0)
    from make_mobilenetv2 import make_mobilenetv2

    mnv2 = work / "mobilenetv2.onnx"
    make_mobilenetv2(mnv2)
    models = [("ppocr_cls", C.PPOCR, C.PPOCR_SHAPE, val), ("mobilenetv2", mnv2, C.MNV2_SHAPE, None)]
    devices, rows, results = {}, [], []
    for backend, precision in CONFIGS:
        be = converters.get(backend)
        py = toolenvs.ensure(be.toolenv, log=C.log)
        if backend not in devices:
            root = work / f"device-{backend}"
            devices[backend] = open_device("local", device_root=str(root), backend=backend)
            import atexit

            atexit.register(C.stop_agent, devices[backend], root)
        dev = devices[backend]
        for model_name, src, shape, data in models:
            out = work / f"{model_name}-{backend}-{precision}"
            C.log(f"build {model_name} {backend} {precision}")
            try:
                r = edgekit.build(
                    src,
                    "host",
                    out,
                    backend=backend,
                    precision=precision,
                    val=data,
                    input_shapes=shape,
                    name=f"{model_name}-{backend}-{precision}",
                    allow_degraded=True,
                )
            except edgekit.EdgekitError as e:
                results.append({"model": model_name, "backend": backend, "precision": precision, "error": str(e)})
                rows.append(
                    [model_name, backend, precision, "–", "–", "–", "–", f"failed: {str(e).splitlines()[0][:60]}"]
                )
                continue
            from edgekit.deployer import deploy

            deploy(out, dev, bench=False)
            manifest = json.loads((out / "manifest.json").read_text())
            layout = manifest["runner"].get("inputs") or manifest["runner"].get("input_layout") or {}
            agent, bare = [], []
            for i in range(args.rounds):
                for kind in ("agent", "bare") if i % 2 == 0 else ("bare", "agent"):
                    if kind == "agent":
                        rep = dev.bench(r["name"], runs=args.runs, warmup=20, threads=args.threads)
                        agent.append(rep["latency_ms"]["p50"])
                    else:
                        bare.append(
                            bare_p50(
                                py,
                                out / manifest["model"],
                                out / "sample_inputs.npz",
                                args.runs,
                                args.threads,
                                backend,
                                layout,
                            )
                        )
            steps = r["fidelity"]["steps"]
            m = next(iter(steps[-1]["outputs"].values()))
            paired = sorted(a / b for a, b in zip(agent, bare))
            host = r.get("host_latency") or {}
            res = {
                "model": model_name,
                "backend": backend,
                "precision": precision,
                "size_bytes": r["model_size_bytes"],
                "source_size_bytes": r["source_size_bytes"],
                "host_latency_p50_ms": host.get("built_p50_ms"),
                "host_latency": host,
                "fidelity": {s["step"]: next(iter(s["outputs"].values())) for s in steps},
                "fidelity_passed": r["fidelity"]["passed"],
                "fidelity_samples": r["fidelity"]["data"]["samples"],
                "agent_p50_ms": statistics.median(agent),
                "bare_p50_ms": statistics.median(bare),
                "agent_rounds": agent,
                "bare_rounds": bare,
                "ratio": statistics.median(paired),
                "paired_ratios": paired,
                "device_python": rep["device"]["python"],
                "accelerator": rep.get("accelerator"),
                "device_fidelity": rep.get("device_fidelity"),
                "warnings": rep.get("warnings"),
            }
            results.append(res)
            acc = (
                f"acc {m['accuracy']:.2f}% (fp32 ONNX {m['accuracy_reference']:.2f}%), "
                if m.get("accuracy") is not None
                else ""
            )
            rows.append(
                [
                    model_name,
                    backend,
                    precision,
                    f"{r['model_size_bytes'] / 1024:.0f}",
                    f"{host.get('built_p50_ms', float('nan')):.2f}",
                    f"{res['agent_p50_ms']:.2f} ({min(agent):.2f}–{max(agent):.2f})",
                    f"{res['bare_p50_ms']:.2f}",
                    f"**{res['ratio']:.3f}** ({paired[0]:.2f}–{paired[-1]:.2f}); {acc}cos {m['cosine_mean']:.6f}, "
                    f"top-1 {100 * m['top1_agreement']:.1f}%" + ("" if r["fidelity"]["passed"] else ", BELOW GATE"),
                ]
            )
    C.write_results(NAME, {"benchmark": NAME, "environment": env, "threads": args.threads, "results": results})
    print(
        f"### Paddle Lite and MindSpore Lite on this host ({env['cpu_count']}-core {env['machine']}, "
        f"{args.threads} thread(s) asked, {args.rounds} interleaved rounds of {args.runs} runs)\n"
    )
    print(
        C.table(
            [
                "model",
                "backend",
                "precision",
                "size KB",
                "host p50 ms (build, via pipe)",
                "agent p50 ms (range)",
                "bare p50 ms",
                "agent / bare (range); fidelity",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
