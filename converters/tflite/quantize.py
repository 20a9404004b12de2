"""TFLite mixed precision: the layers --budget keeps float, found in the float32 .tflite and requantized."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from .common import IO_FILE, TOOLS, _structured_probe, _threads

if TYPE_CHECKING:
    from edgekit.converters.base import BuildContext
    from edgekit.converters.session import BuildSession
    from edgekit.data import Dataset
    from edgekit.execution import Feed
    from edgekit.model import TensorSpec
    from edgekit.passes.mixed_precision import Layer
    from edgekit.toolenvs import ToolEnvSpec


class TFLiteQuantization:
    """Mixed-precision methods of the TFLite backend (mixed into :class:`.backend.TFLiteBackend`)."""

    if TYPE_CHECKING:  # what the backend provides
        toolenv: ToolEnvSpec | None

        def _convert(
            self,
            onnx_path: str | Path,
            work: Path,
            precision: str,
            specs: Sequence[TensorSpec],
            outputs: Sequence[TensorSpec],
            probe: Feed,
            threads: int | None,
            log: Callable[[str], Any] | None,
            calib: Dataset | None = None,
            extra: dict[str, Any] | None = None,
            session: BuildSession | None = None,
        ) -> dict[str, Any]: ...

    # -- mixed precision (--budget) ---------------------------------------------------
    def _weighted_ops(self, ctx: BuildContext) -> dict[str, Any]:
        """The build's float32 .tflite weighted ops (converted now when called outside a build)."""
        res = ctx.session.memo.get("tflite.converted")
        if res is None:
            work = Path(ctx.workdir) / "tflite"
            res = self._convert(
                ctx.reference_path,
                work,
                "fp32",
                ctx.source.inputs,
                ctx.source.outputs,
                _structured_probe(ctx.source.inputs),
                _threads(None),
                ctx.log,
                session=ctx.session,
            )
            ctx.session.memo["tflite.converted"] = res
        return res

    def _scopes(self, ctx: BuildContext, layer: Layer) -> list[str]:
        """The .tflite op scopes (ai-edge-quantizer's names: the op's output tensors) of one reference layer:
        the ops whose weights onnx2tf named after the layer's ONNX node (or after a node onnxsim fused it into,
        named by the output the layer is known by), else the ops that output one of the layer's tensors."""
        known = {layer.name, *layer.tensors}
        ops = self._weighted_ops(ctx).get("weighted_ops") or []
        found = [op["scope"] for op in ops if op.get("node") in known]
        if not found:
            found = [op["scope"] for op in ops if known & set(op.get("outputs") or [])]
        return found

    def layer_names(self, ctx: BuildContext, layers: Iterable[Layer]) -> dict[str, str | None]:
        """Reference layers -> the .tflite op scopes ai-edge-quantizer matches recipes against."""
        return {layer.name: " | ".join(self._scopes(ctx, layer)) or None for layer in layers}

    def _float_scopes(self, ctx: BuildContext, names: Iterable[str]) -> list[str]:
        import onnx

        from edgekit.passes.mixed_precision import candidate_layers

        wanted = set(names)
        layers = [layer for layer in candidate_layers(onnx.load(str(ctx.reference_path))) if layer.name in wanted]
        return sorted({s for layer in layers for s in self._scopes(ctx, layer)})

    def quantize(self, ctx: BuildContext, exclude: Iterable[Layer] = ()) -> Path:
        """Static INT8 of the build's float32 .tflite with the ops of ``exclude`` left float (ai-edge-quantizer
        recipe entries with algorithm no_quantize, matched on each op's scope); the calibration ranges of the
        build's plain int8 step are reused."""
        from edgekit import toolenvs
        from edgekit.errors import ConversionError

        ctx.require_calibration("int8 quantization", "fp32/fp16/int8-dynamic")
        res = self._weighted_ops(ctx)
        scopes, missing = [], []
        for layer in exclude:
            found = self._scopes(ctx, layer)
            scopes.extend(found)
            if not found:
                missing.append(layer.name)
        if missing:
            raise ConversionError(
                f"no .tflite op found for layer(s) {', '.join(missing)} of the reference model "
                "(onnx2tf renamed or fused them), so they cannot be kept float; build --precision "
                "int8 without --budget"
            )
        base = Path(ctx.workdir) / "tflite"
        work = base / f"mp{len(list(base.glob('mp*')))}"
        work.mkdir(parents=True)
        import numpy as np

        calib = base / "calib.npz"
        if not calib.is_file():
            np.savez(
                calib,
                **{s.name: np.stack([np.asarray(x[s.name]) for x in ctx.calib.samples]) for s in ctx.source.inputs},  # type: ignore[arg-type]
            )
        request = {
            "step": f"ai-edge-quantizer (int8, {len(scopes)} op(s) float)",
            "precision": "int8",
            "requantize": {"fp32": res["fp32"], "io": res["io"]},
            "calib": str(calib),
            "calibration_cache": str(base / "calibration.json"),
            "float_scopes": sorted(set(scopes)),
            "threads": _threads(ctx.profile.threads if ctx.profile.name == "host" else None),
        }
        out = toolenvs.run_tool(self.toolenv, TOOLS / "tflite_convert.py", request, work, log=None)
        (work / IO_FILE).write_text(json.dumps(out["io"], indent=2))
        return Path(out["model"])
