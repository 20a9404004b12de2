"""edgekit profile: per-layer times from each runtime's own profiler on the device, joined with explain's placement.

Fast tests parse hand-made ONNX Runtime traces and OpenVINO counters and join hand-made placements; end-to-end
tests profile the PP-OCR classifier with real runtimes on a real agent, locally and over SSH."""

import json
import sys

import pytest
from harness import PPOCR, one_json, run_cli, stop_agent

import edgekit
from edgekit.layer_profile import RATIO_TOLERANCE, SCHEMA, join
from edgekit.layer_profile_text import profile_text
from edgekit_agent.profiling import _exec_precision, parse_ort_trace, parse_ov_counters


# -- parsing the runtimes' own output ----------------------------------------------------------------------------
def _ort_event(name, ts, dur, op="Conv", provider="CPUExecutionProvider", shapes=({"float": [1, 3, 8, 8]},)):
    args = {"op_name": op, "provider": provider, "input_type_shape": list(shapes)}
    return {"cat": "Node", "name": name + "_kernel_time", "ts": ts, "dur": dur, "args": args}


def test_ort_trace_gives_each_node_its_median_over_runs():
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
        {"cat": "Session", "name": "model_run", "ts": 400, "dur": 100},
        {"cat": "Node", "name": "conv_fence_before", "ts": 1, "dur": 0, "args": {"op_name": "Conv"}},
    ]
    for run, (a, b) in enumerate([(10, 40), (30, 20), (20, 30)]):
        t = run * 200
        events.append(_ort_event("conv", t + 1, a))
        events.append(_ort_event("loop_body", t + 50, b, op="Add", shapes=({"int8": [4]}, {"int8": [4]})))
        events.append(_ort_event("loop_body", t + 60, 5, op="Add", shapes=({"int8": [4]}, {"int8": [4]})))
    nodes = parse_ort_trace(events)
    assert [n["name"] for n in nodes] == ["conv", "loop_body"]  # execution order; fences are not nodes
    conv, body = nodes
    assert conv["time_ms"] == pytest.approx(0.020) and conv["runs"] == 3  # median of 10, 30, 20 us
    assert body["time_ms"] == pytest.approx(0.035)  # a node run twice in one run counts the sum of that run
    assert conv["accelerator"] == "CPUExecutionProvider" and conv["op"] == "Conv"
    assert conv["input_shapes"] == [[1, 3, 8, 8]] and conv["precision"] == "float"
    assert body["input_shapes"] == [[4], [4]] and body["precision"] == "int8"


def test_openvino_counters_keep_executed_nodes_with_their_median():
    def run(conv_ms, relu_status="EXECUTED"):
        return [
            {"node_name": "x", "node_type": "Parameter", "exec_type": "unknown_FP32", "real_time_ms": 0,
             "status": "NOT_RUN"},
            {"node_name": "conv", "node_type": "Convolution", "exec_type": "brgconv_avx2_f32", "real_time_ms": conv_ms,
             "status": "Status.EXECUTED"},
            {"node_name": "relu", "node_type": "Eltwise", "exec_type": "jit_avx2_I8", "real_time_ms": 0.5,
             "status": relu_status},
        ]  # fmt: skip

    layers = {"conv": {"input_shapes": [[1, 3, 8, 8], [8, 3, 3, 3]], "fused": ["bn", "act"], "precision": None}}
    nodes = parse_ov_counters([run(1.0), run(3.0), run(2.0, "OPTIMIZED_OUT")], "GPU.0", layers)
    assert [n["name"] for n in nodes] == ["conv", "relu"]
    conv, relu = nodes
    assert conv["time_ms"] == 2.0 and conv["runs"] == 3 and relu["runs"] == 2
    assert conv["accelerator"] == "GPU.0" and conv["kernel"] == "brgconv_avx2_f32" and conv["fused"] == ["bn", "act"]
    assert conv["precision"] == "F32" and relu["precision"] == "I8"
    assert conv["input_shapes"] == [[1, 3, 8, 8], [8, 3, 3, 3]] and relu["input_shapes"] is None


