"""Pruning passes: graph rewiring (exact on dead channels), a CNN trained on digits, the build integration."""

import json
import time
import types

import numpy as np
import onnx
import pytest
from harness import one_json, run_cli
from onnx import numpy_helper

pytest.importorskip("sklearn")


def _session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _ctx(workdir, samples=None, calib=None):
    """A pass context outside a build: ``check`` runs the model and records its outputs."""
    checked = []

    def check(step, path):
        sess = _session(path)
        outs = [sess.run(None, s)[0] for s in samples or []]
        checked.append((step, path, outs))
        return {"passed": True}

    return types.SimpleNamespace(workdir=workdir, check=check, log=lambda m: None, calib=calib, checked=checked)


def _inits(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from harness.digits import make_digits_model

    return make_digits_model(tmp_path_factory.mktemp("digits"))


def _accuracy(path, npz):
    d = np.load(npz)
    sess = _session(path)
    pred = np.concatenate([sess.run(None, {"x": d["x"][i : i + 1]})[0].argmax(1) for i in range(len(d["x"]))])
    return float(np.mean(pred == d["labels"]) * 100)


# -- rewiring -------------------------------------------------------------------------
def test_rewiring_is_exact_when_removing_dead_channels(tmp_path):
    from harness.models import prunable_cnn

    from edgekit.passes import PrunePass

    model, dead = prunable_cnn(tmp_path / "cnn.onnx", zero=0.25)
    rng = np.random.default_rng(3)
    samples = [{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(8)]
    ctx = _ctx(tmp_path, samples)
    result = PrunePass(ratio=0.25, channel_multiple=1, bias_correction=False).run(ctx, model)
    onnx.checker.check_model(onnx.load(str(result.model_path)), full_check=True)

    ref = _session(model)
    pruned = _session(result.model_path)
    for s in samples:
        np.testing.assert_allclose(pruned.run(None, s)[0], ref.run(None, s)[0], rtol=1e-5, atol=1e-5)

    w = _inits(result.model_path)
    assert w["stem.w"].shape == (12, 3, 3, 3)
    assert w["expand.w"].shape == (12, 12, 1, 1)
    assert w["dw.w"].shape == (12, 1, 3, 3) and w["dw_bn.scale"].shape == (12,)
    dw = next(n for n in onnx.load(str(result.model_path)).graph.node if n.name == "dw")
    assert onnx.helper.get_attribute_value(dw.attribute[[a.name for a in dw.attribute].index("group")]) == 12
    assert w["branch.w"].shape == (6, 12, 3, 3)
    assert w["project.w"].shape == (12, 18, 1, 1)  # concat: 12 of expand + 6 of branch, offsets kept
    assert w["se_reduce.w"].shape == (6, 12, 1, 1) and w["se_expand.w"].shape == (12, 6, 1, 1)
    assert w["fc.w"].shape == (10, 12)  # GAP -> Flatten -> Gemm: input columns dropped
    assert w["side.w"].shape == (8, 12, 1, 1)  # side conv kept (hard-coded Reshape), its input still pruned
    # the kept channels are exactly the live ones
    live = [c for c in range(16) if c not in dead["residual"]]
    np.testing.assert_array_equal(w["stem.w"], _inits(model)["stem.w"][live])

    sec = result.section
    skipped = {tuple(s["layers"]): s["reason"] for s in sec["skipped"]}
    assert "hard-coded" in skipped[("side",)]
    assert "graph output 'logits'" in skipped[("fc", "side_fc")]  # the logits' Add unites both heads
    groups = {r["name"]: r for r in sec["layers"]}
    assert {groups[n]["group"] for n in ("stem", "project", "se_expand")} == {groups["stem"]["group"]}
    assert sec["params_after"] < sec["params_before"]
    assert sec["macs_after"] < sec["macs_before"]
    assert sec["size_after"]["bytes"] < sec["size_before"]["bytes"]
    assert ctx.checked and ctx.checked[0][0].startswith("structured pruning")


def test_zero_ratio_changes_nothing_but_the_layout(tmp_path):
    from harness.models import prunable_cnn

    from edgekit.passes import PrunePass

    model, _ = prunable_cnn(tmp_path / "cnn.onnx", zero=0.25)
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    result = PrunePass(ratio=0.0).run(_ctx(tmp_path), model)
    np.testing.assert_allclose(_session(result.model_path).run(None, x)[0], _session(model).run(None, x)[0], atol=1e-6)
    assert result.section["params_after"] == result.section["params_before"]


# -- a trained CNN (digits) -------------------------------------------------------------
C1, C3 = 24, 48  # tests/harness/digits.py CHANNELS: conv1 and conv2 share the residual's channels


def _digits_calib(digits):
    from edgekit.data import Dataset

    d = np.load(digits["calib"])
    return Dataset(samples=[{"x": d["x"][i : i + 1]} for i in range(len(d["x"]))], labels=d["labels"], source="digits")


def _interleaved_p50(paths, feed, rounds=7, runs=40):
    sessions = [_session(p) for p in paths]
    for s in sessions:
        for _ in range(5):
            s.run(None, feed)
    p50 = [[] for _ in paths]
    for _ in range(rounds):
        for i, s in enumerate(sessions):
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                s.run(None, feed)
                times.append(time.perf_counter() - t0)
            p50[i].append(np.median(times) * 1000)
    return [float(np.median(p)) for p in p50]


def test_structured_pruning_of_a_trained_cnn(tmp_path, digits):
    from edgekit.passes import PrunePass

    result = PrunePass(ratio=0.3, allocation="uniform").run(
        _ctx(tmp_path, calib=_digits_calib(digits)), digits["model"]
    )
    sec = result.section
    c1, c3 = C1 - int(0.3 * C1), 32  # 48 * 0.7 = 33.6 -> nearest multiple of 8
    rows = {r["name"]: r for r in sec["layers"]}
    assert (rows["conv1"]["channels_after"], rows["conv2"]["channels_after"], rows["conv3"]["channels_after"]) == (
        c1,
        c1,
        c3,
    )
    assert rows["conv1"]["group"] == rows["conv2"]["group"]  # the residual Add unites them
    assert [s["layers"] for s in sec["skipped"]] == [["fc"]]  # feeds the graph output
    # exact counts: 8x8 maps, 3x3 kernels, BN with 4 vectors per channel
    macs = lambda a, b: 64 * 9 * (a + a * a + b * a) + 10 * b  # noqa: E731
    params = lambda a, b: (a * 9 + a) + (a * a * 9 + a) + (b * a * 9 + b) + 4 * (2 * a + b) + (10 * b + 10)  # noqa: E731
    assert sec["macs_before"] == macs(C1, C3) and sec["macs_after"] == macs(c1, c3)
    assert sec["params_before"] == params(C1, C3) and sec["params_after"] == params(c1, c3)
    assert sec["size_after"]["bytes"] < 0.6 * sec["size_before"]["bytes"]
    assert sec["bias_correction"]["applied"] and sec["criterion"] == ["activation"]

    before, after = _accuracy(digits["model"], digits["val"]), _accuracy(result.model_path, digits["val"])
    print(f"digits accuracy {before:.2f}% -> {after:.2f}% at 30 % of channels")  # shown with pytest -rP
    assert before > 90
    assert after > before - 8, (before, after)  # no fine-tuning: a few points are lost, not the model
    val = np.load(digits["val"])
    ref_ms, pruned_ms = _interleaved_p50([digits["model"], result.model_path], {"x": val["x"][:1]})
    print(f"digits p50 {ref_ms:.4f} ms -> {pruned_ms:.4f} ms (reported, not asserted: shared machine)")


def test_bias_correction_and_data_criterion_recover_accuracy(tmp_path, digits):
    from edgekit.passes import PrunePass

    calib = _digits_calib(digits)
    (tmp_path / "a").mkdir()
    plain = PrunePass(ratio=0.3, criterion="l1", bias_correction=False).run(
        _ctx(tmp_path / "a", calib=calib), digits["model"]
    )
    (tmp_path / "b").mkdir()
    best = PrunePass(ratio=0.3).run(_ctx(tmp_path / "b", calib=calib), digits["model"])
    assert _accuracy(best.model_path, digits["val"]) >= _accuracy(plain.model_path, digits["val"])
    assert plain.section["bias_correction"]["applied"] is False


def test_unstructured_reaches_the_target_sparsity(tmp_path, digits):
    from edgekit.passes import PrunePass

    result = PrunePass(mode="unstructured", ratio=0.5).run(_ctx(tmp_path), digits["model"])
    w = _inits(result.model_path)
    for name in ("conv1.weight", "conv2.weight", "conv3.weight", "fc.weight"):
        assert np.sum(w[name] == 0) == int(0.5 * w[name].size), name
    sec = result.section
    assert sec["sparsity"] == pytest.approx(0.5, abs=0.01)
    assert sec["params_after"] == sec["params_before"]
    assert sec["size_after"]["compressed_bytes"] < 0.8 * sec["size_before"]["compressed_bytes"]
    assert _accuracy(result.model_path, digits["val"]) > 50

    (tmp_path / "g").mkdir()
    glob = PrunePass(mode="unstructured", ratio=0.6, scope="global").run(_ctx(tmp_path / "g"), digits["model"])
    assert glob.section["sparsity"] == pytest.approx(0.6, abs=0.002)
    per_layer = {r["name"]: r["sparsity_after"] for r in glob.section["layers"]}
    assert len(set(per_layer.values())) > 1  # one threshold: layers end up with different sparsities


# -- edgekit build --prune ------------------------------------------------------------------
LOOSE_GATE = ["--min-cosine", "0.85", "--min-top1", "0.85", "--max-accuracy-drop", "10"]


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_build_with_prune_end_to_end(tmp_path, digits, backend):
    pytest.importorskip({"ort": "onnxruntime", "openvino": "openvino"}[backend])
    out = tmp_path / "bundle"
    p = run_cli(
        "build",
        digits["model"],
        "--profile",
        "host",
        "--backend",
        backend,
        "--precision",
        "fp32",
        "--prune",
        "0.3",
        "--calib",
        digits["calib"],
        "--val",
        digits["val"],
        *LOOSE_GATE,
        "-o",
        out,
        "--json",
        check=0,
    )
    report = one_json(p.stdout)
    pr = report["pruning"]
    assert pr["mode"] == "structured" and pr["ratio"] == 0.3 and pr["params_after"] < pr["params_before"]
    steps = report["fidelity"]["steps"]
    assert steps[0]["step"] == "structured pruning (30% of channels)" and steps[0]["passed"]
    assert len(steps) >= 2  # the backend's conversion of the pruned model, checked against the original
    last = next(iter(steps[-1]["outputs"].values()))
    assert last["accuracy_reference"] == pytest.approx(_accuracy(digits["model"], digits["val"]), abs=0.01)
    assert last["accuracy_reference"] - 10 < last["accuracy"] < last["accuracy_reference"] + 5
    assert report["model_size_bytes"] < 0.9 * report["source_size_bytes"]
    assert report["host_latency"] is not None  # a pruned fp32 build is timed against the original here
    text = (out / "report.txt").read_text()
    assert "pruning: structured 30%" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 1, 8, 8]


def test_build_api_recipe_and_cache(tmp_path, digits):
    import edgekit

    recipe = tmp_path / "recipe.toml"
    recipe.write_text('mode = "structured"\nratio = 0.3\nskip = ["conv1"]\n\n[layers]\n"conv3" = 0.5\n')
    kwargs = dict(
        precision="fp32", calib=digits["calib"], val=digits["val"], min_cosine=0.85, min_top1=0.85, max_accuracy_drop=10
    )
    rep = edgekit.build(digits["model"], "host", tmp_path / "a", prune_recipe=recipe, **kwargs)
    rows = {r["name"]: r for r in rep["pruning"]["layers"]}
    assert rows["conv3"]["channels_after"] == 24 and rows["conv3"]["ratio"] == 0.5
    assert "conv1" not in rows
    skipped = {tuple(s["layers"]): s["reason"] for s in rep["pruning"]["skipped"]}
    assert skipped[("conv1", "conv2")] == "skipped by the recipe"  # skipping conv1 keeps its whole residual group
    assert rep["cache"]["hit"] is False
    again = edgekit.build(digits["model"], "host", tmp_path / "b", prune_recipe=recipe, **kwargs)
    assert again["cache"]["hit"] is True
    other = edgekit.build(digits["model"], "host", tmp_path / "c", prune=0.2, **kwargs)
    assert other["cache"]["hit"] is False and other["cache"]["key"] != rep["cache"]["key"]
    plain = edgekit.build(digits["model"], "host", tmp_path / "d", **kwargs)
    assert "pruning" not in plain


@pytest.mark.parametrize("ratio", ["1.0", "-0.1", "1.5", "nan"])
def test_bad_ratio_is_refused(tmp_path, digits, ratio):
    out = tmp_path / "out"
    p = run_cli("build", digits["model"], "--profile", "host", f"--prune={ratio}", "-o", out, check=1)
    assert "pruning ratio must be a number in [0, 1)" in p.stderr
    assert not out.exists()


def test_bad_recipes_are_refused(tmp_path, digits):
    out = tmp_path / "out"
    unknown_layer = tmp_path / "layer.toml"
    unknown_layer.write_text('ratio = 0.3\n[layers]\n"conv9" = 0.5\n')
    p = run_cli("build", digits["model"], "--profile", "host", "--prune-recipe", unknown_layer, "-o", out, check=1)
    assert "'conv9' match no Conv/Gemm/MatMul" in p.stderr and "conv1, conv2, conv3, fc" in p.stderr
    bad_key = tmp_path / "key.toml"
    bad_key.write_text("ratio = 0.3\nratios = 0.5\n")
    p = run_cli("build", digits["model"], "--profile", "host", "--prune-recipe", bad_key, "-o", out, check=1)
    assert "unknown key(s) ratios" in p.stderr
    bad_layer_ratio = tmp_path / "lr.toml"
    bad_layer_ratio.write_text('ratio = 0.3\n[layers]\n"conv3" = 1\n')
    p = run_cli("build", digits["model"], "--profile", "host", "--prune-recipe", bad_layer_ratio, "-o", out, check=1)
    assert "ratio of layer 'conv3' must be a number in [0, 1)" in p.stderr
    no_ratio = tmp_path / "none.toml"
    no_ratio.write_text('mode = "unstructured"\n')
    p = run_cli("build", digits["model"], "--profile", "host", "--prune-recipe", no_ratio, "-o", out, check=1)
    assert "pruning needs a ratio" in p.stderr
    assert not out.exists()


def test_fidelity_gate_refuses_heavy_pruning(tmp_path, digits):
    out = tmp_path / "out"
    p = run_cli(
        "build",
        digits["model"],
        "--profile",
        "host",
        "--precision",
        "fp32",
        "--prune",
        "0.7",
        "--calib",
        digits["calib"],
        "--val",
        digits["val"],
        "-o",
        out,
        check=3,
    )
    assert "after step 'structured pruning (70% of channels)'" in p.stderr
    assert not out.exists()


def test_real_model_ppocr_is_pruned_and_still_runs(tmp_path):
    """PP-OCR: weights in Constant nodes, biases built by Reshape, hard-swish, squeeze-excite, a hard-coded Reshape."""
    from harness import PPOCR

    from edgekit.model import load_model
    from edgekit.passes import PrunePass

    src = load_model(PPOCR, {"x": [1, 3, 48, 192]})
    ref = src.save(tmp_path / "ref.onnx")
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32)}
    exact = PrunePass(ratio=0.0).run(_ctx(tmp_path), ref)  # constants folded, nothing removed: same function
    np.testing.assert_allclose(_session(exact.model_path).run(None, x)[0], _session(ref).run(None, x)[0], atol=1e-5)

    (tmp_path / "p").mkdir()
    result = PrunePass(ratio=0.3).run(_ctx(tmp_path / "p"), ref)
    sec = result.section
    assert sec["criterion"] == ["l1"]  # no calibration data
    assert sec["params_after"] < 0.7 * sec["params_before"] and sec["macs_after"] < 0.7 * sec["macs_before"]
    reasons = {tuple(s["layers"]): s["reason"] for s in sec["skipped"]}
    assert "hard-coded sizes [1, 200]" in reasons[("Conv@52",)]
    assert "Softmax" in reasons[("MatMul@0",)]
    se = {r["name"]: r for r in sec["layers"]}
    assert se["Conv@4"]["group"] == se["Conv@1"]["group"]  # the excitation conv shares the gated tensor's channels
    out = _session(result.model_path).run(None, x)[0]
    assert out.shape == (1, 2) and np.all(np.isfinite(out))


