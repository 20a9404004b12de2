"""INT8 under an accuracy budget: keep the most sensitive layers in float (mixed precision).

``--budget`` says how much quality an INT8 build may lose against the FP32 reference:

- ``1pt`` / ``0.5pt``: accuracy points (needs ``labels`` in the validation data);
- ``cos=0.999``: mean cosine similarity of the outputs to the reference's (no labels needed);
- ``top1=0.99``: top-1 agreement with the reference (class-like outputs, no labels needed).

How the float layers are chosen:

1. **Candidates** are the reference model's weighted layers: Conv, ConvTranspose, Gemm and
   MatMul with a constant weight, the layers whose weights and inputs every INT8 scheme
   quantizes. Each is named by its ONNX node name and carries the tensor names its output is
   known by once a following BatchNormalization or bias Add is folded into it, so that every
   backend can find it in its own graph (:meth:`edgekit.converters.base.Backend.quantize`).
2. **Sensitivity, one cheap pass, no backend quantization**: "this layer alone quantized".
   For each candidate, a copy of the FP32 reference in which only that layer is fake-quantized
   (weights int8 symmetric per output channel, its input activation uint8 per tensor with the
   min/max range seen on the calibration samples: the scheme the backends use) runs on up to
   ``SENSITIVITY_SAMPLES`` calibration samples. The layer's sensitivity is the noise-to-signal
   ratio it causes at the model's outputs, ``||y_q - y||^2 / ||y||^2`` (mean over samples,
   summed over outputs). Quantizing one layer at a time isolates that layer's own error,
   which comparing activations of a fully quantized model (SNR per layer) does not: there
   every layer inherits the error of all layers before it. It costs one short run per layer.
3. **Greedy search with the real backend**: quantize everything (the plain INT8 build); if
   the budget does not hold on the evaluation data, keep layers in float in order of
   sensitivity, one at a time for the first two steps, then in doubling groups, each
   candidate quantized by the backend itself and measured with :func:`edgekit.fidelity.compare`
   on the evaluation data (``--val``; the calibration data itself only when no ``--val`` is
   given, with a warning). When a group made the budget hold, its layers are tried back in
   INT8 one by one (least sensitive first) while evaluations are left. Full evaluations are
   capped (``Budget.max_evaluations``).

If the budget does not hold within the cap, or with every candidate in float, the build
fails with the best value reached (:class:`~edgekit.errors.FidelityError`), unless degraded
builds are allowed: then the best candidate is kept and marked.
"""

import re
import time
from dataclasses import dataclass, field

import numpy as np

from .. import progress
from ..errors import DataError, EdgekitError, FidelityError

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
SENSITIVITY_SAMPLES = 32
MAX_EVALUATIONS = 12


class BudgetError(EdgekitError):
    """A ``--budget`` that cannot be read, or that does not fit the build."""


