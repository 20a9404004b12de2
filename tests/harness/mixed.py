"""A small ONNX model with inputs of every kind, for the data-format and feed tests (seconds to make).

Inputs: ``ids`` int64 [N, 6] (token ids into a 20-row table), ``mask`` bool [N, 6], ``sr`` int64 0-d (compared
with 16000), ``state`` float [2, N, 4] (batch axis 1) and ``y`` float [N, 4] (an input named like a label key).
Outputs: ``state_out`` and ``y_out`` float, ``keep`` bool, ``best`` int64.
"""

from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = 20
LENGTH = 6
WIDTH = 4


def mixed_inputs_model(
    path: Union[str, Path], seed: int = 0, batch: Union[int, str] = "N", optional: bool = False
) -> Path:
    """``optional``: ``y_out`` is also scaled by ``gain``, an optional float input (a graph input with an
    initializer of the same name, 1.0, as its default)."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((VOCAB, WIDTH)).astype(np.float32), "table"),
        numpy_helper.from_array(np.array([2], np.int64), "axis2"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(16000, np.int64), "k16000"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1.0, np.float32), "gain"),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["masku"]),
        helper.make_node("Mul", ["emb", "masku"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["pooled"], keepdims=0),
        helper.make_node("Equal", ["sr", "k16000"], ["is16"]),
        helper.make_node("Where", ["is16", "one", "half"], ["factor"]),
        helper.make_node("Mul", ["state", "factor"], ["scaled"]),
        helper.make_node("Add", ["scaled", "pooled"], ["state_out"]),
        helper.make_node("Add", ["y", "pooled"], ["y_sum"]),
        helper.make_node("Mul", ["y_sum", "gain"], ["y_out"]),
        helper.make_node("Not", ["mask"], ["keep"]),
        helper.make_node("ArgMax", ["masked"], ["best"], axis=2, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, LENGTH]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, [batch, LENGTH]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, batch, WIDTH]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, WIDTH]),
        ]
        + ([helper.make_tensor_value_info("gain", TensorProto.FLOAT, [])] if optional else []),
        [
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, batch, WIDTH]),
            helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [batch, WIDTH]),
            helper.make_tensor_value_info("keep", TensorProto.BOOL, [batch, LENGTH]),
            helper.make_tensor_value_info("best", TensorProto.INT64, [batch, LENGTH]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def mixed_samples(n: int, seed: int = 1) -> dict:
    """``n`` samples as arrays: ``ids`` (n, 1, 6), ``mask`` (n, 1, 6), ``state`` (2, n, 4) — samples along axis 1 —
    and ``y`` (n, 4); ``sr`` is left to the caller (it is the same for every sample)."""
    rng = np.random.default_rng(seed)
    mask = np.arange(LENGTH) < rng.integers(1, LENGTH + 1, (n, 1, 1))
    return {
        "ids": rng.integers(0, VOCAB, (n, 1, LENGTH)).astype(np.int64),
        "mask": mask,
        "state": rng.standard_normal((2, n, WIDTH)).astype(np.float32),
        "y": rng.standard_normal((n, WIDTH)).astype(np.float32),
    }