@pytest.mark.parametrize(
    "backend, says", [("tflite", "LiteRT 2.3.0"), ("paddlelite", "Paddle Lite 2.3.0"), ("mindspore-lite", "MindSpore")]
)
def test_runtimes_without_a_python_profiler_say_which_and_why(backend, says):
    from edgekit_agent.profiling import PROFILERS, NotAvailable

    class Runner:  # what the message needs of a runner: its runtime's version on the device
        @staticmethod
        def runtime_version():
            return "2.3.0"

    with pytest.raises(NotAvailable, match=f"^not available from {says}.*: its Python "):
        PROFILERS[backend](Runner(), {})


def test_kernel_names_without_a_precision_say_none():
    assert _exec_precision("ref_any_BF16") == "BF16"
    assert _exec_precision("undef") is None and _exec_precision("jit_avx2") is None


# -- the placement join ---------------------------------------------------------------------------------------
def _node(name, ms, accelerator="CPU", **extra):
    return {"name": name, "op": "Conv", "accelerator": accelerator, "time_ms": ms, "share": 0.0, **extra}


def _report(nodes):
    return {
        "schema": SCHEMA,
        "name": "m",
        "bundle_id": "b1",
        "backend": "ort",
        "runtime": "onnxruntime",
        "runtime_version": "1",
        "precision": "fp32",
        "accelerator": "NNAPI",
        "threads": 1,
        "runs": 3,
        "end_to_end_ms": {"p50": 10.0, "p90": 11.0},
        "profiler": {"available": True, "source": "test"},
        "node_sum_ms": sum(n["time_ms"] for n in nodes),
        "node_sum_ratio": sum(n["time_ms"] for n in nodes) / 10.0,
        "memory": {"peak_rss_load_mb": 50.0, "peak_rss_inference_mb": 60.0, "weights_bytes": 1000},
        "nodes": nodes,
    }


NNAPI = {
    "accelerator": "NNAPI",
    "summary": {"fallback": 1, "unknown": 1},
    "fallback": [{"node": "b", "op": "Resize", "reason": "mode cubic", "fix": "use linear"}],
    "unknown": [{"node": "c", "op": "Custom", "reason": "no table"}],
}


def test_each_node_carries_explains_verdict_and_time_is_summed_per_accelerator_and_partition():
    nodes = [
        _node("a", 4.0, "NNAPI"),
        _node("b", 2.0),
        _node("c", 1.0, "NNAPI"),
        _node("k_fused", 0.5, "NNAPI", fused=["b"]),
        _node("reorder_token_1", 0.5, "NNAPI"),
    ]
    r = join(_report(nodes), {"targets": [NNAPI]}, graph={"a", "b", "c"})
    verdicts = [n["placement"][0]["verdict"] for n in r["nodes"]]
    assert verdicts == ["yes", "no", "unknown", "no", "unmatched"]
    assert (
        "mode cubic" in r["nodes"][1]["placement"][0]["reason"]
        and "use linear" in r["nodes"][1]["placement"][0]["reason"]
    )
    assert r["nodes"][3]["placement"][0]["matched"] == "b"  # a fused kernel takes the verdict of what it holds
    acc = {a["accelerator"]: a for a in r["by_accelerator"]}
    assert acc["NNAPI"]["time_ms"] == 6.0 and acc["NNAPI"]["nodes"] == 4 and acc["CPU"]["share"] == pytest.approx(0.25)
    assert [(p["accelerator"], p["nodes"], p["time_ms"]) for p in r["partitions"]] == [
        ("NNAPI", 1, 4.0),
        ("CPU", 1, 2.0),
        ("NNAPI", 3, 2.0),
    ]
    spent = r["by_verdict"][0]["time_ms"]
    assert spent == {"yes": 4.0, "no": 2.5, "unknown": 1.0, "unmatched": 0.5}
    assert "placement_note" not in r


def test_truncated_placement_lists_give_unknown_not_yes():
    target = dict(NNAPI, summary={"fallback": 500, "unknown": 1})
    r = join(_report([_node("a", 1.0)]), {"targets": [target]}, graph=None)
    assert r["nodes"][0]["placement"][0]["verdict"] == "unknown"


def test_without_targets_or_placement_the_report_says_why():
    r = join(_report([_node("a", 1.0)]), {"targets": [], "note": "profile host names no accelerator"})
    assert r["nodes"][0]["placement"] == [] and r["placement_note"] == "profile host names no accelerator"
    r = join(_report([_node("a", 1.0)]), None)
    assert "edgekit explain" in r["placement_note"]


