"""TensorFlow SavedModel / Keras -> ONNX (tf2onnx) or TFLite (TF's own converter), in edgekit's tensorflow tool
environment (standalone: no edgekit imports; ``edgekit.toolenvs.run_tool`` runs it with ``python -I``).

Usage: python -I tf_export.py request.json result.json (cwd: a scratch work directory)

request: {"action": "inspect" | "onnx" | "tflite" | "run", "model": a SavedModel directory or a .keras/.h5 file,
          "kind": "SavedModel" | "Keras" | "Keras H5",
          "shapes": {input: [dims]} (onnx, tflite: a fixed size per dimension, or -1 to keep it dynamic; onnx without
          it: the signature's sizes, a dynamic batch as 1, else "needs_shapes" in the result and no conversion),
          "opset": n (onnx), "output": path of the .onnx/.tflite to write,
          "precision": fp32|fp16|int8 (tflite), "calib": npz of calibration samples (tflite int8),
          "samples": npz of samples (run, tflite): key "<sample index>.<input index>",
          "outputs_npz": where the original's outputs for ``samples`` go (same keys, by output index)}
result:  {"inputs": [{"name", "shape", "dtype"}], "outputs": [...], "versions": {...}, "seconds": s,
          "io": {...} (tflite: the LiteRT tensor behind each signature name), "error": {...} (an op not taken)}

The original is the SavedModel's ``serving_default`` signature, or the Keras model called with training=False.
"""

import json
import logging
import os
import re
import sys
import time
from typing import Any, Dict, List, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def log(msg: str) -> None:
    sys.__stderr__.write(msg + "\n")  # type: ignore[union-attr]
    sys.__stderr__.flush()  # type: ignore[union-attr]


class Original:
    """The model as TensorFlow runs it: named inputs and outputs, and a call."""

    def __init__(self, tf: Any, path: str, kind: str) -> None:
        self.tf, self.path, self.kind = tf, path, kind
        if kind == "SavedModel":
            self.obj = tf.saved_model.load(path)
            if "serving_default" not in self.obj.signatures:
                raise SystemExit(
                    "UsageError: the SavedModel has no serving_default signature (it has %s): save it with "
                    "tf.saved_model.save(model, dir, signatures=...) or model.export(dir)"
                    % (sorted(self.obj.signatures) or "none")
                )
            self.fn = self.obj.signatures["serving_default"]
            specs = self.fn.structured_input_signature[1]
            self.inputs = [(n, specs[n]) for n in sorted(specs)]
            self.outputs = sorted(self.fn.structured_outputs)
        else:
            try:
                self.obj = tf.keras.models.load_model(path, compile=False)
            except Exception as e:
                text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                if re.search(r"custom|Unknown (layer|object)|deserialize|register_keras_serializable", text, re.I):
                    raise SystemExit(
                        "CustomObjects: %s: %s. A Keras file with custom layers or objects cannot be loaded without "
                        "their Python code: save the model as a SavedModel where its code is (tf.saved_model.save("
                        "model, 'saved_model/') or model.export('saved_model/')) and build that directory"
                        % (type(e).__name__, text)
                    ) from None
                raise SystemExit(
                    "UsageError: tf.keras cannot load %s: %s: %s" % (path, type(e).__name__, text)
                ) from None
            self.inputs = [(t.name.split(":")[0], t) for t in self.obj.inputs]
            self.outputs = list(self.obj.output_names)

    def describe(self) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
        ins = [
            {"name": n, "shape": [-1 if d is None else int(d) for d in s.shape], "dtype": s.dtype.name}
            for n, s in self.inputs
        ]
        return ins, [{"name": n} for n in self.outputs]

    def run(self, feeds: List[Any]) -> List[Any]:
        tf = self.tf
        if self.kind == "SavedModel":
            out = self.fn(**{n: tf.constant(a) for (n, _), a in zip(self.inputs, feeds)})
            return [out[n].numpy() for n in self.outputs]
        out = self.obj([tf.constant(a) for a in feeds] if len(feeds) > 1 else tf.constant(feeds[0]), training=False)
        out = out if isinstance(out, (list, tuple)) else [out]
        return [o.numpy() for o in out]

    def specs(self, shapes: Dict[str, List[int]]) -> List[Any]:
        tf = self.tf
        out = []
        for n, s in self.inputs:
            dims = shapes.get(n) or [-1 if d is None else d for d in s.shape]
            out.append(tf.TensorSpec([None if d is None or d < 0 else int(d) for d in dims], s.dtype, name=n))
        return out

    def function(self, shapes: Dict[str, List[int]]) -> Any:
        """The original as a tf.function with the given input sizes, returning {output name: tensor}."""
        names = [n for n, _ in self.inputs]
        outs = self.outputs
        call = self.fn if self.kind == "SavedModel" else None
        model = self.obj

        def f(*args: Any) -> Any:
            if call is not None:
                r = call(**dict(zip(names, args)))
                return {n: r[n] for n in outs}
            r = model(list(args) if len(args) > 1 else args[0], training=False)
            r = r if isinstance(r, (list, tuple)) else [r]
            return dict(zip(outs, r))

        return self.tf.function(f, input_signature=self.specs(shapes))