def test_sensitivity_allocation_spares_fragile_groups(tmp_path, textlines):
    """PP-OCR at 30 %: the same channel budget taken where the outputs care least keeps the classifier working."""
    from harness import PPOCR

    from edgekit.data import Dataset
    from edgekit.model import load_model
    from edgekit.passes import PrunePass

    d = np.load(textlines)
    calib = Dataset(samples=[{"x": d["x"][i : i + 1]} for i in range(100)])
    ref = load_model(PPOCR, {"x": [1, 3, 48, 192]}).save(tmp_path / "ref.onnx")

    def accuracy(path):
        sess = _session(path)
        pred = [sess.run(None, {"x": d["x"][i : i + 1]})[0].argmax() for i in range(100, len(d["x"]))]
        return float(np.mean(np.array(pred) == d["labels"][100:]) * 100)

    runs = {}
    for allocation in ("uniform", "sensitivity"):
        (tmp_path / allocation).mkdir()
        runs[allocation] = PrunePass(ratio=0.3, allocation=allocation).run(
            _ctx(tmp_path / allocation, calib=calib), ref
        )
    sens, uni = runs["sensitivity"].section, runs["uniform"].section
    assert sens["allocation"] == "sensitivity" and uni["allocation"] == "uniform"
    assert sens["channels_removed"] >= 0.8 * uni["channels_removed"]
    ratios = {r["ratio"] for r in sens["layers"]}
    assert len(ratios) > 3 and max(ratios) <= 0.6  # uneven, and capped at 2x the ratio
    trunk = next(r for r in sens["layers"] if r["name"] == "Conv@16")  # residual trunk shared by five blocks
    assert trunk["ratio"] < 0.3
    reference, sensitive, uniform = (
        accuracy(ref),
        accuracy(runs["sensitivity"].model_path),
        accuracy(runs["uniform"].model_path),
    )
    assert sensitive > uniform + 10, (reference, sensitive, uniform)
    assert sensitive > reference - 10, (reference, sensitive, uniform)


