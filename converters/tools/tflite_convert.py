"""ONNX -> TFLite (LiteRT) in edgekit's tflite tool environment (standalone: no edgekit imports).

Usage: python -I tflite_convert.py request.json result.json (cwd: a scratch work directory)

The file is self-contained on purpose, and so longer than edgekit's other modules: ``edgekit.toolenvs.run_tool``
runs it alone in the tool environment, where edgekit is not installed and ``-I`` keeps this directory off
``sys.path`` (Python 3.11+), so it imports nothing from beside it.

request: {"onnx": reference model (static shapes), "precision": fp32|fp16|int8-dynamic|int8,
          "inputs": [{"name", "shape"}], "outputs": [{"name"}],
          "probe": npz with one structured sample per input (the layout the user feeds),
          "probe_outputs": npz with the ONNX reference's outputs for the probe (run on the host),
          "calib": npz with calibration samples stacked per input, (n, *input shape) (int8 only), "threads": n,
          "float_scopes": op scopes (as in "weighted_ops") that int8 leaves in float,
          "calibration_cache": json file with the int8 calibration ranges (written once, then reused),
          "requantize": {"fp32": float32 .tflite, "io": io} (int8 only: quantize that file again, no conversion)}
result:  {"fp32": path, "model": path, "io": {"inputs": [...], "outputs": [...]}, "ops": [...],
          "versions": {...}, "warnings": [...], "steps": [...],
          "weighted_ops": [{"op", "scope", "node", "outputs"}]: the float32 file's convolutions and fully
          connected ops, with the ONNX node each came from (onnx2tf names its weights "<node>_conv_filter"...)}

Steps: onnxsim simplifies the graph (onnx2tf's flatbuffer_direct path needs every shape known);
onnx2tf 2.x writes the float32 .tflite without TensorFlow (flatbuffer_direct); ai-edge-quantizer
then quantizes that file (fp16 weights, dynamic-range int8, static int8 with the user's data).
onnx2tf's own dynamic-range and full-int8 outputs are not used: on PP-OCR cls the first gives NaN
and the second refuses HardSigmoid (RELU_0_TO_1). onnx2tf makes 4-D inputs/outputs channels-last;
the permutation per input and output is measured here on the probe sample (the reference's outputs,
computed by ONNX Runtime on the host, against LiteRT on the float32 file) and returned, so the runners
can feed the user's layout.
"""

import contextlib
import itertools
import json
import os
import re
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

# ONNX Runtime (imported here or by the converters, onnxsim included) records telemetry unless this is set first
os.environ["ORT_DISABLE_TELEMETRY"] = "1"


def log(msg: str) -> None:
    sys.__stderr__.write(msg + "\n")  # type: ignore[union-attr]  # edgekit's log, also while a tool's own stderr is redirected
    sys.__stderr__.flush()  # type: ignore[union-attr]


def channels_last(rank: int) -> List[int]:
    return [0] + list(range(2, rank)) + [1] if rank >= 3 else list(range(rank))


def channels_first(rank: int) -> List[int]:
    return [0, rank - 1] + list(range(1, rank - 1)) if rank >= 3 else list(range(rank))


def input_perms(onnx_shape: Sequence[int], tfl_shape: Sequence[int]) -> List[List[int]]:
    """Permutations p with onnx_shape[p] == tfl_shape: identity first, then channels-last."""
    out = []
    for p in (list(range(len(onnx_shape))), channels_last(len(onnx_shape))):
        if len(tfl_shape) == len(onnx_shape) and [onnx_shape[i] for i in p] == list(tfl_shape) and p not in out:
            out.append(p)
    return out


def output_perms(tfl_shape: Sequence[int], onnx_rank: int) -> List[List[int]]:
    """Permutations p with tflite_output.transpose(p) in ONNX layout (identity first, then channels-first)."""
    out: List[List[int]] = []
    if len(tfl_shape) != onnx_rank:
        return out
    for p in (list(range(onnx_rank)), channels_first(onnx_rank)):
        if p not in out:
            out.append(p)
    return out


def quant_in(a: Any, detail: Dict[str, Any]) -> Any:
    import numpy as np

    if detail["dtype"] in (np.float32, np.float16) or not detail["quantization"][0]:
        return a.astype(detail["dtype"])
    scale, zero = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(a / scale + zero), info.min, info.max).astype(detail["dtype"])


