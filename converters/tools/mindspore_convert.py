"""ONNX -> MindSpore Lite ``.ms`` (``mindspore_lite.Converter``, MINDIR_LITE), FP32 or FP16 weights.

Runs in the mindspore-lite tool environment (Python 3.7): ``python -I mindspore_convert.py request.json
result.json``. Standalone: stdlib + the environment's packages (mindspore_lite, onnx, numpy).

- MindSpore Lite 2.0.0 converts ONNX ``HardSigmoid`` as ``relu6(x + 3) / 6`` whatever its
  ``alpha``/``beta`` (measured: PP-OCR cls, exported from Paddle with alpha 0.2, is off by up to
  0.43 in its softmax). Such nodes are first rewritten to ``Clip(x * alpha + beta, 0, 1)`` (Clip's
  bounds are inputs from opset 11 on, attributes before).
- ``HardSwish``, ``GreaterOrEqual`` and ``LessOrEqual`` are unsupported by its ONNX parser and are rewritten
  into ops it has (``rewrite_unsupported``); for any other failure the converter's native log is read for the
  unsupported ops or the node it failed on, and that is the step's error (``explain``).
- The converted model takes NHWC where the ONNX model took NCHW; the result lists the .ms
  inputs' shapes so the build can record the layout for the runner.

request: {"onnx", "output" (path without .ms), "fp16": bool}
result: {"model", "inputs": [{"name", "shape"}], "outputs": [names], "hardsigmoid_rewritten": n,
         "rewritten": {op: n}, "versions": {...}}
"""

import json
import os
import re
import sys
import tempfile
import time
from typing import Any, Dict, List

# ONNX Runtime (imported here or by the converters, onnxsim included) records telemetry unless this is set first
os.environ["ORT_DISABLE_TELEMETRY"] = "1"


def rewrite_hardsigmoid(model: Any) -> int:
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [11])
    nodes, count = [], 0
    for k, n in enumerate(g.node):
        if n.op_type != "HardSigmoid":
            nodes.append(n)
            continue
        attrs = dict((a.name, helper.get_attribute_value(a)) for a in n.attribute)
        alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
        p = "edgekit_hsig%d_" % k
        bounds = (("lo", 0.0), ("hi", 1.0)) if opset >= 11 else ()
        for name, v in (("alpha", alpha), ("beta", beta)) + bounds:
            g.initializer.append(numpy_helper.from_array(np.array(v, np.float32), p + name))
        clip = (
            helper.make_node("Clip", [p + "add", p + "lo", p + "hi"], [n.output[0]])
            if opset >= 11
            else helper.make_node("Clip", [p + "add"], [n.output[0]], min=0.0, max=1.0)
        )  # opset 6-10: attributes
        nodes += [
            helper.make_node("Mul", [n.input[0], p + "alpha"], [p + "mul"]),
            helper.make_node("Add", [p + "mul", p + "beta"], [p + "add"]),
            clip,
        ]
        count += 1
    del g.node[:]
    g.node.extend(nodes)
    return count


def rewrite_unsupported(model: Any) -> Dict[str, int]:
    """Rewrite the ONNX ops MindSpore Lite 2.0.0's converter lists as unsupported into ops it has (measured):
    ``HardSwish(x)`` -> ``x * HardSigmoid(x, 1/6, 0.5)`` (the HardSigmoid is then rewritten as above),
    ``GreaterOrEqual(a, b)`` -> ``Not(Less(a, b))``, ``LessOrEqual(a, b)`` -> ``Not(Greater(a, b))``."""
    from onnx import helper

    g = model.graph
    nodes: List[Any] = []
    counts: Dict[str, int] = {}
    for k, n in enumerate(g.node):
        p = "edgekit_ms%d_" % k
        if n.op_type == "HardSwish":
            nodes += [
                helper.make_node("HardSigmoid", [n.input[0]], [p + "hsig"], alpha=1.0 / 6, beta=0.5),
                helper.make_node("Mul", [n.input[0], p + "hsig"], [n.output[0]]),
            ]
        elif n.op_type in ("GreaterOrEqual", "LessOrEqual"):
            strict = "Less" if n.op_type == "GreaterOrEqual" else "Greater"
            nodes += [
                helper.make_node(strict, list(n.input), [p + "cmp"]),
                helper.make_node("Not", [p + "cmp"], [n.output[0]]),
            ]
        else:
            nodes.append(n)
            continue
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    del g.node[:]
    g.node.extend(nodes)
    return counts


