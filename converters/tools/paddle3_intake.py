"""A Paddle 3 inference model in the JSON program format (PIR) read, run and exported to ONNX (paddle2onnx 2.x), in
the paddle3 tool environment.

``python -I paddle3_intake.py request.json result.json``; standalone: stdlib + the environment's paddlepaddle 3,
paddle2onnx 2 and numpy. The requests and results are those of ``paddle_intake.py`` (``inspect``, ``run``,
``export``), less ``for_opt`` (Paddle Lite's ``opt`` does not read this format) and with no output var names in
``ops`` (a PIR value has none).

- run: Paddle Inference with its graph optimizations and oneDNN off (the program as written; Paddle 3.3's oneDNN
  executor cannot run some PIR attributes: "ConvertPirAttribute2RuntimeAttribute not support").
- export: paddle2onnx's own post-export passes are off (its default, Polygraphy's constant folding, installs
  onnx_graphsurgeon with pip at run time and takes a minute on a small model; its onnxoptimizer list names a pass
  onnxoptimizer does not know, so it does nothing). ``tidy`` runs onnxoptimizer here instead: paddle2onnx 2 writes
  the parameters as Constant nodes and puts an Identity before many ops, and X2Paddle 1.6 (the paddlelite build of
  the export) loses shapes at those Identity nodes (BatchNormalization after one fails: "list index out of range").
"""

import json
import os
import sys
import time
from typing import Any, Dict, List

PASSES = [
    "eliminate_deadend",
    "extract_constant_to_initializer",
    "eliminate_unused_initializer",
    "eliminate_duplicate_initializer",
    "eliminate_nop_cast",
]
CONTROL_FLOW = ("If", "Loop", "Scan")  # Identity nodes carry a loop body's values: kept where the graph has any
TRAINING_OPS = ("sgd", "adam", "adamw", "momentum", "lamb", "rmsprop", "adagrad")


def _dtype(dtype: Any) -> str:
    return str(dtype).replace("paddle.", "").replace("DataType.", "").lower()


def _load(req: Dict[str, Any]) -> Any:
    import paddle

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    model, params = req["model"], req["params"]
    try:
        if model[: -len(".json")] == params[: -len(".pdiparams")]:
            return paddle.static.load_inference_model(model[: -len(".json")], exe)
        return paddle.static.load_inference_model(
            os.path.dirname(model),
            exe,
            model_filename=os.path.basename(model),
            params_filename=os.path.relpath(params, os.path.dirname(model)),
        )
    except Exception as e:
        text = str(e).strip().splitlines()
        raise SystemExit(
            "Paddle %s cannot load %s as an inference model: %s"
            % (paddle.__version__, model, text[0] if text else type(e).__name__)
        ) from None


def inspect(req: Dict[str, Any]) -> Dict[str, Any]:
    import paddle
    import paddle2onnx

    versions = {"paddlepaddle": paddle.__version__, "paddle2onnx": paddle2onnx.__version__}
    program, _, _ = _load(req)
    ops = program.global_block().ops
    types = [op.name().split(".", 1)[-1] for op in ops]
    grads = sorted(set(t for t in types if t.rstrip("_").endswith("_grad") or t.rstrip("_") in TRAINING_OPS))
    if grads:
        return {"training": "it holds training ops (%s)" % ", ".join(grads[:5]), "versions": versions}
    if "data" not in types or "fetch" not in types:
        reason = "it has no data and fetch ops (the inputs and outputs an inference model declares)"
        return {"training": reason, "versions": versions}
    inputs: List[Dict[str, Any]] = []
    outputs: List[Dict[str, Any]] = []
    for op, t in zip(ops, types):
        if t == "data":
            v = op.result(0)
            inputs.append({"name": op.attrs()["name"], "shape": [int(d) for d in v.shape], "dtype": _dtype(v.dtype)})
        elif t == "fetch":
            v = op.operand_source(0)
            outputs.append({"name": op.attrs()["name"], "shape": [int(d) for d in v.shape], "dtype": _dtype(v.dtype)})
    skip = ("data", "fetch", "parameter", "combine", "full", "full_int_array")
    listed = [{"type": t, "outputs": []} for t in types if t not in skip]
    return {"inputs": inputs, "outputs": outputs, "ops": listed, "training": None, "versions": versions, "for_opt": {}}


def run(req: Dict[str, Any]) -> Dict[str, Any]:
    """The original run by Paddle Inference as ``paddle_intake.run`` does it (the script beside this one), with
    oneDNN off: Paddle 3.3.1 fails on these programs with it on."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with -I: its own folder is not on the path
    import paddle_intake

    return paddle_intake.run(dict(req, mkldnn=False))


def export(req: Dict[str, Any]) -> Dict[str, Any]:
    import onnx
    import paddle2onnx

    info = inspect(req)
    with open(req["info"], "w") as f:
        json.dump(info, f, indent=2)
    if info["training"]:
        return {"info": info}
    t0 = time.time()
    paddle2onnx.export(req["model"], req["params"], req["onnx"], opset_version=int(req["opset"]), optimize_tool="none")
    if not os.path.isfile(req["onnx"]):
        raise SystemExit("paddle2onnx wrote no ONNX model (see its messages above)")
    model = tidy(onnx.load(req["onnx"]))
    onnx.save(model, req["onnx"])
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    seconds = round(time.time() - t0, 2)
    return {"info": info, "opset": int(opset), "seconds": seconds, "paddle2onnx": paddle2onnx.__version__}


def tidy(model: Any) -> Any:
    """The export with its Constant parameters as initializers and, outside control flow, no Identity nodes."""
    import onnx
    import onnxoptimizer

    passes = list(PASSES)
    if not any(n.op_type in CONTROL_FLOW for n in model.graph.node):
        passes.append("eliminate_identity")
    tidied = onnxoptimizer.optimize(model, passes)
    onnx.checker.check_model(tidied, full_check=True)
    return tidied


def main(req_path: str, res_path: str) -> None:
    with open(req_path) as f:
        req = json.load(f)
    result = {"inspect": inspect, "run": run, "export": export}[req["action"]](req)
    with open(res_path, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