def test_weights_listed_as_graph_inputs_are_pruned_too(tmp_path):
    """Older exporters list every initializer among the graph inputs: they are weights all the same."""
    from harness.models import prunable_cnn

    from edgekit.passes import PrunePass

    path, _ = prunable_cnn(tmp_path / "cnn.onnx", zero=0.25)
    m = onnx.load(str(path))
    m.graph.input.extend(
        onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in m.graph.initializer
    )
    onnx.save(m, str(tmp_path / "old.onnx"))
    result = PrunePass(ratio=0.25, channel_multiple=1, bias_correction=False).run(_ctx(tmp_path), tmp_path / "old.onnx")
    assert [i.name for i in onnx.load(str(result.model_path)).graph.input] == ["x"]
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    np.testing.assert_allclose(_session(result.model_path).run(None, x)[0], _session(path).run(None, x)[0], atol=1e-5)
    assert result.section["params_after"] < result.section["params_before"]


def test_build_unstructured_through_the_cli(tmp_path, digits):
    out = tmp_path / "bundle"
    p = run_cli(
        "build",
        digits["model"],
        "--profile",
        "host",
        "--precision",
        "fp32",
        "--prune",
        "0.3",
        "--prune-mode",
        "unstructured",
        "--calib",
        digits["calib"],
        "--val",
        digits["val"],
        *LOOSE_GATE,
        "-o",
        out,
        "--json",
        check=0,
    )
    pr = one_json(p.stdout)["pruning"]
    assert pr["mode"] == "unstructured" and pr["sparsity"] == pytest.approx(0.3, abs=0.01)
    assert pr["size_after"]["compressed_bytes"] < pr["size_before"]["compressed_bytes"]
    w = _inits(out / "model.onnx")
    assert np.mean(w["conv3.weight"] == 0) == pytest.approx(0.3, abs=0.01)
    assert "pruning: unstructured 30% (layer): weight sparsity" in (out / "report.txt").read_text()