# -- the budget -------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    kind: str  # accuracy | cosine | top1
    value: float  # accuracy: max drop in points; cosine/top1: minimum
    text: str = ""
    max_evaluations: int = MAX_EVALUATIONS
    sensitivity_samples: int = SENSITIVITY_SAMPLES

    METRICS = {
        "accuracy": "accuracy drop (points)",
        "cosine": "mean cosine to the reference",
        "top1": "top-1 agreement with the reference",
    }

    @classmethod
    def parse(cls, text, **options):
        """``1pt``, ``0.5pt``, ``cos=0.999``, ``top1=0.99`` (a Budget passes through)."""
        if isinstance(text, Budget):
            return text
        raw = str(text).strip().lower().replace(" ", "")
        usage = (
            "--budget takes accuracy points (e.g. 1pt, 0.5pt: needs labels), a cosine similarity "
            "(cos=0.999) or a top-1 agreement (top1=0.99)"
        )
        m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)(?:pt|pts|points?)", raw)
        if m:
            value = float(m.group(1))
            if not 0 <= value <= 100:
                raise BudgetError(f"--budget {text}: accuracy points must be between 0 and 100; {usage}")
            return cls("accuracy", value, f"{value:g}pt", **options)
        m = re.fullmatch(r"(cos|cosine|top1|top-1)=(\d+(?:\.\d*)?|\.\d+)", raw)
        if m:
            kind = "cosine" if m.group(1).startswith("cos") else "top1"
            value = float(m.group(2))
            if not 0 < value <= 1:
                raise BudgetError(
                    f"--budget {text}: {kind} must be in (0, 1], e.g. "
                    f"{'cos=0.999' if kind == 'cosine' else 'top1=0.99'}; {usage}"
                )
            return cls(kind, value, f"{'cos' if kind == 'cosine' else 'top1'}={value:g}", **options)
        raise BudgetError(f"cannot read --budget {text!r}: {usage}")

    def __str__(self):
        return self.text

    def to_dict(self):
        return {
            "budget": self.text,
            "metric": self.METRICS[self.kind],
            ("max_drop" if self.kind == "accuracy" else "min"): self.value,
        }

    def thresholds(self, thresholds, min_cosine=None, min_top1=None, max_accuracy_drop=None):
        """The build's fidelity gate with the budget's own metric set to the budget (unless given explicitly)."""
        from dataclasses import replace

        if self.kind == "accuracy" and max_accuracy_drop is None:
            return replace(thresholds, max_accuracy_drop=self.value)
        if self.kind == "cosine" and min_cosine is None:
            return replace(thresholds, min_cosine=self.value)
        if self.kind == "top1" and min_top1 is None:
            return replace(thresholds, min_top1=self.value)
        return thresholds

    def measure(self, metrics):
        """The budget's metric from :func:`edgekit.fidelity.compare` output: (value, score, holds, detail).

        ``score`` is higher-is-better (the negative drop for accuracy). The worst output counts.
        """
        outs = [m for m in metrics["outputs"].values() if "cosine_mean" in m]
        if not outs or any(m.get("non_finite") for m in outs):
            return None, float("-inf"), False, {"error": "non-finite or missing outputs"}
        detail = {"cosine_mean": min(m["cosine_mean"] for m in outs)}
        top1 = [m["top1_agreement"] for m in outs if "top1_agreement" in m]
        if top1:
            detail["top1_agreement"] = min(top1)
        acc = [m for m in outs if "accuracy" in m]
        if acc:
            worst = max(acc, key=lambda m: m["accuracy_reference"] - m["accuracy"])
            detail["accuracy"] = worst["accuracy"]
            detail["accuracy_reference"] = worst["accuracy_reference"]
            detail["accuracy_drop"] = worst["accuracy_reference"] - worst["accuracy"]
        if self.kind == "accuracy":
            value = detail.get("accuracy_drop")
            if value is None:
                return None, float("-inf"), False, detail
            return value, -value, value <= self.value + 1e-9, detail
        value = detail["cosine_mean"] if self.kind == "cosine" else detail.get("top1_agreement")
        if value is None:
            return None, float("-inf"), False, detail
        return value, value, value >= self.value, detail

    def check_data(self, dataset):
        """Refuse a budget the evaluation data cannot measure (before anything is built)."""
        if self.kind == "accuracy" and (dataset is None or dataset.labels is None):
            raise DataError(
                f"--budget {self.text} is measured in accuracy points, which needs labels: give --val "
                "(or --calib) data with a 'labels' array (or image folders named by class), or use a "
                "budget without labels: --budget cos=0.999 or --budget top1=0.99"
            )
        if dataset is None or dataset.synthetic:
            raise DataError(f"--budget {self.text} must be measured on real data: pass --val (held-out) or --calib")


def prepare(budget, backend, precision, dataset, min_cosine=None, min_top1=None, max_accuracy_drop=None):
    """Parse and validate ``budget`` for a build; returns the Budget (or None)."""
    if budget is None:
        return None
    budget = Budget.parse(budget)
    if precision != "int8":
        raise BudgetError(
            f"--budget keeps layers of an INT8 build in float: pass --precision int8 (this build is {precision})"
        )
    if not backend.supports_mixed_precision():
        why = (
            getattr(backend, "mixed_precision_refusal", None)
            or f"backend {backend.name!r} cannot keep single layers in float"
        )
        raise BudgetError(
            f"{why}, so --budget is not available for it: build it with --precision int8 (no budget) "
            f"or fp16, or use a backend that can (ort, openvino, mnn, tflite)"
        )
    budget.check_data(dataset)
    return budget


# -- candidate layers ---------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    name: str  # the ONNX node name (its first output when the node has none)
    op: str
    weight: str  # the weight tensor's name
    input: str  # the activation input
    tensors: tuple  # the layer's output names, before and after a folded BatchNormalization / bias Add
    axis: int = 0  # the weight's output-channel axis

    def to_dict(self):
        return {"layer": self.name, "op": self.op, "weight": self.weight}


