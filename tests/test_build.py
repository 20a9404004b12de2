import json

import numpy as np
import pytest
from harness import PPOCR

import edgekit
from edgekit import bundle
from edgekit.errors import BundleError, DataError, FidelityError, ProfileError


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def test_fp32_bundle_for_host(tmp_path, tiny_model, tiny_calib):
    out = tmp_path / "b"
    r = edgekit.build(tiny_model, "host", out, precision="fp32", calib=tiny_calib)
    m = bundle.load(out)  # verifies every file's sha256
    assert m["backend"] == "ort" and m["precision"] == "fp32" and m["profile"] == "host"
    assert m["format"] == "onnx" and m["model"] == "model.onnx"
    assert m["inputs"] == [{"name": "input", "shape": [1, 3, 16, 16], "dtype": "float32", "layout": "NCHW"}]
    assert {f["role"] for f in m["files"]} == {"model", "required_operators", "sample_inputs", "expected_outputs"}
    assert m["source"]["sha256"] and m["runtime"]["name"] == "onnxruntime"
    assert {o["op"] for o in m["ops"]} >= {"Conv", "Relu", "Gemm", "Softmax"}
    # the report: fidelity measured on the real calibration samples
    fid = r["fidelity"]
    assert fid["passed"] and fid["data"]["samples"] == 32 and not fid["data"]["synthetic"]
    step = fid["steps"][0]["outputs"]["probs"]
    assert step["max_abs"] == 0 and step["cosine_min"] == pytest.approx(1.0) and step["top1_agreement"] == 1.0
    assert "ai.onnx;17;" in r["required_operators"]["config"][0]
    assert (out / "report.txt").read_text().startswith("edgekit build report")


def test_ort_format_for_arm_profile(tmp_path, tiny_model, tiny_calib):
    out = tmp_path / "pi"
    r = edgekit.build(tiny_model, "raspberrypi5", out, precision="fp32", calib=tiny_calib)
    assert r["format"] == "ort" and (out / "model.ort").exists()
    assert [s["step"] for s in r["fidelity"]["steps"]] == ["fp32 (shapes fixed)", "ORT format (optimized for arm)"]
    assert r["ort_format"]["target_platform"] == "arm"
    assert set(r["mobile_usability"]) == {"NNAPI", "CoreML MLProgram"}


def test_int8_static_on_ppocr_with_rendered_text(tmp_path, textlines):
    out = tmp_path / "int8"
    r = edgekit.build(PPOCR, "raspberrypi5", out, precision="int8", calib=textlines, input_shapes=["x=1,3,48,192"])
    steps = r["fidelity"]["steps"]
    assert [s["step"].split(" (")[0] for s in steps] == [
        "opset upgrade 11 -> 13",
        "int8 static quantization",
        "ORT format",
    ]
    m = steps[-1]["outputs"]["save_infer_model/scale_0.tmp_1"]
    assert m["accuracy_reference"] > 85.0  # the FP32 model really classifies the rendered lines
    assert m["accuracy"] >= m["accuracy_reference"] - 2.0
    assert m["top1_agreement"] >= 0.95
    assert r["quantization"]["format"] == "QDQ" and r["quantization"]["per_channel"]
    assert r["model_size_bytes"] < r["source_size_bytes"]
    ops = {o["op"] for o in r["ops"]}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_auto_precision_follows_the_profile(tmp_path, tiny_model, tiny_calib):
    assert edgekit.build(tiny_model, "raspberrypi5", tmp_path / "a", calib=tiny_calib)["precision"] == "int8"
    assert edgekit.build(tiny_model, "raspberrypi5", tmp_path / "b")["precision"] == "fp32"


def test_int8_without_calibration_is_refused(tmp_path, tiny_model):
    with pytest.raises(DataError, match="--calib"):
        edgekit.build(tiny_model, "host", tmp_path / "x", precision="int8")
    assert not (tmp_path / "x").exists()


def test_int8_without_calibration_is_refused_before_any_work(tmp_path, tiny_model):
    """No reference run on synthetic samples first: the refusal says how to make data or what else to choose."""
    said = []
    with pytest.raises(DataError) as e:
        edgekit.build(tiny_model, "raspberrypi5", tmp_path / "x", precision="int8", log=said.append)
    assert said == []
    message = str(e.value)
    for part in (
        "needs calibration data",
        "examples/textlines.py",
        "--calib DIR",
        "--preprocess",
        "Or choose --precision",
        "fp32",
    ):
        assert part in message, message


def test_fp16_and_dynamic_warn_honestly(tmp_path, tiny_model, tiny_calib):
    r = edgekit.build(tiny_model, "host", tmp_path / "h", precision="fp16", calib=tiny_calib)
    assert r["fidelity"]["passed"] and any("fp16" in w for w in r["warnings"])
    r = edgekit.build(tiny_model, "host", tmp_path / "d", precision="int8-dynamic", calib=tiny_calib)
    assert any("ConvInteger" in w for w in r["warnings"])