def load_samples(np: Any, path: str, n_inputs: int) -> List[List[Any]]:
    data = np.load(path)
    count = len({k.split(".")[0] for k in data.files})
    return [[data["%d.%d" % (i, j)] for j in range(n_inputs)] for i in range(count)]


def run_original(np: Any, orig: Original, req: Dict[str, Any]) -> None:
    samples = load_samples(np, req["samples"], len(orig.inputs))
    out = {}
    for i, s in enumerate(samples):
        for j, a in enumerate(orig.run(s)):
            out["%d.%d" % (i, j)] = a
    np.savez(req["outputs_npz"], **out)


def op_error(text: str, converter: str) -> Dict[str, Any]:
    """The op a converter did not take, and the layer it is in (from the TF node's name scope)."""
    op, node = None, None
    m = re.search(r"'tf\.(\w+)' op is neither a custom op nor a flex op", text)
    if m:
        op = m.group(1)
        loc = re.search(r'fused\["%s:", "([^"@]+)@' % re.escape(op), text)
        node = loc.group(1) if loc else None
    m = re.search(r"Tensorflow op \[([^:\]]+): (\w+)\] is not supported", text)
    if m:
        node, op = m.group(1), m.group(2)
    layer = node.rsplit("/", 1)[0] if node and "/" in node else node
    return {"converter": converter, "op": op, "node": node, "layer": layer, "detail": text.strip()[-1500:]}


