"""FP16 with a block list: the nodes whose values leave float16's range stay in float32.

float16 holds magnitudes up to 65504 and flushes those below 2**-24 to zero; ONNX's float16 converter
(onnxconverter-common) also clamps constants beyond +-1e4 to +-1e4 and raises nonzero ones below 1e-7 to +-1e-7.
A model can compute garbage once converted while every op is supported: PP-OCRv4's text detector has a
BatchNormalization whose running variance is ~1e8 (its input's standard deviation is ~1e4), clamped to 1e4 the
normalisation is 100x off and the probability map is wrong.

:func:`scan` runs the FP32 model once on a few samples with ``max |x|`` of every float tensor as an extra output,
and reads the constants; :func:`block_list` names the nodes to keep in float32 with the reason: a node with a
constant input beyond what the converter keeps, the producer and the consumers of a tensor beyond fp16's range
(within ``headroom`` of it: widening steps re-check with more headroom), and those of a tensor whose every value
flushes to 0. :func:`prepare` makes the model ready for the converter's ``node_block_list`` (nodes named, the
constants of blocked nodes as their own float32 initializers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # the smallest float16 subnormal: anything smaller is 0
CONVERTER_MAX = 1e4  # onnxconverter-common's max_finite_val: constants beyond it are clamped
CONVERTER_MIN = 1e-7  # its min_positive_val: nonzero constants below it become +-1e-7
HEADROOMS = (1.0, 4.0, 16.0)  # widening: tensors beyond FP16_MAX / headroom, one step at a time
SCAN_SAMPLES = 4  # the scan runs the whole graph with a reduction per tensor: a few samples
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
SUFFIX = "__edgekit_absmax"


@dataclass(frozen=True)
class Blocked:
    """A node kept in float32 and why (e.g. "overflow fp16: max |x| = 1.2e+05 at conv_out")."""

    node: str
    op: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "op": self.op, "reason": self.reason}


@dataclass
class Scan:
    """What the FP32 model computes on the samples: ``max |x|`` per float tensor, and its constants' ranges."""

    absmax: dict[str, float] = field(default_factory=dict)
    constants: dict[str, float] = field(default_factory=dict)  # float constant -> max |x|
    tiny_constants: dict[str, float] = field(default_factory=dict)  # nonzero constants all below CONVERTER_MIN
    samples: int = 0
    error: str | None = None  # the probe run failed: constants only


def name_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The converter blocks nodes by name: give unnamed nodes unique names (in place; semantics unchanged)."""
    taken = {n.name for n in model.graph.node if n.name}
    for k, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_edgekit_{k}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    return model


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.data_type in FLOATS}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type in FLOATS:
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _float_tensors(model: onnx.ModelProto) -> list[str]:
    """Float tensors computed by the graph (inputs and node outputs, not constants), in graph order."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)
    }
    constants = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in constants]
    names += [o for n in model.graph.node if n.op_type != "Constant" for o in n.output if o]
    return [t for t in names if types.get(t) in FLOATS]


def scan(model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]], limit: int = SCAN_SAMPLES) -> Scan:
    """Run ``model`` (FP32) on up to ``limit`` samples with ``max |x|`` of every float tensor as an output."""
    from edgekit.execution import reference_outputs

    result = Scan()
    for name, value in _constant_values(model.graph).items():
        mag = np.abs(value.astype(np.float64))
        if mag.size and np.isfinite(mag).all():
            result.constants[name] = float(mag.max())
            nonzero = mag[mag > 0]
            if nonzero.size and float(nonzero.max()) < CONVERTER_MIN:
                result.tiny_constants[name] = float(nonzero.max())
    feeds = list(samples)[:limit]
    try:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        tensors = _float_tensors(probe)
        for k, tensor in enumerate(tensors):
            absolute = f"{tensor}__edgekit_abs{k}"
            probe.graph.node.extend(
                [
                    helper.make_node("Abs", [tensor], [absolute], name=f"edgekit_abs_{k}"),
                    helper.make_node("ReduceMax", [absolute], [tensor + SUFFIX], name=f"edgekit_max_{k}", keepdims=0),
                ]
            )
            probe.graph.output.extend([onnx.ValueInfoProto(name=tensor + SUFFIX)])
        outputs = reference_outputs(probe.SerializeToString(), feeds)
    except Exception as e:  # shape inference, a model over 2 GB, onnxruntime's own exception types: the constants
        # still tell the worst cases
        result.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return result
    for tensor in tensors:
        result.absmax[tensor] = max(float(np.max(o[tensor + SUFFIX])) for o in outputs)
    result.samples = len(feeds)
    return result


