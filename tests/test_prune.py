"""Pruning passes: graph rewiring (exact on dead channels), a CNN trained on digits, the build integration."""

import json
import types

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from conftest import one_json, run_cli

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
    from digits import make_digits_model

    return make_digits_model(tmp_path_factory.mktemp("digits"))


def _accuracy(path, npz):
    d = np.load(npz)
    sess = _session(path)
    pred = np.concatenate([sess.run(None, {"x": d["x"][i:i + 1]})[0].argmax(1) for i in range(len(d["x"]))])
    return float(np.mean(pred == d["labels"]) * 100)


# -- rewiring -------------------------------------------------------------------------
def test_rewiring_is_exact_when_removing_dead_channels(tmp_path):
    from models import prunable_cnn

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
    from models import prunable_cnn

    from edgekit.passes import PrunePass

    model, _ = prunable_cnn(tmp_path / "cnn.onnx", zero=0.25)
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    result = PrunePass(ratio=0.0).run(_ctx(tmp_path), model)
    np.testing.assert_allclose(_session(result.model_path).run(None, x)[0], _session(model).run(None, x)[0], atol=1e-6)
    assert result.section["params_after"] == result.section["params_before"]
