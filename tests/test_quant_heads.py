"""Quantization that knows heads and ranges, on small hand-made graphs (fast; real models in test_tasks_build.py).

- the decoder tail of a YOLOv8-style head is found from the outputs back to the last learned layers, the
  distribution-focal integral (a Conv over a Softmax) included;
- FP16: the nodes whose constants or values leave float16's range are found on the data and kept in float32, and
  the converted model then computes what the FP32 one does (it does not without the block list).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.converters import fp16_range as fr
from edgekit.converters.heads import find_tail, wants_float_tail
from edgekit.execution import reference_outputs


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _yolo_head():
    """features -> box conv -> DFL (softmax + fixed conv) -> decode; cls conv -> sigmoid; concat [boxes, scores]."""
    f = helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8, 4, 4])
    out = helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 16])
    rng = np.random.default_rng(0)
    inits = [
        _const("w_box", rng.standard_normal((16, 8, 1, 1))),
        _const("w_cls", rng.standard_normal((2, 8, 1, 1))),
        _const("w_dfl", np.arange(4).reshape(1, 4, 1, 1)),
        numpy_helper.from_array(np.array([1, 4, 4, 16], np.int64), "s_dfl"),
        numpy_helper.from_array(np.array([1, 4, 16], np.int64), "s_box"),
        numpy_helper.from_array(np.array([1, 2, 16], np.int64), "s_cls"),
        _const("stride", 8.0),
        numpy_helper.from_array(np.array(2, np.int64), "i2"),
    ]
    nodes = [
        helper.make_node("Relu", ["features"], ["act"], name="backbone_act"),
        helper.make_node("Conv", ["act", "w_box"], ["box_logits"], name="box_conv"),
        helper.make_node("Conv", ["act", "w_cls"], ["cls_logits"], name="cls_conv"),
        helper.make_node("Reshape", ["box_logits", "s_dfl"], ["dfl_in"], name="dfl_reshape"),
        helper.make_node("Softmax", ["dfl_in"], ["dfl_p"], name="dfl_softmax", axis=1),
        helper.make_node("Conv", ["dfl_p", "w_dfl"], ["dfl_out"], name="dfl_conv"),
        helper.make_node("Reshape", ["dfl_out", "s_box"], ["dist"], name="box_reshape"),
        helper.make_node("Mul", ["dist", "stride"], ["scaled"], name="box_scale"),
        # a grid size from the input's shape (constant once shapes are fixed): not part of the tail
        helper.make_node("Shape", ["features"], ["shape"], name="grid_shape"),
        helper.make_node("Gather", ["shape", "i2"], ["side"], name="grid_side", axis=0),
        helper.make_node("Cast", ["side"], ["side_f"], name="grid_cast", to=TensorProto.FLOAT),
        helper.make_node("Div", ["scaled", "side_f"], ["boxes"], name="box_norm"),
        helper.make_node("Reshape", ["cls_logits", "s_cls"], ["cls_flat"], name="cls_reshape"),
        helper.make_node("Sigmoid", ["cls_flat"], ["scores"], name="cls_sigmoid"),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], name="concat_out", axis=1),
    ]
    return _model(nodes, [f], [out], inits)


def test_the_decoder_tail_of_a_yolo_head_is_found_up_to_the_learned_layers():
    tail = find_tail(_yolo_head().graph)
    assert set(tail.nodes) == {
        "dfl_reshape",
        "dfl_softmax",
        "dfl_conv",  # the distribution-focal integral: a fixed 0..reg_max weight over a softmax
        "box_reshape",
        "box_scale",
        "box_norm",
        "cls_reshape",
        "cls_sigmoid",
        "concat_out",
    }
    assert tail.boundary == ("box_conv", "cls_conv") and "backbone_act" not in tail.nodes
    assert wants_float_tail("detection") and wants_float_tail("segmentation") and not wants_float_tail("ctc")


def _overflowing():
    """x (|x| <= 1) * 300 * 300 reaches 9e4 (beyond 65504), divided by a Constant 1e5 (the converter clamps at 1e4);
    a BatchNormalization whose running variance (1e8, a Constant node as exporters write it) is beyond float16."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 4, 4])

    def constant(name, value):
        return helper.make_node("Constant", [], [name], value=_const(name, value))

    nodes = [
        constant("k300", 300.0),
        constant("k1e5", 1e5),
        helper.make_node("Mul", ["x", "k300"], ["a"], name="mul_a"),
        helper.make_node("Mul", ["a", "k300"], ["b"], name="mul_b"),
        helper.make_node("Div", ["b", "k1e5"], ["y"], name="div"),
        constant("bn_scale", [1.0, 1.0]),
        constant("bn_bias", [0.0, 0.0]),
        constant("bn_mean", [0.0, 0.0]),
        constant("bn_var", [1e8, 4e8]),
        helper.make_node("Mul", ["x", "k300"], ["big"], name="mul_big"),
        helper.make_node("Mul", ["big", "k300"], ["bigger"], name="mul_bigger"),
        helper.make_node("BatchNormalization", ["bigger", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["z"], "bn"),
    ]
    return _model(nodes, [x], [y, z])


def _fp16(model, blocked, tmp_path):
    """ONNX Runtime's fp16 conversion (the backend's own) with ``blocked`` kept in float32."""
    from edgekit.converters.ort import BACKEND

    path = BACKEND._fp16(fr.prepare(model, blocked), tmp_path / f"m{len(blocked)}.onnx", [b.node for b in blocked])
    return onnx.load(str(path))


def test_fp16_keeps_the_nodes_whose_values_leave_its_range_in_float32(tmp_path):
    pytest.importorskip("onnxconverter_common")
    model = fr.name_nodes(_overflowing())
    samples = [{"x": np.random.default_rng(k).uniform(-1, 1, (1, 2, 4, 4)).astype(np.float32)} for k in range(3)]
    found = fr.scan(model, samples)
    assert found.error is None and found.samples == 3 and found.absmax["b"] > 65504
    blocked = fr.block_list(model, found)
    by_node = {b.node: b.reason for b in blocked}
    # the producer and the consumer of the overflowing tensor; the Div also for its constant; the BN for its variance
    assert set(by_node) == {"mul_b", "div", "mul_bigger", "bn"}
    assert by_node["mul_b"].startswith("overflow fp16: max |x| = ") and " at b" in by_node["mul_b"]
    assert "bn_var" in by_node["bn"] and "beyond fp16" in by_node["bn"]
    assert fr.summary(blocked).startswith("4 node(s) kept float32: ")

    reference = reference_outputs(model.SerializeToString(), samples)
    kept = reference_outputs(_fp16(model, blocked, tmp_path).SerializeToString(), samples)
    plain = reference_outputs(_fp16(model, [], tmp_path).SerializeToString(), samples)
    for r, k, p in zip(reference, kept, plain):
        for name in ("y", "z"):
            assert np.allclose(k[name], r[name], rtol=2e-3, atol=1e-3), name
        # without the block list: inf where 9e4 overflows, and a variance clamped to 1e4 scales z by 100-200x
        assert not np.all(np.isfinite(p["y"])) or not np.allclose(p["y"], r["y"], rtol=0.05)
        assert np.abs(p["z"]).max() > 50 * np.abs(r["z"]).max()


def test_fp16_headroom_widens_the_block_list_and_nothing_is_blocked_in_range():
    model = fr.name_nodes(_overflowing())
    found = fr.Scan(absmax={"a": 300.0, "b": 20000.0}, constants={}, samples=1)
    assert fr.block_list(model, found, 1.0) == []
    wide = fr.block_list(model, found, 4.0)
    assert [b.node for b in wide] == ["mul_b", "div"] and "(within 4x of 65504)" in wide[0].reason
    tiny = fr.Scan(absmax={"a": 1e-9}, samples=1)
    assert "every value flushes to 0" in fr.block_list(model, tiny)[0].reason