def dequant_out(a: Any, detail: Dict[str, Any]) -> Any:
    import numpy as np

    if a.dtype in (np.float32,) or not detail["quantization"][0]:
        return a.astype(np.float32)
    scale, zero = detail["quantization"]
    return ((a.astype(np.float32) - zero) * scale).astype(np.float32)


def match_io(tfl_path: str, ref: Dict[str, Any], req: Dict[str, Any], probe: Dict[str, Any]) -> Dict[str, Any]:
    """Measure which tflite tensor and permutation serves each ONNX input/output (``ref``: the reference's
    outputs for ``probe``)."""
    import numpy as np
    from ai_edge_litert import interpreter as tfl

    it = tfl.Interpreter(model_path=tfl_path, num_threads=int(req.get("threads") or 1))
    it.allocate_tensors()
    tin, tout = it.get_input_details(), it.get_output_details()
    by_name_in = dict((d["name"], d) for d in tin)
    by_name_out = dict((d["name"], d) for d in tout)
    ins = []
    for k, spec in enumerate(req["inputs"]):
        d = by_name_in.get(spec["name"]) or (tin[k] if k < len(tin) else None)
        if d is None:
            raise SystemExit("the converted model has no tensor for input %r" % spec["name"])
        perms = input_perms(list(probe[spec["name"]].shape), [int(x) for x in d["shape"]])
        if probe[spec["name"]].ndim == 0 and [int(x) for x in d["shape"]] == [1]:
            perms = [[]]  # a 0-d input (a sample rate) that the converter made [1]: fed reshaped, not transposed
        if not perms:
            raise SystemExit(
                "input %r: the converted model wants shape %s, the ONNX model %s (no layout change "
                "explains it)" % (spec["name"], list(d["shape"]), list(probe[spec["name"]].shape))
            )
        ins.append((spec["name"], d, perms))
    outs = []
    for k, spec in enumerate(req["outputs"]):
        d = by_name_out.get(spec["name"]) or (tout[k] if k < len(tout) else None)
        if d is None:
            raise SystemExit("the converted model has no tensor for output %r" % spec["name"])
        outs.append((spec["name"], d))
    best: Any = None
    for combo in itertools.islice(itertools.product(*[p for _, _, p in ins]), 64):
        for (name, d, _), p in zip(ins, combo):
            it.set_tensor(d["index"], np.reshape(quant_in(np.transpose(probe[name], p), d), d["shape"]))
        it.invoke()
        chosen: List[Any]
        total, chosen = 0.0, []
        for name, d in outs:
            got = dequant_out(it.get_tensor(d["index"]), d)
            want = ref[name]
            errs = []
            for p in output_perms(list(got.shape), want.ndim):
                g = np.transpose(got, p)
                if g.shape == want.shape:
                    errs.append((float(np.max(np.abs(g - want))) if g.size else 0.0, p))
            if not errs:
                total = float("inf")
                chosen.append((name, d, None, float("inf")))
                continue
            err, p = min(errs, key=lambda e: e[0])
            total += err / (float(np.max(np.abs(want))) + 1e-12)
            chosen.append((name, d, p, err))
        if best is None or total < best[0]:
            best = (total, combo, chosen)
    total, combo, chosen = best
    if total == float("inf"):
        raise SystemExit("an output of the converted model has a shape no layout change maps to the ONNX output")
    identity = lambda p: p is None or list(p) == list(range(len(p)))  # noqa: E731
    return {
        "inputs": [
            {
                "name": name,
                "tensor": d["name"],
                "perm": None if identity(p) else list(p),
                "shape": [int(x) for x in d["shape"]],
            }
            for (name, d, _), p in zip(ins, combo)
        ],
        "outputs": [
            {
                "name": name,
                "tensor": d["name"],
                "perm": None if identity(p) else list(p),
                "shape": [int(x) for x in d["shape"]],
                "probe_max_abs_err": err,
            }
            for name, d, p, err in chosen
        ],
        "measured_on": "one structured sample: ONNX Runtime (reference) vs LiteRT (float32 file)",
    }


def tflite_ops(path: str) -> List[Dict[str, Any]]:
    """[{op, version, count}] from the flatbuffer's operator codes (builtin code + version)."""
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        buf = f.read()
    model = schema.Model.GetRootAsModel(buf, 0)
    names = dict(
        (v, k) for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)
    )
    codes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        name = names.get(code, "BUILTIN_%d" % code)
        if name == "CUSTOM":
            name = "CUSTOM:" + (oc.CustomCode() or b"").decode("utf-8", "replace")
        codes.append((name, oc.Version()))
    counts: Dict[Any, int] = {}
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for j in range(sg.OperatorsLength()):
            key = codes[sg.Operators(j).OpcodeIndex()]
            counts[key] = counts.get(key, 0) + 1
    return [{"domain": "tflite", "op": n, "version": v, "count": c} for (n, v), c in sorted(counts.items())]