def to_onnx(orig: Original, req: Dict[str, Any], result: Dict[str, Any]) -> None:
    import tf2onnx

    errors: List[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                errors.append(record.getMessage())

    logging.getLogger("tf2onnx").addHandler(Catch())
    specs = orig.specs(req.get("shapes") or {})
    try:
        tf2onnx.convert.from_function(
            orig.function(req.get("shapes") or {}),
            input_signature=specs,
            opset=int(req["opset"]),
            output_path=req["output"],
        )
    except Exception as e:
        errors.append("%s: %s" % (type(e).__name__, e))
    unsupported = [e for e in errors if "is not supported" in e or "Unsupported ops" in e]
    if unsupported or errors:
        result["error"] = op_error("\n".join(errors), "tf2onnx %s" % tf2onnx.__version__)
        if os.path.exists(req["output"]):
            os.remove(req["output"])


def to_tflite(np: Any, orig: Original, req: Dict[str, Any], result: Dict[str, Any]) -> None:
    tf = orig.tf
    shapes = req.get("shapes") or {}
    if orig.kind == "SavedModel" and not shapes:
        conv = tf.lite.TFLiteConverter.from_saved_model(orig.path, signature_keys=["serving_default"])
        how = "TFLiteConverter.from_saved_model"
    elif orig.kind != "SavedModel" and not shapes:
        conv = tf.lite.TFLiteConverter.from_keras_model(orig.obj)
        how = "TFLiteConverter.from_keras_model"
    else:
        conv = tf.lite.TFLiteConverter.from_concrete_functions(
            [orig.function(shapes).get_concrete_function()], orig.obj
        )
        how = "TFLiteConverter.from_concrete_functions (the --input-shape sizes)"
    precision = req["precision"]
    if precision == "fp16":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.target_spec.supported_types = [tf.float16]
    elif precision == "int8":
        calib = load_samples(np, req["calib"], len(orig.inputs))

        def representative() -> Any:
            for s in calib:
                yield [a.astype(np.float32) if a.dtype == np.float64 else a for a in s]

        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        result["calibration_samples"] = len(calib)
    result["converter"] = how
    try:
        blob = conv.convert()
    except Exception as e:
        result["error"] = op_error("%s: %s" % (type(e).__name__, e), "TFLiteConverter (TensorFlow %s)" % tf.__version__)
        return
    with open(req["output"], "wb") as f:
        f.write(blob)
    it = tf.lite.Interpreter(model_content=blob)
    sigs = it.get_signature_list()
    io: Dict[str, List[Dict[str, Any]]] = {"inputs": [], "outputs": []}
    if sigs:
        key = "serving_default" if "serving_default" in sigs else sorted(sigs)[0]
        runner = it.get_signature_runner(key)
        ins, outs = runner.get_input_details(), runner.get_output_details()
        names_in = [n for n, _ in orig.inputs]
        for n in names_in:
            if n in ins:
                io["inputs"].append({"name": n, "tensor": ins[n]["name"], "perm": None})
        for k, n in enumerate(orig.outputs):
            d = outs.get(n) or (outs.get("output_%d" % k) if len(outs) == len(orig.outputs) else None)
            if d is not None:
                io["outputs"].append({"name": n, "tensor": d["name"], "perm": None})
    if len(io["inputs"]) != len(orig.inputs) or len(io["outputs"]) != len(orig.outputs):  # by order
        det_in, det_out = it.get_input_details(), it.get_output_details()
        io = {
            "inputs": [{"name": n, "tensor": d["name"], "perm": None} for (n, _), d in zip(orig.inputs, det_in)],
            "outputs": [{"name": n, "tensor": d["name"], "perm": None} for n, d in zip(orig.outputs, det_out)],
        }
    result["io"] = io


def main() -> None:
    req = json.load(open(sys.argv[1]))
    result: Dict[str, Any] = {}
    t0 = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    result["versions"] = {"tensorflow": tf.__version__, "python": "%d.%d.%d" % sys.version_info[:3]}
    try:
        import keras

        result["versions"]["keras"] = keras.__version__
    except Exception:
        pass
    orig = Original(tf, req["model"], req["kind"])
    result["inputs"], result["outputs"] = orig.describe()
    action = req["action"]
    if action == "onnx":
        import tf2onnx

        result["versions"]["tf2onnx"] = tf2onnx.__version__
        log("  tf2onnx %s: %s -> ONNX opset %s" % (tf2onnx.__version__, req["kind"], req["opset"]))
        t1 = time.perf_counter()
        if req.get("shapes") is None:  # the signature's sizes, a dynamic batch as 1 (edgekit.intake_tf.fixed_shapes)
            shapes = {
                i["name"]: [1 if k == 0 and d < 0 else d for k, d in enumerate(i["shape"])] for i in result["inputs"]
            }
            if any(d < 0 for dims in shapes.values() for d in dims):
                result["needs_shapes"] = True
                json.dump(result, open(sys.argv[2], "w"))
                return
            req["shapes"] = shapes
        to_onnx(orig, req, result)
        result["seconds"] = round(time.perf_counter() - t1, 2)
    elif action == "tflite":
        log("  TensorFlow %s TFLiteConverter: %s -> .tflite (%s)" % (tf.__version__, req["kind"], req["precision"]))
        t1 = time.perf_counter()
        to_tflite(np, orig, req, result)
        result["seconds"] = round(time.perf_counter() - t1, 2)
        if "error" not in result and req.get("samples"):
            run_original(np, orig, req)
    elif action == "run":
        run_original(np, orig, req)
    result["total_seconds"] = round(time.perf_counter() - t0, 2)
    with open(sys.argv[2], "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
