"""TensorFlow in: SavedModel directories and Keras files (docs/INTAKE.md). The models are Keras applications built
from their code with fixed random weights, saved inside the tensorflow tool environment (the host has no
TensorFlow); the environment is created on first use and kept between runs (``.cache/tests/keep/toolenvs``)."""

import hashlib
import os
import shutil
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
from harness.isolation import kept

import edgekit
from edgekit import intake_tf
from edgekit.errors import BackendUnavailable, ConversionError, ModelError
from edgekit.report import schema

MAKE = r"""
import sys, numpy as np, tensorflow as tf
out = sys.argv[1]
tf.keras.utils.set_random_seed(0)
m = tf.keras.applications.MobileNetV3Small(
    input_shape=(96, 96, 3), alpha=0.75, minimalistic=True, weights=None, classes=10, classifier_activation=None
)
tf.saved_model.save(m, out + "/saved_model")
m.save(out + "/mnv3.keras")

class Odd(tf.keras.layers.Layer):
    def call(self, x):
        return tf.math.igamma(tf.abs(x) + 1.0, tf.abs(x) + 0.5)

x = tf.keras.Input((8,), name="x")
odd = tf.keras.Model(x, Odd(name="odd_layer")(tf.keras.layers.Dense(8, name="fc")(x)))
tf.saved_model.save(odd, out + "/odd_saved_model")
odd.save(out + "/custom.keras")
"""


@pytest.fixture(scope="module")
def tf_models():
    """The models, made once in the tool environment and kept between runs (minutes to make on 2 cores)."""
    from edgekit import toolenvs

    if toolenvs.state(intake_tf.TOOLENV).get("interpreter_missing"):
        pytest.skip("no Python 3.11 or 3.10 on this machine for the tensorflow tool environment")
    py = toolenvs.ensure(intake_tf.TOOLENV)
    key = hashlib.sha256((MAKE + intake_tf.TOOLENV.digest()).encode()).hexdigest()[:12]
    d = kept(f"tf-models-{key}")
    if not (d / "done").is_file():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        script = d / "make.py"
        script.write_text(MAKE)
        env = dict(os.environ, **dict(intake_tf.TOOLENV.env))
        subprocess.run([py, "-I", str(script), str(d)], check=True, env=env, timeout=1800)
        rng = np.random.default_rng(0)
        np.savez(d / "calib.npz", input_1=rng.random((16, 1, 96, 96, 3), dtype=np.float32))
        (d / "done").write_text("")
    return d


# -- host logic (no TensorFlow) ----------------------------------------------------------------------------------


def test_detection(tmp_path):
    sm = tmp_path / "sm"
    sm.mkdir()
    assert intake_tf.kind_of(sm) is None  # a directory without saved_model.pb
    (sm / "saved_model.pb").write_bytes(b"")
    assert intake_tf.kind_of(sm) == "SavedModel" and intake_tf.kind_of(str(sm)) == "SavedModel"
    assert intake_tf.kind_of("m.keras") == "Keras" and intake_tf.kind_of("m.h5") == "Keras H5"
    assert intake_tf.kind_of("m.onnx") is None and intake_tf.kind_of(object()) is None


def test_shapes_from_the_signature_and_declared():
    sig = [{"name": "x", "shape": [-1, 96, 96, 3], "dtype": "float32"}]
    assert intake_tf.fixed_shapes(sig, None, keep_ranges=False) == {"x": [1, 96, 96, 3]}  # a dynamic batch is 1
    free = [{"name": "x", "shape": [-1, -1, -1, 3], "dtype": "float32"}]
    with pytest.raises(ModelError, match=r"dynamic dimensions.*--input-shape x=D1,D2"):
        intake_tf.fixed_shapes(free, None, keep_ranges=True)
    assert intake_tf.fixed_shapes(free, {"x": [1, 64, 64, 3]}, keep_ranges=False) == {"x": [1, 64, 64, 3]}
    ranged = {"x": [1, intake_tf.shapes_mod.parse_dim("[32:128]"), 64, 3]}
    assert intake_tf.fixed_shapes(free, ranged, keep_ranges=True) == {"x": [1, -1, 64, 3]}
    with pytest.raises(ModelError, match="TFLite converter fixes every size"):
        intake_tf.fixed_shapes(free, ranged, keep_ranges=False)
    with pytest.raises(ModelError, match=r"names \['y'\] but the model's inputs are \['x'\]"):
        intake_tf.fixed_shapes(sig, {"y": [1]}, keep_ranges=True)


def test_an_unsupported_op_names_the_op_the_layer_and_the_options():
    err = {"converter": "TFLiteConverter", "op": "Igamma", "node": "model/odd/Igamma", "layer": "model/odd"}
    text = str(intake_tf.unsupported_op(err, "tflite"))
    assert "the op Igamma (layer model/odd" in text and "SELECT_TF_OPS" in text and "--backend ort" in text
    text = str(intake_tf.unsupported_op(dict(err, converter="tf2onnx 1.16.1"), "onnx"))
    assert "tf2onnx 1.16.1 cannot convert the op Igamma" in text and "--backend tflite" in text