def block_list(model: onnx.ModelProto, found: Scan, headroom: float = 1.0) -> list[Blocked]:
    """The nodes of ``model`` (named, see :func:`name_nodes`) to keep in float32, each with its reason."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    reasons: dict[str, str] = {}

    def block(node: onnx.NodeProto, reason: str) -> None:
        if node.op_type != "Constant":
            reasons.setdefault(node.name, reason)

    for node in graph.node:
        for i in node.input:
            if found.constants.get(i, 0.0) > CONVERTER_MAX:
                block(node, f"constant {i}: max |x| = {found.constants[i]:.3g} beyond fp16 (clamped to 1e4)")
            elif i in found.tiny_constants:
                block(node, f"constant {i}: max |x| = {found.tiny_constants[i]:.3g} below fp16's 1e-7 (all lost)")
    limit = FP16_MAX / headroom
    for tensor, value in found.absmax.items():
        if value > limit:
            why = f"overflow fp16: max |x| = {value:.3g} at {tensor}" + (
                f" (within {headroom:g}x of 65504)" if value <= FP16_MAX else ""
            )
        elif 0 < value < FP16_TINY:
            why = f"underflow fp16: max |x| = {value:.3g} at {tensor} (every value flushes to 0)"
        else:
            continue
        if tensor in producer:
            block(producer[tensor], why)
        for node in consumers.get(tensor, []):
            block(node, why)
    return [Blocked(n.name, n.op_type, reasons[n.name]) for n in graph.node if n.name in reasons]


def prepare(model: onnx.ModelProto, blocked: Sequence[Blocked]) -> onnx.ModelProto:
    """A copy of ``model`` the converter can keep ``blocked`` in float32 in: each constant a blocked node reads (a
    ``Constant`` node's value, or an initializer it shares with converted nodes) becomes its own float32 initializer;
    the converter would otherwise clamp it or feed converted nodes a float32 tensor."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    names = {b.node for b in blocked}
    constants = _constant_values(graph)
    initializers = {t.name for t in graph.initializer}
    users: dict[str, set[str]] = {}
    for node in graph.node:
        for i in node.input:
            users.setdefault(i, set()).add(node.name)
    made: dict[str, str] = {}
    for node in graph.node:
        if node.name not in names:
            continue
        for k, i in enumerate(node.input):
            if i not in constants or (i in initializers and users[i] <= names):
                continue  # not a constant, or an initializer only blocked nodes read (the converter keeps it)
            if i not in made:
                made[i] = f"{i}__edgekit_fp32"
                graph.initializer.append(numpy_helper.from_array(constants[i], made[i]))
            node.input[k] = made[i]
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    kept = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in read]
    del graph.node[:]
    graph.node.extend(kept)
    return out


def section(blocked: Sequence[Blocked], found: Scan, headroom: float, rounds: int) -> dict[str, Any]:
    """The report's ``kept_float`` section of an FP16 build."""
    return {
        "kind": "fp16 range",
        "reason": summary(blocked),
        "nodes": [b.to_dict() for b in blocked],
        "headroom": headroom,
        "rounds": rounds,
        "scan_samples": found.samples,
        **({"scan_error": found.error} if found.error else {}),
    }


def summary(blocked: Sequence[Blocked]) -> str:
    """One line: how many nodes stayed float32 and the first reasons."""
    if not blocked:
        return "no node leaves fp16's range"
    shown = "; ".join(f"{b.node} ({b.reason})" for b in blocked[:3])
    more = f"; and {len(blocked) - 3} more" if len(blocked) > 3 else ""
    return f"{len(blocked)} node(s) kept float32: {shown}{more}"