WEIGHTED_TFL = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "CONV_3D", "BATCH_MATMUL")
WEIGHT_SUFFIX = re.compile(
    r"^(.*?)(?:_group\d+)?_(?:transpose_conv_filter|conv_filter|depthwise_filter|fc_weights|"
    r"matmul_weights?|weights?|kernel|filter)(?:_q|_f32)?$"
)


def name_nodes(model: Any) -> None:
    """Unnamed ONNX nodes get their first output's name, so onnx2tf's weight names say which node they belong to."""
    taken = set(n.name for n in model.graph.node if n.name)
    for n in model.graph.node:
        if not n.name and n.output:
            name = n.output[0]
            while name in taken:
                name += "_"
            n.name = name
            taken.add(name)


def weighted_ops(path: str) -> List[Dict[str, Any]]:
    """The .tflite's weighted ops: [{"op", "scope" (ai-edge-quantizer's op scope), "node", "outputs"}]."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfu

    model = tfu.read_model(path)
    out = []
    for sg in model.subgraphs[:1]:
        for op in sg.operators:
            code = model.operatorCodes[op.opcodeIndex].builtinCode
            name = str(tfu.TFL_OP_CODE_TO_NAME.get(code, "")).split(".")[-1]
            if name not in WEIGHTED_TFL:
                continue
            inputs = [tfu.get_tensor_name(sg.tensors[i]) for i in op.inputs if i >= 0]
            m = WEIGHT_SUFFIX.match(inputs[1]) if len(inputs) > 1 else None
            out.append(
                {
                    "op": name,
                    "scope": tfu.get_op_scope(op, sg.tensors),
                    "node": m.group(1) if m else None,
                    "outputs": [tfu.get_tensor_name(sg.tensors[i]) for i in op.outputs if i >= 0],
                }
            )
    return out


def float_region(path: str, scopes: Sequence[str]) -> List[str]:
    """The scopes of the weighted ops in ``scopes`` plus every op between them and the neighbouring weighted ops
    (padding, pooling, activations, reshapes, softmax): quantized, those would quantize the float layer's input
    and output anyway (measured on a small CNN: every convolution float alone left the all-int8 cosine)."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfu

    model = tfu.read_model(path)
    sg = model.subgraphs[0]
    kinds = [
        str(tfu.TFL_OP_CODE_TO_NAME.get(model.operatorCodes[op.opcodeIndex].builtinCode, "")).split(".")[-1]
        for op in sg.operators
    ]
    op_scopes = [tfu.get_op_scope(op, sg.tensors) for op in sg.operators]
    consumers: Dict[int, List[int]]
    producer, consumers = {}, {}
    for k, op in enumerate(sg.operators):
        for t in op.outputs:
            producer[t] = k
        for t in op.inputs:
            if t >= 0:
                consumers.setdefault(t, []).append(k)
    wanted = set(scopes)
    heads = [k for k, sc in enumerate(op_scopes) if sc in wanted]
    region = set(heads)
    back = [t for k in heads for t in sg.operators[k].inputs if t >= 0]
    ahead = [t for k in heads for t in sg.operators[k].outputs]
    seen = set()
    while back:
        t = back.pop()
        if t in seen or t not in producer:
            continue
        seen.add(t)
        k = producer[t]
        if kinds[k] not in WEIGHTED_TFL and k not in region:
            region.add(k)
            back.extend(t for t in sg.operators[k].inputs if t >= 0)
    seen = set()
    while ahead:
        t = ahead.pop()
        if t in seen:
            continue
        seen.add(t)
        for k in consumers.get(t, []):
            if kinds[k] not in WEIGHTED_TFL and k not in region:
                region.add(k)
                ahead.extend(sg.operators[k].outputs)
    return [op_scopes[k] for k in sorted(region)]


def _save_calibration(cal: Dict[str, Dict[str, Any]], path: str) -> None:
    import numpy as np

    data = dict((t, dict((k, np.asarray(v).tolist()) for k, v in qsv.items())) for t, qsv in cal.items())
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _load_calibration(path: str) -> Dict[str, Dict[str, Any]]:
    import numpy as np

    with open(path) as f:
        data = json.load(f)
    return dict((t, dict((k, np.asarray(v, dtype=np.float32)) for k, v in qsv.items())) for t, qsv in data.items())


