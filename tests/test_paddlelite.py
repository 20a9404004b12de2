"""Paddle Lite through the CLI: x2paddle + opt in the paddlelite tool environment (created once, reused),
the host .nb validated and deployed locally under the env's Python, the ARM .nb marked cross-target and refused
by the device's own fidelity check when run on this x86 machine."""

import json
import platform

import numpy as np
import pytest
from harness import PPOCR, run_cli

from edgekit import toolenvs
from edgekit.converters import get

X86 = platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not X86, reason="the cross-target checks below assume an x86_64 host")
BE = get("paddlelite")
OUT = "save_infer_model/scale_0.tmp_1"


@pytest.fixture(scope="module")
def env_python():
    if toolenvs.state(BE.toolenv).get("interpreter_missing"):
        pytest.skip("no Python 3.10 on this machine for the paddlelite tool environment")
    return toolenvs.ensure(BE.toolenv, log=print)  # the first run creates it (~1-2 min); later runs reuse it


@pytest.fixture(scope="module")
def mnv2(tmp_path_factory):
    from make_mobilenetv2 import make_mobilenetv2

    path = tmp_path_factory.mktemp("models") / "mobilenetv2.onnx"
    make_mobilenetv2(path)
    return path


def _build(*args, check=0):
    p = run_cli("build", *args, "--backend", "paddlelite", "--json", check=check)
    return json.loads(p.stdout) if check == 0 else p


def _deploy(bundle, root, check=0):
    return run_cli("deploy", bundle, "--local", "--device-root", root, "--runs", "20", "--json", check=check)


@pytest.fixture(scope="module")
def ppocr_host(env_python, tmp_path_factory, textlines):
    out = tmp_path_factory.mktemp("bundles") / "ppocr-host"
    return out, _build(PPOCR, "--profile", "host", "--val", textlines, "--input-shape", "x=1,3,48,192", "-o", out)


