"""A small stateful ONNX model and its data, for the stream tests (edgekit.stream, agent sessions)."""

from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 4
ZOO = Path(__file__).resolve().parents[2] / "benchmarks" / "zoo"


def weights(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((WIDTH, WIDTH)) * 0.5).astype(np.float32)


def stateful(path: Path, seed: int = 0) -> Path:
    """x [1, 4], state [1, 4] -> stateN = 0.5 * state + x @ W, out = sigmoid(sum(stateN)) [1, 1]."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Mul", ["state", "half"], ["decayed"]),
        helper.make_node("Add", ["decayed", "h"], ["stateN"]),
        helper.make_node("ReduceSum", ["stateN", "axes"], ["total"], keepdims=1),
        helper.make_node("Sigmoid", ["total"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "stateful",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, WIDTH]),
        ],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [1, WIDTH]),
        ],
        [
            numpy_helper.from_array(weights(seed), "W"),
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def sequence(steps: int, seed: int) -> np.ndarray:
    """``x`` for ``steps`` steps, [T, 1, 4]: a slow wave plus noise, so the output crosses 0.5 now and then."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=np.float32)[:, None, None]
    return (np.sin(t / 3.0 + seed) + 0.3 * rng.standard_normal((steps, 1, WIDTH))).astype(np.float32)


def sequences(folder: Path, n: int = 3, steps: int = 20, initial: Optional[np.ndarray] = None) -> Path:
    """A folder of ``n`` sequence files (``x`` [T, 1, 4]; ``state`` [1, 4] when ``initial`` is given)."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        arrays: Dict[str, np.ndarray] = {"x": sequence(steps, k)}
        if initial is not None:
            arrays["state"] = initial
        np.savez(folder / f"seq{k:02d}.npz", **arrays)
    return folder


def by_hand(xs: np.ndarray, seed: int = 0, state: Optional[np.ndarray] = None) -> List[Dict[str, np.ndarray]]:
    """What the model computes over one sequence, in numpy: each step's outputs."""
    w = weights(seed)
    s = np.zeros((1, WIDTH), np.float32) if state is None else state
    out = []
    for x in xs:
        s = (0.5 * s + x @ w).astype(np.float32)
        out.append({"out": 1 / (1 + np.exp(-s.sum(axis=1, keepdims=True))), "stateN": s})
    return out