def test_options_the_tflite_path_does_not_take_are_refused_before_any_work(tmp_path):
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ModelError, match="prune is not taken on the tflite backend's TensorFlow path"):
        edgekit.build(tmp_path / "sm", "pixel-8", tmp_path / "out", backend="tflite", prune=0.25)
    with pytest.raises(ModelError, match="int8 needs calibration data: --calib"):
        edgekit.build(tmp_path / "sm", "pixel-8", tmp_path / "out", backend="tflite", precision="int8")
    assert not (tmp_path / "out").exists()


def test_no_interpreter_for_the_environment_says_how_to_get_one(tmp_path, monkeypatch):
    from edgekit.toolenvs import interpreters

    monkeypatch.setenv("EDGEKIT_TOOLENV_DIR", str(tmp_path / "envs"))
    monkeypatch.setattr(interpreters, "_candidates", lambda version: [])
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(BackendUnavailable, match=r"tensorflow tool environment.*Python 3.11 or 3.10.*pyenv install"):
        edgekit.build(tmp_path / "sm", "host", tmp_path / "out", backend="ort")
    assert not (tmp_path / "out").exists()


# -- through TensorFlow (the tool environment) ---------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_saved_model_to_tflite_fp32_against_tensorflow(tf_models, tmp_path):
    report = edgekit.build(tf_models / "saved_model", "pixel-8", tmp_path / "out", backend="tflite", precision="fp32")
    jsonschema.validate(report, schema())
    [step] = report["fidelity"]["steps"]
    assert step["step"] == "fp32 (SavedModel -> TFLite, TensorFlow's converter)" and step["passed"]
    assert step["reference"].startswith("TensorFlow 2.15")
    [out] = step["outputs"].values()
    assert out["cosine_min"] > 0.9999
    export = report["export"]
    assert export["exporter"].startswith("TFLiteConverter.from_saved_model") and export["tensorflow"] == "2.15.1"
    assert export["dynamic_dims"] == {"input_1": {"0": "fixed to 1"}}
    assert report["inputs"][0]["name"] == "input_1" and report["inputs"][0]["shape"] == [1, 96, 96, 3]
    assert (tmp_path / "out" / "model.tflite").is_file() and (tmp_path / "out" / "io_layout.json").is_file()
    assert "error" not in report["placement"]


@pytest.mark.e2e
@pytest.mark.slow
def test_saved_model_to_tflite_int8_calibrated_by_tensorflow(tf_models, tmp_path):
    report = edgekit.build(
        tf_models / "saved_model",
        "pixel-8",
        tmp_path / "out",
        backend="tflite",
        precision="int8",
        calib=str(tf_models / "calib.npz"),
        allow_degraded=True,
    )
    assert report["precision"] == "int8" and report["export"]["calibration_samples"] == 16
    [step] = report["fidelity"]["steps"]
    assert step["step"].startswith("int8 (SavedModel -> TFLite") and step["samples"] == 16
    [out] = step["outputs"].values()
    assert out["cosine_mean"] > 0.9, out
    assert report["inputs"][0]["dtype"] == "float32"  # float in and out: the runner needs no quantization
    assert {o["op"] for o in report["ops"]} >= {"CONV_2D", "QUANTIZE"}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_keras_file_through_tf2onnx_judged_against_tensorflow(tf_models, tmp_path, backend):
    report = edgekit.build(tf_models / "mnv3.keras", "host", tmp_path / "out", backend=backend, precision="fp32")
    jsonschema.validate(report, schema())
    first = report["fidelity"]["steps"][0]
    assert first["step"] == "export (TensorFlow Keras -> ONNX opset 17, tf2onnx 1.16.1)" and first["passed"]
    assert first["reference"].startswith("TensorFlow 2.15")
    assert all(o["cosine_min"] > 0.9999 for o in first["outputs"].values())
    assert report["export"]["from"] == "Keras" and report["export"]["opset"] == 17
    assert all(s["passed"] for s in report["fidelity"]["steps"])


@pytest.mark.e2e
@pytest.mark.slow
def test_an_op_no_converter_takes_names_it_and_its_layer(tf_models, tmp_path):
    with pytest.raises(ConversionError, match=r"Igamma \(layer .*odd_layer.*SELECT_TF_OPS"):
        edgekit.build(tf_models / "odd_saved_model", "pixel-8", tmp_path / "a", backend="tflite", precision="fp32")
    with pytest.raises(ConversionError, match=r"tf2onnx 1.16.1 cannot convert the op Igamma \(layer .*odd_layer"):
        edgekit.build(tf_models / "odd_saved_model", "host", tmp_path / "b", backend="ort")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.e2e
def test_a_keras_file_with_custom_objects_says_to_save_a_saved_model(tf_models, tmp_path):
    with pytest.raises(ModelError, match=r"custom layers or objects.*tf.saved_model.save"):
        edgekit.build(tf_models / "custom.keras", "host", tmp_path / "out", backend="ort")
    assert not (tmp_path / "out").exists()


def test_cli_takes_a_saved_model_directory(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "edgekit", "build", str(tmp_path), "--profile", "host", "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "directory" in r.stderr  # a directory without saved_model.pb is not a model
