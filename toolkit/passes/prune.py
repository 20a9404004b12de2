"""Pruning: structured (remove whole channels, rewire every consumer) and unstructured (zero weights).

Structured pruning removes, in every prunable channel group (see
:mod:`edgekit.passes.prune_graph`), the ``ratio`` fraction of channels with the smallest
importance: the L1 norm of each producer's filter, scaled by the following
BatchNormalization's ``|gamma| / sqrt(var + eps)`` when there is one (the filter's norm
as BN folds it), each producer's scores divided by their mean so that the producers of a
residual group weigh alike. The model really gets smaller and cheaper: weights, biases,
BN vectors and MACs shrink. With calibration data, *bias correction* adds each removed
input channel's mean contribution (its mean activation on the calibration samples,
measured on the unpruned model, times the consumer's weights) to the consumer's bias, a
training-free recovery step. Fine-tuning with a training framework is not done here.

Unstructured pruning sets the ``ratio`` fraction of smallest-magnitude weights of every
Conv/Gemm/MatMul to zero (per layer, or one global threshold): the file keeps its size
but compresses (and backends with sparse or compressed weights benefit).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import onnx

from ..tasks import PRIMARY
from .base import Option, Pass, PassConfigError, PassResult, file_sizes, param_count
from .graph_fold import fold_constants, name_nodes, static_shapes
from .prune_alloc import TIE_BREAK, allocate, choose, keep_count, sensitivities
from .prune_graph import Analysis, macs
from .prune_recipe import MODES, PRUNED_THRESHOLDS, RECIPE_KEYS, check_ratio, load_recipe, relax_thresholds
from .prune_stats import activation_importance, activation_stats, bias_deltas, l1_importance, weight_consumers
from .prune_unstructured import prune_weights

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext

    from .prune_spaces import Group

__all__ = [
    "MODES",
    "PRUNED_THRESHOLDS",
    "RECIPE_KEYS",
    "PrunePass",
    "apply",
    "check_ratio",
    "load_recipe",
    "relax_thresholds",
    "settings",
    "summary",
]


def settings(
    prune: float | None = None, mode: str | None = None, recipe: str | Path | None = None
) -> dict[str, Any] | None:
    """The pass settings a build asked for (None: no pruning). ``prune`` is the ratio, e.g. 0.3."""
    if prune is None and recipe is None and mode is None:
        return None
    data = load_recipe(recipe) if recipe else {}
    ratio = prune if prune is not None else data.get("ratio")
    if ratio is None:
        raise PassConfigError("pruning needs a ratio: pass --prune 0.3 (or set ratio = 0.3 in the recipe)")
    out = {
        "ratio": check_ratio(ratio),
        "mode": mode or data.get("mode", "structured"),
        "layers": dict(data.get("layers", {})),
        "skip": list(data.get("skip", [])),
    }
    for key in ("scope", "channel_multiple", "bias_correction", "criterion", "allocation"):
        if key in data:
            out[key] = data[key]
    PrunePass(**out)  # validate now, before any conversion
    return out


class PrunePass(Pass):
    name = "prune"
    options = (
        Option("mode", str, "structured", "structured: remove channels; unstructured: zero single weights", MODES),
        Option("ratio", float, 0.3, "fraction of channels (structured) or weights (unstructured) to remove, in [0, 1)"),
        Option(
            "scope",
            str,
            "layer",
            "unstructured only: the same ratio in every layer, or one global magnitude threshold",
            ("layer", "global"),
        ),
        Option("layers", dict, None, "per-layer ratios {node or weight name: ratio}"),
        Option("skip", list, None, "layers (node or weight names) left unpruned"),
        Option(
            "channel_multiple",
            int,
            8,
            "structured: keep channel counts at the nearest multiple of this (layers "
            "with fewer than 4x as many channels are not rounded): vectorised CPU kernels run whole "
            "blocks of 8 or 16 channels, other counts can run slower",
        ),
        Option(
            "criterion",
            str,
            "auto",
            "structured: which channels go first. activation: smallest mean |activation| "
            "x consumer weights on calibration data; l1: smallest filter norms; auto: "
            "activation with calibration data, else l1",
            ("auto", "activation", "l1"),
        ),
        Option(
            "allocation",
            str,
            "auto",
            "structured: uniform (every group loses the ratio) or sensitivity (the "
            "same number of channels, taken more from groups whose removal changes "
            "the outputs less, measured on calibration data); auto: sensitivity with "
            "calibration data",
            ("auto", "uniform", "sensitivity"),
        ),
        Option(
            "bias_correction",
            bool,
            True,
            "structured, with calibration data: fold removed channels' mean contribution into the consumers' biases",
        ),
    )

    def validate(self) -> None:
        s = self.settings
        check_ratio(s["ratio"])
        for name, r in (s["layers"] or {}).items():
            check_ratio(r, f"ratio of layer {name!r}")
        if s["channel_multiple"] < 1:
            raise PassConfigError(f"channel_multiple must be >= 1, got {s['channel_multiple']}")

    # -- entry point ------------------------------------------------------------------
    def run(self, ctx: BuildContext, model_path: Path) -> PassResult:
        s = self.settings
        original = onnx.load(str(model_path))
        named = onnx.ModelProto()
        named.CopyFrom(original)
        name_nodes(named)
        model = fold_constants(named)
        shapes = static_shapes(model, dynamic_as_one=True)
        layers = _prunable_layers(model)
        self._check_names(layers)
        out = Path(ctx.workdir) / f"pruned.{s['mode']}.onnx"
        if s["mode"] == "structured":
            pruned, section = self._structured(ctx, model, shapes, layers)
            step = f"structured pruning ({s['ratio']:.0%} of channels)"
        else:
            pruned, section = self._unstructured(model, layers)
            step = f"unstructured pruning ({s['ratio']:.0%} of weights)"
        try:
            onnx.checker.check_model(pruned)  # shapes: onnxruntime runs it in ctx.check
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            from ..errors import ConversionError

            raise ConversionError(
                f"the pruned model fails the ONNX checker ({str(e).splitlines()[0]}); "
                "use --prune-recipe to skip the layer named there"
            ) from None
        onnx.save(pruned, str(out))
        src = Path(ctx.workdir) / "pruning.input.onnx"
        onnx.save(original, str(src))
        section.update(
            {
                "mode": s["mode"],
                "ratio": s["ratio"],
                "step": step,
                "params_before": param_count(model),
                "params_after": param_count(pruned),
                "size_before": file_sizes(src),
                "size_after": file_sizes(out),
            }
        )
        if s["mode"] == "structured":
            before, after = macs(model, shapes), macs(pruned, static_shapes(pruned, dynamic_as_one=True))
            section["macs_before"], section["macs_after"] = sum(before.values()), sum(after.values())
            for row in section["layers"]:
                row["macs_before"], row["macs_after"] = before.get(row["name"]), after.get(row["name"])
        ctx.log(
            f"  pruning: {section['params_before']:,} -> {section['params_after']:,} parameters, "
            f"{section['size_before']['bytes'] / 1024:.1f} -> {section['size_after']['bytes'] / 1024:.1f} KB"
        )
        record = ctx.check(step, out)
        section["fidelity_passed"] = bool(record.get("passed")) if isinstance(record, dict) else None
        return PassResult(out, section)

    def _check_names(self, layers: dict[str, set[str]]) -> None:
        s = self.settings
        aliases = {a for names in layers.values() for a in names}
        for label, names in (("layers", list(s["layers"] or {})), ("skip", list(s["skip"] or []))):
            unknown = [n for n in names if n not in aliases]
            if unknown:
                shown = sorted(layers)[:12]
                raise PassConfigError(
                    f"pruning recipe {label} name(s) {', '.join(map(repr, unknown))} match no Conv/Gemm/MatMul of the "
                    f"model; its layers are: {', '.join(shown)}{' ...' if len(layers) > len(shown) else ''} "
                    "(node names, or their weight names)"
                )

    def _ratio_for(self, names: Iterable[str], layers: dict[str, set[str]]) -> float | None:
        """Ratio for a set of node names; None when the recipe skips one of them."""
        s = self.settings
        skip, per_layer = set(s["skip"] or ()), dict(s["layers"] or {})
        ratios = []
        for n in names:
            aliases = layers.get(n, {n})
            if aliases & skip:
                return None
            ratios += [per_layer[a] for a in aliases if a in per_layer]
        return min(ratios) if ratios else s["ratio"]

    def _explicit(self, names: Iterable[str], layers: dict[str, set[str]]) -> bool:
        """Whether the recipe sets a ratio for one of these layers (then allocation leaves the group alone)."""
        per_layer = set(self.settings["layers"] or ())
        return any(layers.get(n, {n}) & per_layer for n in names)

    # -- structured -------------------------------------------------------------------
    def _structured(
        self, ctx: BuildContext, model: onnx.ModelProto, shapes: dict[str, list], layers: dict[str, set[str]]
    ) -> tuple[onnx.ModelProto, dict[str, Any]]:
        s = self.settings
        an = Analysis(model, shapes)
        keep, rows, skipped = {}, [], []
        stats, stats_detail = None, "not needed"
        if s["criterion"] != "l1" or s["bias_correction"] or s["allocation"] != "uniform":
            tensors = sorted({node.input[0] for node, _ in weight_consumers(an)})
            stats, stats_detail = activation_stats(ctx, model, tensors)
        if s["criterion"] == "activation" and stats is None:
            raise PassConfigError(f"the activation criterion needs calibration data: {stats_detail}")
        data_scores = (
            activation_importance(an, stats, centred=s["bias_correction"])
            if stats is not None and s["criterion"] != "l1"
            else {}
        )

        def scores_for(g: Group) -> Any:
            return data_scores[g.root] if g.root in data_scores else l1_importance(an, g.producers)

        def deltas_for(k: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
            return bias_deltas(an, k, stats) if k and stats is not None and s["bias_correction"] else {}

        plan = []  # (group, names, ratio, set by the recipe)
        for g in an.groups():
            names = sorted(set(g.producers))
            if g.reasons:
                skipped.append({"layers": names, "channels": g.size, "reason": "; ".join(g.reasons)})
                continue
            ratio = self._ratio_for(names, layers)
            if ratio is None:
                skipped.append({"layers": names, "channels": g.size, "reason": "skipped by the recipe"})
                continue
            plan.append((g, names, ratio, self._explicit(names, layers)))

        ratios, damage, metric = {g.root: r for g, _, r, _ in plan}, {}, None
        allocation = "uniform"
        if s["allocation"] != "uniform" and stats is not None:
            trials = {
                g.root: choose(scores_for(g), keep_count(g.size, r, 1))
                for g, _, r, fixed in plan
                if not fixed and keep_count(g.size, r, 1) < g.size
            }
            if len(trials) > 1:
                damage = sensitivities(ctx, an, trials, deltas_for)
                free = [(g.root, g.size, damage[g.root]) for g, _, _, _ in plan if g.root in trials]
                ratios.update(allocate(free, s["ratio"]))
                allocation = "sensitivity"
                judged = getattr(getattr(ctx, "task", None), "spec", None)
                metric = "squared output error / output variance"
                if judged is not None and judged.family != "generic":
                    metric = f"1 - {PRIMARY[judged.family]} (task {judged}) + {TIE_BREAK:g} x squared output error"
        elif s["allocation"] == "sensitivity":
            raise PassConfigError(f"sensitivity allocation needs calibration data: {stats_detail}")

        criteria = set()
        for g, names, _, _ in plan:
            n_keep = keep_count(g.size, ratios[g.root], s["channel_multiple"])
            criterion = "activation" if g.root in data_scores else "l1"
            if n_keep < g.size:
                keep[g.root] = choose(scores_for(g), n_keep)
                criteria.add(criterion)
            for n in names:
                rows.append(
                    {
                        "name": n,
                        "op": an.nodes[n].op_type,
                        "group": names[0],
                        "ratio": round(float(ratios[g.root]), 4),
                        "sensitivity": damage.get(g.root),
                        "criterion": criterion,
                        "channels_before": g.size,
                        "channels_after": n_keep,
                    }
                )
        bias_add = deltas_for(keep)
        correction = {
            "applied": bool(bias_add),
            "layers": sorted(bias_add),
            "statistics": stats_detail,
            "method": "removed input channels' mean activation on the calibration data (unpruned model) "
            "times the consumer's weights, added to its bias",
        }
        pruned = an.apply(keep, bias_add)
        before, after = _node_params(model), _node_params(pruned)
        for row in rows:
            row["params_before"], row["params_after"] = before.get(row["name"]), after.get(row["name"])
        prunable = sum(g.size for g in an.groups() if not g.reasons)
        removed = sum(r["channels_before"] - r["channels_after"] for r in rows if r["group"] == r["name"])
        return pruned, {
            "layers": rows,
            "skipped": skipped,
            "bias_correction": correction,
            "criterion": sorted(criteria),
            "allocation": allocation,
            **({"sensitivity_metric": metric} if metric else {}),
            "channels_prunable": prunable,
            "channels_removed": removed,
            "channel_multiple": s["channel_multiple"],
        }

    # -- unstructured -----------------------------------------------------------------
    def _unstructured(
        self, model: onnx.ModelProto, layers: dict[str, set[str]]
    ) -> tuple[onnx.ModelProto, dict[str, Any]]:
        return prune_weights(model, layers, self.settings, self._ratio_for)


def _prunable_layers(model: onnx.ModelProto) -> dict[str, set[str]]:
    """``{node name: {node name, weight name}}`` for every Conv/Gemm/MatMul with a constant weight."""
    inits = {i.name for i in model.graph.initializer}
    return {
        n.name: {n.name, n.input[1]}
        for n in model.graph.node
        if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in inits
    }


def _node_params(model: onnx.ModelProto) -> dict[str, int]:
    sizes = {i.name: int(np.prod(i.dims)) for i in model.graph.initializer}
    return {
        n.name: sum(sizes.get(i, 0) for i in n.input[1:])
        for n in model.graph.node
        if n.op_type in ("Conv", "Gemm", "MatMul")
    }


def apply(prune_settings: dict[str, Any], ctx: BuildContext) -> tuple[Path, dict[str, Any]]:
    """Run the pass a build asked for on ``ctx.reference_path``: ``(pruned model path, report section)``."""
    from ..errors import ConversionError, EdgekitError

    try:
        result = PrunePass(**prune_settings).run(ctx, ctx.reference_path)
    except EdgekitError:
        raise
    except Exception as e:  # a graph this pass does not handle: say so instead of a traceback
        raise ConversionError(
            f"pruning failed on this model ({type(e).__name__}: {e}); build without --prune, or "
            "skip the layers involved with --prune-recipe (skip = [...])"
        ) from e
    return result.model_path, result.section


def summary(section: dict[str, Any]) -> str:
    """One line for the text report."""
    size = f"{section['size_before']['bytes'] / 1024:.1f} -> {section['size_after']['bytes'] / 1024:.1f} KB"
    if section["mode"] == "structured":
        macs = section.get("macs_before") or 0
        ratio = f", MACs {section['macs_after'] / macs:.0%} of the original" if macs else ""
        return (
            f"structured {section['ratio']:.0%}: {section['channels_removed']} of {section['channels_prunable']} "
            f"prunable channels removed, params {section['params_before']:,} -> {section['params_after']:,}, "
            f"{size}{ratio}, {len(section['skipped'])} group(s) skipped"
        )
    comp = (
        f"{section['size_before']['compressed_bytes'] / 1024:.1f} -> "
        f"{section['size_after']['compressed_bytes'] / 1024:.1f}"
    )
    return (
        f"unstructured {section['ratio']:.0%} ({section['scope']}): weight sparsity {section['sparsity']:.1%}, "
        f"{size}, compressed {comp} KB"
    )
