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

request: {"onnx", "outdir", "targets": ["x86", "arm", ...]}, or instead of "onnx" a Paddle inference model as given
         (no x2paddle): {"pdmodel", "pdiparams", "input_names", "output_names"}
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


class _Tee(object):
    """A stdout that also keeps its last lines, to find the error a library printed before it exited."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lines: List[str] = []

    def write(self, text: str) -> int:
        self.lines = (self.lines + text.splitlines())[-200:]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def error(self) -> str:
        pattern = re.compile(r"^\s*[A-Z]\w*(Error|Exception)\b")
        found = [ln.strip() for ln in self.lines if pattern.match(ln)]
        return found[-1] if found else "it printed no error (see its output above)"


def _check_ops(self: Any, node_names: Dict[str, str]) -> bool:
    """x2paddle's ``ONNXOpMapper.op_checker``, naming the nodes too (``node_names``: x2paddle's name -> the
    model's) and stopping with one line that says it (the original prints the op types to stdout and raises
    "Model is not supported yet.")."""
    missing: Dict[str, List[str]] = {}
    for node_name in self.graph.topo_sort:
        node = self.graph.get_node(node_name)
        op = node.layer_type
        if not (hasattr(self.opset, op) or op in self.opset.directly_map_ops or op in self.opset.elementwise_ops):
            missing.setdefault(op, []).append(node_names.get(node_name, node_name))
    if missing:
        import x2paddle

        raise SystemExit(
            "x2paddle %s has no mapping for the ONNX op(s) %s"
            % (
                x2paddle.__version__,
                "; ".join(
                    "%s (%d node(s), e.g. %r)" % (op, len(names), names[0]) for op, names in sorted(missing.items())
                ),
            )
        )
    return True


def _lines(path: str) -> List[str]:
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except OSError:
        return []


def _from_onnx(req: Dict[str, Any], out: str) -> Dict[str, Any]:
    """x2paddle: the ONNX model -> ``out/paddle/inference_model``; the result's first fields."""
    import onnx
    import x2paddle
    import x2paddle.convert
    import x2paddle.utils

    x2paddle.utils.ConverterCheck = _NoFeedback
    x2paddle.convert.ConverterCheck = _NoFeedback
    x2paddle.utils.requests = _NoRequests()

    model = onnx.load(req["onnx"])
    inputs = [i.name for i in model.graph.input if i.name not in set(t.name for t in model.graph.initializer)]
    outputs = [o.name for o in model.graph.output]
    names = _sanitize(model)
    from x2paddle.op_mapper.onnx2paddle.onnx_op_mapper import ONNXOpMapper

    node_names = dict(("x2paddle_" + n.output[0], n.name) for n in model.graph.node if n.name and n.output)
    ONNXOpMapper.op_checker = lambda self: _check_ops(self, node_names)
    renamed = sum(1 for k, v in names.items() if k != v)
    src = os.path.join(out, "renamed.onnx")
    onnx.save(model, src)
    t0 = time.time()
    sys.stderr.write("x2paddle: ONNX -> Paddle inference model\n")
    said = _Tee(sys.stdout)
    sys.stdout = said  # x2paddle prints its errors and may then call exit(0): keep what it printed
    try:
        x2paddle.convert.onnx2paddle(src, os.path.join(out, "paddle"), disable_feedback=True)
    except SystemExit as e:
        if e.code not in (0, None):
            raise
        raise SystemExit("x2paddle stopped without a Paddle model: %s" % said.error()) from None
    finally:
        sys.stdout = said.stream
    x2paddle_s = time.time() - t0
    inf = os.path.join(out, "paddle", "inference_model")
    if not os.path.isfile(os.path.join(inf, "model.pdmodel")):
        raise SystemExit("x2paddle wrote no inference model (see its messages above)")
    return {
        "inputs": dict((n, "x2paddle_" + names[n]) for n in inputs),
        "outputs": outputs,
        "renamed": renamed,
        "seconds": {"x2paddle": round(x2paddle_s, 2)},
        "pdmodel": os.path.join(inf, "model.pdmodel"),
        "pdiparams": os.path.join(inf, "model.pdiparams"),
    }


def main(req_path: str, res_path: str) -> None:
    with open(req_path) as f:
        req = json.load(f)
    import paddle

    out = os.path.abspath(req["outdir"])
    os.makedirs(out, exist_ok=True)
    if req.get("pdmodel"):  # a Paddle inference model as given: opt reads it directly
        first: Dict[str, Any] = {
            "inputs": dict((n, n) for n in req["input_names"]),
            "outputs": req["output_names"],
            "renamed": 0,
            "seconds": {},
            "pdmodel": req["pdmodel"],
            "pdiparams": req["pdiparams"],
        }
    else:
        first = _from_onnx(req, out)

    from paddlelite.lite import Opt

    result: Dict[str, Any] = dict((k, first[k]) for k in ("inputs", "outputs", "renamed", "seconds"))
    result.update({"nb": {}, "ops": {}, "kernels": {}, "tailoring": {}})
    for target in req["targets"]:
        t0 = time.time()
        sys.stderr.write("opt: Paddle inference model -> .nb for %s\n" % target)
        stem = os.path.join(out, "model_" + target.replace(",", "_"))
        o = Opt()
        o.set_model_file(first["pdmodel"])
        o.set_param_file(first["pdiparams"])
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
        "x2paddle": version("x2paddle"),
        "paddlepaddle": paddle.__version__,
        "paddlelite": version("paddlelite"),
        "onnx": version("onnx"),
    }
    with open(res_path, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
