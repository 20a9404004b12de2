"""ONNX -> Paddle inference model (x2paddle) -> Paddle Lite ``.nb`` per target (``opt``).

Runs in the paddlelite tool environment: ``python -I paddle_convert.py request.json result.json``.
Standalone: stdlib + the environment's packages (onnx, x2paddle, paddlepaddle, paddlelite).

- x2paddle's usage report (``ConverterCheck``, an HTTP GET to paddlepaddle.org.cn on every
  conversion) is off: ``disable_feedback=True``, and the class itself is replaced by a no-op
  and ``requests`` in x2paddle.utils by a stub that refuses, so no code path can send it.
- x2paddle writes Python code with the ONNX tensor names as identifiers and does not
  sanitize every character (PP-OCR's ``Constant@0`` is a SyntaxError there): every name is
  first rewritten to ``[A-Za-z0-9_]``; the mapping of the graph's inputs is returned.
- ``opt`` runs once per target with ``record_model_info`` (the tailored operator and kernel
  lists for a selective build of Paddle Lite).

request: {"onnx", "outdir", "targets": ["x86", "arm", ...]}
result: {"inputs": {onnx name: paddle name}, "outputs": [onnx names], "nb": {target: path},
         "ops": {target: [...]}, "kernels": {target: [...]}, "tailoring": {target: {"ops": path, "kernels": path}},
         "versions": {...}, "renamed": n}
"""

import json
import os
import re
import shutil
import sys
import time
from typing import Any, Dict, List, NoReturn, Set

# ONNX Runtime (imported here or by the converters, onnxsim included) records telemetry unless this is set first
os.environ["ORT_DISABLE_TELEMETRY"] = "1"


class _NoFeedback(object):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> None:
        pass


class _NoRequests(object):
    def get(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError("network access is disabled in edgekit's x2paddle run")

    post = request = get


def _sanitize(model: Any) -> Dict[str, str]:
    names: Dict[str, str] = {}
    used: Set[str] = set()

    def safe(n: str) -> str:
        if n == "":
            return n
        if n not in names:
            s = re.sub(r"[^A-Za-z0-9_]", "_", n)
            if not re.match(r"[A-Za-z_]", s):
                s = "t_" + s
            base, k = s, 1
            while s in used:
                s = "%s_%d" % (base, k)
                k += 1
            used.add(s)
            names[n] = s
        return names[n]

    g = model.graph
    for t in g.initializer:
        t.name = safe(t.name)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = safe(v.name)
    for node in g.node:
        for i, n in enumerate(node.input):
            node.input[i] = safe(n)
        for i, n in enumerate(node.output):
            node.output[i] = safe(n)
    return names


def _lines(path: str) -> List[str]:
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except OSError:
        return []


def main(req_path: str, res_path: str) -> None:
    with open(req_path) as f:
        req = json.load(f)
    import onnx
    import paddle
    import x2paddle
    import x2paddle.convert
    import x2paddle.utils

    x2paddle.utils.ConverterCheck = _NoFeedback
    x2paddle.convert.ConverterCheck = _NoFeedback
    x2paddle.utils.requests = _NoRequests()

    out = os.path.abspath(req["outdir"])
    os.makedirs(out, exist_ok=True)
    model = onnx.load(req["onnx"])
    inputs = [i.name for i in model.graph.input if i.name not in set(t.name for t in model.graph.initializer)]
    outputs = [o.name for o in model.graph.output]
    names = _sanitize(model)
    renamed = sum(1 for k, v in names.items() if k != v)
    src = os.path.join(out, "renamed.onnx")
    onnx.save(model, src)
    t0 = time.time()
    sys.stderr.write("x2paddle: ONNX -> Paddle inference model\n")
    x2paddle.convert.onnx2paddle(src, os.path.join(out, "paddle"), disable_feedback=True)
    x2paddle_s = time.time() - t0
    inf = os.path.join(out, "paddle", "inference_model")
    if not os.path.isfile(os.path.join(inf, "model.pdmodel")):
        raise SystemExit("x2paddle wrote no inference model (see its messages above)")

    from paddlelite.lite import Opt

    result: Dict[str, Any] = {
        "inputs": dict((n, "x2paddle_" + names[n]) for n in inputs),
        "outputs": outputs,
        "nb": {},
        "ops": {},
        "kernels": {},
        "tailoring": {},
        "renamed": renamed,
        "seconds": {"x2paddle": round(x2paddle_s, 2)},
    }
    for target in req["targets"]:
        t0 = time.time()
        sys.stderr.write("opt: Paddle inference model -> .nb for %s\n" % target)
        stem = os.path.join(out, "model_" + target.replace(",", "_"))
        o = Opt()
        o.set_model_file(os.path.join(inf, "model.pdmodel"))
        o.set_param_file(os.path.join(inf, "model.pdiparams"))
        o.set_valid_places(target)
        o.set_model_type("naive_buffer")
        o.set_optimize_out(stem)
        o.record_model_info(True)
        o.run()
        if not os.path.isfile(stem + ".nb"):
            raise SystemExit("opt wrote no .nb for target %s (see its messages above)" % target)
        tailoring = {}
        for kind, fname in (("ops", ".tailored_ops_list"), ("kernels", ".tailored_kernels_list")):
            src_list = os.path.join(stem, fname)
            if os.path.isfile(src_list):
                d = os.path.join(out, "tailoring_" + target.replace(",", "_"))
                if not os.path.isdir(d):
                    os.makedirs(d)
                dst = os.path.join(d, "paddlelite_tailored_%s.txt" % kind)
                shutil.copyfile(src_list, dst)
                tailoring[kind] = dst
        result["nb"][target] = stem + ".nb"
        result["tailoring"][target] = tailoring
        result["ops"][target] = _lines(tailoring.get("ops", ""))
        result["kernels"][target] = _lines(tailoring.get("kernels", ""))
        result["seconds"]["opt_" + target] = round(time.time() - t0, 2)

    def version(pkg: str) -> str:
        try:
            from importlib import metadata

            return metadata.version(pkg)
        except Exception:
            return "unknown"

    result["versions"] = {
        "x2paddle": x2paddle.__version__,
        "paddlepaddle": paddle.__version__,
        "paddlelite": version("paddlelite"),
        "onnx": onnx.__version__,
    }
    with open(res_path, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
