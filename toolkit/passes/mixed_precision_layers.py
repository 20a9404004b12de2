"""Candidate layers of a mixed-precision INT8 build and their sensitivity (one layer fake-quantized at a time).

See :mod:`edgekit.passes.mixed_precision` for how they are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import onnx

    from edgekit.converters.base import Backend

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


# -- candidate layers ---------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    name: str  # the ONNX node name (its first output when the node has none)
    op: str
    weight: str  # the weight tensor's name
    input: str  # the activation input
    tensors: tuple  # the layer's output names, before and after a folded BatchNormalization / bias Add
    axis: int = 0  # the weight's output-channel axis

    def to_dict(self) -> dict[str, str]:
        return {"layer": self.name, "op": self.op, "weight": self.weight}


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    consts = {i.name: i for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = a.t
    return {k: numpy_helper.to_array(v) for k, v in consts.items()} if consts else {}


def candidate_layers(model: onnx.ModelProto, constants: dict[str, np.ndarray] | None = None) -> list[Layer]:
    """The weighted layers of an ONNX model, in graph order."""
    constants = _constants(model) if constants is None else constants
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    graph_outputs = {o.name for o in model.graph.output}
    layers = []
    for n in model.graph.node:
        if n.op_type not in WEIGHTED_OPS or len(n.input) < 2 or n.input[1] not in constants:
            continue
        if n.input[0] in constants:
            continue
        w = constants[n.input[1]]
        if w.ndim < 2:
            continue
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "ConvTranspose":
            axis = 1
        elif n.op_type == "Gemm":
            axis = 0 if (attrs.get("transB") and attrs["transB"].i) else 1
        elif n.op_type == "MatMul":
            axis = w.ndim - 1
        else:
            axis = 0
        tensors = [n.output[0]]
        out = n.output[0]
        for fold in ("BatchNormalization", "Add"):
            users = consumers.get(out, [])
            if len(users) != 1 or out in graph_outputs or users[0].op_type != fold:
                continue
            if fold == "Add" and not any(i in constants for i in users[0].input if i != out):
                continue
            out = users[0].output[0]
            tensors.append(out)
        layers.append(Layer(n.name or n.output[0], n.op_type, n.input[1], n.input[0], tuple(tensors), axis))
    return layers


# -- sensitivity ------------------------------------------------------------------------------
def _fake_quant_weight(w: np.ndarray, axis: int) -> np.ndarray:
    w = w.astype(np.float32)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    scale = np.abs(moved).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.round(moved / scale[:, None]), -127, 127) * scale[:, None]
    return np.moveaxis(q.reshape(np.moveaxis(w, axis, 0).shape), 0, axis).astype(np.float32)


def _runner(be: Backend, workdir: Path) -> Callable[[onnx.ModelProto, list[dict[str, np.ndarray]]], list]:
    """``run(model_proto, samples) -> outputs``: onnxruntime in memory when installed, else the backend."""
    import importlib.util

    from edgekit.execution import reference_outputs

    have_ort = importlib.util.find_spec("onnxruntime") is not None

    def run(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> list:
        if have_ort:
            return reference_outputs(model.SerializeToString(), samples)
        import onnx

        path = workdir / "sensitivity.onnx"
        onnx.save(model, str(path))
        return be.reference_outputs(path, samples)

    return run


def _nsr(reference: list[dict[str, Any]], candidate: list[dict[str, Any]]) -> float:
    values = []
    for ref, cand in zip(reference, candidate):
        total = 0.0
        for name, r in ref.items():
            r = np.asarray(r, np.float64)
            if r.dtype.kind != "f":
                continue
            c = np.nan_to_num(np.asarray(cand[name], np.float64), nan=1e30, posinf=1e30, neginf=-1e30)
            total += float(np.sum((c - r) ** 2) / (np.sum(r**2) + 1e-12))
        values.append(total)
    return float(np.mean(values))


def sensitivity(
    be: Backend, model: onnx.ModelProto, layers: list[Layer], samples: list[dict[str, np.ndarray]], workdir: Path
) -> dict[str, float]:
    """``{layer name: output noise-to-signal ratio}`` with only that layer fake-quantized (see the module doc)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    run = _runner(be, workdir)
    constants = _constants(model)
    reference = run(model, samples)
    graph_inputs = {i.name for i in model.graph.input}
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [13])

    # activation ranges of every candidate's input on the calibration samples (zero included, as ORT's MinMax)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    wanted = sorted({layer.input for layer in layers} - graph_inputs)
    for name in wanted:
        if name not in existing:
            probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    ranges: dict[str, tuple[float, float]] = {}
    for feed, outs in zip(samples, run(probe, samples) if wanted else [{}] * len(samples)):
        for name in {layer.input for layer in layers}:
            arr = np.asarray(feed[name] if name in graph_inputs else outs[name])
            lo, hi = ranges.get(name, (0.0, 0.0))
            ranges[name] = (min(lo, float(arr.min())), max(hi, float(arr.max())))

    result = {}
    for layer in layers:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        g = m.graph
        index, node = next((k, n) for k, n in enumerate(g.node) if (n.name or n.output[0]) == layer.name)
        wname = f"{layer.weight}__edgekit_fq"
        g.initializer.append(numpy_helper.from_array(_fake_quant_weight(constants[layer.weight], layer.axis), wname))
        node.input[1] = wname
        lo, hi = ranges[layer.input]
        if opset >= 10 and hi > lo:
            scale = (hi - lo) / 255.0
            zp = int(np.clip(np.round(-lo / scale), 0, 255))
            s_name, z_name = f"{layer.name}__edgekit_s", f"{layer.name}__edgekit_zp"
            g.initializer.extend(
                [
                    numpy_helper.from_array(np.array(scale, np.float32), s_name),
                    numpy_helper.from_array(np.array(zp, np.uint8), z_name),
                ]
            )
            q, dq = f"{layer.name}__edgekit_q", f"{layer.name}__edgekit_dq"
            g.node.insert(index, helper.make_node("DequantizeLinear", [q, s_name, z_name], [dq]))
            g.node.insert(index, helper.make_node("QuantizeLinear", [layer.input, s_name, z_name], [q]))
            node.input[0] = dq
        result[layer.name] = _nsr(reference, run(m, samples))
    return result