def test_concat_with_fixed_channels_and_matmul_chains(tmp_path):
    """Concat with channels that cannot be removed (offsets around them) and MatMul + Add-bias chains."""
    from onnx import TensorProto, helper

    from edgekit.passes import PrunePass

    rng = np.random.default_rng(5)
    arrays = {
        "wa": rng.standard_normal((8, 3, 3, 3)),
        "wd": rng.standard_normal((3, 1, 3, 3)),
        "wp": rng.standard_normal((6, 11, 1, 1)),
        "w1": rng.standard_normal((6, 10)),
        "b1": rng.standard_normal(10),
        "w2": rng.standard_normal((10, 4)),
    }
    arrays["wa"][[1, 6]] = 0  # group A (8): 2 dead channels
    arrays["wp"][[3]] = 0  # group P (6): 1 dead channel
    arrays["w1"][:, [0, 7]] = 0  # MatMul group (10): 2 dead features, bias too
    arrays["b1"][[0, 7]] = 0
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wd"], ["u"], name="dw_input", pads=[1, 1, 1, 1], group=3),
        helper.make_node("Concat", ["a", "u"], ["c"], name="cat", axis=1),
        helper.make_node("Conv", ["c", "wp"], ["p"], name="conv_p"),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "chains",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "chains.onnx"))

    result = PrunePass(ratio=0.25, channel_multiple=1, bias_correction=False).run(
        _ctx(tmp_path), tmp_path / "chains.onnx"
    )
    w = _inits(result.model_path)
    assert w["wa"].shape == (6, 3, 3, 3) and w["wd"].shape == (3, 1, 3, 3)
    assert w["wp"].shape == (5, 9, 1, 1)  # 6 kept of conv_a, then the 3 fixed depthwise channels
    np.testing.assert_array_equal(w["wp"][:, 6:], arrays["wp"][[0, 1, 2, 4, 5]][:, 8:].astype(np.float32))
    assert w["w1"].shape == (5, 8) and w["b1"].shape == (8,) and w["w2"].shape == (8, 4)
    x = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(
        _session(result.model_path).run(None, x)[0],
        _session(tmp_path / "chains.onnx").run(None, x)[0],
        rtol=1e-5,
        atol=1e-4,
    )
    assert [s["layers"] for s in result.section["skipped"]] == [["mm2"]]


@pytest.mark.slow
def test_mobilenetv2_gets_faster(tmp_path):
    """Half the channels of MobileNetV2 (random weights): MACs and latency both drop (loose ratio, many runs)."""
    from make_mobilenetv2 import make_mobilenetv2, random_inputs

    from edgekit.model import load_model
    from edgekit.passes import PrunePass

    make_mobilenetv2(tmp_path / "mnv2.onnx")
    ref = load_model(tmp_path / "mnv2.onnx").save(tmp_path / "ref.onnx")
    result = PrunePass(ratio=0.5).run(_ctx(tmp_path), ref)
    sec = result.section
    assert sec["macs_after"] < 0.35 * sec["macs_before"] and sec["params_after"] < 0.4 * sec["params_before"]
    assert [s["layers"] for s in sec["skipped"]] == [["classifier"]]
    ref_ms, pruned_ms = _interleaved_p50([ref, result.model_path], {"input": random_inputs(1, 7)}, rounds=7, runs=15)
    print(f"MobileNetV2 p50 {ref_ms:.3f} ms -> {pruned_ms:.3f} ms at 50 % of channels")
    assert pruned_ms < 0.8 * ref_ms, (ref_ms, pruned_ms)  # ~2.5x expected; a loose bound for a shared machine