def test_unchanged_rebuild_hits_the_cache(tmp_path, tiny_model, tiny_calib):
    r1 = edgekit.build(tiny_model, "host", tmp_path / "c1", precision="int8", calib=tiny_calib, name="cached")
    r2 = edgekit.build(tiny_model, "host", tmp_path / "c2", precision="int8", calib=tiny_calib, name="cached")
    assert not r1["cache"]["hit"] and r2["cache"]["hit"]
    assert r1["bundle_id"] == r2["bundle_id"]
    bundle.load(tmp_path / "c2")


def test_failed_fidelity_writes_nothing_and_keeps_the_old_bundle(tmp_path, tiny_model, tiny_calib):
    out = tmp_path / "keep"
    edgekit.build(tiny_model, "host", out, precision="fp32", calib=tiny_calib)
    before = (out / "manifest.json").read_text()
    with pytest.raises(FidelityError, match="cosine similarity") as e:
        edgekit.build(tiny_model, "host", out, precision="int8", calib=tiny_calib, min_cosine=0.9999999)
    assert "--allow-degraded" in str(e.value)
    assert (out / "manifest.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".keep")]
    r = edgekit.build(
        tiny_model, "host", out, precision="int8", calib=tiny_calib, min_cosine=0.9999999, allow_degraded=True
    )
    assert not r["fidelity"]["passed"] and r["fidelity"]["degraded_allowed"]


def test_garbage_outputs_fail_fidelity(tmp_path, tiny_model, tiny_calib):
    """A runtime that returns garbage (NaN) must never pass."""
    from edgekit.fidelity import check_step, thresholds_for

    ref = [{"y": np.ones((1, 4), np.float32)}]
    bad = [{"y": np.array([[np.nan, 1, 1, 1]], np.float32)}]
    with pytest.raises(FidelityError, match="NaN"):
        check_step("x", ref, bad, None, thresholds_for("int8"))
    huge = [{"y": np.full((1, 4), 8e24, np.float32)}]
    rec = check_step("x", ref, huge, None, thresholds_for("int8"), allow_degraded=True)
    assert rec["outputs"]["y"]["max_abs"] > 1e24


def test_empty_outputs_compare_by_shape():
    """A KV-cache decoder's cached branch returns zero-length placeholders: equal shapes agree, the rest is judged."""
    from edgekit.fidelity import check_step, thresholds_for

    ref = [{"logits": np.ones((1, 4), np.float32), "present": np.zeros((1, 8, 0, 36), np.float32)}] * 2
    rec = check_step("x", ref, ref, None, thresholds_for("fp32"))
    assert rec["passed"] and rec["outputs"]["present"] == {"exact_match": 1.0, "non_finite": 0, "empty": True}
    assert rec["outputs"]["logits"]["cosine_min"] == pytest.approx(1.0)
    wrong = [{**r, "present": np.zeros((1, 8, 1, 36), np.float32)} for r in ref]
    with pytest.raises(FidelityError, match="shape mismatch"):
        check_step("x", ref, wrong, None, thresholds_for("fp32"))


def test_tampered_bundle_is_detected(tmp_path, tiny_bundle):
    import shutil

    copy = tmp_path / "t"
    shutil.copytree(tiny_bundle, copy)
    data = bytearray((copy / "model.onnx").read_bytes())
    data[-10] ^= 0xFF
    (copy / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its sha256"):
        bundle.load(copy)


def test_backend_not_in_profile(tmp_path, tiny_model):
    """The iPhone profile runs ORT, TFLite and MNN: an OpenVINO build for it is refused before anything is written."""
    with pytest.raises(ProfileError, match=r"profile iphone-15-pro does not run backend 'openvino'; it runs: ort,"):
        edgekit.build(tiny_model, "iphone-15-pro", tmp_path / "x", backend="openvino", precision="fp32")
    assert not (tmp_path / "x").exists()


def test_precision_the_backend_cannot_build(tmp_path, tiny_model):
    with pytest.raises(ProfileError, match=r"backend ort cannot build precision 'bf16'; choose from "):
        edgekit.build(tiny_model, "host", tmp_path / "x", precision="bf16")
    assert not (tmp_path / "x").exists()


def test_auto_keeps_fp32_when_int8_measured_slower_on_host(tmp_path, tiny_model, tiny_calib, monkeypatch):
    """The decision logic, with the host timing replaced (real timings are noisy; benchmarks/ measures them)."""
    from edgekit import build_write

    def slower(be, ref, built, feed, threads, rounds=3, runs=30, session=None):
        return {"reference_p50_ms": 1.0, "built_p50_ms": 2.0, "speedup": 0.5, "threads": threads}

    monkeypatch.setattr(build_write, "time_on_host", slower)
    r = edgekit.build(tiny_model, "host", tmp_path / "auto", calib=tiny_calib, name="auto-slow")
    assert r["precision"] == "fp32"
    assert r["precision_choice"]["rejected"][0]["precision"] == "int8"
    assert "measured slower" in r["precision_choice"]["reason"]
    assert json.loads((tmp_path / "auto" / "report.json").read_text())["precision_choice"]["chosen"] == "fp32"
    r = edgekit.build(tiny_model, "host", tmp_path / "forced", precision="int8", calib=tiny_calib, name="forced")
    assert r["precision"] == "int8" and any("slower" in w for w in r["warnings"])


def test_host_int8_build_is_timed_here(tmp_path, tiny_model, tiny_calib):
    r = edgekit.build(tiny_model, "host", tmp_path / "t", precision="int8", calib=tiny_calib, name="timed")
    hl = r["host_latency"]
    assert hl["reference_p50_ms"] > 0 and hl["built_p50_ms"] > 0 and hl["speedup"] > 0
    assert (
        edgekit.build(tiny_model, "raspberrypi5", tmp_path / "p", precision="int8", calib=tiny_calib)["host_latency"]
        is None
    )


def test_build_report_says_what_each_node_count_counts(tmp_path, tiny_model, tiny_calib):
    """The source graph, the built graph's operators, ORT's usability check and the placement count different
    graphs: the text report names the graph of each."""
    r = edgekit.build(tiny_model, "pixel-8", tmp_path / "p", precision="int8", calib=tiny_calib)
    assert r["source_nodes"] == 8 and r["ops_graph"].startswith("the built ONNX graph")
    text = (tmp_path / "p" / "report.txt").read_text()
    assert "source     8 nodes in the ONNX graph as given (tiny_cnn.onnx)" in text, text
    built = sum(o["count"] for o in r["ops"])
    assert f"operators of the built ONNX graph (before its conversion to the ORT format): {built} nodes" in text
    assert (
        "NNAPI check (ONNX Runtime's usability checker): " in text
        and " nodes of the built ONNX graph supported" in text
    )
    assert "nodes of the ONNX graph converted to model.ort on the accelerator" in text, text


@pytest.mark.e2e
def test_an_already_quantized_model_keeps_its_own_int8(tmp_path, tiny_model, tiny_calib):
    """A model shipped quantized (QDQ) is not quantized again, and is judged by the int8 gate at fp32."""
    from onnxruntime.quantization import QuantType, quantize_static
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    x = np.load(tiny_calib)["input"]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x[i : i + 1]} for i in range(8)])

        def get_next(self):
            return next(self.it, None)

    quantized = tmp_path / "tiny_qdq.onnx"
    quantize_static(str(tiny_model), str(quantized), Reader(), weight_type=QuantType.QInt8)
    with pytest.raises(edgekit.errors.ModelError, match=r"already quantized \(\d+ QuantizeLinear.*--precision fp32"):
        edgekit.build(quantized, "host", tmp_path / "again", precision="int8", calib=tiny_calib, name="q")
    assert not (tmp_path / "again").exists()
    report = edgekit.build(quantized, "host", tmp_path / "kept", precision="auto", calib=tiny_calib, name="q")
    assert report["precision"] == "fp32" and report["fidelity"]["thresholds"]["precision"] == "int8"
    assert any("already quantized" in w for w in report["warnings"])


def test_ort_format_for_a_compiling_ep_keeps_onnx_operators(tmp_path):
    """For NNAPI (pixel-8) the .ort file is converted in ONNX Runtime's "Runtime" style: no contrib kernel such as
    FusedConv (which NNAPI cannot take) in the file, its optimizations saved and replayed on the CPU's nodes at load
    (the runner enables it); the nodes explain judged are the nodes shipped."""
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs import InferenceSession

    out = tmp_path / "px8"
    r = edgekit.build(PPOCR, "pixel-8", out, backend="ort", precision="fp32", input_shapes=["x=1,3,48,192"])
    assert r["fidelity"]["passed"] and "runtime style" in r["ort_format"]["optimization"]
    graph = InferenceSession.InferenceSession.GetRootAsInferenceSession((out / "model.ort").read_bytes(), 0)
    graph = graph.Model().Graph()
    domains = {(graph.Nodes(i).Domain() or b"").decode() for i in range(graph.NodesLength())}
    assert domains <= {"", "ai.onnx"}, domains
    assert graph.NodesLength() == r["placement"]["targets"][0]["summary"]["nodes"]
    assert json.loads((out / "manifest.json").read_text())["runner"]["saved_runtime_optimizations"] is True