def quantize(fp32: str, precision: str, io: Dict[str, Any], req: Dict[str, Any], out_path: str) -> Dict[str, Any]:
    from ai_edge_quantizer import qtyping, quantizer, recipe
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    q = quantizer.Quantizer(fp32)
    info: Dict[str, Any] = {"tool": "ai-edge-quantizer"}
    if precision == "fp16":
        q.update_quantization_recipe(
            regex=".*",
            operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
            op_config=qtyping.OpQuantizationConfig(
                weight_tensor_config=qtyping.TensorQuantizationConfig(num_bits=16, dtype=qtyping.TensorDataType.FLOAT),
                compute_precision=qtyping.ComputePrecision.FLOAT,
                explicit_dequantize=True,
            ),
            algorithm_key=AlgorithmName.FLOAT_CASTING,
        )
        info.update(method="fp16 weights (float casting, dequantized at load)", activations="fp32")
        result = q.quantize()
    elif precision == "int8-dynamic":
        q.load_quantization_recipe(recipe.dynamic_wi8_afp32())
        info.update(method="dynamic range (int8 weights, activations quantized at run time)", weights="int8")
        result = q.quantize()
    elif precision == "int8":
        import numpy as np
        from ai_edge_litert import interpreter as tfl

        q.load_quantization_recipe(recipe.static_wi8_ai8())
        floats = float_region(fp32, req["float_scopes"]) if req.get("float_scopes") else []
        for scope in floats:  # the latest matching recipe entry wins: these ops stay float
            q.update_quantization_recipe(
                regex="^%s$" % re.escape(scope),
                operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                algorithm_key=AlgorithmName.NO_QUANTIZE,
            )
        cache = req.get("calibration_cache")
        if cache and os.path.isfile(cache):
            t0 = time.time()
            cal = _load_calibration(cache)
            n = len(np.load(req["calib"])[io["inputs"][0]["name"]])
            result = q.quantize(cal)
            info.update(
                method="static (full int8: weights and activations)",
                weights="int8 per-channel, symmetric",
                activations="int8 per-tensor (min/max)",
                calibration_samples=n,
                calibration_seconds=0.0,
                calibration="reused",
                float_ops=floats,
            )
            result.export_model(out_path, overwrite=True)
            return info
        if floats:  # calibrate with every op quantized, so the ranges serve every float set
            qfull = quantizer.Quantizer(fp32)
            qfull.load_quantization_recipe(recipe.static_wi8_ai8())
        else:
            qfull = q
        it = tfl.Interpreter(model_path=fp32)
        sigs = it.get_signature_list()
        if not sigs:
            raise SystemExit("the float32 .tflite has no signature; ai-edge-quantizer calibrates per signature")
        sig = sorted(sigs)[0]
        sig_inputs = sigs[sig]["inputs"]
        data = np.load(req["calib"])
        n = min(len(data[s["name"]]) for s in io["inputs"])
        names = dict(
            (s["name"], s["name"] if s["name"] in sig_inputs else sig_inputs[k]) for k, s in enumerate(io["inputs"])
        )
        samples = []
        for i in range(n):
            feed = {}
            for s in io["inputs"]:
                a = np.ascontiguousarray(
                    np.transpose(data[s["name"]][i], s["perm"]) if s["perm"] else data[s["name"]][i]
                )
                # float inputs calibrate as float32; int64 ids and bool masks are fed as they are (not quantized)
                feed[names[s["name"]]] = a.astype(np.float32) if a.dtype.kind == "f" else a
            samples.append(feed)
        t0 = time.time()
        log("  calibrating int8 on %d samples (ai-edge-quantizer, min/max)" % n)
        cal = qfull.calibrate({sig: samples}, num_threads=int(req.get("threads") or 1))
        if cache:
            _save_calibration(cal, cache)
        result = q.quantize(cal)
        info.update(
            method="static (full int8: weights and activations)",
            weights="int8 per-channel, symmetric",
            activations="int8 per-tensor (min/max)",
            calibration_samples=n,
            calibration_seconds=round(time.time() - t0, 2),
            float_ops=floats,
        )
    else:
        raise SystemExit("unknown precision %r" % precision)
    result.export_model(out_path, overwrite=True)
    sys.stdout.flush()
    return info


