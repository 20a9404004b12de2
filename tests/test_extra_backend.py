"""A backend added from outside edgekit: one host module, one runner, one table row (tests/harness/extra_backend.py)."""

import json

import numpy as np
import pytest

import edgekit
from edgekit import bundle, converters, profiles
from edgekit.errors import ConversionError


@pytest.fixture()
def copy_ort():
    from harness import extra_backend

    converters.register(extra_backend.ROW)
    yield extra_backend
    converters.TABLE.unregister(extra_backend.NAME)


def test_extra_backend_builds_a_bundle_end_to_end(tmp_path, tiny_model, tiny_calib, copy_ort):
    from edgekit.execution import in_process
    from edgekit_agent import runners

    # the table row is all the rest of edgekit needs: listings, the host profile, the agent's runners
    assert copy_ort.NAME in converters.all_backends()
    assert copy_ort.NAME in profiles.load("host").data["runtimes"]["ranked"]
    assert runners.get(copy_ort.NAME) is copy_ort.CopyRunner

    out = tmp_path / "b"
    r = edgekit.build(tiny_model, "host", out, backend=copy_ort.NAME, calib=tiny_calib, use_cache=False)
    m = bundle.load(out)  # every file's sha256 checked
    assert m["backend"] == copy_ort.NAME and m["precision"] == "fp32" and m["model"] == "model.onnx"
    assert r["fidelity"]["passed"] and [s["step"] for s in r["fidelity"]["steps"]] == ["copied"]
    assert r["fidelity"]["steps"][0]["outputs"]["probs"]["max_abs"] < 1e-6
    assert r["placement"]["backend"] == copy_ort.NAME and r["placement"]["graph"]["kind"] == "onnx"

    # the bundle runs with the backend's own runner, as the agent would run it, and gives the expected outputs
    feed = dict(np.load(out / "sample_inputs.npz"))
    want = dict(np.load(out / "expected_outputs.npz"))
    with in_process(copy_ort.NAME, out / "model.onnx", json.loads((out / "manifest.json").read_text())) as model:
        got = model.run(feed)
    assert np.allclose(got["probs"], want["probs"], atol=1e-6)

    # a refused precision says why, from the table
    with pytest.raises(ConversionError, match="copy-ort only copies"):
        converters.get(copy_ort.NAME).refuse_unbuildable("fp16")


def test_extra_backend_is_gone_once_unregistered(copy_ort):
    converters.TABLE.unregister(copy_ort.NAME)
    assert copy_ort.NAME not in converters.all_backends()
    assert copy_ort.NAME not in profiles.load("host").data["runtimes"]["ranked"]
    converters.register(copy_ort.ROW)  # the fixture removes it again


def test_builtin_rows_cannot_be_replaced():
    from edgekit_agent.runners.table import Row

    with pytest.raises(ValueError, match="edgekit's own"):
        converters.register(Row("ort", "x", "y", ("fp32",)))