def _constants(model):
    from onnx import numpy_helper

    consts = {i.name: i for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = a.t
    return {k: numpy_helper.to_array(v) for k, v in consts.items()} if consts else {}


def candidate_layers(model, constants=None):
    """The weighted layers of an ONNX model, in graph order."""
    constants = _constants(model) if constants is None else constants
    consumers = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    graph_outputs = {o.name for o in model.graph.output}
    layers = []
    for n in model.graph.node:
        if n.op_type not in WEIGHTED_OPS or len(n.input) < 2 or n.input[1] not in constants:
            continue
        if n.input[0] in constants:
            continue
        w = constants[n.input[1]]
        if w.ndim < 2:
            continue
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "ConvTranspose":
            axis = 1
        elif n.op_type == "Gemm":
            axis = 0 if (attrs.get("transB") and attrs["transB"].i) else 1
        elif n.op_type == "MatMul":
            axis = w.ndim - 1
        else:
            axis = 0
        tensors = [n.output[0]]
        out = n.output[0]
        for fold in ("BatchNormalization", "Add"):
            users = consumers.get(out, [])
            if len(users) != 1 or out in graph_outputs or users[0].op_type != fold:
                continue
            if fold == "Add" and not any(i in constants for i in users[0].input if i != out):
                continue
            out = users[0].output[0]
            tensors.append(out)
        layers.append(Layer(n.name or n.output[0], n.op_type, n.input[1], n.input[0], tuple(tensors), axis))
    return layers


# -- sensitivity ------------------------------------------------------------------------------
def _fake_quant_weight(w, axis):
    w = w.astype(np.float32)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    scale = np.abs(moved).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.round(moved / scale[:, None]), -127, 127) * scale[:, None]
    return np.moveaxis(q.reshape(np.moveaxis(w, axis, 0).shape), 0, axis).astype(np.float32)


def _runner(be, workdir):
    """``run(model_proto, samples) -> outputs``: onnxruntime in memory when installed, else the backend."""
    import importlib.util

    from edgekit.execution import reference_outputs

    have_ort = importlib.util.find_spec("onnxruntime") is not None

    def run(model, samples):
        if have_ort:
            return reference_outputs(model.SerializeToString(), samples)
        import onnx

        path = workdir / "sensitivity.onnx"
        onnx.save(model, str(path))
        return be.reference_outputs(path, samples)

    return run


def _nsr(reference, candidate):
    values = []
    for ref, cand in zip(reference, candidate):
        total = 0.0
        for name, r in ref.items():
            r = np.asarray(r, np.float64)
            if r.dtype.kind != "f":
                continue
            c = np.nan_to_num(np.asarray(cand[name], np.float64), nan=1e30, posinf=1e30, neginf=-1e30)
            total += float(np.sum((c - r) ** 2) / (np.sum(r**2) + 1e-12))
        values.append(total)
    return float(np.mean(values))


