"""edgekit explain: accelerator placement with reasons and fixes, selective-build inputs (real runtimes)."""

import json
from html.parser import HTMLParser

import numpy as np
import onnx
import pytest
from harness import one_json, run_cli
from onnx import TensorProto, helper, numpy_helper

import edgekit
from edgekit import placement


def hardswish_cnn(path):
    """Conv -> Erf -> Conv -> Relu -> DepthToSpace(CRD) -> GlobalAveragePool, 1x3x16x16.

    NNAPI's op list has no Erf, and NNAPI takes DepthToSpace only in DCR mode: three partitions.
    """
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Erf", ["c1"], ["h1"], name="erf"),
        helper.make_node("Conv", ["h1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("DepthToSpace", ["r2"], ["d2s"], blocksize=2, mode="CRD", name="d2s"),
        helper.make_node("GlobalAveragePool", ["d2s"], ["y"], name="gap"),
    ]
    graph = helper.make_graph(
        nodes,
        "hswish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 1])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def hswish_bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("explain")
    model = hardswish_cnn(d / "hswish.onnx")
    report = edgekit.build(model, "pixel-8", d / "pixel8", precision="fp32", name="hswish")
    return d / "pixel8", model, report


@pytest.fixture(scope="module")
def tiny_pixel8(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("explain") / "tiny-pixel8"
    report = edgekit.build(tiny_model, "pixel-8", out, precision="fp32", input_shapes=["input=1,3,16,16"], name="tiny")
    return out, report


def _target(report, name):
    return next(t for t in report["targets"] if t["accelerator"] == name)


def test_nnapi_names_the_unsupported_node_reason_and_fix(hswish_bundle):
    bundle, model, _ = hswish_bundle
    # model.ort is not a graph edgekit reads: the source model (checked by sha256) is analysed again
    r = placement.explain(bundle, model=model)
    nnapi = _target(r, "NNAPI")
    assert nnapi["device"] == "Google TPU (Tensor G3)"
    assert "usability checker" in nnapi["checked_with"]
    fallback = {f["node"]: f for f in nnapi["fallback"]}
    erf = fallback["erf"]
    assert erf["op"] == "Erf" and "does not support op type ai.onnx:Erf" in erf["reason"]
    assert "tanh approximation" in erf["fix"]
    d2s = fallback["d2s"]  # accepted by ORT's checker by op type; its caveat is checked here
    assert "mode='CRD'" in d2s["reason"] and "Only DCR mode DepthToSpace is supported." in d2s["reason"]
    assert "DCR" in d2s["fix"]
    s = nnapi["summary"]
    assert s["nodes"] == 6 and s["on_accelerator"] == 4 and s["fallback"] == 2
    assert s["partitions"] == 3
    assert 0 < s["flops_share"] < 1 and s["flops"] > 0
    text = placement.text(r)
    assert "erf (Erf)" in text and "fix:" in text


def test_build_report_has_placement_from_the_staged_model(hswish_bundle):
    bundle, _, report = hswish_bundle
    section = report["placement"]
    assert "error" not in section
    nnapi = _target(section, "NNAPI")
    assert {f["node"] for f in nnapi["fallback"]} >= {"erf", "d2s"}
    assert section["selective_build"]["backend"] == "ort"
    saved = json.loads((bundle / "report.json").read_text())
    assert saved["placement"]["targets"][0]["summary"] == nnapi["summary"]
    assert "placement NNAPI: 4/6 nodes" in (bundle / "report.txt").read_text()
    import jsonschema

    from edgekit.report import schema

    jsonschema.validate(saved, schema())
    # without --model, explain falls back to the report's section (model.ort is not a graph here)
    again = placement.explain(bundle)
    assert _target(again, "NNAPI")["summary"] == nnapi["summary"]
    assert "from the build report" in again["graph"]["note"]


def test_all_supported_model_is_one_partition_on_nnapi(tiny_pixel8):
    _, report = tiny_pixel8
    nnapi = _target(report["placement"], "NNAPI")
    s = nnapi["summary"]
    assert s["node_share"] == 1.0 and s["flops_share"] == 1.0 and s["partitions"] == 1
    assert nnapi["fallback"] == [] and s["unknown"] == 0


def test_coreml_reasons_for_iphone(tiny_pixel8, tiny_model):
    bundle, _ = tiny_pixel8
    r = placement.explain(bundle, profile="iphone-15-pro", model=tiny_model)
    coreml = _target(r, "CoreML")
    assert coreml["device"] == "Apple 16-core Neural Engine"
    flat = [f for f in coreml["fallback"] if f["op"] == "Flatten"]
    assert flat and "Reshape" in flat[0]["fix"]
    assert coreml["summary"]["partitions"] == 2


def test_model_must_be_the_bundles_source(hswish_bundle, tiny_model):
    bundle, _, _ = hswish_bundle
    with pytest.raises(edgekit.errors.BundleError, match="not the model bundle"):
        placement.explain(bundle, model=tiny_model)


def test_required_operators_parse_with_ort_reader(tiny_model, tmp_path):
    from onnxruntime.tools.reduced_build_config_parser import parse_config

    bundle = tmp_path / "host"
    edgekit.build(tiny_model, "host", bundle, precision="fp32", input_shapes=["input=1,3,16,16"], name="tiny")
    written = placement.selective_build(bundle, tmp_path / "sb")
    config = tmp_path / "sb" / "onnxruntime" / "required_operators.config"
    assert str(config) in written["files"]
    required, _ = parse_config(str(config))
    assert required == {"ai.onnx": {17: {"Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm", "Softmax"}}}
    assert "--include_ops_by_config" in (tmp_path / "sb" / "onnxruntime" / "README.txt").read_text()


def test_required_operators_of_an_ort_format_bundle_parse(hswish_bundle, tmp_path):
    from onnxruntime.tools.reduced_build_config_parser import parse_config

    bundle, _, _ = hswish_bundle
    placement.selective_build(bundle, tmp_path)
    required, _ = parse_config(str(tmp_path / "onnxruntime" / "required_operators.config"))
    ops = {op for by_opset in required.values() for names in by_opset.values() for op in names}
    assert {"Erf", "DepthToSpace", "GlobalAveragePool"} <= ops


def test_openvino_query_model_on_cpu_and_npu_not_checked(tiny_model, tmp_path):
    bundle = tmp_path / "ov"
    report = edgekit.build(
        tiny_model, "host", bundle, backend="openvino", precision="fp32", input_shapes=["input=1,3,16,16"], name="tiny"
    )
    host = placement.explain(bundle)
    cpu = _target(host, "CPU")
    assert "Core.query_model" in cpu["checked_with"]
    assert cpu["summary"]["node_share"] == 1.0 and cpu["summary"]["partitions"] == 1
    assert cpu["summary"]["flops"] > 0
    assert _target(report["placement"], "CPU")["summary"]["nodes"] == cpu["summary"]["nodes"]
    ultra = placement.explain(bundle, profile="intel-core-ultra")
    npu = _target(ultra, "NPU")
    assert npu["checked_with"] == "not checked: no NPU plugin on this machine"
    assert npu["summary"]["unknown"] == npu["summary"]["nodes"] and npu["summary"]["on_accelerator"] == 0
    assert npu["source"]["url"].startswith("https://docs.openvino.ai/")
    placement.selective_build(bundle, tmp_path / "sb")
    assert "SELECTIVE_BUILD=COLLECT" in (tmp_path / "sb" / "openvino" / "README.txt").read_text()


def test_mnn_opencl_table_and_op_list(tiny_model, tmp_path):
    bundle = tmp_path / "mnn"
    report = edgekit.build(
        tiny_model, "pixel-8", bundle, backend="mnn", precision="fp32", input_shapes=["input=1,3,16,16"], name="tiny"
    )
    r = placement.explain(bundle)
    ocl = _target(r, "MNN OPENCL")
    assert ocl["device"] == "Arm Mali-G715"
    assert "alibaba/MNN" in ocl["source"]["url"]
    ops = {row["op"] for row in ocl["by_op"]}
    assert "Convolution" in ops
    assert _target(report["placement"], "MNN OPENCL")["summary"]["nodes"] == ocl["summary"]["nodes"]
    assert report["placement"]["graph"]["flops"] > 0
    placement.selective_build(bundle, tmp_path / "sb")
    op_txt = (tmp_path / "sb" / "mnn" / "op.txt").read_text()
    listed = [line for line in op_txt.splitlines() if line and not line.startswith("#")]
    assert "Convolution" in listed and listed == sorted(set(listed))


def test_tflite_gpu_table_checks_versions_and_unlisted_ops():
    from edgekit import profiles
    from edgekit.converters.tflite.placement import tflite_targets

    nodes = placement.op_list_graph(
        [
            {"op": "CONV_2D", "count": 2, "version": 1},
            {"op": "DEPTHWISE_CONV_2D", "count": 1, "version": 2},
            {"op": "ADD", "count": 1, "version": 2},
            {"op": "ARG_MAX", "count": 1, "version": 1},
        ]
    )
    t = tflite_targets(nodes, profiles.load("pixel-8"))[0]
    verdict = {f["op"]: f for f in t["fallback"]}
    assert t["summary"]["on_accelerator"] == 3
    assert "version 2" in verdict["ADD"]["reason"]
    assert "not in the GPU delegate's documented op list" in verdict["ARG_MAX"]["reason"]


def test_build_survives_a_failing_analysis(tiny_model, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("simulated")

    monkeypatch.setattr(placement, "explain_build", boom)
    report = edgekit.build(
        tiny_model, "host", tmp_path / "b", precision="fp32", input_shapes=["input=1,3,16,16"], use_cache=False
    )
    assert report["placement"] == {"error": "placement analysis failed: RuntimeError: simulated"}
    assert "placement: not computed" in (tmp_path / "b" / "report.txt").read_text()


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_cli_json_html_and_selective_build(hswish_bundle, tmp_path):
    bundle, model, _ = hswish_bundle
    html_file = tmp_path / "explain.html"
    p = run_cli(
        "explain",
        bundle,
        "--model",
        model,
        "--json",
        "--html",
        html_file,
        "--selective-build",
        tmp_path / "sb",
        check=0,
    )
    r = one_json(p.stdout)
    assert _target(r, "NNAPI")["summary"]["partitions"] == 3
    assert r["selective_build_written"]["runtime"] == "onnxruntime"
    parser = _Collect()
    parser.feed(html_file.read_text())
    text = " ".join(parser.text)
    assert "script" not in parser.tags and parser.tags.count("table") >= 3
    assert "erf" in text and "Only DCR mode DepthToSpace is supported." in text
    p = run_cli("explain", bundle, "--model", model, check=0)
    assert "falls back to the CPU:" in p.stdout and "fix:" in p.stdout
    p = run_cli("explain", tmp_path / "nope", check=1)
    assert p.stderr.startswith("error: ") and "not an edgekit bundle" in p.stderr