_UNSUPPORTED = re.compile(r"OP TYPE: (\w+)")
_INFER = re.compile(r"InferShape failed, name: (\S+), type: (\w+)")
_ERROR = re.compile(r"\[ERROR\][^\[]*\[(?:[^\]]*/)?([^/\]:]+)[^\]]*\] \w+\] (.*)$")


def explain(said: str, what: str = "converter") -> str:
    """One line from the converter's log that says why it failed: the ops it does not support, the node whose shape
    it could not infer, or its first error."""
    ops = sorted(set(_UNSUPPORTED.findall(said)))
    if ops:
        return "the MindSpore Lite %s does not support the ONNX op(s) %s" % (what, ", ".join(ops))
    infer = _INFER.search(said)
    if infer:
        return "the MindSpore Lite %s could not infer the output shape of node %r (%s)" % ((what,) + infer.groups())
    first = ["%s (%s)" % (m.group(2), m.group(1)) for m in map(_ERROR.search, said.splitlines()) if m]
    return "the MindSpore Lite %s failed: %s" % (what, first[0] if first else "it logged no error")


def native(call: Any, what: str) -> Any:
    """``call()``, the native log MindSpore Lite writes to fd 2 meanwhile kept to name the cause if it fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    cap = tempfile.TemporaryFile()
    os.dup2(cap.fileno(), 2)
    failed = None
    try:
        return call()
    except RuntimeError as e:
        failed = e
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        cap.seek(0)
        said = cap.read().decode("utf-8", "replace")
        cap.close()
        sys.stderr.write(said)
        if failed is not None:
            raise SystemExit(explain(said, what))


def main(req_path: str, res_path: str) -> None:
    with open(req_path) as f:
        req = json.load(f)
    import mindspore_lite as mslite
    import onnx

    src = req["onnx"]
    model = onnx.load(src)
    others = rewrite_unsupported(model)
    rewritten = rewrite_hardsigmoid(model)
    for op, n in sorted(others.items()):
        sys.stderr.write("rewrote %d %s node(s) into ops the converter supports\n" % (n, op))
    if rewritten or others:
        src = os.path.join(os.path.dirname(os.path.abspath(req["output"])), "rewritten.onnx")
        onnx.save(model, src)
        sys.stderr.write("rewrote %d HardSigmoid node(s) as Clip(x * alpha + beta, 0, 1)\n" % rewritten)
    t0 = time.time()
    conv = mslite.Converter()
    conv.save_type = mslite.ModelType.MINDIR_LITE
    conv.optimize = "general"
    conv.weight_fp16 = bool(req.get("fp16"))
    sys.stderr.write("converting ONNX -> .ms (%s weights)\n" % ("fp16" if req.get("fp16") else "fp32"))
    native(lambda: conv.convert(fmk_type=mslite.FmkType.ONNX, model_file=src, output_file=req["output"]), "converter")
    seconds = time.time() - t0
    path = req["output"] + ".ms"
    if not os.path.isfile(path):
        raise SystemExit("the MindSpore Lite converter wrote no %s (see its messages above)" % path)
    ctx = mslite.Context()
    ctx.target = ["cpu"]
    ctx.cpu.thread_num = 1
    m = mslite.Model()
    native(lambda: m.build_from_file(path, mslite.ModelType.MINDIR_LITE, ctx), "runtime (loading the converted model)")
    result = {
        "model": path,
        "inputs": [{"name": t.name, "shape": list(t.shape)} for t in m.get_inputs()],
        "hardsigmoid_rewritten": rewritten,
        "rewritten": others,
        "seconds": round(seconds, 2),
        "versions": {"mindspore_lite": mslite.__version__, "onnx": onnx.__version__},
    }
    with open(res_path, "w") as f:
        json.dump(result, f, indent=2)
    # mindspore_lite 2.0.0 segfaults in its teardown at interpreter exit when a Converter and a Model were
    # both used in one process (measured): the result is written, so leave without the teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
