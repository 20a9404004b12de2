"""MindSpore Lite through the CLI: the converter and runtime in the mindspore-lite tool environment (Python 3.7,
created once, reused), FP32 and FP16 built and checked, deployed locally under the env's Python, NHWC inputs
transposed by the runner, weight quantization refused."""

import json
import platform

import numpy as np
import pytest
from conftest import PPOCR, run_cli, stop_agent

from edgekit import toolenvs
from edgekit.converters import get

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the mindspore-lite wheel on PyPI is for Linux x86_64")
BE = get("mindspore-lite")
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
        out[precision] = d, _build(PPOCR, "--profile", "host", "--precision", precision, "--val", textlines,
                                   "--input-shape", "x=1,3,48,192", "-o", d)
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


def test_deploy_locally_under_the_env_python(ppocr, env_python, tmp_path):
    root = tmp_path / "device"
    try:
        for precision in ("fp32", "fp16"):
            p = run_cli("deploy", ppocr[precision][0], "--local", "--device-root", root, "--runs", "20", "--json",
                        check=0)
            b = json.loads(p.stdout)
            assert b["backend"] == "mindspore-lite" and b["precision"] == precision and b["accelerator"] == "CPU"
            assert b["device"]["python"].startswith("3.7")
            assert b["device_fidelity"]["passed"] and b["latency_ms"]["p50"] > 0
            assert any("transposes" in w for w in b["warnings"])
    finally:
        stop_agent(env_python, root)


def test_mobilenetv2_fp16(env_python, tmp_path):
    from make_mobilenetv2 import make_mobilenetv2

    src = tmp_path / "mobilenetv2.onnx"
    make_mobilenetv2(src)
    r = _build(src, "--profile", "host", "--precision", "fp16", "--input-shape", "input=1,3,224,224", "-o", tmp_path / "m")
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
