"""A Paddle inference model read, run and exported to ONNX (paddle2onnx), in the paddlelite tool environment.

``python -I paddle_intake.py request.json result.json``; standalone: stdlib + the environment's paddlepaddle,
paddle2onnx and numpy.

request: {"action": "inspect" | "run" | "export", "model": path.pdmodel, "params": path.pdiparams, ...}
- inspect ({"opt_dir"}) -> {"inputs": [{name, shape, dtype}], "outputs": [...], "ops": [{type, outputs}],
  "training": reason|None, "versions": {...}, "for_opt": {model, params, flatten_as_reshape2} or {}: a copy for
  Paddle Lite's opt where the program as saved would crash it}
- run ({"samples": in.npz, "count": n, "out": out.npz}): the original run by Paddle Inference (its graph
  optimizations off: the program as written), sample i's outputs saved as ``{i}/{output name}``.
- export ({"onnx": path, "opset": n, "info": path, "opt_dir"}) -> {"info": inspect's result, "opset": the one
  written, "seconds", "paddle2onnx"}: inspect and export in one process. paddle2onnx aborts the process on an op it
  lacks after printing "not supported yet, including OP,": the caller reads that from stdout, and inspect's result
  from "info", written before the export.
"""

import json
import os
import sys
import time
from typing import Any, Dict, List

TRAINING_OPS = ("sgd", "adam", "adamw", "momentum", "lamb", "rmsprop", "adagrad")


def _dtype(var: Any) -> str:
    return str(var.dtype).replace("paddle.", "").replace("VarType.", "").lower().replace("fp32", "float32")


def _load(req: Dict[str, Any]) -> Any:
    import paddle

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    model, params = req["model"], req["params"]
    try:
        if model[: -len(".pdmodel")] == params[: -len(".pdiparams")]:
            return paddle.static.load_inference_model(model[: -len(".pdmodel")], exe)
        return paddle.static.load_inference_model(  # files of other stems: the directory and the two names
            os.path.dirname(model),
            exe,
            model_filename=os.path.basename(model),
            params_filename=os.path.relpath(params, os.path.dirname(model)),
        )
    except Exception as e:
        text = str(e).strip().splitlines()
        raise SystemExit(
            "Paddle %s cannot load %s as an inference model: %s"
            % (paddle.__version__, req["model"], text[0] if text else type(e).__name__)
        ) from None


def _for_opt(program: Any, feeds: List[str], fetches: List[Any], out_dir: str) -> Dict[str, Any]:
    """The program as Paddle Lite 2.13's ``opt`` reads it: ``flatten_contiguous_range`` without an ``XShape``
    output (Paddle >= 2.5 saves it so) crashes opt, so each becomes the ``reshape2`` it is (with its XShape) in
    a copy saved to ``out_dir``. {} when nothing needed it."""
    import paddle

    block = program.global_block()
    n = 0
    for op in block.ops:
        if op.type != "flatten_contiguous_range" or "XShape" in op.output_names:
            continue
        x = block.var(op.input("X")[0])
        rank = len(x.shape)
        start, stop = op.attr("start_axis") % rank, op.attr("stop_axis") % rank
        xshape = block.create_var(name=op.output("Out")[0] + ".xshape", shape=[0] + list(x.shape), dtype=x.dtype)
        desc = op.desc
        desc.set_type("reshape2")
        for name in ("start_axis", "stop_axis"):
            desc.remove_attr(name)
        desc._set_attr("shape", [0] * start + [-1] + [0] * (rank - 1 - stop))
        desc.set_output("XShape", [xshape.name])
        n += 1
    if not n:
        return {}
    prefix = os.path.join(out_dir, "inference")
    exe = paddle.static.Executor(paddle.CPUPlace())
    paddle.static.save_inference_model(prefix, [block.var(f) for f in feeds], fetches, exe, program=program)
    return {"model": prefix + ".pdmodel", "params": prefix + ".pdiparams", "flatten_as_reshape2": n}


