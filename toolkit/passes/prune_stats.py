"""Which channels matter, and what their removal costs: weight norms, calibration statistics, bias correction.

Without data a channel's importance is its producers' filter L1 norm (scaled by a
following BatchNormalization, as folding would scale it; each producer's scores divided
by their mean so the producers of a residual group weigh alike). With calibration data
it is what the channel feeds its consumers: mean |activation| (its standard deviation
when bias correction restores the mean) times the L1 norm of the consumers' weights for it
(a first-order estimate of how much the consumers' outputs change without it), summed over
every Conv/Gemm/MatMul that reads the channel. The same statistics give *bias correction*:
the removed channels' mean activation times the consumer's weights is added to the
consumer's bias, so its output keeps its mean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext

    from .prune_graph import Analysis

STAT_SAMPLES = 64


def weight_consumers(an: Analysis) -> list[tuple[onnx.NodeProto, list]]:
    """``[(node, layout)]``: every Conv/Gemm/MatMul whose input channels come from a tracked layout."""
    out = []
    for kind, name, idx, lay, _ in an.edits:
        node = an.nodes[name]
        if kind == "slice" and idx == 1 and node.op_type in ("Conv", "Gemm", "MatMul"):
            out.append((node, lay))
    return out


def activation_stats(
    ctx: BuildContext, model: onnx.ModelProto, tensors: list[str]
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None, str]:
    """``({tensor: (mean, mean |x|, std) per channel}, detail)`` over calibration samples, or ``(None, why not)``."""
    calib = getattr(ctx, "calib", None)
    if calib is None or getattr(calib, "synthetic", False) or not len(calib):
        return None, "no calibration data (pass --calib)"
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        return None, "onnxruntime is not installed"
    from onnx import TensorProto, helper

    m: Any = onnx.ModelProto()  # later rebound to each tensor's moments
    m.CopyFrom(model)
    graph_outputs = {o.name for o in m.graph.output}
    graph_inputs = {i.name for i in m.graph.input}
    extra = sorted(set(tensors) - graph_outputs - graph_inputs)
    m.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in extra)
    from edgekit.execution import reference_session

    sess = reference_session(m.SerializeToString())
    names = [t for t in tensors if t in set(extra) | graph_outputs]
    samples = calib.samples[:STAT_SAMPLES]
    sums: dict[str, np.ndarray] = {}
    for feed in samples:
        for t, v in zip(names, sess.run(names, feed)):
            v = v.astype(np.float64)
            axes = tuple(i for i in range(v.ndim) if i != 1)
            moments = np.stack([v.mean(axis=axes), np.abs(v).mean(axis=axes), (v * v).mean(axis=axes)])
            sums[t] = moments if t not in sums else sums[t] + moments
    for name in tensors:
        if name in graph_inputs:  # a graph input: the samples themselves
            arr = np.concatenate([f[name] for f in samples]).astype(np.float64)
            axes = tuple(i for i in range(arr.ndim) if i != 1)
            sums[name] = len(samples) * np.stack(
                [arr.mean(axis=axes), np.abs(arr).mean(axis=axes), (arr * arr).mean(axis=axes)]
            )
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for t, m in sums.items():
        mean, mabs, sq = m / len(samples)
        out[t] = (mean, mabs, np.sqrt(np.maximum(sq - mean * mean, 0)))
    return out, f"{len(samples)} calibration samples"


def _column_l1(node: onnx.NodeProto, w: np.ndarray) -> np.ndarray:
    """L1 norm of a consumer's weights per input channel."""
    w = np.abs(w.astype(np.float64))
    if node.op_type == "Conv":
        return w.sum(axis=(0, 2, 3)) if w.ndim == 4 else w.sum(axis=tuple(i for i in range(w.ndim) if i != 1))
    if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
        return w.sum(0)
    return w.sum(1)


def activation_importance(
    an: Analysis, stats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], centred: bool = False
) -> dict[int, np.ndarray]:
    """``{group root: per-channel score}`` from what each channel feeds its consumers.

    ``centred`` (with bias correction, which restores a removed channel's mean): the channel's
    standard deviation instead of its mean magnitude, i.e. the part bias correction cannot restore.
    """
    scores: dict[int, np.ndarray] = {}
    for node, lay in weight_consumers(an):
        if node.input[0] not in stats:
            continue
        contrib = stats[node.input[0]][2 if centred else 1] * _column_l1(node, an.inits[node.input[1]])
        offset = 0
        for space, size in lay:
            if space is not None:
                root = an.spaces.find(space)
                scores[root] = scores.get(root, 0) + contrib[offset : offset + size]
            offset += size
    return scores


def l1_importance(an: Analysis, producers: list[str]) -> np.ndarray | None:
    """Per-channel score of a group from its producers' filters (no data needed)."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in an.model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    total = None
    for name in producers:
        node = an.nodes[name]
        w = np.abs(an.inits[node.input[1]].astype(np.float64))
        if node.op_type == "Conv":
            score = w.reshape(w.shape[0], -1).sum(1)
        elif node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            score = w.sum(1)
        else:
            score = w.sum(0)
        after = consumers.get(node.output[0], [])
        if len(after) == 1 and after[0].op_type == "BatchNormalization":
            bn = after[0]
            eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
            gamma, var = an.inits[bn.input[1]], an.inits[bn.input[4]]
            score = score * np.abs(gamma) / np.sqrt(var.astype(np.float64) + eps)
        mean = score.mean()
        score = score / mean if mean > 0 else score
        total = score if total is None else total + score
    return total


def bias_deltas(
    an: Analysis, keep: dict[int, np.ndarray], stats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> dict[str, np.ndarray]:
    """``{Conv/Gemm node: bias delta}``: removed input channels' mean activation times the consumer's weights."""
    deltas = {}
    for node, lay in weight_consumers(an):
        if node.op_type not in ("Conv", "Gemm") or node.input[0] not in stats:
            continue
        full = sum(sz for _, sz in lay)
        removed = np.setdiff1d(np.arange(full), an.keep_indices(lay, keep))
        if not len(removed):
            continue
        mean = stats[node.input[0]][0][removed]
        w = an.inits[node.input[1]].astype(np.float64)
        if node.op_type == "Conv":
            delta = w[:, removed].reshape(w.shape[0], len(removed), -1).sum(2) @ mean
        else:
            alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.0)
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            delta = alpha * ((w[:, removed] @ mean) if trans_b else (w[removed, :].T @ mean))
        deltas[node.name] = delta.astype(np.float32)
    return deltas
