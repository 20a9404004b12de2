"""The SDK contract runner for the Python client (``edgekit_sdk``): ``python_runner.py SCENARIO.json``.

Plays each step of the scenario with :class:`edgekit_sdk.AgentClient` and prints ``{"results": [...]}``
(protocol: ``sdk_bindings/README.md``). Every other SDK's runner is compared with this one.
"""

from __future__ import annotations

import base64
import json
import socket
import sys
import time
from typing import Any

import numpy as np

from edgekit_sdk import AgentClient, AgentHTTPError

UNSET = object()


def _array(t: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(t["b64"]), dtype=t["dtype"]).reshape(t["shape"]).copy()


def _tensor(a: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(a.dtype), "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def _inputs(step: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: _array(v) for k, v in step["inputs"].items()}


def play(client: AgentClient, step: dict[str, Any]) -> Any:
    op = step["op"]
    if op == "health":
        return client.health()
    if op == "models":
        return client.models()
    if op == "load":
        return client.load(step["model"])
    if op == "unload":
        return client.unload(step["model"])
    if op == "annotate":
        return client.annotate(step["request_id"], step.get("pre_ms"), step.get("post_ms"))
    if op == "infer":
        outputs, header = client.infer(step["model"], _inputs(step), with_meta=True)
        meta = {k: v for k, v in header.items() if k != "tensors"}
        return {"outputs": {k: _tensor(v) for k, v in outputs.items()}, "meta": meta}
    if op == "infer_loop":
        ok, errors, versions = 0, [], []
        feeds = _inputs(step)
        for _ in range(int(step["count"])):
            try:
                _, header = client.infer(step["model"], feeds, with_meta=True)
            except AgentHTTPError as e:
                errors.append(e.message)
                continue
            ok += 1
            if header.get("version") not in versions:
                versions.append(header.get("version"))
        return {"ok": ok, "errors": errors, "versions": versions}
    if op == "overhead":
        feeds = _inputs(step)
        for _ in range(int(step.get("warmup", 10))):
            client.infer(step["model"], feeds)
        client_ms, inference_ms = [], []
        for _ in range(int(step["runs"])):
            t0 = time.perf_counter()
            _, header = client.infer(step["model"], feeds, with_meta=True)
            client_ms.append((time.perf_counter() - t0) * 1000.0)
            inference_ms.append(header["inference_ms"])
        return {"client_ms": client_ms, "inference_ms": inference_ms}
    raise ValueError(f"unknown op {op!r}")


def main(path: str) -> int:
    with open(path) as f:
        scenario = json.load(f)
    clients: dict[Any, AgentClient] = {}
    results = []
    for step in scenario["steps"]:
        token = step.get("token", scenario.get("token"))
        if token not in clients:  # token=None: no token at all (not the one the client would find on disk)
            c = AgentClient(scenario["host"], scenario["port"], token=token or "", timeout=60)
            c.token = token
            clients[token] = c
        try:
            results.append({"ok": True, "result": play(clients[token], step)})
        except AgentHTTPError as e:
            results.append({"ok": False, "status": e.status, "message": e.message})
        except (OSError, socket.timeout) as e:
            results.append({"ok": False, "status": 0, "message": str(e)})
    for c in clients.values():
        c.close()
    json.dump({"results": results}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
