"""MNN quantization: full int8 with MNN's quantizer (calibration candidates compared), and the layers --budget
keeps float."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .tools import _finish_tool, _run_tool, _start_tool, _tail

if TYPE_CHECKING:
    from pathlib import Path

    from edgekit.converters.base import BuildContext
    from edgekit.converters.session import BuildSession
    from edgekit.data import Dataset
    from edgekit.execution import Feed
    from edgekit.model import TensorSpec
    from edgekit.passes.mixed_precision import Layer

# Full INT8 calibrations tried, (feature method, samples); the closest to FP32 is kept.
# (activation method, weight method, samples): MNN's calibrations vary a lot by model; on PP-OCR cls, held out:
# ADMM/ADMM 94.5-95.75 %, ADMM/MAX_ABS 92.5-95.75 %, KL 50 % (clipped early layers); on small CNNs KL can win.
INT8_CANDIDATES = (("ADMM", "ADMM", 32), ("ADMM", "ADMM", 64), ("ADMM", "MAX_ABS", 64), ("KL", "MAX_ABS", 64))


INT8_EVAL_SAMPLES = 64


MNN_WEIGHTED = ("Convolution", "ConvolutionDepthwise", "Deconvolution", "DeconvolutionDepthwise")


MATMUL_SUFFIX = "__matmul_converted"


# ops whose int8 form needs nothing but the tensors' quantization: a float layer's activations stay float through them
FLOAT_SAFE = ("ConvertTensor", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Pooling", "Pooling3D", "Softmax")


# ONNX nodes an MNN convolution absorbs after the weighted node (its name is the last one's output)
TRACE_THROUGH = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "BatchNormalization",
    "Relu",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
)


class MNNQuantization:
    """Quantization methods of the MNN backend (mixed into :class:`.backend.MNNBackend`)."""

    if TYPE_CHECKING:  # what the backend provides

        def predict(
            self,
            model_path: str | Path,
            samples: Sequence[Feed],
            threads: int | None = None,
            session: BuildSession | None = None,
        ) -> list: ...
        def _convert(self, src: str | Path, dst: Path, flags: Sequence[str], cwd: str | Path) -> Path: ...

    # -- full int8 ------------------------------------------------------------------------
    @staticmethod
    def _write_samples(
        dataset: Dataset, specs: Sequence[TensorSpec], count: int, directory: Path
    ) -> list[dict[str, Any]]:
        """MNN's raw-tensor calibration layout: one directory per sample, ``<input>.txt`` + ``input.json``."""
        import numpy as np

        from edgekit.errors import ConversionError

        directory.mkdir(parents=True)
        for k in range(count):
            d = directory / f"{k:05d}"
            d.mkdir()
            shapes = []
            for spec in specs:
                if spec.name.startswith("/") or ".." in spec.name.split("/"):
                    raise ConversionError(
                        f"MNN's quantization tool reads <sample>/<input name>.txt; the input name "
                        f"{spec.name!r} cannot be a file name there"
                    )
                arr = np.asarray(dataset.samples[k][spec.name])
                f = d / f"{spec.name}.txt"
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(" ".join(map(repr, arr.astype(np.float64).ravel().tolist())))
                shapes.append({"name": spec.name, "shape": [int(s) for s in arr.shape]})
            (d / "input.json").write_text(json.dumps({"inputs": shapes}))
        return shapes

    def _int8(self, ctx: BuildContext, fp32: Path, work: Path) -> tuple[Path, dict[str, Any]]:
        from edgekit.errors import ConversionError
        from edgekit.fidelity import compare

        ctx.require_calibration("int8 quantization", "fp32/fp16/int8-weights")
        n = len(ctx.calib)
        plans = []
        for method, weights, k in INT8_CANDIDATES:
            if (method, weights, min(k, n)) not in plans:
                plans.append((method, weights, min(k, n)))
        # Choose on calibration samples no candidate was calibrated on, when there are enough of them.
        used = max(k for _, _, k in plans)
        held_out = n - used >= 16
        eval_samples = (
            ctx.calib.samples[used : used + INT8_EVAL_SAMPLES] if held_out else ctx.calib.samples[:INT8_EVAL_SAMPLES]
        )
        specs = ctx.source.inputs
        t0 = time.perf_counter()
        procs: list[Any] = []
        candidates: list[dict[str, Any]] = []
        best: Any = None
        try:
            for method, weights, k in plans:  # each calibration in its own child, two at a time
                tag = f"{method.lower()}-{weights.lower()}{k}"
                samples_dir = work / f"calib-{tag}"
                shapes = self._write_samples(ctx.calib, specs, k, samples_dir)
                config = work / f"quant-{tag}.json"
                config.write_text(
                    json.dumps(
                        {
                            "path": str(samples_dir),
                            "input_type": "sequence",
                            "used_sample_num": k,
                            "inputs": shapes,
                            "feature_quantize_method": method,
                            "weight_quantize_method": weights,
                        }
                    )
                )
                out = work / f"model.int8-{tag}.mnn"
                if len(procs) >= 2:  # bound the children to this machine's two-at-a-time budget
                    procs[-2] = procs[-2][:4] + (_finish_tool(procs[-2][4]),)
                procs.append(
                    (
                        method,
                        weights,
                        k,
                        out,
                        _start_tool("quantize", ["mnnquant", str(fp32), str(out), str(config)], work),
                    )
                )
            reference = self.predict(fp32, eval_samples)
            for method, weights, k, out, proc in procs:
                code, log = proc if isinstance(proc, tuple) else _finish_tool(proc)
                rec = {"feature_method": method, "weight_method": weights, "samples": k}
                if code != 0 or not out.is_file():
                    rec["error"] = f"exit {code}: {_tail(log, 3)}"
                    candidates.append(rec)
                    continue
                metrics = compare(reference, self.predict(out, eval_samples))["outputs"]
                cos = [m["cosine_mean"] for m in metrics.values() if "cosine_mean" in m]
                top1 = [m["top1_agreement"] for m in metrics.values() if "top1_agreement" in m]
                rec.update(
                    {
                        "cosine_mean": round(min(cos), 6) if cos else None,
                        "top1_agreement": round(min(top1), 4) if top1 else None,
                        "size_bytes": out.stat().st_size,
                    }
                )
                candidates.append(rec)
                score = (
                    rec["cosine_mean"] if rec["cosine_mean"] is not None else -1.0,
                    rec["top1_agreement"] if rec["top1_agreement"] is not None else 0.0,
                )
                if best is None or score > best[0]:
                    best = (score, rec, out)
        finally:
            for *_, proc in procs:
                if isinstance(proc, tuple):
                    continue
                if proc.poll() is None:
                    proc.kill()
                if proc.stdout is not None and not proc.stdout.closed:
                    proc.communicate()
        if best is not None:
            ctx.session.memo["mnn.int8_plan"] = (
                best[1]["feature_method"],
                best[1]["weight_method"],
                best[1]["samples"],
            )
        if best is None:
            raise ConversionError(
                "MNN's quantization tool failed for every calibration: "
                + "; ".join(c.get("error", "") for c in candidates)
            )
        ctx.log(
            "  int8 calibrations: "
            + ", ".join(
                f"{c['feature_method']}/{c['weight_method']}/{c['samples']}: "
                + (f"cos {c['cosine_mean']}" if "error" not in c else "failed")
                for c in candidates
            )
            + f" -> {best[1]['feature_method']}/{best[1]['weight_method']}/{best[1]['samples']}"
        )
        section = {
            "method": "static (full int8: weights and activations)",
            "tool": "MNN quantization tool (_tools.mnnquant)",
            "calibration_input": "raw tensors (input_type sequence)",
            "weights": f"int8 per-channel, {best[1]['weight_method']}",
            "activations": "int8 per-tensor, symmetric",
            "calibration_samples": n,
            "candidates": candidates,
            "chosen": best[1],
            "selection": (
                f"highest mean cosine to the FP32 MNN model on {len(eval_samples)} calibration samples "
                + (
                    "that no candidate was calibrated on"
                    if held_out
                    else "that the candidates were also calibrated on (in-sample: pass more calibration data)"
                )
            ),
            "seconds": round(time.perf_counter() - t0, 2),
        }
        return best[2], section

    # -- mixed precision (--budget) ---------------------------------------------------
    def _fp32(self, ctx: BuildContext) -> Path:
        """The FP32 .mnn ``build`` converted (converted now when called outside a build)."""
        fp32 = ctx.workdir / "model.fp32.mnn"
        if not fp32.is_file():
            self._convert(ctx.reference_path, fp32, [], ctx.workdir)
        return fp32

    def _weighted_ops(self, ctx: BuildContext) -> list[str]:
        """``[op name]`` of the FP32 .mnn's convolutions (MNN turns Gemm/MatMul with constant weights into them)."""
        cached = ctx.session.memo.get("mnn.weighted_ops")
        if cached is not None:
            return cached
        from edgekit.errors import ConversionError

        dump = ctx.workdir / "model.fp32.ops.json"
        _run_tool(
            "convert",
            ["mnnconvert", "-f", "MNN", "--modelFile", str(self._fp32(ctx)), "--JsonFile", str(dump)],
            ctx.workdir,
            dump,
        )
        try:
            net = json.loads(dump.read_text())
        except ValueError as e:
            raise ConversionError(f"MNN's JSON dump of {dump.name} cannot be read: {e}") from e
        ops = list(net.get("oplists") or [])
        for sub in net.get("subgraphs") or []:
            ops.extend(sub.get("nodes") or [])
        names = [op.get("name") for op in ops if op.get("type") in MNN_WEIGHTED and op.get("name")]
        ctx.session.memo["mnn.weighted_ops"] = names
        return names

    def layer_names(self, ctx: BuildContext, layers: Iterable[Layer]) -> dict[str, str | None]:
        """Reference layers -> MNN op names (``skip_quant_op_names``). MNN's ONNX converter names each op after
        the ONNX output it ends in: the Conv's own output, or that of the bias Add / BatchNormalization it
        fused, with ``__matmul_converted`` appended where a Gemm/MatMul became a convolution. Each MNN op is
        traced back through such element-wise nodes in the reference graph to its weighted ONNX node."""
        import onnx

        graph = onnx.load(str(ctx.reference_path), load_external_data=False).graph
        producer = {o: n for n in graph.node for o in n.output}
        wanted = {layer.name for layer in layers}
        found: dict[str, str] = {}
        for op in self._weighted_ops(ctx):
            node = producer.get(op[: -len(MATMUL_SUFFIX)] if op.endswith(MATMUL_SUFFIX) else op)
            for _ in range(6):
                if node is None or node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
                    break
                if node.op_type not in TRACE_THROUGH:
                    node = None
                    break
                node = next(
                    (producer[i] for i in node.input if i in producer and producer[i].op_type != "Constant"), None
                )
            if node is not None and node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
                key = node.name or node.output[0]
                if key in wanted:
                    found.setdefault(key, op)
        return {layer.name: found.get(layer.name) for layer in layers}

    def _skip_names(self, ctx: BuildContext, layer_names: Iterable[str]) -> list[str]:
        import onnx

        from edgekit.passes.mixed_precision import candidate_layers

        wanted = set(layer_names)
        layers = [layer for layer in candidate_layers(onnx.load(str(ctx.reference_path))) if layer.name in wanted]
        return sorted(n for n in self.layer_names(ctx, layers).values() if n)

    def quantize(self, ctx: BuildContext, exclude: Iterable[Layer] = ()) -> Path:
        """Full INT8 with ``skip_quant_op_names``: MNN's quantization tool leaves those convolutions in float
        (weights and arithmetic; it skips them when it collects feature ranges). One calibration per search:
        the one plain int8 chose (or the first candidate outside a build)."""
        from edgekit.errors import ConversionError

        ctx.require_calibration("int8 quantization", "fp32/fp16/int8-weights")
        names = self.layer_names(ctx, exclude) if exclude else {}
        missing = [layer.name for layer in exclude if not names.get(layer.name)]
        if missing:
            raise ConversionError(
                f"no MNN op found for layer(s) {', '.join(missing)} of the reference model, so "
                "they cannot be kept float; build --precision int8 without --budget"
            )
        skip: list[str] = sorted(set(names.values()))  # type: ignore[type-var, assignment, arg-type]  # none is missing
        work = ctx.workdir
        method, weights, k = ctx.session.memo.get("mnn.int8_plan") or (
            INT8_CANDIDATES[0][0],
            INT8_CANDIDATES[0][1],
            min(INT8_CANDIDATES[0][2], len(ctx.calib)),
        )
        tag = f"{method.lower()}-{weights.lower()}{k}"
        samples_dir = work / f"calib-{tag}"
        if samples_dir.is_dir():
            shapes = [
                {"name": s.name, "shape": [int(d) for d in ctx.calib.samples[0][s.name].shape]}
                for s in ctx.source.inputs
            ]
        else:
            shapes = self._write_samples(ctx.calib, ctx.source.inputs, k, samples_dir)
        n = len(list(work.glob("model.int8-mp*.mnn")))
        config = work / f"quant-mp{n}.json"
        config.write_text(
            json.dumps(
                {
                    "path": str(samples_dir),
                    "input_type": "sequence",
                    "used_sample_num": k,
                    "inputs": shapes,
                    "feature_quantize_method": method,
                    "weight_quantize_method": weights,
                    "skip_quant_op_names": skip,
                }
            )
        )
        out = work / f"model.int8-mp{len(skip)}f{n}.mnn"
        skipped = work / f"model.int8-mp{len(skip)}f{n}.skipped.mnn" if skip else out
        _run_tool("quantize", ["mnnquant", str(self._fp32(ctx)), str(skipped), str(config)], work, skipped)
        if skip:
            self._float_activations(skipped, out, set(skip), work)
            skipped.unlink(missing_ok=True)
        return out

    def _float_activations(self, src: Path, dst: Path, ops: set[str], work: Path) -> None:
        """MNN quantizes activations per tensor (``extraTensorDescribe`` quantInfo), also around the convolutions
        ``skip_quant_op_names`` left float: the ops between them and the neighbouring convolutions (layout
        conversion, pooling, reshapes) then run int8 and quantize the float layer's input and output anyway
        (measured: the tiny CNN with every convolution skipped stays at the all-int8 cosine). Drop the
        quantization of every tensor from the previous convolutions' outputs to the next ones' inputs, through
        the ops in between, and rebuild the model from MNN's JSON form."""
        from edgekit.errors import ConversionError

        dump = work / (dst.stem + ".json")
        _run_tool("convert", ["mnnconvert", "-f", "MNN", "--modelFile", str(src), "--JsonFile", str(dump)], work, dump)
        try:
            net = json.loads(dump.read_text())
        except ValueError as e:
            raise ConversionError(f"MNN's JSON dump of {src.name} cannot be read: {e}") from e
        oplist = net.get("oplists") or []
        producer: dict[int, dict[str, Any]] = {}
        consumers: dict[int, list[dict[str, Any]]] = {}
        for op in oplist:
            for t in op.get("outputIndexes") or []:
                producer[t] = op
            for t in op.get("inputIndexes") or []:
                consumers.setdefault(t, []).append(op)
        drop = set()
        heads = [op for op in oplist if op.get("name") in ops]
        back = [t for op in heads for t in op.get("inputIndexes") or []]
        ahead = [t for op in heads for t in op.get("outputIndexes") or []]

        # Only through ops that run int8 or float alike (layout, pooling, softmax), and only tensors every reader
        # of which takes float: an op with int8-specific parameters (UnaryOp's tableInt8: hard-swish) fed a
        # tensor that lost its quantization computes garbage (measured on PP-OCR: cosine 0.99 -> 0.6).
        def readers_ok(t: int) -> bool:
            return all(
                c.get("type") in MNN_WEIGHTED or c.get("type") in FLOAT_SAFE or c.get("name") in ops
                for c in consumers.get(t, [])
            )

        while back:
            t = back.pop()
            if t in drop or not readers_ok(t):
                continue
            p = producer.get(t)
            if p is None or p.get("type") == "Input" or p.get("name") in ops:
                drop.add(t)
            elif p.get("type") in FLOAT_SAFE:
                drop.add(t)
                back.extend(p.get("inputIndexes") or [])
        seen = set()
        while ahead:
            t = ahead.pop()
            if t in seen or not readers_ok(t):
                continue
            seen.add(t)
            drop.add(t)
            for c in consumers.get(t, []):
                if c.get("type") in FLOAT_SAFE:
                    ahead.extend(c.get("outputIndexes") or [])
        net["extraTensorDescribe"] = [d for d in net.get("extraTensorDescribe") or [] if d.get("index") not in drop]
        dump.write_text(json.dumps(net))
        try:
            _run_tool(
                "convert", ["mnnconvert", "-f", "JSON", "--modelFile", str(dump), "--MNNModel", str(dst)], work, dst
            )
        finally:
            dump.unlink(missing_ok=True)
