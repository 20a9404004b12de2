"""MindSpore Lite through the CLI: the converter and runtime in the mindspore-lite tool environment (Python 3.7,
created once, reused), FP32 and FP16 built and checked, deployed locally under the env's Python, NHWC inputs
transposed by the runner, weight quantization refused."""

import json
import platform
from pathlib import Path

import numpy as np
import pytest
from harness import PPOCR, run_cli

from edgekit import toolenvs
from edgekit.converters import get

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="the mindspore-lite wheel on PyPI is for Linux x86_64"
)
BE = get("mindspore-lite")
BE_TOOLS = Path(__file__).resolve().parent.parent / "converters" / "tools"
OUT = "save_infer_model/scale_0.tmp_1"


@pytest.fixture(scope="module")
def env_python():
    if toolenvs.state(BE.toolenv).get("interpreter_missing"):
        pytest.skip("no Python 3.7 on this machine for the mindspore-lite tool environment")
    return toolenvs.ensure(BE.toolenv, log=print)


def _build(*args, check=0):
    p = run_cli("build", *args, "--backend", "mindspore-lite", "--json", check=check)
    return json.loads(p.stdout) if check == 0 else p


@pytest.fixture(scope="module")
def ppocr(env_python, tmp_path_factory, textlines):
    out = {}
    for precision in ("fp32", "fp16"):
        d = tmp_path_factory.mktemp("bundles") / f"ppocr-{precision}"
        out[precision] = (
            d,
            _build(
                PPOCR,
                "--profile",
                "host",
                "--precision",
                precision,
                "--val",
                textlines,
                "--input-shape",
                "x=1,3,48,192",
                "-o",
                d,
            ),
        )
    return out


def test_fp32_and_fp16_pass_on_real_lines(ppocr):
    for precision, (out, r) in ppocr.items():
        assert r["backend"] == "mindspore-lite" and r["format"] == "ms" and r["precision"] == precision
        assert r["fidelity"]["passed"] and r["fidelity"]["data"]["samples"] == 200
        first = r["fidelity"]["steps"][0]
        # HardSigmoid(alpha=0.2) is rewritten before conversion: without that, MindSpore Lite is off by up to 0.43
        assert first["outputs"][OUT]["cosine_mean"] > 0.99999 and first["outputs"][OUT]["top1_agreement"] == 1.0
        sec = r["mindspore_lite"]
        assert sec["hardsigmoid_rewritten"] == 9 and sec["converted_input_shapes"] == {"x": [1, 48, 192, 3]}
        manifest = json.loads((out / "manifest.json").read_text())
        # the bundle keeps NCHW (declared inputs and sample) and the runner transposes
        assert manifest["inputs"][0]["shape"] == [1, 3, 48, 192] and manifest["runner"]["input_layout"] == {"x": "NHWC"}
        with np.load(out / "sample_inputs.npz") as z:
            assert z["x"].shape == (1, 3, 48, 192)
    fp16 = ppocr["fp16"][1]
    assert [s["step"] for s in fp16["fidelity"]["steps"]][1].startswith("fp16 weights")
    assert fp16["model_size_bytes"] < 0.6 * ppocr["fp32"][1]["model_size_bytes"]


def test_deploy_locally_under_the_env_python(agent_roots, ppocr, env_python, tmp_path):
    root = agent_roots("device", python=env_python)
    for precision in ("fp32", "fp16"):
        p = run_cli("deploy", ppocr[precision][0], "--local", "--device-root", root, "--runs", "20", "--json", check=0)
        b = json.loads(p.stdout)
        assert b["backend"] == "mindspore-lite" and b["precision"] == precision and b["accelerator"] == "CPU"
        assert b["device"]["python"].startswith("3.7")
        assert b["device_fidelity"]["passed"] and b["latency_ms"]["p50"] > 0
        assert any("transposes" in w for w in b["warnings"])


def test_mobilenetv2_fp16(env_python, tmp_path):
    from make_mobilenetv2 import make_mobilenetv2

    src = tmp_path / "mobilenetv2.onnx"
    make_mobilenetv2(src)
    r = _build(
        src, "--profile", "host", "--precision", "fp16", "--input-shape", "input=1,3,224,224", "-o", tmp_path / "m"
    )
    steps = {s["step"]: s["outputs"]["logits"] for s in r["fidelity"]["steps"]}
    assert steps["fp32 (ONNX -> MindSpore Lite .ms)"]["cosine_mean"] > 0.99999
    assert steps["fp16 weights (Converter.weight_fp16)"]["top1_agreement"] == 1.0
    assert r["model_size_bytes"] < 8_000_000 and r["host_latency"]["built_p50_ms"] > 0


def test_weight_quantization_is_refused_clearly(env_python, tmp_path, tiny_model):
    for precision in ("int8-weights", "int8"):
        out = tmp_path / precision
        p = _build(tiny_model, "--profile", "host", "--precision", precision, "-o", out, check=1)
        assert f"mindspore-lite {precision} refused" in p.stderr and "fp16" in p.stderr, p.stderr
        assert not out.exists()
    p = _build(tiny_model, "--profile", "host", "--precision", "int8-weights", "-o", tmp_path / "w", check=1)
    assert "Prepare kernels failed" in p.stderr  # the reason: such a .ms does not load