def test_host_build_is_validated_on_real_lines(ppocr_host):
    out, r = ppocr_host
    assert r["backend"] == "paddlelite" and r["format"] == "nb" and r["precision"] == "fp32"
    step = r["fidelity"]["steps"][0]
    assert "x86 .nb on this host" in step["step"] and r["fidelity"]["passed"]
    assert step["outputs"][OUT]["cosine_mean"] > 0.99999 and step["outputs"][OUT]["top1_agreement"] == 1.0
    assert r["fidelity"]["data"]["samples"] == 200
    sec = r["paddlelite"]
    assert sec["target"] == "x86" and sec["validated"].startswith("yes") and sec["built_targets"] == ["x86"]
    assert (
        "conv2d" in sec["model_ops"] and "x2paddle" in sec["converter"] and "usage report disabled" in sec["converter"]
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runner"]["target"] == "x86" and manifest["runner"]["inputs"] == {"x": "x2paddle_x"}
    roles = {f["role"] for f in manifest["files"]}
    assert {"model", "tailored_ops", "tailored_kernels", "expected_outputs"} <= roles
    assert "conv2d" in (out / "paddlelite_tailored_ops.txt").read_text().split()


def test_host_build_deploys_locally_under_the_env_python(agent_roots, ppocr_host, env_python, tmp_path):
    out, _ = ppocr_host
    root = agent_roots("device", python=env_python)
    b = json.loads(_deploy(out, root).stdout)
    assert b["backend"] == "paddlelite" and b["runtime"] == "paddlelite" and b["accelerator"] == "X86 CPU"
    assert b["device"]["python"].startswith("3.10")  # the tool environment's interpreter, not the host's
    assert b["device_fidelity"]["passed"] and b["latency_ms"]["p50"] > 0 and b["runs"] == 20


def test_arm_build_is_marked_cross_target(ppocr_host, tmp_path):
    out = tmp_path / "ppocr-pi5"
    r = _build(PPOCR, "--profile", "raspberrypi5", "--input-shape", "x=1,3,48,192", "-o", out)
    sec = r["paddlelite"]
    assert sec["target"] == "arm" and sorted(sec["built_targets"]) == ["arm", "x86"]
    assert sec["validated"].startswith("no (cross-target: arm .nb cannot run on this x86 host")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runner"]["validated"] == sec["validated"] and manifest["runner"]["target"] == "arm"
    assert "x86 .nb on this host" in r["fidelity"]["steps"][0]["step"]
    assert any("was not run here" in w for w in r["warnings"])
    # the ARM .nb differs from the x86 one; what the device compares with comes from the validated x86 build
    assert (out / "model.nb").read_bytes() != (ppocr_host[0] / "model.nb").read_bytes()
    with np.load(out / "expected_outputs.npz") as z:
        assert np.all(np.isfinite(z[OUT])) and abs(float(z[OUT].sum()) - 1.0) < 1e-4


def test_arm_nb_on_this_x86_machine_is_refused_at_install(agent_roots, env_python, mnv2, tmp_path):
    out = tmp_path / "mnv2-pi5"
    _build(mnv2, "--profile", "raspberrypi5", "--input-shape", "input=1,3,224,224", "-o", out)
    root = agent_roots("device", python=env_python)
    p = _deploy(out, root, check=5)
    # the ARM kernels return garbage here: the device's comparison with the build machine's outputs refuses it
    assert "outputs differ from the reference outputs" in p.stderr and "not installed" in p.stderr, p.stderr


def test_fp16_and_int8_are_refused_with_the_reason(env_python, tmp_path, tiny_model):
    for precision, why in (("fp16", "only on ARM CPUs"), ("int8", "NaN or garbage")):
        p = _build(
            tiny_model, "--profile", "raspberrypi5", "--precision", precision, "-o", tmp_path / precision, check=1
        )
        assert f"paddlelite {precision} refused" in p.stderr and why in p.stderr, p.stderr
        assert not (tmp_path / precision).exists()


def test_availability_reports_the_environment(env_python):
    ok, detail = BE.availability()
    assert ok and "tool environment ready" in detail and "Python 3.10" in detail


def test_selective_build_lists_come_out_under_paddle_lite_names(ppocr_host, tmp_path):
    bundle, _ = ppocr_host
    out = tmp_path / "minimal"
    run_cli("explain", bundle, "--selective-build", out, check=0)
    ops = (out / "paddlelite" / ".tailored_ops_list").read_text()
    assert "conv2d" in ops
    assert (out / "paddlelite" / ".tailored_kernels_list").is_file()


def test_host_workers_end_after_predict_runner_and_timing(ppocr_host, tmp_path):
    """Each host-side use of the runtime (a worker process with the model loaded) ends when its use ends: predict,
    a timing runner once closed, a model that fails to load, and the build's host timing."""
    import shutil

    from test_toolenvs import children

    from edgekit.errors import ConversionError
    from edgekit.host_timing import time_on_host as _time_on_host

    out, _ = ppocr_host
    with np.load(out / "sample_inputs.npz") as z:
        feed = {k: z[k] for k in z.files}
    before = children()
    got = BE.predict(out / "model.nb", [feed])[0][OUT]
    assert children() == before
    run = BE.runner(out / "model.nb")
    assert len(children() - before) == 1
    assert np.array_equal(run(feed)[OUT], got)
    run.close()
    assert children() == before
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(out / "manifest.json", bad)
    (bad / "model.nb").write_bytes(b"not a paddle lite model")
    with pytest.raises(ConversionError, match="in the tool environment failed"):
        BE.predict(bad / "model.nb", [feed])
    assert children() == before
    # an ONNX reference this process did not build (as for the unpruned model of a pruned build) is converted and
    # timed in Paddle Lite too, not in onnxruntime
    from edgekit.model import load_model

    ref = load_model(PPOCR, {"x": [1, 3, 48, 192]}).save(tmp_path / "reference.onnx")
    hl = _time_on_host(BE, ref, out / "model.nb", feed, 1, rounds=1, runs=3)
    assert hl["runtimes"] == {"reference": "paddlelite", "built": "paddlelite"}
    assert children() == before


def test_runner_feeds_every_input_exactly(ppocr_host, textlines):
    """The runner's input copy (a memoryview into set_float_data) gives what onnxruntime computes, sample by sample
    (a copy that lagged or read a stale buffer would repeat or mix outputs)."""
    from edgekit.converters.toolworker import onnx_predict
    from edgekit.model import load_model

    out, _ = ppocr_host
    with np.load(textlines) as z:
        xs = [{"x": z["x"][i : i + 1]} for i in range(12)]
    ref = load_model(PPOCR, {"x": [1, 3, 48, 192]}).save(out.parent / "ppocr-ref.onnx")
    want = [o[OUT] for o in onnx_predict(ref, xs)[2]]
    got = [o[OUT] for o in BE.predict(out / "model.nb", xs)]
    assert max(float(np.abs(g - w).max()) for g, w in zip(got, want)) < 1e-4
    assert len({g.tobytes() for g in got}) == len(got)


def test_device_commands_reach_the_backend_agent(agent_roots, ppocr_host, env_python, tmp_path):
    """deploy --local of a paddlelite bundle runs its agent in <root>-paddlelite: models, rollback and agent reach
    it with --backend, and models without it says where it is."""
    out, _ = ppocr_host
    env = {"EDGEKIT_DEVICE_ROOT": str(tmp_path / "device")}
    agent_root = agent_roots("device-paddlelite", python=env_python)
    try:
        run_cli("deploy", out, "--local", "--runs", "5", "--json", env=env, check=0)
        plain = run_cli("models", "--local", env=env, check=0)
        assert f"also: paddlelite agent in {agent_root}: pass --backend paddlelite" in plain.stdout, plain.stdout
        listed = json.loads(run_cli("models", "--local", "--backend", "paddlelite", "--json", env=env, check=0).stdout)
        assert [m["backend"] for m in listed["models"]] == ["paddlelite"] and "other_agents" not in listed
        name = listed["models"][0]["name"]
        r = run_cli("rollback", name, "--local", "--backend", "paddlelite", env=env)
        assert "has no earlier version kept" in r.stderr, r.stderr  # the agent that has the model answered
        st = json.loads(
            run_cli("agent", "status", "--local", "--backend", "paddlelite", "--json", env=env, check=0).stdout
        )
        assert st["running"] and st["root"] == str(agent_root)
    finally:
        run_cli("agent", "stop", "--local", env=env)


def test_x2paddle_failures_on_an_lstm_or_an_if_name_the_node_and_what_to_do(tmp_path):
    """X2Paddle's own traceback on an LSTM it cannot map (one that runs several steps) or on an If is a
    ConversionError naming the node: no traceback reaches the user."""
    import onnx
    from onnx import TensorProto, helper

    from edgekit.converters.paddlelite.backend import x2paddle_limitation

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 4])
    lstm = helper.make_node("LSTM", ["x", "W", "R"], ["y", "yh"], name="rnn", hidden_size=3)
    path = tmp_path / "lstm.onnx"
    onnx.save(helper.make_model(helper.make_graph([lstm], "g", [x], [])), str(path))
    said = (
        "Traceback ...\nAssertionError: Couldn't find x2paddle_y_p1 in previous layers, the layers should be make by "
    )
    e = x2paddle_limitation(path, said + "topological sort")
    assert e is not None and "LSTM node 'rnn'" in str(e) and "another backend" in str(e)
    assert "Traceback" not in str(e)
    assert x2paddle_limitation(path, "some other failure") is None  # the converter's own message then stands


def test_an_op_x2paddle_cannot_map_is_named_with_its_nodes(env_python, tmp_path):
    """x2paddle prints the op types it lacks to stdout and raises "Model is not supported yet."; the build's error
    names them and a node of each instead."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Celu", ["r"], ["y"], name="celu_0")],
        "celu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    src = tmp_path / "celu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7), str(src))
    p = _build(src, "--profile", "host", "-o", tmp_path / "out", check=1)
    assert "failed (exit 1): x2paddle 1.6.0 has no mapping for the ONNX op(s) Celu (1 node(s), e.g. 'celu_0')" in (
        p.stderr
    ), p.stderr
    assert not (tmp_path / "out").exists()
