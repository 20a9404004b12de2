"""``edgekit build MODEL --profile P -o DIR`` (and ``--auto``: measure candidates on a device, keep the winner)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from edgekit_agent.runners.table import TABLE

from ..errors import EdgekitError, FidelityError
from .options import check_backend, output_options
from .output import emit, logger

#: ``--precision`` values, from the backends' capability table
PRECISION_CHOICES = ["auto", *TABLE.precisions()]


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("build", help="convert and shrink a model for a device profile into a bundle")
    s.add_argument(
        "model",
        help="the model: an .onnx file; a PyTorch .pt2 (ExportedProgram) or TorchScript .pt, exported to ONNX here "
        "(needs torch: pip install 'edgekit[torch]'); a TensorFlow SavedModel directory or Keras .keras/.h5 file "
        "(TensorFlow runs in a tool environment made on first use); a .tflite, deployed as it is (tflite backend); "
        "a Paddle inference model (.pdmodel + .pdiparams, or their directory), read in the paddlelite tool environment "
        "(docs/INTAKE.md)",
    )
    s.add_argument(
        "--profile",
        help="device profile (see `edgekit profiles`), or a .toml file; default: the configuration file's profile",
    )
    s.add_argument("-o", "--output", required=True, help="bundle directory to write")
    s.add_argument(
        "--backend",
        help="runtime to build for: "
        + ", ".join(n + " (default)" * (n == "ort") for n in TABLE.names())
        + " (see `edgekit backends`)",
    )
    s.add_argument(
        "--precision",
        default="auto",
        choices=PRECISION_CHOICES,
        help="auto: what the profile runs fast (int8 needs --calib); int8-dynamic: ort; "
        "int8-weights: openvino, mnn; int4-weights: mnn",
    )
    s.add_argument("--calib", help="calibration data: .npz/.npy, or a folder of images (with --preprocess)")
    s.add_argument("--val", help="validation data for the fidelity check (default: the calibration data)")
    s.add_argument("--preprocess", help='image preprocessing, e.g. "resize=224x224 scale=1/255 mean=0.5 std=0.5"')
    s.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D1,D2,...",
        help="an input's shape (repeatable); a dimension may be a range [MIN:MAX] or a set [A,B,C], e.g. "
        "x=1,3,[32:960],[32:960]: kept dynamic where the backend runs it, checked at min/typical/max (docs/SHAPES.md)",
    )
    s.add_argument(
        "--stream",
        action="append",
        metavar="INPUT=OUTPUT",
        help="a stateful model: OUTPUT feeds INPUT at the next step, e.g. state=stateN (repeatable); --calib/--val "
        "are then sequences (docs/STREAMS.md)",
    )
    s.add_argument(
        "--sample-axis",
        action="append",
        metavar="NAME=AXIS",
        help="the axis of an .npz array that counts samples, when not the first (e.g. state=1; repeatable)",
    )
    s.add_argument(
        "--input-value",
        action="append",
        metavar="NAME=VALUE",
        help="an input the data leaves out, the same for every sample (e.g. sr=16000; repeatable)",
    )
    s.add_argument("--name", help="model name on the device (default: the model file's stem)")
    s.add_argument("--min-cosine", type=float, help="fidelity threshold: minimum cosine similarity")
    s.add_argument("--min-top1", type=float, help="fidelity threshold: minimum top-1 agreement (0-1)")
    s.add_argument("--max-accuracy-drop", type=float, help="fidelity threshold: accuracy points (with labels)")
    s.add_argument(
        "--task",
        help="what the model is for, judged by its own metric (default: inferred from the model, the reason in the "
        "report): classification, detection[:yolov8|yolov5|yolox|picodet|ssd|nms][,conf=0.25,iou=0.45], "
        "segmentation, dense[,thresh=0.3], keypoints, ctc[,blank=0], embedding, vad[,thresh=0.5], generic "
        "(docs/TASKS.md)",
    )
    s.add_argument(
        "--metric",
        metavar="MODULE:FUNCTION",
        help="your own fidelity metric: f(reference_outputs, candidate_outputs, labels) -> score, higher is better "
        "(module name or path/to/file.py); it gates every step",
    )
    s.add_argument("--min-score", type=float, help="fidelity threshold for the task metric or --metric")
    s.add_argument("--allow-degraded", action="store_true", help="write the bundle even if fidelity fails (marked)")
    s.add_argument(
        "--no-keep-head-float",
        dest="keep_head_float",
        action="store_false",
        help="int8: judge the plain quantized model only; by default a detector or segmenter whose task metric fails "
        "is quantized again with its decoder tail (box decode, score concat, final sigmoids) in float",
    )
    s.add_argument(
        "--budget",
        help="int8 with the most sensitive layers kept float until the loss fits: accuracy "
        "points (1pt, 0.5pt: needs labels), cos=0.999, top1=0.99, the task's score (score=0.99) or a task "
        "metric (map50=1pt, mask_iou=0.9, ...)",
    )
    s.add_argument(
        "--prune",
        type=float,
        metavar="RATIO",
        help="prune before converting: remove this fraction (0-1) of the prunable channels, e.g. 0.3",
    )
    s.add_argument(
        "--prune-mode",
        choices=["structured", "unstructured"],
        help="structured (default): remove channels, the model gets smaller and faster; "
        "unstructured: zero the smallest weights (smaller compressed)",
    )
    s.add_argument(
        "--prune-recipe", metavar="TOML", help="pruning recipe: mode, ratio, [layers] name = ratio, skip = [...]"
    )
    s.add_argument(
        "--auto",
        action="store_true",
        help="build every backend x precision x pruning level the profile supports, measure the ones that "
        "keep fidelity on the device (--target) and write the winner of the latency/size/accuracy front",
    )
    s.add_argument(
        "--target",
        metavar="URL",
        help="--auto: device to measure on: local:// (default), ssh://USER@HOST[:PORT], adb://SERIAL",
    )
    s.add_argument(
        "--backends",
        metavar="B1,B2",
        help="--auto: only these backends (default: all the profile runs)",
    )
    s.add_argument("--prune-levels", metavar="R1,R2", help="--auto: pruning levels to try (default 0,0.25)")
    s.add_argument("--auto-runs", type=int, help="--auto: timed runs per round and candidate (default 50)")
    s.add_argument("--auto-rounds", type=int, help="--auto: interleaved measuring rounds (default 3)")
    s.add_argument("--device-python", help="--auto: Python on the target device")
    s.add_argument("--device-root", help="--auto: agent directory on the target device")
    s.add_argument("--no-cache", action="store_true", help="convert again even if the inputs are unchanged")
    output_options(s, "print the build report as one JSON object")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..builder import build
    from ..intake_tflite import is_tflite
    from ..report import build_text

    log = logger(args)
    if args.auto:
        return _run_auto(args, log)
    auto_only = [
        flag
        for flag, value in (
            ("--target", args.target),
            ("--backends", args.backends),
            ("--prune-levels", args.prune_levels),
            ("--auto-runs", args.auto_runs),
            ("--auto-rounds", args.auto_rounds),
            ("--device-python", args.device_python),
            ("--device-root", args.device_root),
        )
        if value is not None
    ]
    if auto_only:
        raise EdgekitError(
            f"{auto_only[0]} works only with --auto (it measures candidates on a device); "
            f"add --auto, or drop {auto_only[0]}"
        )
    check_backend(args.backend)
    try:
        report = build(
            args.model,
            args.profile,
            args.output,
            backend=args.backend or ("tflite" if is_tflite(args.model) else "ort"),
            precision=args.precision,
            calib=args.calib,
            val=args.val,
            preprocess=args.preprocess,
            input_shapes=args.input_shape,
            stream=args.stream,
            sample_axes=args.sample_axis,
            input_values=args.input_value,
            name=args.name,
            min_cosine=args.min_cosine,
            min_top1=args.min_top1,
            max_accuracy_drop=args.max_accuracy_drop,
            allow_degraded=args.allow_degraded,
            task=args.task,
            metric=args.metric,
            min_score=args.min_score,
            keep_head_float=args.keep_head_float,
            budget=args.budget,
            prune=args.prune,
            prune_mode=args.prune_mode,
            prune_recipe=args.prune_recipe,
            use_cache=not args.no_cache,
            log=log,
        )
    except FidelityError as e:
        if args.json and e.report:
            emit(args, {"error": str(e), "fidelity_step": e.report}, None)
        raise
    emit(args, report, build_text)
    return 0


def _run_auto(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    from ..auto import DEFAULT_PRUNE_LEVELS, auto_build, auto_text

    def floats(text: str) -> tuple[float, ...]:
        try:
            return tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise EdgekitError(f"--prune-levels {text!r}: give fractions separated by commas, e.g. 0,0.25") from None

    if args.prune is not None or args.prune_recipe:
        raise EdgekitError(
            "--auto tries pruning levels itself: use --prune-levels 0,0.25 instead of "
            + ("--prune" if args.prune is not None else "--prune-recipe")
        )
    if args.prune_mode is not None:
        raise EdgekitError(
            "--auto tries pruning levels itself (structured): drop --prune-mode, or build without --auto"
        )
    if not str(args.model).lower().endswith(".onnx"):
        raise EdgekitError(
            f"--auto builds from an ONNX model; {args.model} is not one: build it without --auto (a PyTorch model is "
            "exported and a .tflite taken as given, docs/INTAKE.md), then run --auto on the exported .onnx"
        )
    if args.stream:
        raise EdgekitError("--auto does not build streams yet: build each backend with --stream without --auto")
    if args.sample_axis or args.input_value:
        raise EdgekitError(
            "--sample-axis and --input-value are not taken by --auto: save the data as a folder of .npz files "
            "(one sample each, docs/INPUTS.md), or build one configuration without --auto"
        )
    if args.backend is not None:
        raise EdgekitError("--auto tries every backend the profile runs: use --backends B1,B2 instead of --backend")
    if args.allow_degraded:
        raise EdgekitError(
            "--auto writes only a candidate that keeps fidelity: drop --allow-degraded, "
            "or build one configuration without --auto"
        )
    report = auto_build(
        args.model,
        args.profile,
        args.output,
        device=args.target or "local://",
        calib=args.calib,
        val=args.val,
        preprocess=args.preprocess,
        input_shapes=args.input_shape,
        name=args.name,
        budget=args.budget,
        backends=[b for b in (args.backends or "").split(",") if b] or None,
        precisions=None if args.precision == "auto" else [args.precision],
        prune_levels=floats(args.prune_levels) if args.prune_levels else DEFAULT_PRUNE_LEVELS,
        runs=50 if args.auto_runs is None else args.auto_runs,
        rounds=3 if args.auto_rounds is None else args.auto_rounds,
        device_python=args.device_python,
        device_root=args.device_root,
        use_cache=not args.no_cache,
        log=log,
        min_cosine=args.min_cosine,
        min_top1=args.min_top1,
        max_accuracy_drop=args.max_accuracy_drop,
        task=args.task,
        metric=args.metric,
        min_score=args.min_score,
    )
    emit(args, report, auto_text)
    return 0