@pytest.mark.parametrize("opset", [10, 13])
def test_hardsigmoid_rewrite_keeps_the_values_in_both_clip_forms(tmp_path, opset):
    """Clip takes its bounds as inputs from opset 11 and as attributes before: the rewrite writes the form of the
    model's opset, and the rewritten model computes what HardSigmoid did (run by onnxruntime)."""
    import importlib.util

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    spec = importlib.util.spec_from_file_location("mindspore_convert", BE_TOOLS / "mindspore_convert.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    node = helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.2, beta=0.5)
    g = helper.make_graph(
        [node],
        "hs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    x = np.linspace(-6, 6, 16, dtype=np.float32).reshape(2, 8)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert tool.rewrite_hardsigmoid(model) == 1
    onnx.checker.check_model(model, full_check=True)
    clip = [n for n in model.graph.node if n.op_type == "Clip"][0]
    assert len(clip.input) == (3 if opset >= 11 else 1)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - want).max() < 1e-6 and want.min() == 0.0 and want.max() == 1.0


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mindspore_convert", BE_TOOLS / "mindspore_convert.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_unsupported_op_rewrites_keep_the_values():
    """HardSwish, GreaterOrEqual and LessOrEqual (which the converter's ONNX parser lists as unsupported) are
    rewritten into ops it has; onnxruntime computes the same values from both graphs."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    tool = _tool()
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [
            helper.make_node("HardSwish", ["x"], ["hs"]),
            helper.make_node("GreaterOrEqual", ["x", "t"], ["ge"]),
            helper.make_node("LessOrEqual", ["x", "t"], ["le"]),
        ],
        "ops",
        [helper.make_tensor_value_info("x", f, [2, 8]), helper.make_tensor_value_info("t", f, [2, 8])],
        [helper.make_tensor_value_info(n, t, [2, 8]) for n, t in (("hs", f), ("ge", TensorProto.BOOL), ("le", 9))],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)
    x = np.linspace(-5, 5, 16, dtype=np.float32).reshape(2, 8)
    feeds = {"x": x, "t": np.round(x)}  # equal values included: >= and <= differ from > and < there

    def run(m):
        return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)

    want = run(model)
    assert tool.rewrite_unsupported(model) == {"HardSwish": 1, "GreaterOrEqual": 1, "LessOrEqual": 1}
    assert tool.rewrite_hardsigmoid(model) == 1  # the HardSwish's HardSigmoid
    onnx.checker.check_model(model, full_check=True)
    assert not {"HardSwish", "GreaterOrEqual", "LessOrEqual", "HardSigmoid"} & {n.op_type for n in model.graph.node}
    got = run(model)
    assert np.abs(got[0] - want[0]).max() < 1e-6
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2]) and want[1].any() and want[2].any()


def test_the_converters_log_is_read_for_the_cause():
    """The native log lines of MindSpore Lite 2.0.0 (as it wrote them) become one line naming the cause."""
    tool = _tool()
    prefix = "[ERROR] LITE(23807,7f9477e11b80,python):2026-12-02-00:45:21.019.255 "
    ops = (
        f"{prefix}[mindspore/lite/tools/converter/converter_funcgraph.cc:162] Build] Load model file failed\n"
        f"{prefix}[mindspore/lite/tools/converter/converter_context.h:63] PrintOps] FMKTYPE: ONNX, OP TYPE: GRU\n"
    )
    assert tool.explain(ops) == "the MindSpore Lite converter does not support the ONNX op(s) GRU"
    infer = f"{prefix}[mindspore/lite/src/litert/scheduler.cc:852] InferSubGraphShape] InferShape failed, name: "
    assert tool.explain(infer + "node_squeeze, type: Squeeze", "runtime") == (
        "the MindSpore Lite runtime could not infer the output shape of node 'node_squeeze' (Squeeze)"
    )
    other = f"{prefix}[mindspore/lite/src/litert/kernel/cpu/fp32/prelu_fp32.cc:50] Prepare] slope_shapes: 256 is"
    assert tool.explain(other) == "the MindSpore Lite converter failed: slope_shapes: 256 is (prelu_fp32.cc)"


def test_an_unsupported_op_is_named_by_the_real_converter(env_python, tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "w")
    r = numpy_helper.from_array(rng.standard_normal((1, 12, 4)).astype(np.float32), "r")
    g = helper.make_graph(
        [helper.make_node("GRU", ["x", "w", "r"], ["y"], hidden_size=4, name="gru_0")],
        "gru",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1, 1, 4])],
        [w, r],
    )
    src = tmp_path / "gru.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=7), str(src))
    p = _build(src, "--profile", "host", "--precision", "fp32", "-o", tmp_path / "out", check=1)
    assert "failed (exit 1): the MindSpore Lite converter does not support the ONNX op(s) GRU" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr.split("last output:")[0] and not (tmp_path / "out").exists()


def test_opset10_hardsigmoid_model_converts_and_matches(env_python, tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node(
            "Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], strides=[1, 1], dilations=[1, 1], group=1
        ),
        helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.2, beta=0.5),
    ]
    g = helper.make_graph(
        nodes,
        "hs10",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    src = tmp_path / "hs10.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)], ir_version=6), str(src))
    r = _build(src, "--profile", "host", "--precision", "fp32", "-o", tmp_path / "out")
    assert r["mindspore_lite"]["hardsigmoid_rewritten"] == 1
    assert r["fidelity"]["steps"][0]["outputs"]["y"]["max_abs"] < 1e-4