def versions() -> Dict[str, Optional[str]]:
    from importlib.metadata import version

    out: Dict[str, Optional[str]] = {}
    for p in ("onnx2tf", "ai-edge-quantizer", "ai-edge-litert", "onnx", "onnxsim", "onnxruntime", "numpy"):
        try:
            out[p] = version(p)
        except Exception:
            out[p] = None
    out["python"] = "%d.%d.%d" % sys.version_info[:3]
    return out


def main(req_path: str, res_path: str) -> None:
    import numpy as np
    import onnx

    req = json.load(open(req_path))
    work = os.getcwd()
    warnings: List[str]
    steps: List[Dict[str, Any]]
    quant: Optional[Dict[str, Any]]
    warnings, steps = [], []
    t0 = time.time()
    if req.get("requantize"):  # int8 again from the float32 file a build already converted (mixed precision)
        fp32, io = req["requantize"]["fp32"], req["requantize"]["io"]
        model_path = os.path.join(work, "model.int8.tflite")
        with contextlib.redirect_stderr(sys.stdout):
            quant = quantize(fp32, "int8", io, req, model_path)
        steps.append({"step": "ai-edge-quantizer int8", "seconds": round(time.time() - t0, 2)})
        write_result(res_path, fp32, model_path, io, quant, warnings, steps)
        return
    model = onnx.load(req["onnx"])
    try:
        import onnxsim

        simplified, ok = onnxsim.simplify(model)
        if ok:
            model = simplified
        else:
            warnings.append("onnxsim could not verify its simplified graph; the original graph was converted")
    except Exception as e:  # onnx2tf may still manage; it reports its own error otherwise
        warnings.append("onnxsim failed (%s); the original graph was converted" % (str(e).splitlines() or [""])[0])
    name_nodes(model)
    sim_path = os.path.join(work, "simplified.onnx")
    onnx.save(model, sim_path)
    steps.append({"step": "onnxsim", "seconds": round(time.time() - t0, 2)})
    log("  onnx2tf (flatbuffer_direct, no TensorFlow): ONNX -> float32 .tflite")
    t1 = time.time()
    import onnx2tf

    out_dir = os.path.join(work, "onnx2tf")
    with contextlib.redirect_stderr(sys.stdout):  # progress bars go to the tool's stdout log, not edgekit's
        onnx2tf.convert(
            input_onnx_file_path=sim_path,
            output_folder_path=out_dir,
            copy_onnx_input_output_names_to_tflite=True,
            non_verbose=True,
        )
    produced = os.path.join(out_dir, "simplified_float32.tflite")
    if not os.path.isfile(produced):
        raise SystemExit("onnx2tf wrote no float32 .tflite (found: %s)" % ", ".join(sorted(os.listdir(out_dir))))
    fp32 = os.path.join(work, "model.fp32.tflite")
    shutil.copyfile(produced, fp32)
    steps.append({"step": "onnx2tf", "seconds": round(time.time() - t1, 2)})
    probe = dict((k, v) for k, v in np.load(req["probe"]).items())
    ref = dict((k, v) for k, v in np.load(req["probe_outputs"]).items())
    io = match_io(fp32, ref, req, probe)
    moved = [s["name"] for s in io["inputs"] + io["outputs"] if s["perm"]]
    if moved:
        log("  layout: onnx2tf made %s channels-last; the runners transpose" % ", ".join(moved))
    model_path, quant = fp32, None
    if req["precision"] != "fp32":
        t2 = time.time()
        log("  ai-edge-quantizer: %s" % req["precision"])
        model_path = os.path.join(work, "model.%s.tflite" % req["precision"])
        with contextlib.redirect_stderr(sys.stdout):
            quant = quantize(fp32, req["precision"], io, req, model_path)
        steps.append({"step": "ai-edge-quantizer " + req["precision"], "seconds": round(time.time() - t2, 2)})
    write_result(res_path, fp32, model_path, io, quant, warnings, steps)


def write_result(
    res_path: str,
    fp32: str,
    model_path: str,
    io: Dict[str, Any],
    quant: Optional[Dict[str, Any]],
    warnings: List[str],
    steps: List[Dict[str, Any]],
) -> None:
    """The JSON result edgekit reads back (written whole, then renamed into place)."""
    result = {
        "fp32": fp32,
        "model": model_path,
        "io": io,
        "ops": tflite_ops(model_path),
        "fp32_ops": tflite_ops(fp32),
        "quantization": quant,
        "versions": versions(),
        "warnings": warnings,
        "steps": steps,
        "weighted_ops": weighted_ops(fp32),
    }
    with open(res_path + ".tmp", "w") as f:
        json.dump(result, f, indent=2)
    os.replace(res_path + ".tmp", res_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