def _training(path: str) -> Any:
    """Why the program at ``path`` is a training program (read alone, before its parameters), or None."""
    from paddle.base import core

    with open(path, "rb") as f:
        desc = core.ProgramDesc(f.read())
    types = set(desc.block(b).op(i).type() for b in range(desc.num_blocks()) for i in range(desc.block(b).op_size()))
    grads = sorted(t for t in types if t.endswith("_grad") or t in TRAINING_OPS)
    if grads:
        return "it holds training ops (%s)" % ", ".join(grads[:5])
    if "feed" not in types or "fetch" not in types:
        return "it has no feed and fetch ops (the inputs and outputs an inference model declares)"
    return None


def inspect(req: Dict[str, Any]) -> Dict[str, Any]:
    import paddle

    try:
        import paddle2onnx

        p2o = paddle2onnx.__version__
    except Exception:
        p2o = None
    versions = {"paddlepaddle": paddle.__version__, "paddle2onnx": p2o}
    try:
        training = _training(req["model"])
    except Exception as e:
        text = str(e).strip().splitlines()
        raise SystemExit(
            "Paddle %s cannot read %s as a Paddle program: %s"
            % (paddle.__version__, req["model"], text[0] if text else type(e).__name__)
        ) from None
    if training:
        return {"training": training, "versions": versions}
    program, feeds, fetches = _load(req)
    block = program.global_block()
    ops: List[Dict[str, Any]] = []
    for op in block.ops:
        if op.type not in ("feed", "fetch"):
            ops.append({"type": op.type, "outputs": [n for k in op.output_names for n in op.output(k)]})

    def spec(var: Any) -> Dict[str, Any]:
        return {"name": var.name, "shape": [int(d) for d in var.shape], "dtype": _dtype(var)}

    return {
        "inputs": [spec(block.var(n)) for n in feeds],
        "outputs": [spec(v) for v in fetches],
        "ops": ops,
        "training": None,
        "versions": versions,
        "for_opt": _for_opt(program, feeds, fetches, req["opt_dir"]),
    }


def run(req: Dict[str, Any]) -> Dict[str, Any]:
    import numpy as np
    import paddle.inference as pi

    config = pi.Config(req["model"], req["params"])
    config.disable_gpu()
    config.switch_ir_optim(False)  # the program as written, not Paddle Inference's fused rewrite of it
    if not req.get("mkldnn", True):  # Paddle 3.3.1 cannot run PIR programs with oneDNN on
        config.disable_mkldnn()
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    data = np.load(req["samples"])
    names = predictor.get_input_names()
    out: Dict[str, Any] = {}
    for i in range(int(req["count"])):
        for n in names:
            h = predictor.get_input_handle(n)
            a = np.ascontiguousarray(data["%d/%s" % (i, n)])
            h.reshape(list(a.shape))
            h.copy_from_cpu(a)
        predictor.run()
        for n in predictor.get_output_names():
            out["%d/%s" % (i, n)] = predictor.get_output_handle(n).copy_to_cpu()
    np.savez(req["out"], **out)
    return {"outputs": predictor.get_output_names()}


def export(req: Dict[str, Any]) -> Dict[str, Any]:
    """inspect, its result written to ``req["info"]`` first (paddle2onnx may abort the process), then the export
    unless the program is a training one."""
    import onnx
    import paddle2onnx

    info = inspect(req)
    with open(req["info"], "w") as f:
        json.dump(info, f, indent=2)
    if info["training"]:
        return {"info": info}
    t0 = time.time()
    paddle2onnx.export(req["model"], req["params"], req["onnx"], opset_version=int(req["opset"]))
    if not os.path.isfile(req["onnx"]):
        raise SystemExit("paddle2onnx wrote no ONNX model (see its messages above)")
    model = onnx.load(req["onnx"], load_external_data=False)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    seconds = round(time.time() - t0, 2)
    return {"info": info, "opset": int(opset), "seconds": seconds, "paddle2onnx": paddle2onnx.__version__}


def main(req_path: str, res_path: str) -> None:
    with open(req_path) as f:
        req = json.load(f)
    result = {"inspect": inspect, "run": run, "export": export}[req["action"]](req)
    with open(res_path, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