def test_text_report_lists_top_nodes_accelerators_and_what_is_not_available():
    nodes = [_node(f"n{i}", float(i), "NNAPI" if i % 2 else "CPU") for i in range(1, 30)]
    text = profile_text(join(_report(nodes), {"targets": [NNAPI]}, graph=None), top=5)
    assert "top 5 of 29 nodes by time:" in text and "n29" in text and "n3 " not in text
    assert "time per accelerator:" in text and "NNAPI" in text and "explain's verdict for NNAPI" in text
    off = _report([])
    off["profiler"] = {"available": False, "reason": "not available from LiteRT 2.3.0: no profiler"}
    assert "not available from LiteRT 2.3.0" in profile_text(join(off, None))


def test_runs_out_of_bounds_are_refused_before_anything_is_opened(tmp_path):
    with pytest.raises(edgekit.EdgekitError, match="1 to 200 runs"):
        edgekit.profile(tmp_path, "local", runs=0)


# -- real runtimes, real agent ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ppocr_device(tmp_path_factory):
    """The PP-OCR classifier built for this machine with ONNX Runtime, OpenVINO and MNN, each deployed to one
    local agent (one model name: the last deployed serves, so tests deploy the one they profile)."""
    from edgekit.deployer import open_device

    d = tmp_path_factory.mktemp("profile")
    bundles = {}
    for backend in ("ort", "openvino", "mnn"):
        bundles[backend] = d / backend
        edgekit.build(PPOCR, "host", bundles[backend], precision="fp32", backend=backend, input_shapes=["x=1,3,48,192"])
    root = d / "device"
    dev = open_device("local", device_root=str(root))
    try:
        yield dev, bundles, root
    finally:
        dev.close()
        stop_agent(sys.executable, root)


