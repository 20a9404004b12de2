"""MNN backend: ONNX -> ``.mnn`` in FP32, FP16 weights, weight-only INT8/INT4, and full INT8 calibrated
with the user's data.

Choices, and why (measured with MNN 3.6.1, the PyPI wheel, on x86 and the PP-OCR cls model):

- The converter and the quantizer are MNN's compiled ``_tools`` module (``mnnconvert(argv)``,
  ``mnnquant(argv)``), run in a child Python. MNN's Python wrappers (``MNN.tools.*``, the ``mnnconvert``
  and ``mnnquant`` commands) are never imported: on import they ``pip install`` a logging SDK and send
  usage data to a cloud log service; and the ``mnnquant`` command passes its arguments to
  ``_tools.mnnquant`` as three strings where it takes one argv list (it dies with ``std::length_error``).
  The child also gets ``PIP_NO_INDEX`` so that nothing it might start could fetch packages.
  A child process also keeps a converter crash (the quantizer segfaults on some inputs) from taking
  edgekit down, and keeps MNN's progress prints off edgekit's stdout.
- Every step is checked on the host with MNN itself (:mod:`edgekit_agent.runners.mnn`, the same code
  the agent runs): first the plain FP32 conversion against the ONNX reference (run by onnxruntime when
  it is installed), then the precision step.
- Full INT8 uses MNN's quantization tool with raw-tensor samples (``input_type: sequence``: one
  directory per sample, one text file per input). Its calibration is fragile: on PP-OCR cls its KL
  method clips the first layers (35 % of values overflow, cosine to FP32 0.72) and ADMM over a large
  batch mis-scales the logits (200 samples: cosine 0.86; 32 samples: 0.99). edgekit runs both
  calibrations (ADMM on 32 samples, KL on up to 64) side by side and keeps the one whose outputs are
  closest to the FP32 MNN model on the calibration samples; the report lists every candidate.
- MNN's INT8 kernels are written for Arm (sdot / i8mm); on x86 an INT8 model runs slower than FP32. The
  default precision follows the profile's ``[runtimes.mnn] precisions`` (the ``host`` profile on x86
  lists fp32 only), never the file size.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .base import Backend, BuildResult

# The child that runs MNN's compiled tools: _tools only, never MNN.tools (see the module docstring).
_TOOL_MAIN = (
    "import json, sys\n"
    "import _tools\n"
    "tool = {'convert': _tools.mnnconvert, 'quantize': _tools.mnnquant}[sys.argv[1]]\n"
    "tool(json.loads(sys.argv[2]))\n"
)

CONVERT_FLAGS = {
    "fp32": [],
    "fp16": ["--fp16"],
    "int8-weights": ["--weightQuantBits", "8"],
    "int4-weights": ["--weightQuantBits", "4"],
}
# Full INT8 calibrations tried, (feature method, samples); the closest to FP32 is kept.
# (activation method, weight method, samples): MNN's calibrations vary a lot by model; on PP-OCR cls, held out:
# ADMM/ADMM 94.5-95.75 %, ADMM/MAX_ABS 92.5-95.75 %, KL 50 % (clipped early layers); on small CNNs KL can win.
INT8_CANDIDATES = (("ADMM", "ADMM", 32), ("ADMM", "ADMM", 64), ("ADMM", "MAX_ABS", 64), ("KL", "MAX_ABS", 64))
INT8_EVAL_SAMPLES = 64
_PROGRESS = (
    "ComputeFeatureRange",
    "CollectFeatureDistribution",
    "ComputeADMM",
    "ProcessCalibrationFiles",
    "quantize with EMA",
    "computeDistance",
)


def _runner_module():
    from edgekit_agent.runners import mnn

    return mnn


def _tool_env():
    env = dict(os.environ)
    env.update({"PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


def _start_tool(kind, argv, cwd):
    return subprocess.Popen(
        [sys.executable, "-c", _TOOL_MAIN, kind, json.dumps([str(a) for a in argv])],
        cwd=str(cwd),
        env=_tool_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _finish_tool(proc, timeout=3600):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -9, f"timed out after {timeout} s"
    return proc.returncode, out.decode("utf-8", "replace").replace("\r", "\n")


def _tail(output, n=8):
    lines = [l for l in output.splitlines() if l.strip() and not l.startswith(_PROGRESS)]
    return "\n    ".join(lines[-n:]) or "(no output)"


def _run_tool(kind, argv, cwd, expect):
    from edgekit.errors import ConversionError

    code, out = _finish_tool(_start_tool(kind, argv, cwd))
    # _tools returns True even when it failed (e.g. "Model File Does Not Exist!"): the file decides.
    if code != 0 or not Path(expect).is_file() or Path(expect).stat().st_size == 0:
        why = f"exit {code}" + (" (killed by a signal: the tool crashed)" if code < 0 else "")
        raise ConversionError(
            f"MNN {'converter' if kind == 'convert' else 'quantization tool'} failed ({why}):\n    {_tail(out)}"
        )
    return out


class MNNBackend(Backend):
    name = "mnn"
    install_hint = "Install it with: pip install 'edgekit[mnn]' (or pip install MNN)."

    # per-build state lives in ctx.session.memo: "mnn.int8_plan" (the feature method, weight method and sample
    # count plain int8 chose) and "mnn.weighted_ops" (the FP32 .mnn's weighted op names)

    def availability(self):
        import importlib.util

        if importlib.util.find_spec("MNN") is None:
            return False, "MNN is not installed"
        if importlib.util.find_spec("_tools") is None:
            return False, "MNN is installed without its compiled converter/quantizer module (_tools)"
        try:
            mnn = _runner_module()
            version = mnn.import_mnn().version()
        except Exception as e:  # a broken wheel raises whatever its extension raises
            return False, f"MNN does not import: {e}"
        feats = mnn.cpu_features()
        cpu = (
            f", CPU features per MNN: {', '.join(k for k, v in feats.items() if v) or 'none of sdot/fp16/i8mm/sve2/sme2'}"
            if feats is not None
            else ""
        )
        return True, (
            f"MNN {version}{cpu}; converter and quantizer: the compiled _tools module in a child "
            "process (MNN.tools wrappers, which pip-install and phone home, are not used)"
        )

    def runtime_version(self):
        return _runner_module().import_mnn().version()

    def default_precision(self, profile, have_calib):
        wanted = profile.backend("mnn").get("precisions", ["fp32"])
        for p in wanted:
            if p == "int8" and not have_calib:
                continue
            if p in self.precisions:
                return p
        return "fp32"

    def host_settings(self, arch, isa):
        import importlib.util

        if importlib.util.find_spec("MNN") is None:
            return None
        # MNN's int8 kernels target ARM; on x86 they are slower than fp32.
        return {
            "backend": "CPU",
            "precisions": ["fp32"] if arch == "x86_64" else ["int8", "fp32"],
            "precision_mode": "normal",
        }

    # -- host-side inference (fidelity, timing) -------------------------------------
    @staticmethod
    def _threads(threads):
        return threads or min(4, os.cpu_count() or 1)

    def _model(self, model_path, threads, feed=None):
        mnn = _runner_module()
        shapes = {k: list(v.shape) for k, v in (feed or {}).items()}
        return mnn.MNNModel(str(model_path), "CPU", self._threads(threads), "normal", input_shapes=shapes).load()

    def _onnx_as_mnn(self, onnx_path, threads, feed):
        """An ONNX file converted to MNN FP32 in a temporary directory and loaded (MNN reads it whole)."""
        with tempfile.TemporaryDirectory(prefix="edgekit-mnn-") as tmp:
            out = Path(tmp) / "model.mnn"
            self._convert(Path(onnx_path), out, [], Path(tmp))
            return self._model(out, threads, feed)

    def reference_threads(self, threads):
        return self._threads(threads)

    def reference_outputs(self, model_path, samples, threads=None, session=None):
        """onnxruntime runs the reference when installed, so the FP32 step really tests MNN's converter."""
        try:
            return super().reference_outputs(model_path, samples, threads, session)
        except ImportError:
            model = self._onnx_as_mnn(model_path, threads, samples[0])
            return [model.run(feed) for feed in samples]

    def predict(self, model_path, samples, threads=None, session=None):
        """A built .mnn run by the agent's MNN runner code (its MNNModel); an ONNX file is the reference."""
        if str(model_path).endswith(".onnx"):
            return self.reference_outputs(model_path, samples, threads, session)
        model = self._model(model_path, threads, samples[0])
        try:
            return [model.run(feed) for feed in samples]
        finally:
            model.close()

    def runner(self, model_path, threads=None, session=None):
        """Timing on the host: an ONNX reference is timed as MNN FP32, so the comparison is MNN against MNN."""
        state = {}

        def run(feed):
            if "model" not in state:
                state["model"] = (
                    self._onnx_as_mnn(model_path, threads, feed)
                    if str(model_path).endswith(".onnx")
                    else self._model(model_path, threads, feed)
                )
            return state["model"].run(feed)

        return run

    # -- conversion -------------------------------------------------------------------
    def _convert(self, src, dst, flags, cwd):
        argv = [
            "mnnconvert",
            "-f",
            "ONNX" if str(src).endswith(".onnx") else "MNN",
            "--modelFile",
            str(src),
            "--MNNModel",
            str(dst),
            "--bizCode",
            "edgekit",
            *flags,
        ]
        _run_tool("convert", argv, cwd, dst)
        return dst

    def _mnn_ops(self, model_file, work):
        """MNN's own operator list for a .mnn file (the converter's JSON dump)."""
        dump = work / (Path(model_file).stem + ".ops.json")
        try:
            _run_tool(
                "convert",
                ["mnnconvert", "-f", "MNN", "--modelFile", str(model_file), "--JsonFile", str(dump)],
                work,
                dump,
            )
            net = json.loads(dump.read_text())
        except Exception as e:  # advice for the report, not a reason to fail the build
            return {"error": f"MNN's JSON dump failed: {e}"}
        finally:
            dump.unlink(missing_ok=True)
        counts = {}
        ops = list(net.get("oplists") or [])
        for sub in net.get("subgraphs") or []:
            ops.extend(sub.get("nodes") or [])
        for op in ops:
            counts[op.get("type", "?")] = counts.get(op.get("type", "?"), 0) + 1
        return dict(sorted(counts.items()))

    def build(self, ctx):
        import onnx

        from edgekit.model import operator_set

        settings = ctx.profile.backend("mnn")
        work = ctx.workdir
        warnings = []
        sections = {}
        runs_fast = list(settings.get("precisions", ["fp32"]))
        x86 = ctx.profile.arch in ("x86_64", "amd64", "i686", "x86")

        fp32 = self._convert(ctx.reference_path, work / "model.fp32.mnn", [], work)
        ctx.check("fp32 (ONNX -> MNN)", fp32)
        flags = []
        if ctx.precision == "fp32":
            model_file = fp32
        elif ctx.precision in ("fp16", "int8-weights", "int4-weights"):
            flags = CONVERT_FLAGS[ctx.precision]
            model_file = self._convert(ctx.reference_path, work / f"model.{ctx.precision}.mnn", flags, work)
            if ctx.precision == "fp16":
                ctx.check("fp16 weights (MNNConvert --fp16)", model_file)
            else:
                bits = int(flags[1])
                sections["quantization"] = {
                    "method": "weight-only",
                    "weights": f"int{bits}",
                    "granularity": "per output channel",
                    "symmetric": True,
                    "activations": "float",
                    "tool": "MNNConvert --weightQuantBits",
                    "runtime": "MNN dequantizes the weights when it loads the model (a smaller file, fp32 speed); "
                    "MNN documents dynamic int8 activation quantization for such models with memory_mode low",
                }
                ctx.check(f"int{bits} weight-only quantization (MNNConvert --weightQuantBits {bits})", model_file)
        elif ctx.precision == "int8":
            model_file, sections["quantization"] = self._int8(ctx, fp32, work)
            q = sections["quantization"]["chosen"]
            step = f"int8 full quantization (MNN quantization tool, {q['feature_method']} on {q['samples']} samples)"
            if ctx.budget is not None:
                from edgekit.passes.mixed_precision import search

                model_file, sections["mixed_precision"] = search(self, ctx, plain=model_file)
                warnings.extend(sections["mixed_precision"].get("warnings", []))
                skipped = self._skip_names(ctx, sections["mixed_precision"]["float_layer_names"])
                sections["mixed_precision"]["calibration"] = (
                    f"{q['feature_method']}/{q['weight_method']} on {q['samples']} samples: the calibration plain "
                    "int8 chose, used for every candidate (the others are not searched)"
                )
                sections["quantization"]["skip_quant_op_names"] = skipped
                step += f", {len(skipped)} layer(s) kept float for --budget {ctx.budget}"
            ctx.check(step, model_file)
        else:
            raise ValueError(f"unsupported precision {ctx.precision}")

        if ctx.precision not in runs_fast:
            why = ""
            if ctx.precision == "int8" and x86:
                why = ": MNN's int8 kernels are written for Arm (sdot/i8mm); on x86 int8 runs slower than fp32"
            elif ctx.precision == "fp16":
                why = ": on a CPU without fp16 arithmetic MNN expands fp16 weights to fp32 (a smaller file, fp32 speed)"
            warnings.append(
                f"profile {ctx.profile.name} does not list {ctx.precision} as fast for MNN (it lists "
                f"{', '.join(runs_fast)}){why}"
            )

        backend = settings.get("backend", "CPU")
        runner_options = {
            "backend": backend,
            "precision_mode": settings.get("precision_mode", "normal"),
            "power_mode": settings.get("power_mode", "normal"),
            "memory_mode": settings.get("memory_mode", "normal"),
        }
        try:
            import onnxruntime

            reference_runtime = f"onnxruntime {onnxruntime.__version__}"
        except ImportError:
            reference_runtime = "MNN (onnxruntime is not installed: the fp32 step cannot catch converter errors)"
        sections["mnn"] = {
            "converter": f"MNN {self.runtime_version()} _tools.mnnconvert (compiled tool, in a child process)",
            "convert_flags": flags,
            "model_ops": self._mnn_ops(model_file, work),
            "reference_runtime": reference_runtime,
            "host_checks": "MNN CPU backend, precision normal (fp32 arithmetic) on this machine",
            "target": {
                "profile": ctx.profile.name,
                "arch": ctx.profile.arch,
                "runs_fast": runs_fast,
                **runner_options,
                "note": (
                    "MNN's int8 kernels target Arm (sdot/i8mm): on x86, int8 is slower than fp32"
                    if x86
                    else f"{ctx.profile.name} runs {', '.join(runs_fast)} fast with MNN"
                ),
            },
        }
        return BuildResult(
            model_file=model_file,
            runtime="MNN",
            runtime_version=self.runtime_version(),
            format="mnn",
            ops=operator_set(onnx.load(str(ctx.reference_path))),
            sections=sections,
            warnings=warnings,
            runner_options=runner_options,
        )

    # -- full int8 ------------------------------------------------------------------------
    @staticmethod
    def _write_samples(dataset, specs, count, directory):
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

    def _int8(self, ctx, fp32, work):
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
        procs = []
        candidates, best = [], None
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
    def _fp32(self, ctx):
        """The FP32 .mnn ``build`` converted (converted now when called outside a build)."""
        fp32 = ctx.workdir / "model.fp32.mnn"
        if not fp32.is_file():
            self._convert(ctx.reference_path, fp32, [], ctx.workdir)
        return fp32

    def _weighted_ops(self, ctx):
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

    def layer_names(self, ctx, layers):
        """Reference layers -> MNN op names (``skip_quant_op_names``). MNN's ONNX converter names each op after
        the ONNX output it ends in: the Conv's own output, or that of the bias Add / BatchNormalization it
        fused, with ``__matmul_converted`` appended where a Gemm/MatMul became a convolution. Each MNN op is
        traced back through such element-wise nodes in the reference graph to its weighted ONNX node."""
        import onnx

        graph = onnx.load(str(ctx.reference_path), load_external_data=False).graph
        producer = {o: n for n in graph.node for o in n.output}
        wanted = {layer.name for layer in layers}
        found = {}
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

    def _skip_names(self, ctx, layer_names):
        import onnx

        from edgekit.passes.mixed_precision import candidate_layers

        layers = [l for l in candidate_layers(onnx.load(str(ctx.reference_path))) if l.name in set(layer_names)]
        return sorted(n for n in self.layer_names(ctx, layers).values() if n)

    def quantize(self, ctx, exclude=()):
        """Full INT8 with ``skip_quant_op_names``: MNN's quantization tool leaves those convolutions in float
        (weights and arithmetic; it skips them when it collects feature ranges). One calibration per search:
        the one plain int8 chose (or the first candidate outside a build)."""
        from edgekit.errors import ConversionError

        ctx.require_calibration("int8 quantization", "fp32/fp16/int8-weights")
        names = self.layer_names(ctx, exclude) if exclude else {}
        missing = [l.name for l in exclude if not names.get(l.name)]
        if missing:
            raise ConversionError(
                f"no MNN op found for layer(s) {', '.join(missing)} of the reference model, so "
                "they cannot be kept float; build --precision int8 without --budget"
            )
        skip = sorted(set(names.values()))
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

    def _float_activations(self, src, dst, ops, work):
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
        producer, consumers = {}, {}
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
        def readers_ok(t):  # every reader takes a float tensor: a convolution, a float layer, or a safe op
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

BACKEND = MNNBackend()
