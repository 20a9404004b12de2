"""Real public models with inputs of every kind, built and served end to end (benchmarks/zoo, fetched on first use).

- Silero VAD: float audio, a 0-d int64 ``sr`` given once, a ``state`` whose batch axis is 1 (``--sample-axis``);
- the Arabic-name romanizer's encoder: int64 character ids and a bool padding mask (JSON lines), a bool output;
- the Khmer segmenter: int64 + bool, weights in an external-data file (a folder of per-sample ``.npz``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from harness import stop_agent

import edgekit
from edgekit import agent_package
from edgekit.execution import reference_session, session_outputs

pytestmark = pytest.mark.e2e

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo"
NAMES = ["محمد", "أحمد علي", "فاطمة الزهراء", "عبد الله", "يوسف", "مريم", "خالد بن الوليد", "سارة"]
LENGTH = 16
KHMER = ["សួស្តី", "ប្រទេសកម្ពុជា", "ភាសាខ្មែរ", "សៀវភៅ", "រៀនភាសា", "ទីក្រុងភ្នំពេញ"]


@pytest.fixture(scope="module")
def zoo():
    sys.path.insert(0, str(ZOO))
    import data  # noqa: PLC0415
    import fetch  # noqa: PLC0415

    cache = fetch.zoo_dir()
    try:
        fetch.fetch_all(cache, ["silero_vad", "romanizer_encoder", "khmersm_segmenter"])
    except fetch.FetchError as exc:
        pytest.fail(f"cannot fetch the zoo models: {exc}")
    return data, cache / "models"


@pytest.fixture(scope="module")
def vad_data(zoo, tmp_path_factory):
    """40 frames of real speech, each with the state the stream had reached: ``state`` (2, n, 128), on axis 1."""
    data, models = zoo
    chunks = data.vad_chunks(data.speech("Edge devices listen for speech all day long."))[:40]
    sess = reference_session(models / "silero_vad.onnx")
    state, states = np.zeros((2, 1, 128), np.float32), []
    sr = np.array(16000, np.int64)
    for chunk in chunks:
        states.append(state)
        _, state = sess.run(None, {"input": chunk[None], "state": state, "sr": sr})
    path = tmp_path_factory.mktemp("vad") / "vad.npz"
    np.savez(path, input=chunks, state=np.concatenate(states, axis=1))  # sr: --input-value
    return path


@pytest.fixture(scope="module")
def romanizer_jsonl(zoo, tmp_path_factory):
    data, models = zoo
    tokens = json.loads((models / "romanizer_encoder.extras" / "vocab.json").read_text())["tokens"]
    path = tmp_path_factory.mktemp("romanizer") / "names.jsonl"
    with path.open("w") as f:
        for i, name in enumerate(NAMES):
            ids = data.romanizer_source(tokens, name, ["EG", "SA", None][i % 3])[0].tolist()[:LENGTH]
            mask = [0] * len(ids) + [1] * (LENGTH - len(ids))  # True at padding; 0/1 feeds a bool input
            f.write(json.dumps({"src": [ids + [0] * (LENGTH - len(ids))], "src_mask": [mask]}) + "\n")
    return path


ROMANIZER_SHAPES = [f"src=1,{LENGTH}", f"src_mask=1,{LENGTH}"]


def test_silero_vad_scalar_sr_and_state_on_axis_1(zoo, vad_data, tmp_path):
    _, models = zoo
    report = edgekit.build(
        models / "silero_vad.onnx",
        "host",
        tmp_path / "vad",
        backend="ort",
        precision="fp32",
        val=vad_data,
        input_shapes=["input=1,576", "state=2,1,128"],
        sample_axes=["state=1"],
        input_values=["sr=16000"],
    )
    assert report["fidelity"]["passed"] and report["fidelity"]["data"]["samples"] == 40
    assert "NNAPI" in report["mobile_usability"]  # ORT's checker, run with constant folding left out
    inputs = {i["name"]: i for i in report["inputs"]}
    assert inputs["sr"]["shape"] == [] and inputs["sr"]["dtype"] == "int64"
    # per frame, the built model (loaded as the device loads it) says what the original says
    z = np.load(vad_data)
    feeds = [
        {"input": z["input"][i : i + 1], "state": z["state"][:, i : i + 1], "sr": np.array(16000, np.int64)}
        for i in range(len(z["input"]))
    ]
    reference = session_outputs(reference_session(models / "silero_vad.onnx"), feeds)
    built = session_outputs(reference_session(tmp_path / "vad" / "model.onnx"), feeds)
    for r, b in zip(reference, built):
        np.testing.assert_allclose(b["output"], r["output"], atol=1e-5)
        np.testing.assert_allclose(b["stateN"], r["stateN"], atol=1e-5)
    speech = [float(r["output"].ravel()[0]) > 0.5 for r in reference]
    assert any(speech) and not all(speech)  # real speech with silence around it
    assert speech == [float(b["output"].ravel()[0]) > 0.5 for b in built]


@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_romanizer_encoder_int64_ids_and_bool_mask(zoo, romanizer_jsonl, tmp_path, backend):
    _, models = zoo
    report = edgekit.build(
        models / "romanizer_encoder.onnx",
        "host",
        tmp_path / backend,
        backend=backend,
        precision="fp32",
        val=romanizer_jsonl,
        input_shapes=ROMANIZER_SHAPES,
    )
    assert report["fidelity"]["passed"]
    step = report["fidelity"]["steps"][-1]
    assert step["outputs"]["src_mask_out"] == {"exact_match": 1.0, "non_finite": 0}  # bool: exact, not cosine
    assert step["outputs"]["memory_out"]["cosine_mean"] > 0.99999
    assert not report["fidelity"]["data"].get("synthetic")


def test_romanizer_encoder_int8_dynamic_leaves_int_inputs_alone(zoo, romanizer_jsonl, tmp_path):
    _, models = zoo
    report = edgekit.build(
        models / "romanizer_encoder.onnx",
        "host",
        tmp_path / "int8",
        backend="ort",
        precision="int8-dynamic",
        val=romanizer_jsonl,
        input_shapes=ROMANIZER_SHAPES,
    )
    manifest = json.loads((tmp_path / "int8" / "manifest.json").read_text())
    assert {i["name"]: i["dtype"] for i in manifest["inputs"]} == {"src": "int64", "src_mask": "bool"}
    steps = report["fidelity"]["steps"]
    assert report["fidelity"]["passed"] and steps and all(s["passed"] for s in steps)  # judged on every step
    assert steps[-1]["outputs"]["src_mask_out"]["exact_match"] == 1.0
    assert steps[-1]["outputs"]["memory_out"]["cosine_mean"] > 0.999


def test_khmer_segmenter_external_data_from_a_folder_of_npz(zoo, tmp_path):
    _, models = zoo
    char2id = json.loads((models / "khmersm_segmenter.extras" / "config.json").read_text())["char2id"]
    folder = tmp_path / "samples"
    folder.mkdir()
    for i, text in enumerate(KHMER):
        ids = [char2id.get(ch, 1) for ch in text][:LENGTH]
        x = np.zeros((1, LENGTH), np.int64)
        x[0, : len(ids)] = ids
        np.savez(folder / f"{i:02d}.npz", x=x, mask=np.arange(LENGTH)[None] < len(ids))
    report = edgekit.build(
        models / "khmersm_segmenter" / "model.onnx",
        "host",
        tmp_path / "khm",
        backend="ort",
        precision="fp32",
        val=folder,
        input_shapes=[f"x=1,{LENGTH}", f"mask=1,{LENGTH}"],
    )
    assert report["fidelity"]["passed"] and report["fidelity"]["data"]["samples"] == len(KHMER)


@pytest.fixture
def local_agent(tmp_path):
    from edgekit.deployer import open_device

    root = tmp_path / "device"
    built, _ = agent_package.build(root / "agent")
    pyz = root / "agent" / "edgekit-agent.pyz"
    shutil.copy(built, pyz)
    p = subprocess.run([sys.executable, str(pyz), "start", "--root", str(root)], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    dev = open_device("local", device_root=str(root))
    try:
        yield dev
    finally:
        dev.close()
        stop_agent(sys.executable, root)


def test_agent_serves_int64_bool_and_0d_tensors(zoo, romanizer_jsonl, vad_data, tmp_path, local_agent):
    from edgekit.deployer import deploy

    _, models = zoo
    edgekit.build(
        models / "romanizer_encoder.onnx", "host", tmp_path / "rom", backend="ort", precision="fp32",
        val=romanizer_jsonl, input_shapes=ROMANIZER_SHAPES, name="romanizer",
    )  # fmt: skip
    edgekit.build(
        models / "silero_vad.onnx", "host", tmp_path / "vad", backend="ort", precision="fp32", val=vad_data,
        input_shapes=["input=1,576", "state=2,1,128"], sample_axes={"state": 1}, input_values={"sr": 16000},
        name="vad",
    )  # fmt: skip
    deploy(tmp_path / "rom", local_agent, bench=False)
    deploy(tmp_path / "vad", local_agent, bench=False)
    client = local_agent.client
    line = json.loads(romanizer_jsonl.read_text().splitlines()[1])
    feed = {"src": np.asarray(line["src"], np.int64), "src_mask": np.asarray(line["src_mask"], bool)}
    expected = session_outputs(reference_session(models / "romanizer_encoder.onnx"), [feed])[0]
    got = client.infer("romanizer", feed)  # the binary wire (EKT1)
    assert got["src_mask_out"].dtype == np.bool_
    np.testing.assert_array_equal(got["src_mask_out"], expected["src_mask_out"])
    np.testing.assert_allclose(got["memory_out"], expected["memory_out"], atol=1e-5)
    as_json = client.infer_json(
        "romanizer",
        {
            "src": {"dtype": "int64", "shape": [1, LENGTH], "data": line["src"]},
            "src_mask": {"dtype": "bool", "shape": [1, LENGTH], "data": line["src_mask"]},
        },
    )
    assert as_json["outputs"]["src_mask_out"]["dtype"] == "bool"
    assert as_json["outputs"]["src_mask_out"]["data"] == expected["src_mask_out"].tolist()
    # a 0-d int64 input travels as a 0-d tensor, both ways of the wire
    z = np.load(vad_data)
    vad_feed = {"input": z["input"][5:6], "state": z["state"][:, 5:6], "sr": np.array(16000, np.int64)}
    want = session_outputs(reference_session(models / "silero_vad.onnx"), [vad_feed])[0]
    out = client.infer("vad", vad_feed)
    np.testing.assert_allclose(out["output"], want["output"], atol=1e-5)
    scalar = client.infer_json(
        "vad",
        {
            "input": {"dtype": "float32", "data": vad_feed["input"].tolist()},
            "state": {"dtype": "float32", "data": vad_feed["state"].tolist()},
            "sr": {"dtype": "int64", "shape": [], "data": 16000},
        },
    )
    np.testing.assert_allclose(scalar["outputs"]["output"]["data"], want["output"].tolist(), atol=1e-5)


def test_mnn_that_cannot_run_the_encoder_says_so(zoo, romanizer_jsonl, tmp_path):
    """MNN converts the GRU encoder into a loop it cannot size: a ConversionError with the inputs, no traceback."""
    from edgekit.errors import ConversionError

    _, models = zoo
    with pytest.raises(ConversionError) as e:
        edgekit.build(
            models / "romanizer_encoder.onnx", "host", tmp_path / "mnn", backend="mnn", precision="fp32",
            val=romanizer_jsonl, input_shapes=ROMANIZER_SHAPES,
        )  # fmt: skip
    assert "mnn built 'fp32" in str(e.value) and "src int64 [1, 16]" in str(e.value)
    # MNN's error code is named, and the op it printed as failing is traced to the model's node
    assert "error code 3 (COMPUTE_SIZE_ERROR: MNN could not compute the output shape of its op" in str(e.value)
    assert not (tmp_path / "mnn").exists()


def test_silero_vad_for_the_ort_format_is_built_with_sr_fixed(zoo, vad_data, tmp_path):
    """The ORT format cannot leave out the constant folding that breaks this model's If branches once shapes are
    fixed; with sr given once, the graph is specialised first (If folded), so the .ort build works."""
    _, models = zoo
    report = edgekit.build(
        models / "silero_vad.onnx", "raspberrypi5", tmp_path / "pi5", backend="ort", precision="fp32",
        val=vad_data, input_shapes=["input=1,576", "state=2,1,128"], sample_axes={"state": 1},
        input_values={"sr": 16000},
    )  # fmt: skip
    assert report["fidelity"]["passed"] and (tmp_path / "pi5" / "model.ort").is_file()
    assert report["specialised"]["fixed_inputs"][0]["name"] == "sr"
