"""The SDK contract suite's fixtures: its models, the scenario every SDK's runner plays, and the runners.

Every SDK (``sdk_bindings/<lang>``) ships a small runner program that reads a scenario (JSON: the agent's
address, its token, and steps such as ``infer`` or ``load``), makes each call with that SDK, and prints the
results as one JSON document (protocol: ``sdk_bindings/README.md``). ``tests/harness/sdk_<lang>.py`` builds a
language's runner (``command(build_dir) -> argv``); :func:`runners` finds them all.

Models (ONNX made here, built for ONNX Runtime at fp32 and deployed to a real agent):
- ``mix``: ``a`` float32 [1, 4], ``ids`` int64 [1, 6], ``pix`` uint8 [1, 8] -> ``y`` float32 [1, 4]
  (``a * K + sum(ids)``), ``n`` int64 [1, 6] (``ids + 1``), ``z`` float32 [1, 8] (``pix / 2``); two versions,
  K = 2 and K = 3, so a rollback shows in the outputs and in the version the agent names.
- ``big``: ``x`` float32 [1, 4, 512, 512] (4 MiB) -> ``y = x * 2``: a large tensor each way.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HARNESS = Path(__file__).resolve().parent
BIG = [1, 4, 512, 512]


def mix_model(path: Path, k: float) -> Path:
    inits = [
        numpy_helper.from_array(np.array(k, np.float32), "k"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("Mul", ["a", "k"], ["ak"]),
        helper.make_node("ReduceSum", ["ids", "one"], ["s"], keepdims=1),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["ak", "sf"], ["y"]),
        helper.make_node("Add", ["ids", "one"], ["n"]),
        helper.make_node("Cast", ["pix"], ["pixf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pixf", "half"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mix",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6]),
            helper.make_tensor_value_info("pix", TensorProto.UINT8, [1, 8]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [1, 6]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8]),
        ],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def big_model(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, BIG)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, BIG)],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def mix_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.standard_normal((1, 4)).astype(np.float32),
        "ids": rng.integers(-(2**40), 2**40, (1, 6)).astype(np.int64),  # beyond 32 bits: no silent narrowing
        "pix": rng.integers(0, 256, (1, 8)).astype(np.uint8),
    }


def samples(path: Path, named: dict[str, np.ndarray], n: int = 8) -> Path:
    """An .npz of ``n`` samples along axis 0 (each shaped like the input without its batch of 1)."""
    arrays = {k: np.concatenate([v] * n, axis=0) for k, v in named.items()}
    np.savez(path, **arrays)
    return path


def tensor(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a) if a.ndim else a
    return {"dtype": str(a.dtype), "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def array(t: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(t["b64"]), dtype=t["dtype"]).reshape(t["shape"])


def tensors(named: dict[str, np.ndarray]) -> dict[str, Any]:
    return {k: tensor(v) for k, v in named.items()}


def runners() -> dict[str, Callable[[Path], list[str]]]:
    """``{language: command}`` from every ``tests/harness/sdk_<lang>.py``."""
    out: dict[str, Callable[[Path], list[str]]] = {}
    for path in sorted(HARNESS.glob("sdk_*.py")):
        if path.stem == "sdk_contract":
            continue
        spec = importlib.util.spec_from_file_location(f"harness.{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[path.stem[len("sdk_") :]] = module.command
    return out


def play(argv: list[str], scenario: dict[str, Any], work: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """Run a runner on ``scenario``; its list of step results."""
    path = work / "scenario.json"
    path.write_text(json.dumps(scenario))
    p = subprocess.run([*argv, str(path)], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{argv[0]} exited {p.returncode}: {p.stderr[-3000:]}"
    try:
        results = json.loads(p.stdout)["results"]
    except (ValueError, KeyError) as e:
        raise AssertionError(
            f"{argv[0]} printed no results document ({e}): {p.stdout[-2000:]} {p.stderr[-2000:]}"
        ) from e
    assert len(results) == len(scenario["steps"]), results
    return list(results)