def sensitivity(be, model, layers, samples, workdir):
    """``{layer name: output noise-to-signal ratio}`` with only that layer fake-quantized (see the module doc)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    run = _runner(be, workdir)
    constants = _constants(model)
    reference = run(model, samples)
    graph_inputs = {i.name for i in model.graph.input}
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [13])

    # activation ranges of every candidate's input on the calibration samples (zero included, as ORT's MinMax)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    wanted = sorted({layer.input for layer in layers} - graph_inputs)
    for name in wanted:
        if name not in existing:
            probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    ranges = {}
    for feed, outs in zip(samples, run(probe, samples) if wanted else [{}] * len(samples)):
        for name in {layer.input for layer in layers}:
            arr = np.asarray(feed[name] if name in graph_inputs else outs[name])
            lo, hi = ranges.get(name, (0.0, 0.0))
            ranges[name] = (min(lo, float(arr.min())), max(hi, float(arr.max())))

    result = {}
    for layer in layers:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        g = m.graph
        index, node = next((k, n) for k, n in enumerate(g.node) if (n.name or n.output[0]) == layer.name)
        wname = f"{layer.weight}__edgekit_fq"
        g.initializer.append(numpy_helper.from_array(_fake_quant_weight(constants[layer.weight], layer.axis), wname))
        node.input[1] = wname
        lo, hi = ranges[layer.input]
        if opset >= 10 and hi > lo:
            scale = (hi - lo) / 255.0
            zp = int(np.clip(np.round(-lo / scale), 0, 255))
            s_name, z_name = f"{layer.name}__edgekit_s", f"{layer.name}__edgekit_zp"
            g.initializer.extend(
                [
                    numpy_helper.from_array(np.array(scale, np.float32), s_name),
                    numpy_helper.from_array(np.array(zp, np.uint8), z_name),
                ]
            )
            q, dq = f"{layer.name}__edgekit_q", f"{layer.name}__edgekit_dq"
            g.node.insert(index, helper.make_node("DequantizeLinear", [q, s_name, z_name], [dq]))
            g.node.insert(index, helper.make_node("QuantizeLinear", [layer.input, s_name, z_name], [q]))
            node.input[0] = dq
        result[layer.name] = _nsr(reference, run(m, samples))
    return result


# -- the search -------------------------------------------------------------------------------
@dataclass
class _Eval:
    exclude: tuple
    path: object
    value: object
    score: float
    holds: bool
    detail: dict
    size_bytes: int = 0
    metrics: dict = field(default_factory=dict)


def _size(path):
    from pathlib import Path

    p = Path(path)
    total = p.stat().st_size
    if p.suffix == ".xml" and p.with_suffix(".bin").is_file():
        total += p.with_suffix(".bin").stat().st_size
    return total


def _fmt(budget, value):
    if value is None:
        return "n/a"
    if budget.kind == "accuracy":
        return f"{value:.2f} pt drop"
    return f"{'cos' if budget.kind == 'cosine' else 'top-1'} {value:.6f}"


def search(be, ctx, plain=None):
    """INT8 ``ctx.reference_path`` with as few float layers as keep ``ctx.budget``; returns (model file, section).

    ``plain``: the all-INT8 model when the backend has already built it (saves one quantization).
    """
    budget = Budget.parse(ctx.budget)
    with progress.of(ctx.log).step(f"--budget {budget}: evaluating candidates", total=budget.max_evaluations) as step:
        return _search(be, ctx, plain, step)


def _search(be, ctx, plain, step):
    import onnx

    from .. import fidelity

    t0 = time.perf_counter()
    budget = Budget.parse(ctx.budget)
    data = ctx.evaluation if ctx.evaluation is not None else ctx.calib
    budget.check_data(data)
    in_sample = data is ctx.calib or (ctx.calib is not None and data.source == ctx.calib.source)
    # the user's model is the reference, also when an earlier pass (pruning) replaced ctx.reference_path
    original = ctx.source.save(ctx.workdir / "budget.reference.onnx")
    reference = be.reference_outputs(original, data.samples, session=ctx.session)
    evals = []

    def evaluate(exclude):
        path = plain if (plain is not None and not exclude) else be.quantize(ctx, list(exclude))
        metrics = fidelity.compare(reference, be.predict(path, data.samples, session=ctx.session), data.labels)
        value, score, holds, detail = budget.measure(metrics)
        e = _Eval(tuple(layer.name for layer in exclude), path, value, score, holds, detail, _size(path), metrics)
        evals.append(e)
        step.advance()
        ctx.log(
            f"  budget {budget}: {len(exclude)} layer(s) float -> {_fmt(budget, value)} "
            f"({'holds' if holds else 'over budget'})"
        )
        return e

    model = onnx.load(str(ctx.reference_path))
    layers = candidate_layers(model)
    section = {
        **budget.to_dict(),
        "measured_on": {**data.describe(), "held_out": not in_sample},
        "method": (
            "sensitivity: output noise-to-signal ratio with only that layer fake-quantized (int8 per-channel "
            "weights, uint8 per-tensor input), on calibration samples; then layers kept float greedily in "
            "that order, each candidate quantized by the backend and measured on the evaluation data"
        ),
        "candidates": len(layers),
        "max_evaluations": budget.max_evaluations,
        "warnings": [],
    }
    if in_sample:
        section["warnings"].append(
            f"the budget {budget} was measured on the calibration data itself: pass --val with "
            "held-out data, or the float layers are chosen for the samples they were calibrated on"
        )
    first = evaluate([])
    section["all_int8"] = {"value": first.value, **first.detail, "size_bytes": first.size_bytes}
    steps, trimmed, chosen = [], [], first
    sens = {}
    if not first.holds and layers:
        names = (
            be.layer_names(ctx, layers) if hasattr(be, "layer_names") else {layer.name: layer.name for layer in layers}
        )
        missing = [layer.name for layer in layers if not names.get(layer.name)]
        usable = [layer for layer in layers if names.get(layer.name)]
        if missing:
            section["not_in_backend_graph"] = missing
        k = min(budget.sensitivity_samples, len(ctx.calib))
        ts = time.perf_counter()
        sens = sensitivity(be, model, usable, ctx.calib.samples[:k], ctx.workdir)
        ctx.log(
            f"  budget {budget}: sensitivity of {len(usable)} layer(s) on {k} calibration samples in "
            f"{time.perf_counter() - ts:.1f} s"
        )
        section["sensitivity"] = {
            "samples": k,
            "seconds": round(time.perf_counter() - ts, 2),
            "ranking": [
                {"layer": layer.name, "op": layer.op, "nsr": round(sens[layer.name], 8)}
                for layer in sorted(usable, key=lambda layer: -sens[layer.name])
            ],
        }
        order = sorted(usable, key=lambda layer: -sens[layer.name])
        floats, pos, group, best = [], 0, 1, first
        while pos < len(order) and len(evals) < budget.max_evaluations:
            added = order[pos : pos + group]
            pos += len(added)
            before = chosen
            chosen = evaluate(floats + added)
            floats = floats + added
            steps.append(
                {
                    "added": [layer.name for layer in added],
                    "float_layers": len(floats),
                    "value_before": before.value,
                    "value_after": chosen.value,
                    "holds": chosen.holds,
                    "size_bytes": chosen.size_bytes,
                }
            )
            if chosen.score > best.score:
                best = chosen
            if chosen.holds:
                break
            if len(steps) >= 2:
                group *= 2
        if chosen.holds and len(steps[-1]["added"]) > 1:
            # the last group made it hold: try its layers back in int8, least sensitive first
            for layer in sorted(order[pos - len(steps[-1]["added"]) : pos], key=lambda candidate: sens[candidate.name]):
                if len(evals) >= budget.max_evaluations:
                    break
                trial = evaluate([kept for kept in floats if kept.name != layer.name])
                ok = trial.holds
                trimmed.append({"layer": layer.name, "value_without": trial.value, "back_in_int8": ok})
                if ok:
                    floats = [kept for kept in floats if kept.name != layer.name]
                    chosen = trial
        if not chosen.holds:
            chosen = best
    by_name = {layer.name: layer for layer in layers}
    float_layers = []
    for name in chosen.exclude:
        entry = {**by_name[name].to_dict(), "sensitivity_nsr": round(sens.get(name, 0.0), 8)}
        for s in steps:
            if name in s["added"]:
                entry.update(
                    {
                        "value_before": s["value_before"],
                        "value_after": s["value_after"],
                        "added_with": len(s["added"]) - 1,
                    }
                )
        float_layers.append(entry)
    section.update(
        {
            "steps": steps,
            "trimmed": trimmed,
            "float_layers": float_layers,
            "float_layer_names": list(chosen.exclude),
            "evaluations": len(evals),
            "final": {
                "value": chosen.value,
                **chosen.detail,
                "budget": budget.value,
                "met": chosen.holds,
                "size_bytes": chosen.size_bytes,
            },
            "seconds": round(time.perf_counter() - t0, 2),
        }
    )
    if not section["warnings"]:
        del section["warnings"]
    ctx.log(
        f"  budget {budget}: {'met' if chosen.holds else 'NOT met'} with {len(chosen.exclude)} of {len(layers)} "
        f"layer(s) float ({_fmt(budget, chosen.value)}, {len(evals)} evaluations)"
    )
    if not chosen.holds and not ctx.allow_degraded:
        tried = len(chosen.exclude)
        raise FidelityError(
            f"INT8 cannot meet --budget {budget} on {data.describe()['source']} ({len(data)} samples): the best "
            f"reached is {_fmt(budget, chosen.value)} with {tried} of {len(layers)} layer(s) kept in float "
            f"(all-int8: {_fmt(budget, first.value)}; {len(evals)} evaluations). Try --precision fp16, more or more "
            "representative calibration data (--calib, ~100-300 samples), a looser budget, or --allow-degraded to "
            "write the best candidate anyway. The build was not written.",
            report=section,
        )
    return chosen.path, section