def _check_profile(r, bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert r["schema"] == SCHEMA and r["bundle_id"] == manifest["id"] and r["runs"] == 10
    assert r["profiler"]["available"], r["profiler"]
    nodes = r["nodes"]
    assert len(nodes) > 20
    for n in nodes:
        # a node counts the runs it executed in: OpenVINO's CPU plugin now and then reports a tiny node (0.001 ms)
        # executed in only some of them (5 of 10 seen once)
        assert n["time_ms"] >= 0 and 1 <= n["runs"] <= 10 and n["accelerator"] and n["op"]
        assert n["input_shapes"] and n["precision"]
    assert sum(n["runs"] == 10 for n in nodes) >= 0.9 * len(nodes)
    assert sum(n["share"] for n in nodes) == pytest.approx(1.0)
    assert nodes[0]["input_shapes"][0] == [1, 3, 48, 192]  # the first layer reads the image
    lo, hi = RATIO_TOLERANCE
    assert lo <= r["node_sum_ratio"] <= hi, (r["node_sum_ms"], r["end_to_end_ms"]["p50"])
    assert r["profiled_ms"]["p50"] > 0 and r["profiler_overhead"] > 0  # measured, not judged: benchmarks/ does
    mem = r["memory"]
    assert 0 < mem["peak_rss_load_mb"] <= mem["peak_rss_inference_mb"]
    weights = sum(f["size"] for f in manifest["files"] if f["role"] in ("model", "weights"))
    assert mem["weights_bytes"] == weights > 0
    assert sum(a["time_ms"] for a in r["by_accelerator"]) == pytest.approx(r["node_sum_ms"])


@pytest.mark.parametrize("backend", ["ort", "openvino", "mnn"])
def test_profile_on_a_local_agent(ppocr_device, backend):
    from edgekit.deployer import deploy

    dev, bundles, _ = ppocr_device
    deploy(bundles[backend], dev, bench=False)
    r = edgekit.profile(bundles[backend], dev, runs=10, warmup=2, threads=1)
    _check_profile(r, bundles[backend])
    if backend == "openvino":  # the host profile's CPU target: each kernel joined with query_model's verdict
        verdicts = {n["placement"][0]["verdict"] for n in r["nodes"]}
        assert "yes" in verdicts and verdicts <= {"yes", "unmatched"}
        assert any(n.get("fused") for n in r["nodes"])  # OpenVINO names what it fused into a kernel
    else:
        assert "names no accelerator" in r["placement_note"]
    if backend == "ort":  # kernels of ORT's optimized graph traced to the model's nodes, but the ones it inserted
        from edgekit.layer_profile import HANDOVER_OPS, built_graph

        manifest = json.loads((bundles[backend] / "manifest.json").read_text())
        graph = {n["name"] for n in built_graph(bundles[backend], manifest)}
        untraced = [n for n in r["nodes"] if n["name"] not in graph and not n.get("fused")]
        assert r["traced_kernels"] > 0 and [n for n in untraced if n["op"] not in HANDOVER_OPS] == []


def test_the_agent_bounds_a_profile_and_profiles_only_the_deployed_bundle(ppocr_device):
    from edgekit.deployer import deploy

    dev, bundles, _ = ppocr_device
    deploy(bundles["ort"], dev, bench=False)
    with pytest.raises(edgekit.AgentError, match="1 to 200 runs"):
        dev.profile(json.loads((bundles["ort"] / "manifest.json").read_text())["name"], runs=201)
    with pytest.raises(edgekit.AgentError, match="not this bundle.*edgekit deploy"):  # another build of the model
        edgekit.profile(bundles["mnn"], dev, runs=1)


def test_cli_text_and_json(ppocr_device):
    from edgekit.deployer import deploy

    dev, bundles, root = ppocr_device
    deploy(bundles["mnn"], dev, bench=False)
    where = ("--local", "--device-root", root, "--runs", 5, "--threads", 1)
    text = run_cli("profile", bundles["mnn"], *where, "--top", 3, check=0).stdout
    assert "top 3 of" in text and "time per accelerator:" in text and "peak RSS after load" in text
    r = one_json(run_cli("profile", bundles["mnn"], *where, "--json", check=0).stdout)
    assert r["schema"] == SCHEMA and r["backend"] == "mnn" and r["runs"] == 5


def test_litert_says_it_has_no_per_node_profiler(tmp_path, local_device):
    from edgekit import toolenvs
    from edgekit.converters import tflite
    from edgekit.deployer import deploy

    try:
        toolenvs.find_python(tflite.TOOLENV)
    except Exception as e:
        pytest.skip(f"no interpreter for the tflite tool environment: {e}")
    out = tmp_path / "tflite"
    edgekit.build(PPOCR, "host", out, precision="fp32", backend="tflite", input_shapes=["x=1,3,48,192"])
    deploy(out, local_device, bench=False)
    r = edgekit.profile(out, local_device, runs=3, warmup=1)
    assert r["profiler"]["available"] is False and r["nodes"] == []
    assert r["profiler"]["reason"].startswith("not available from LiteRT 2.")
    assert r["end_to_end_ms"]["p50"] > 0 and r["memory"]["weights_bytes"] > 0


def test_profile_over_ssh(sshd, agent_roots, tmp_path):
    from edgekit.deployer import deploy, open_device

    bundle = tmp_path / "ort"
    edgekit.build(PPOCR, "host", bundle, precision="fp32", backend="ort", input_shapes=["x=1,3,48,192"])
    root = agent_roots("ssh-device")
    with open_device(
        "ssh",
        f"{sshd.user}@{sshd.host}:{sshd.port}",
        device_python=sys.executable,
        device_root=str(root),
        key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    ) as dev:
        deploy(bundle, dev, bench=False)
    p = run_cli(
        "profile",
        bundle,
        "--ssh",
        f"{sshd.user}@{sshd.host}:{sshd.port}",
        "--ssh-key",
        sshd.client_key,
        "--known-hosts",
        sshd.known_hosts,
        "--device-python",
        sys.executable,
        "--device-root",
        root,
        "--runs",
        10,
        "--threads",
        1,
        "--json",
        check=0,
    )
    r = one_json(p.stdout)
    assert r["transport"] == f"ssh {sshd.user}@{sshd.host}:{sshd.port}"
    _check_profile(r, bundle)


def test_fallbacks_are_one_line_with_their_cost_partitions_and_fix():
    """The issue's sentence: which nodes fall back, the partitions they make and what they cost, and the fix."""
    nnapi = {
        "accelerator": "NNAPI",
        "summary": {"fallback": 2, "unknown": 0},
        "fallback": [
            {"node": "h1", "op": "HardSigmoid", "reason": "not in NNAPI 1.3", "fix": "rewrite as Clip"},
            {"node": "h2", "op": "HardSigmoid", "reason": "not in NNAPI 1.3", "fix": "rewrite as Clip"},
        ],
        "unknown": [],
    }
    nodes = [_node("a", 4.0), _node("h1", 1.0), _node("b", 3.0), _node("h2", 1.0), _node("c", 1.0)]
    for n, op in zip(nodes, ["Conv", "HardSigmoid", "Conv", "HardSigmoid", "Conv"]):
        n["op"] = op
    r = join(_report(nodes), {"targets": [nnapi]}, graph={"a", "h1", "b", "h2", "c"})
    (f,) = r["fallbacks"]
    assert f["nodes"] == 2 and f["ops"] == {"HardSigmoid": 2} and f["partitions"] == 3
    assert f["share"] == pytest.approx(0.2) and f["fixes"] == ["rewrite as Clip"]
    assert f["headline"] == (
        "2 node(s) (HardSigmoid x2) fall back from NNAPI: they split the graph into 3 NNAPI partitions and cost 20 % "
        "of the measured time; the fix: rewrite as Clip"
    )
    assert f["headline"] in profile_text(r)


def test_handover_kernels_the_runtime_inserted_are_the_boundary_cost():
    nodes = [_node("a", 4.0, "CUDA"), _node("Memcpy_token_1", 1.0), _node("b", 5.0)]
    nodes[1]["op"] = "MemcpyToHost"
    r = join(_report(nodes), None, graph={"a", "b"})
    h = r["handovers"]
    assert h["nodes"] == 1 and h["time_ms"] == 1.0 and h["share"] == pytest.approx(0.1)
    assert h["boundaries"] == [
        {"from": "CUDA", "to": "CPU", "after": "a", "copies": ["Memcpy_token_1"], "time_ms": 1.0}
    ]
    assert "hand-overs   1 copy/re-layout kernel(s)" in profile_text(r)


def test_ort_kernels_named_after_their_tensor_are_traced_to_the_graph_nodes_they_fuse():
    """ONNX Runtime's NCHWc kernel ``relu_0.tmp_0_nchwc`` runs Conv+BatchNormalization+Relu of the model (named after
    the Relu's output); an inserted ``ReorderOutput_token_3`` runs no node of the model and stays unmatched."""
    from edgekit.layer_profile import trace_kernels

    def n(name, op, src, out):
        return {"name": name, "op": op, "inputs": [{"name": src}], "outputs": [out]}

    graph = [
        n("Conv@0", "Conv", "x", "conv_0.tmp_0"),
        n("BN@0", "BatchNormalization", "conv_0.tmp_0", "batch_norm_0.tmp_2"),
        n("Relu@0", "Relu", "batch_norm_0.tmp_2", "relu_0.tmp_0"),
        n("Pool@0", "MaxPool", "relu_0.tmp_0", "pool_0.tmp_0"),
        n("HS@0", "HardSigmoid", "pool_0.tmp_0", "hardsigmoid_0.tmp_0"),
    ]
    kernels = [
        _node("relu_0.tmp_0_nchwc", 1.0),
        _node("ReorderOutput_token_3", 0.1),
        _node("hardsigmoid_0.tmp_0_nchwc", 0.2),
        _node("Pool@0", 0.3),
    ]
    assert trace_kernels(kernels, graph) == 2
    assert kernels[0]["fused"] == ["Conv@0", "BN@0", "Relu@0"]
    assert kernels[2]["fused"] == ["HS@0"]  # its input comes from a pool: nothing fused before it
    assert "fused" not in kernels[1] and "fused" not in kernels[3]
    gemm = [n("MatMul@0", "MatMul", "h", "mm"), n("Add@0", "Add", "mm", "y")]
    fused = [_node("MatMul@0/MatMulAddFusion", 0.1)]
    assert trace_kernels(fused, gemm) == 1 and fused[0]["fused"] == ["MatMul@0", "Add@0"]
    hs = {"accelerator": "NNAPI", "summary": {"fallback": 1, "unknown": 0}, "unknown": [],
          "fallback": [{"node": "HS@0", "op": "HardSigmoid", "reason": "no", "fix": "Clip"}]}  # fmt: skip
    r = join(_report(kernels), {"targets": [hs]}, graph={g["name"] for g in graph})
    assert [k["placement"][0]["verdict"] for k in r["nodes"]] == ["yes", "unmatched", "no", "yes"]
