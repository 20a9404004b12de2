"""The build's step checker: a runtime that fails on a built model is a ConversionError naming the step."""

from types import SimpleNamespace

import pytest

from edgekit.build_check import StepChecker
from edgekit.errors import ConversionError, DataError
from edgekit.model import TensorSpec


class _Data:
    samples = [{}]
    labels = None

    def __len__(self):
        return 1


class _Failing:
    def __init__(self, error):
        self.error = error

    def predict(self, path, samples, session=None):
        raise self.error


def _checker(error, precision="fp16"):
    p = SimpleNamespace(
        precision=precision,
        log=lambda m: None,
        fid_ds=_Data(),
        runs=_Failing(error),
        opts=SimpleNamespace(backend="ort", allow_degraded=False),
        src=SimpleNamespace(inputs=[TensorSpec("x", [1, 4], "float32", None)], path=None),
    )
    inferred = SimpleNamespace(inferred=True, spec=SimpleNamespace(family="generic"))
    return StepChecker(p, [{}], inferred, session=None)  # type: ignore[arg-type]


def test_a_runtime_error_on_the_built_model_names_the_step_and_what_to_do():
    class Fail(Exception):  # stands for onnxruntime's own exception types
        pass

    with pytest.raises(ConversionError) as e:
        _checker(Fail("Load model from /tmp/m.onnx failed: Type Error: float16 vs float.")).check("fp16", "m.onnx")
    message = str(e.value)
    assert "ort built 'fp16' but its runtime cannot run it" in message and "Type Error" in message
    assert "--precision fp32" in message and ".." not in message
    with pytest.raises(ConversionError) as e:  # an fp32 build is not told to try fp32
        _checker(Fail("Load model failed: unsupported op"), "fp32").check("ONNX -> OpenVINO IR (fp32)", "m.onnx")
    assert "--precision" not in str(e.value) and "Choose another backend: ort and openvino" in str(e.value)


def test_edgekit_errors_pass_through_unchanged():
    with pytest.raises(DataError, match="bad data"):
        _checker(DataError("bad data")).check("fp32", "m.onnx")
