"""edgekit.converters.onnx_specialise on tiny hand-made graphs: an If on a constant input is replaced by the branch it
takes, nested Ifs and shape-dependent Ifs are folded, output names are kept, and the values match ONNX Runtime's run
of the original graph fed the constant."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.converters.onnx_specialise import specialise


def _branch(name: str, op: str, k: float) -> onnx.GraphProto:
    const = helper.make_node("Constant", [], [f"{name}_k"], value=numpy_helper.from_array(np.array(k, np.float32)))
    node = helper.make_node(op, ["x", f"{name}_k"], [f"{name}_y"])
    return helper.make_graph(
        [const, node], name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 4])]
    )


def _model(nested: bool = False) -> onnx.ModelProto:
    """y = x * 2 if sr == 16000 else x + 3; with ``nested``, the then-branch holds If(Shape(x)[1] == 4)."""
    then = _branch("then", "Mul", 2.0)
    if nested:
        inner_then, inner_else = _branch("inner_then", "Mul", 5.0), _branch("inner_else", "Sub", 1.0)
        then = helper.make_graph(
            [
                helper.make_node("Shape", ["x"], ["dims"]),
                helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.int64))),
                helper.make_node("Gather", ["dims", "one"], ["n"]),
                helper.make_node("Constant", [], ["four"], value=numpy_helper.from_array(np.array(4, np.int64))),
                helper.make_node("Equal", ["n", "four"], ["is4"]),
                helper.make_node("If", ["is4"], ["then_y"], then_branch=inner_then, else_branch=inner_else),
            ],
            "then",
            [],
            [helper.make_tensor_value_info("then_y", TensorProto.FLOAT, [1, 4])],
        )
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["rate"], value=numpy_helper.from_array(np.array(16000, np.int64))),
            helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
            helper.make_node(
                "If", ["is16k"], ["y"], name="If_0", then_branch=then, else_branch=_branch("else", "Add", 3.0)
            ),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["y"], feeds)[0]


@pytest.mark.parametrize("sr,branch", [(16000, "then"), (8000, "else")])
def test_an_if_on_a_fixed_input_becomes_the_branch_it_takes(sr, branch):
    model = _model()
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    got = specialise(model, {"sr": np.array(sr, np.int64)})
    onnx.checker.check_model(got.model, full_check=True)
    assert got.inlined == {"If_0": branch}
    assert [i.name for i in got.model.graph.input] == ["x"]
    assert [o.name for o in got.model.graph.output] == ["y"]
    assert not [n for n in got.model.graph.node if n.op_type in ("If", "Equal")]
    assert f"sr fixed to {sr}: If_0 folded to its {branch}-branch" in got.notes()[0]
    assert np.array_equal(_run(got.model, {"x": x}), _run(model, {"x": x, "sr": np.array(sr, np.int64)}))
    assert [i.name for i in model.graph.input] == ["x", "sr"]  # the given model is left as it was


def test_a_nested_if_on_a_static_shape_is_folded_too():
    model = _model(nested=True)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    got = specialise(model, {"sr": np.array(16000, np.int64)})
    assert len(got.inlined) == 2 and set(got.inlined.values()) == {"then"}  # If_0, then the If on Shape(x)[1]
    assert not [n for n in got.model.graph.node if n.op_type == "If"]
    assert got.notes() == ["sr fixed to 16000: If_0 folded to its then-branch; 1 If node inside it folded too"]
    assert np.array_equal(_run(got.model, {"x": x}), x * 5)


def test_an_input_that_reaches_no_if_changes_no_control_flow():
    got = specialise(_model(), {"x": np.ones((1, 4), np.float32)})
    assert not got.changed_control_flow


def test_fixing_an_unknown_input_is_refused():
    with pytest.raises(ValueError, match="not inputs of the model"):
        specialise(_model(), {"rate": np.array(1)})


def test_the_agent_takes_a_fixed_input_left_out_or_at_its_value_and_refuses_another():
    from edgekit_agent.runners.base import Runner, RunnerError

    manifest = {
        "model": "m.onnx",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 4]}],
        "fixed_inputs": [{"name": "sr", "dtype": "int64", "shape": [], "value": 16000}],
    }
    runner = Runner("/nowhere", manifest)
    x = np.zeros((1, 4), np.float32)
    assert list(runner.drop_fixed({"x": x})) == ["x"]
    assert list(runner.drop_fixed({"x": x, "sr": np.array(16000, np.int64)})) == ["x"]
    runner.check_feeds(runner.drop_fixed({"x": x, "sr": np.array(16000, np.int64)}))
    for wrong in (np.array(8000, np.int64), np.array([16000], np.int64)):
        with pytest.raises(RunnerError, match="'sr' was fixed to 16000.*--input-value sr=VALUE") as e:
            runner.drop_fixed({"x": x, "sr": wrong})
        assert e.value.status == 400
    plain = Runner("/nowhere", {"model": "m.onnx", "inputs": manifest["inputs"]})
    feeds = {"x": x, "sr": np.array(16000, np.int64)}
    assert plain.drop_fixed(feeds) is feeds  # a bundle without fixed inputs: check_feeds names the unknown input


def test_control_flow_advice_tells_an_input_switch_from_a_condition_computed_from_the_data():
    from edgekit.converters.onnx_specialise import control_flow_advice

    switched = control_flow_advice(_model(), "X2Paddle 1.6.0")
    assert switched is not None
    assert "cannot convert the If node 'If_0'" in switched and "the input(s) sr" in switched
    assert "--input-value" in switched
    computed = _model()
    g = computed.graph
    g.node[1].CopyFrom(helper.make_node("Sigmoid", ["x"], ["score"]))  # If(score >= 0.5): a detector's decision
    g.node.insert(2, helper.make_node("ReduceMax", ["score"], ["best"], keepdims=0))
    g.node.insert(3, helper.make_node("Greater", ["best", "rate_f"], ["is16k"]))
    g.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "rate_f"))
    advice = control_flow_advice(computed, "MindSpore Lite 2.0.0")
    assert advice is not None and "computed from the data at run time" in advice
    assert "--input-value" not in advice and "choose ort or openvino" in advice
    no_flow = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [], []))
    assert control_flow_advice(no_flow, "X") is None
