"""Small ONNX models the tests build themselves (deterministic, seconds to make)."""

from pathlib import Path
from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn(path, seed=0, dynamic_batch=True, classes=10):
    """Conv(3->8) + Relu + Conv(8->16, stride 2) + Relu + GlobalAveragePool + Flatten + Gemm + Softmax, 3x16x16."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * np.sqrt(2 / 27)).astype(np.float32)
    b1 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((16, 8, 3, 3)) * np.sqrt(2 / 72)).astype(np.float32)
    b2 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w3 = (rng.standard_normal((classes, 16)) * np.sqrt(2 / 16)).astype(np.float32)
    b3 = np.zeros(classes, np.float32)
    batch = "N" if dynamic_batch else 1
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes])],
        [
            numpy_helper.from_array(a, n)
            for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"), (b3, "b3"))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def tiny_calib(path, n=32, seed=1):
    """Structured (not i.i.d. noise) images: smooth gradients and blobs."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:16, 0:16] / 15.0
    x = np.empty((n, 3, 16, 16), np.float32)
    for i in range(n):
        for c in range(3):
            a, b, cx, cy = rng.uniform(-1, 1, 4)
            x[i, c] = a * xx + b * yy + np.exp(-((xx - (cx + 1) / 2) ** 2 + (yy - (cy + 1) / 2) ** 2) * 8)
    np.savez(path, input=x)
    return path


def prunable_cnn(path, seed=0, zero=0.25):
    """A graph with every rewiring case, some channels exactly dead; returns ``(path, info)``.

    stem Conv(3->16)+BN+Relu -> [expand 1x1(16)+BN+Clip -> depthwise 3x3+BN+Relu] || [Conv 3x3(8)+Relu]
    -> Concat (24) -> project 1x1(16)+BN -> Add stem (residual) -> squeeze-excite (GAP, Conv 8, Relu, Conv 16,
    HardSigmoid, Mul) -> GAP -> Flatten -> Gemm(10) -> logits (+ side: stem -> Conv(8) -> GAP -> Reshape[1, 8]
    -> MatMul(10), added to the logits). In every channel group ``floor(zero * C)`` channels have all-zero
    weights, biases and BN shifts, so they output exactly 0: removing them must not change the output.
    """
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, shape, scale=0.3):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def arr(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def conv(x, name, cin, cout, k, group=1, bias=True):
        ins = [x, w(f"{name}.w", (cout, cin // group, k, k))] + ([w(f"{name}.b", (cout,), 0.1)] if bias else [])
        nodes.append(helper.make_node("Conv", ins, [name], name=name, pads=[k // 2] * 4, group=group))
        return name

    def bn(x, name, c):
        arr(f"{name}.scale", rng.uniform(0.5, 1.5, c))
        arr(f"{name}.shift", rng.standard_normal(c) * 0.1)
        arr(f"{name}.mean", rng.standard_normal(c) * 0.1)
        arr(f"{name}.var", rng.uniform(0.5, 1.5, c))
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [x] + [f"{name}.{p}" for p in ("scale", "shift", "mean", "var")],
                [name],
                name=name,
            )
        )
        return name

    def act(op, x, name, *extra):
        nodes.append(helper.make_node(op, [x, *extra], [name], name=name))
        return name

    arr("six", 6.0)
    arr("zero", 0.0)
    stem = act("Relu", bn(conv("x", "stem", 3, 16, 3), "stem_bn", 16), "stem_relu")
    a = act("Clip", bn(conv(stem, "expand", 16, 16, 1), "expand_bn", 16), "expand_clip", "zero", "six")
    a = act("Relu", bn(conv(a, "dw", 16, 16, 3, group=16), "dw_bn", 16), "dw_relu")
    b = act("Relu", conv(stem, "branch", 16, 8, 3), "branch_relu")
    nodes.append(helper.make_node("Concat", [a, b], ["cat"], name="cat", axis=1))
    proj = bn(conv("cat", "project", 24, 16, 1), "project_bn", 16)
    nodes.append(helper.make_node("Add", [stem, proj], ["res"], name="res"))
    nodes.append(helper.make_node("GlobalAveragePool", ["res"], ["se_pool"], name="se_pool"))
    s = act("Relu", conv("se_pool", "se_reduce", 16, 8, 1), "se_relu")
    s = act("HardSigmoid", conv(s, "se_expand", 8, 16, 1), "se_gate")
    nodes.append(helper.make_node("Mul", ["res", s], ["se_out"], name="se_mul"))
    nodes.append(helper.make_node("GlobalAveragePool", ["se_out"], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"))
    nodes.append(
        helper.make_node("Gemm", ["flat", w("fc.w", (10, 16)), w("fc.b", (10,))], ["main"], name="fc", transB=1)
    )
    side = act("Relu", conv(stem, "side", 16, 8, 1), "side_relu")
    nodes.append(helper.make_node("GlobalAveragePool", [side], ["side_pool"], name="side_pool"))
    inits.append(numpy_helper.from_array(np.array([1, 8], np.int64), "side_shape"))
    nodes.append(helper.make_node("Reshape", ["side_pool", "side_shape"], ["side_flat"], name="side_reshape"))
    nodes.append(helper.make_node("MatMul", ["side_flat", w("side_fc.w", (8, 10))], ["side_logits"], name="side_fc"))
    nodes.append(helper.make_node("Add", ["main", "side_logits"], ["logits"], name="logits_add"))

    # dead channels: the residual group (stem, project, se_expand), expand+dw, branch, se_reduce, side
    byname = {i.name: i for i in inits}

    def kill(names, channels):
        for n in names:
            t = byname[n]
            a = numpy_helper.to_array(t).copy()
            a[channels] = 0
            t.CopyFrom(numpy_helper.from_array(a, n))

    dead = {}
    for group, c, members in (
        ("residual", 16, ["stem", "project", "se_expand"]),
        ("expand", 16, ["expand"]),
        ("branch", 8, ["branch"]),
        ("se_reduce", 8, ["se_reduce"]),
        ("side", 8, ["side"]),
    ):
        ch = np.sort(rng.choice(c, int(np.floor(zero * c)), replace=False))
        dead[group] = ch.tolist()
        for m in members:
            kill([f"{m}.w", f"{m}.b"], ch)
            if f"{m}_bn.shift" in byname:
                kill([f"{m}_bn.shift", f"{m}_bn.mean"], ch)
        if group == "expand":  # the depthwise conv and its BN carry the same channels
            kill(["dw.w", "dw.b", "dw_bn.shift", "dw_bn.mean"], ch)
    graph = helper.make_graph(
        nodes,
        "prunable_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path, dead


def dynamic_model(path: Path, inputs: dict, metadata: Optional[dict] = None) -> Path:
    """A model of one Identity per input, shaped ``inputs = {name: [dims]}`` (a str is symbolic, None unset)."""

    def value(name, dims):
        v = helper.make_tensor_value_info(name, TensorProto.FLOAT, [d if d is not None else "" for d in dims])
        for d, dim in zip(dims, v.type.tensor_type.shape.dim):
            if d is None:
                dim.Clear()
        return v

    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in inputs]
    graph = helper.make_graph(
        nodes, "g", [value(n, d) for n, d in inputs.items()], [value(f"{n}_out", d) for n, d in inputs.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for k, v in (metadata or {}).items():
        model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(path))
    return path
