"""Small ONNX models the tests build themselves (deterministic, seconds to make)."""

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
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"), (b3, "b3"))],
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
