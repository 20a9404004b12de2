"""Every backend at FP32 on a model with int64 ids, a bool mask, a 0-d int64 scalar and a bool/int64 output.

ONNX Runtime, OpenVINO, MNN, TFLite (onnx2tf makes the 0-d input [1]) and MindSpore Lite (its converter makes int64
inputs int32) run it and keep fidelity; Paddle Lite's Python binding has no int64 setter: the build stops with an
error naming the input, its dtype and what to do, and writes nothing.
"""

import json

import numpy as np
import pytest
from harness.mixed import mixed_inputs_model, mixed_samples

import edgekit
from edgekit import converters
from edgekit.errors import ConversionError

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixed")
    model = mixed_inputs_model(base / "mixed.onnx", batch=1)
    np.savez(base / "mixed.npz", sr=np.array(16000, np.int64), **mixed_samples(16))
    return model, base / "mixed.npz"


@pytest.mark.parametrize("backend", ["ort", "openvino", "mnn", "tflite", "mindspore-lite"])
def test_backend_runs_int64_bool_and_0d_inputs(mixed, tmp_path, backend):
    model, data = mixed
    report = edgekit.build(
        model, "host", tmp_path / "out", backend=backend, precision="fp32", val=data, sample_axes={"state": 1}
    )
    assert report["fidelity"]["passed"], report["fidelity"]
    outputs = report["fidelity"]["steps"][-1]["outputs"]
    assert outputs["keep"]["exact_match"] == 1.0 and outputs["best"]["exact_match"] == 1.0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {i["name"]: (i["dtype"], i["shape"]) for i in manifest["inputs"]}["sr"] == ("int64", [])
    # what the device's runner returns has the declared dtypes, whatever width the runtime computed in
    sample = dict(np.load(tmp_path / "out" / "sample_inputs.npz"))
    got = converters.get(backend).predict(tmp_path / "out" / manifest["model"], [sample])[0]
    assert {n: str(got[n].dtype) for n in ("keep", "best")} == {"keep": "bool", "best": "int64"}


def test_paddlelite_refuses_int64_inputs_clearly(mixed, tmp_path):
    model, data = mixed
    with pytest.raises(ConversionError) as e:
        edgekit.build(
            model, "host", tmp_path / "out", backend="paddlelite", precision="fp32", val=data, sample_axes={"state": 1}
        )
    text = str(e.value)
    assert "'ids' is int64" in text and "int32" in text and "another backend" in text
    assert "Traceback" not in text
    assert not (tmp_path / "out").exists()
