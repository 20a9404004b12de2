"""Unstructured pruning: set the smallest-magnitude weights to zero (the file keeps its size but compresses)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper


def prune_weights(
    model: onnx.ModelProto, layers: dict, s: dict, ratio_for: Callable[[list, dict], float | None]
) -> tuple[onnx.ModelProto, dict]:
    """Unstructured pruning: zero the ``s["ratio"]`` smallest-magnitude weights of every layer (per layer, or one
    global threshold with ``s["scope"] == "global"``); ``ratio_for([name], layers)`` is None for skipped layers."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = {n.name: n for n in m.graph.node}
    inits = {i.name: i for i in m.graph.initializer}
    chosen = {}
    for name in layers:
        ratio = ratio_for([name], layers)
        if ratio is not None:
            chosen[name] = ratio
    weights = {n: numpy_helper.to_array(inits[nodes[n].input[1]]) for n in chosen}
    threshold = None
    if s["scope"] == "global":
        allw = np.concatenate([np.abs(w).ravel() for n, w in weights.items()]) if weights else np.zeros(0)
        k = int(math.floor(s["ratio"] * allw.size))
        threshold = np.partition(allw, k - 1)[k - 1] if k > 0 else -1.0
    rows, total, zeros = [], 0, 0
    done: dict = {}
    for n, ratio in chosen.items():
        w = weights[n]
        flat = np.abs(w).ravel()
        if threshold is not None and not (layers[n] & set(s["layers"] or {})):
            mask = np.abs(w) <= threshold
        else:
            k = int(math.floor(ratio * flat.size))
            mask = np.zeros(w.shape, bool)
            if k:
                mask.ravel()[np.argsort(flat, kind="stable")[:k]] = True
        before = float(np.mean(w == 0))
        wname = nodes[n].input[1]
        new = np.where(mask, 0, w).astype(w.dtype)
        if wname in done:  # a weight shared by two layers: prune it once
            new = np.where(mask | (done[wname] == 0), 0, w).astype(w.dtype)
        done[wname] = new
        inits[wname].CopyFrom(numpy_helper.from_array(new, wname))
        total += w.size
        zeros += int(np.sum(new == 0))
        rows.append(
            {
                "name": n,
                "op": nodes[n].op_type,
                "weights": int(w.size),
                "target": ratio,
                "sparsity_before": round(before, 4),
                "sparsity_after": round(float(np.mean(new == 0)), 4),
            }
        )
    skipped = [{"layers": [n], "reason": "skipped by the recipe"} for n in layers if n not in chosen]
    return m, {
        "scope": s["scope"],
        "layers": rows,
        "skipped": skipped,
        "sparsity": round(zeros / total, 4) if total else 0.0,
        "weights_pruned": total,
    }
