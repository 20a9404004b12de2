"""How many channels each group loses: the same ratio everywhere, or by measured sensitivity.

Sensitivity allocation (with calibration data): each channel group is pruned *alone* at
the requested ratio and the model's outputs on calibration samples are compared with the
unpruned model's (squared error divided by the outputs' variance over the samples). A
group's damage is then modelled as growing with the square of the channels it loses, and
the ratios that minimise the total damage while removing the same number of channels as
the uniform ratio would are found by water-filling, each ratio capped so that no group is
emptied. Robust groups (wide expansions) give up more channels, fragile ones (a residual
trunk shared by many blocks) fewer. The cost is one inference pass per group. When the build has a task, a
group's damage is the loss of the task's primary score (the metric the build's gate judges), see
:func:`sensitivities`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext

    from .prune_graph import Analysis

SENSITIVITY_SAMPLES = 32
TIE_BREAK = 1e-3  # weight of the outputs' squared error next to a task metric's loss
MAX_RATIO = 0.9


def keep_count(size: int, ratio: float, multiple: int) -> int:
    """Channels a group of ``size`` keeps at ``ratio`` (at least 1; nearest ``multiple`` on wide groups)."""
    n_keep = max(1, size - int(math.floor(ratio * size + 1e-9)))
    if multiple > 1 and size >= 4 * multiple and n_keep < size:  # NCHWc kernels run whole channel blocks
        n_keep = min(size, max(multiple, int(round(n_keep / multiple)) * multiple))
    return n_keep


def choose(scores: Any, n_keep: int) -> np.ndarray:
    """Indices of the ``n_keep`` highest scores, in channel order."""
    return np.sort(np.argsort(-np.asarray(scores), kind="stable")[:n_keep])


def _session(model_bytes: bytes) -> Any:
    from edgekit.execution import reference_session

    return reference_session(model_bytes, threads=1)


def _float_outputs(sess: Any, samples: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    outs = [sess.run(None, f) for f in samples]
    return [
        np.concatenate([np.asarray(o, np.float64).ravel() for o in out if np.asarray(o).dtype.kind == "f"])
        for out in outs
    ]


def _named_outputs(sess: Any, samples: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(None, f))) for f in samples]


def _task_loss(task: Any, reference: Any, candidate: list[dict[str, np.ndarray]]) -> float:
    """1 - the task's primary score (answers after decoding) of a candidate against the reference's outputs."""
    from edgekit.tasks import evaluate

    spec = getattr(task, "spec", task)
    return 1.0 - float(evaluate(spec, reference, candidate)["score"])


def sensitivities(
    ctx: BuildContext,
    an: Analysis,
    trials: dict[int, np.ndarray],
    deltas_for: Callable[[dict[int, np.ndarray]], dict[str, np.ndarray]],
) -> dict[int, float]:
    """``{group root: damage}`` with each group of ``trials = {root: kept indices}`` pruned alone.

    The damage is the outputs' squared error over their variance; when the build has a task (``ctx.task``), it is
    the loss of the task's primary score (1 - agreement after decoding), the same metric the build's gate judges,
    plus ``TIE_BREAK`` x that squared error to order the groups whose removal leaves the answers unchanged.
    """
    samples = ctx.calib.samples[:SENSITIVITY_SAMPLES]
    task = getattr(ctx, "task", None)
    spec = getattr(task, "spec", task)
    task = task if spec is not None and getattr(spec, "family", "generic") != "generic" else None
    ref_sess = _session(an.model.SerializeToString())
    ref = np.stack(_float_outputs(ref_sess, samples))
    ref_named = _named_outputs(ref_sess, samples) if task is not None else None
    scale = float(((ref - ref.mean(0)) ** 2).sum()) or float((ref**2).sum()) or 1.0
    damage = {}
    for root, kept in trials.items():
        keep = {root: kept}
        model = an.apply(keep, deltas_for(keep))
        sess = _session(model.SerializeToString())
        out = np.stack(_float_outputs(sess, samples))
        damage[root] = float(((out - ref) ** 2).sum()) / scale
        if task is not None:
            damage[root] = _task_loss(task, ref_named, _named_outputs(sess, samples)) + TIE_BREAK * damage[root]
    return damage


def allocate(groups: list[tuple[int, int, float]], ratio: float, max_ratio: float = MAX_RATIO) -> dict[int, float]:
    """Ratios ``{root: q}`` for ``groups = [(root, size, damage at ratio)]`` removing ``ratio`` of their channels.

    Minimises sum(damage * (q / ratio)^2) with sum(q * size) = ratio * sum(size), 0 <= q <= cap.
    """
    if not groups or ratio <= 0:
        return {root: ratio for root, _, _ in groups}
    cap = min(max_ratio, max(2 * ratio, ratio + 0.2))
    target = ratio * sum(size for _, size, _ in groups)
    # removing n channels of a group costs d * (n / n0)^2, n0 = ratio * size: equal marginal cost
    # mu gives n = mu * n0^2 / (2 d), i.e. q = mu * ratio^2 * size / (2 d)
    weight = {root: ratio * ratio * size / (2 * max(d, 1e-12)) for root, size, d in groups}

    def removed(mu: float) -> float:
        return sum(min(cap, mu * weight[root]) * size for root, size, _ in groups)

    lo, hi = 0.0, 1.0
    while removed(hi) < target and hi < 1e30:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if removed(mid) < target else (lo, mid)
    return {root: min(cap, hi * weight[root]) for root, _, _ in groups}
