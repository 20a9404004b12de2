"""Silero VAD (benchmarks/zoo) as a stream: real speech from espeak-ng, built with --stream and --task vad, served with
sessions and compared with the sequence run by hand in ONNX Runtime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import edgekit

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo"
TEXTS = ["Shipping models to small devices is easy.", "Hello there. How are you today?"]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def vad(tmp_path_factory):
    """The model file and a folder of two speech sequences (``input`` [T, 1, 576], ``sr`` 16000)."""
    sys.path.insert(0, str(ZOO))
    import data  # noqa: PLC0415
    import fetch  # noqa: PLC0415

    try:
        model = fetch.fetch_all(fetch.zoo_dir(), ["silero_vad"])["silero_vad"]
    except fetch.FetchError as exc:
        pytest.fail(f"cannot fetch silero_vad: {exc}")
    d = tmp_path_factory.mktemp("vad")
    (d / "speech").mkdir()
    chunks = []
    for k, text in enumerate(TEXTS):
        c = data.vad_chunks(data.speech(text))[:, None, :]
        np.savez(d / "speech" / f"s{k}.npz", input=c, sr=np.array(16000, np.int64))
        chunks.append(c)
    return model, d, chunks


def _by_hand(model, chunks):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    state, probs = np.zeros((2, 1, 128), np.float32), []
    for c in chunks:
        p, state = sess.run(["output", "stateN"], {"input": c, "state": state, "sr": np.array(16000, np.int64)})
        probs.append(p)
    return np.concatenate(probs)


def test_silero_vad_streams_with_its_state(vad, agent_roots):
    from edgekit.deployer import deploy, open_device

    model, d, chunks = vad
    report = edgekit.build(
        model, "host", d / "bundle", backend="ort", precision="fp32", calib=d / "speech",
        stream={"state": "stateN"}, task="vad", name="silero_vad",
        input_shapes={"input": [1, 576], "state": [2, 1, 128]},
    )  # fmt: skip
    step = report["fidelity"]["steps"][-1]
    assert step["task"]["family"] == "vad" and step["task"]["metrics"]["frame_agreement"] == 1.0
    assert 0.2 < step["task"]["metrics"]["speech_frames_reference"] < 0.9  # speech and the silence around it
    assert step["stream"]["state_drift"]["state"]["max_abs_error_at_end"] < 1e-3

    expected = _by_hand(model, chunks[0])
    dev = open_device("local", device_root=str(agent_roots("dev")))
    try:
        deploy(d / "bundle", dev, bench=False)
        with dev.client.stream("silero_vad") as s:
            got = np.concatenate([s.step({"input": c, "sr": np.array(16000, np.int64)})["output"] for c in chunks[0]])
    finally:
        dev.close()
    assert np.allclose(got, expected, atol=1e-4)
    assert np.mean((got > 0.5) == (expected > 0.5)) == 1.0


def _build(vad, backend, precision="fp32"):
    model, d, _ = vad
    return edgekit.build(
        model, "host", d / f"bundle-{backend}-{precision}", backend=backend, precision=precision, calib=d / "speech",
        stream={"state": "stateN"}, task="vad", name="silero_vad",
        input_shapes={"input": [1, 576], "state": [2, 1, 128]}, use_cache=False,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["openvino", "mnn", "tflite", "mindspore-lite", "paddlelite"])
def test_silero_vad_builds_with_sr_fixed_where_the_backend_cannot_switch_on_it(vad, backend):
    import jsonschema

    from edgekit.report import schema

    report = _build(vad, backend)
    jsonschema.validate(report, schema())
    spec = report["specialised"]
    assert spec["fixed_inputs"] == [{"name": "sr", "dtype": "int64", "shape": [], "value": 16000}]
    assert (
        spec["if_inlined"]["If_0"] == "then" and "sr fixed to 16000: If_0 folded to its then-branch" in spec["notes"][0]
    )
    assert [i["name"] for i in report["inputs"]] == ["input", "state"]
    assert report["source_nodes"] == 5 and spec["nodes"]["before"] == 5  # the graph as given: If_0 and its switch
    step = report["fidelity"]["steps"][-1]  # against the original model fed sr=16000
    assert step["task"]["metrics"]["frame_agreement"] == 1.0
    assert step["stream"]["state_drift"]["state"]["max_abs_error_at_end"] < 1e-2


def test_silero_vad_on_openvino_takes_sr_16000_or_none_and_refuses_8000(vad, agent_roots):
    from edgekit.deployer import deploy, open_device
    from edgekit_sdk.client import AgentHTTPError

    model, d, chunks = vad
    _build(vad, "openvino")
    expected = _by_hand(model, chunks[1])
    dev = open_device("local", device_root=str(agent_roots("dev-ov")))
    sr = {"sr": np.array(16000, np.int64)}
    try:
        deploy(d / "bundle-openvino-fp32", dev, bench=False)
        with dev.client.stream("silero_vad") as s:  # sr as it was fixed at the odd steps, left out at the even ones
            got = np.concatenate(
                [s.step({"input": c, **(sr if k % 2 else {})})["output"] for k, c in enumerate(chunks[1])]
            )
        with dev.client.stream("silero_vad") as s, pytest.raises(AgentHTTPError) as e:
            s.step({"input": chunks[1][0], "sr": np.array(8000, np.int64)})
    finally:
        dev.close()
    assert e.value.status == 400 and "fixed to 16000" in str(e.value)
    assert np.allclose(got, expected, atol=1e-3)
    assert np.mean((got > 0.5) == (expected > 0.5)) == 1.0


def test_silero_vad_ort_int8_that_quantizes_nothing_is_refused(vad):
    """ONNX Runtime's quantizer does not enter If branches, where all of Silero's work is: not an int8 build."""
    from edgekit.errors import ConversionError

    with pytest.raises(ConversionError, match=r"quantized no node of this model; \d+ of its \d+ nodes sit inside If"):
        _build(vad, "ort", "int8")
    assert not (vad[1] / "bundle-ort-int8").exists()
