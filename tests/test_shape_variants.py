"""One static model per declared shape (edgekit.shape_variants): the points, the merge into one bundle, and a TFLite
build of a variable-width classifier served by the local agent at each declared width."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import edgekit
from edgekit import bundle as bundle_mod
from edgekit.errors import BundleError
from edgekit.shape_variants import merge, points
from edgekit.shapes import parse_input_shapes

CLS = Path(__file__).resolve().parents[1] / "examples" / "ppocr_mobile_v2_cls.onnx"


def test_points_a_range_gives_min_typical_max_and_sets_one_model_per_size():
    typical = {"x": [1, 3, 48, 480], "len": [1]}
    got = points(parse_input_shapes(["x=1,3,48,[160:960]"]), typical)
    assert [(label, p["x"][3]) for label, p in got] == [("v1", 160), ("typical", 480), ("v2", 960)]
    assert all(p["len"] == [1] for _, p in got)  # undeclared inputs stay at the typical shape
    sets = parse_input_shapes(["src=1,[8,16,32,64]", "mask=1,[8,16,32,64]"])
    got = points(sets, {"src": [1, 16], "mask": [1, 16]})
    assert [(label, p["src"], p["mask"]) for label, p in got] == [
        ("v1", [1, 8], [1, 8]),
        ("typical", [1, 16], [1, 16]),
        ("v2", [1, 32], [1, 32]),
        ("v3", [1, 64], [1, 64]),
    ]
    mixed = parse_input_shapes(["x=1,3,[32:64],[8,16,32,64]"])
    assert [p["x"][2:] for _, p in points(mixed, {"x": [1, 3, 48, 16]})] == [[32, 8], [48, 16], [64, 64]]
    assert points(parse_input_shapes(["x=1,3,48,96"]), {"x": [1, 3, 48, 96]}) == []


def _bundle(path: Path, width: int, payload: bytes) -> Path:
    """A hand-made bundle fixed at width ``width``: a model, an extra file, a sample; a manifest and report."""
    path.mkdir()
    (path / "model.tflite").write_bytes(payload)
    (path / "io_layout.json").write_text(json.dumps({"width": width}))
    np.savez(path / "sample_inputs.npz", x=np.zeros((1, 3, 48, width), np.float32))
    files = [
        bundle_mod.file_entry(path / "model.tflite", "model.tflite", "model"),
        bundle_mod.file_entry(path / "io_layout.json", "io_layout.json", "io_layout"),
        bundle_mod.file_entry(path / "sample_inputs.npz", "sample_inputs.npz", "sample_inputs"),
    ]
    x = {"name": "x", "shape": [1, 3, 48, width], "dtype": "float32", "layout": "NCHW", "allowed": [1, 3, 48, width]}
    manifest = {
        "schema_version": bundle_mod.MANIFEST_SCHEMA_VERSION,
        "backend": "tflite",
        "precision": "fp32",
        "profile": "host",
        "model": "model.tflite",
        "files": files,
        "inputs": [x],
        "runner": {"io": {"width": width}},
        "shapes": {"dynamic": False, "allowed": {"x": [1, 3, 48, width]}, "points": [],
                   "fixed_because": f"tflite runs static shapes only in this release: fixed at x=[1, 3, 48, {width}]"},
    }  # fmt: skip
    manifest["id"] = bundle_mod.bundle_id(manifest)
    bundle_mod.write_json(path / bundle_mod.MANIFEST, manifest)
    step = {"step": "fp32", "passed": True, "outputs": {"y": {"max_abs": 1e-6, "cosine_mean": 1.0, "cosine_min": 1.0}}}
    report = {"bundle_id": manifest["id"], "fidelity": {"passed": True, "steps": [step]}, "warnings": []}
    bundle_mod.write_json(path / bundle_mod.REPORT_JSON, report)
    return path


def _merged(tmp_path: Path, wide_payload: bytes) -> tuple:
    import shutil

    work = tmp_path / wide_payload.hex()
    work.mkdir()
    typical, wide = _bundle(work / "t", 96, b"typical model"), _bundle(work / "w", 192, wide_payload)
    staged = work / "staged"
    shutil.copytree(typical, staged)
    report = merge(staged, [("typical", {"x": [1, 3, 48, 96]}, typical), ("v1", {"x": [1, 3, 48, 192]}, wide)])
    return staged, report


def test_merge_adds_each_variants_files_with_sha256_and_a_new_id(tmp_path):
    staged, report = _merged(tmp_path, b"wide model")
    manifest = bundle_mod.load(staged)  # every file present with its sha256
    names = {f["name"]: f for f in manifest["files"]}
    assert set(names) == {
        "model.tflite",
        "io_layout.json",
        "sample_inputs.npz",
        "model.v1.tflite",
        "v1.io_layout.json",
        "shape_samples.npz",
    }
    with np.load(staged / "shape_samples.npz") as z:  # the agent's benchmark times the other model with it
        assert {k: z[k].shape for k in z.files} == {"v1.x": (1, 3, 48, 192)}
    assert (staged / "model.v1.tflite").read_bytes() == b"wide model" and names["model.v1.tflite"]["role"] == "model"
    assert manifest["model"] == "model.tflite"
    assert [(v["label"], v["shapes"], v["model"], v["files"]) for v in manifest["variants"]] == [
        ("typical", {"x": [1, 3, 48, 96]}, "model.tflite", ["model.tflite", "io_layout.json"]),
        ("v1", {"x": [1, 3, 48, 192]}, "model.v1.tflite", ["model.v1.tflite", "v1.io_layout.json"]),
    ]
    assert manifest["variants"][1]["runner"] == {"io": {"width": 192}}
    assert manifest["variants"][1]["inputs"][0]["shape"] == [1, 3, 48, 192]
    assert manifest["inputs"][0]["allowed"] == [1, 3, 48, {"values": [96, 192]}]
    assert manifest["shapes"]["fixed_because"].endswith("fixed per declared shape, one model each")
    assert [v["fidelity"]["passed"] for v in manifest["shapes"]["variants"]] == [True, True]
    assert report["bundle_id"] == manifest["id"] and report["shapes"] == manifest["shapes"]
    # the id is the content's: another wide model, another id
    assert bundle_mod.load(_merged(tmp_path, b"other wide model")[0])["id"] != manifest["id"]
    (staged / "model.v1.tflite").write_bytes(b"tampered")
    with pytest.raises(BundleError, match="does not match its sha256"):
        bundle_mod.load(staged)


@pytest.fixture(scope="module")
def cls_tflite(tmp_path_factory):
    """PaddleOCR's text-direction classifier (x float[-1,3,?,?]) built for TFLite at widths 96 and 192."""
    out = tmp_path_factory.mktemp("bundles") / "cls"
    r = edgekit.build(CLS, "host", out, backend="tflite", precision="fp32", input_shapes=["x=1,3,48,[96,192]"],
                      name="cls", use_cache=False)  # fmt: skip
    return out, r


def _answers_as_the_reference_at_each_width(client, widths=(96, 192)):
    import onnxruntime as ort

    reference = ort.InferenceSession(str(CLS), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for width in widths:
        x = rng.standard_normal((1, 3, 48, width)).astype(np.float32)
        (want,) = reference.run(None, {"x": x})
        (got,) = client.infer("cls", {"x": x}).values()
        np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.e2e
def test_tflite_gets_one_model_per_declared_width_and_the_agent_serves_each(cls_tflite, local_device):
    """One bundle, two static models, each checked at its width; the agent answers at each width as the reference
    does and refuses another width."""
    from edgekit.deployer import deploy
    from edgekit_sdk.client import AgentHTTPError

    out, r = cls_tflite
    shapes = r["shapes"]
    assert not shapes["dynamic"] and shapes["allowed"] == {"x": [1, 3, 48, {"values": [96, 192]}]}
    assert [(v["shapes"]["x"][3], v["model"], v["fidelity"]["passed"]) for v in shapes["variants"]] == [
        (96, "model.tflite", True),
        (192, "model.v1.tflite", True),
    ]
    assert all(s["passed"] for v in shapes["variants"] for s in v["fidelity"]["steps"])
    assert shapes["fixed_because"] == (
        "tflite runs static shapes only in this release: fixed per declared shape, one model each"
    )
    manifest = bundle_mod.load(out)
    assert manifest["id"] == r["bundle_id"] and manifest["inputs"][0]["allowed"] == [1, 3, 48, {"values": [96, 192]}]
    assert {"model.tflite", "model.v1.tflite"} <= {f["name"] for f in manifest["files"]}
    text = (out / "report.txt").read_text()
    assert "fixed per declared shape: 2 models (x=[1,3,48,96], x=[1,3,48,192])" in text, text

    report = deploy(out, local_device, runs=3, warmup=1)
    assert report["input_shapes"] == {"x": [1, 3, 48, 96]}  # the bench times the typical model, then the others
    assert [(t["label"], t["shapes"]["x"][3], t["runs"]) for t in report["by_shape"]] == [("v1", 192, 3)]
    import jsonschema

    from edgekit.report import schema

    jsonschema.validate(report, schema())
    jsonschema.validate(json.loads((out / "report.json").read_text()), schema())
    client = local_device.client
    _answers_as_the_reference_at_each_width(client)
    with pytest.raises(AgentHTTPError) as e:
        client.infer("cls", {"x": np.zeros((1, 3, 48, 128), np.float32)})
    assert e.value.status == 400 and e.value.message.endswith(
        "input 'x' has shape [1, 3, 48, 128], outside the shapes the bundle was built and checked for: "
        "[1, 3, 48, {96,192}]"
    ), e.value.message
    assert client.health()["status"] == "ok"


@pytest.mark.e2e
def test_encrypted_at_rest_every_model_is_loaded_while_its_files_are_decrypted(cls_tflite, agent_roots, tmp_path):
    """Sealed files are decrypted for the load only: the agent loads every model then, and serves each width."""
    import glob

    from test_agent_atrest import agent, key_file

    from edgekit.deployer import deploy, open_device

    root = agent_roots("device")
    key = key_file(tmp_path / "model.key")
    code, state, err = agent(root, "start", "--encrypt-key", str(key))
    assert code == 0, err
    shm_before = set(glob.glob("/dev/shm/edgekit-model-*"))
    dev = open_device("local", device_root=str(root))
    try:
        deploy(cls_tflite[0], dev, bench=False)
        assert dev.state["encrypt"]["key_id"] == state["encrypt"]["key_id"]
        _answers_as_the_reference_at_each_width(dev.client, widths=(192, 96))
        assert set(glob.glob("/dev/shm/edgekit-model-*")) == shm_before
    finally:
        dev.close()


def test_the_agent_loads_each_variant_on_first_use_and_refuses_shapes_it_has_no_model_for():
    """Two varying dimensions: [8, 16] passes the per-dimension allowed sizes but no model was built for it."""
    from edgekit_agent.runners.base import Runner, RunnerError
    from edgekit_agent.variants import make_runner

    loaded = []

    class Echo(Runner):
        backend = "echo"

        def load(self) -> None:
            loaded.append(self.manifest["model"])

        def run(self, feeds):
            return {"model": self.manifest["model"], "runner": self.manifest["runner"]}

        def describe(self):
            return {"runtime": "echo"}

    def spec(h, w):
        return {"name": "x", "shape": [1, h, w], "dtype": "float32"}

    allowed = [1, {"values": [8, 16]}, {"values": [8, 16]}]
    manifest = {
        "model": "model.bin",
        "inputs": [dict(spec(8, 8), allowed=allowed)],
        "runner": {"model_cache": False},
        "variants": [
            {"shapes": {"x": [1, 8, 8]}, "model": "model.bin", "inputs": [spec(8, 8)], "runner": {"k": 0}},
            {"shapes": {"x": [1, 16, 16]}, "model": "model.v1.bin", "inputs": [spec(16, 16)], "runner": {"k": 1}},
        ],
    }
    runner = make_runner(Echo, "/nowhere", manifest)
    runner.load()
    assert loaded == ["model.bin"]
    big = {"x": np.zeros((1, 16, 16), np.float32)}
    runner.check_feeds(big)
    assert runner.run(big) == {"model": "model.v1.bin", "runner": {"k": 1, "model_cache": False}}
    runner.run(big)
    assert loaded == ["model.bin", "model.v1.bin"]  # loaded once, on first use
    assert runner.run({"x": np.zeros((1, 8, 8), np.float32)})["model"] == "model.bin"
    with pytest.raises(RunnerError) as e:
        runner.check_feeds({"x": np.zeros((1, 8, 16), np.float32)})
    assert e.value.status == 400 and str(e.value) == (
        "input shapes x=[1, 8, 16] match none of the bundle's models; it has models for: x=[1, 8, 8]; x=[1, 16, 16]"
    )
    with pytest.raises(RunnerError, match=r"outside the shapes the bundle was built and checked for"):
        runner.check_feeds({"x": np.zeros((1, 8, 32), np.float32)})
    with pytest.raises(RunnerError, match=r"has dtype int32; the model wants float32"):
        runner.check_feeds({"x": np.zeros((1, 8, 8), np.int32)})
    assert [v["loaded"] for v in runner.describe()["variants"]] == [True, True]


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["paddlelite", "mindspore-lite"])
def test_tool_environment_backends_get_one_model_per_width_and_the_agent_serves_each(tmp_path, agent_roots, backend):
    """Paddle Lite and MindSpore Lite (converters and runtimes in their tool environments): the same classifier at
    widths 96 and 192, each model with its own files, served by an agent under the environment's Python."""
    import onnxruntime as ort

    from edgekit import toolenvs
    from edgekit.converters import get
    from edgekit.deployer import deploy
    from edgekit.device import open_device
    from edgekit_sdk.client import AgentHTTPError

    be = get(backend)
    if toolenvs.state(be.toolenv).get("interpreter_missing"):
        pytest.skip(f"no Python for the {backend} tool environment on this machine")
    env_python = toolenvs.ensure(be.toolenv, log=print)
    out = tmp_path / backend
    r = edgekit.build(CLS, "host", out, backend=backend, precision="fp32", input_shapes=["x=1,3,48,[96,192]"],
                      name="cls", use_cache=False)  # fmt: skip
    checked = [(v["shapes"]["x"][3], v["fidelity"]["passed"]) for v in r["shapes"]["variants"]]
    assert checked == [(96, True), (192, True)]
    manifest = bundle_mod.load(out)
    typical, wide = manifest["variants"]
    assert typical["model"] == manifest["model"] and wide["model"].startswith("model.v1.")
    assert all(name.startswith(("model.v1.", "v1.")) for name in wide["files"]) and len(wide["files"]) == len(
        typical["files"]
    )
    root = agent_roots("device", python=str(env_python))
    with open_device("local", device_python=str(env_python), device_root=str(root), backend=backend) as dev:
        report = deploy(out, dev, runs=3, warmup=1)
        assert report["device_fidelity"]["passed"] and [t["label"] for t in report["by_shape"]] == ["v1"]
        reference = ort.InferenceSession(str(CLS), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(1)
        for width in (96, 192):
            x = rng.standard_normal((1, 3, 48, width)).astype(np.float32)
            (want,) = reference.run(None, {"x": x})
            (got,) = dev.client.infer("cls", {"x": x}).values()
            np.testing.assert_allclose(got, want, atol=1e-4)
        with pytest.raises(AgentHTTPError) as e:
            dev.client.infer("cls", {"x": np.zeros((1, 3, 48, 128), np.float32)})
        assert e.value.status == 400 and "[1, 3, 48, {96,192}]" in e.value.message, e.value.message


def test_npz_data_is_cropped_or_wrapped_to_each_models_shape(tmp_path):
    from edgekit.shape_variants import fit_data

    x = np.arange(4 * 3 * 2 * 4, dtype=np.float32).reshape(4, 3, 2, 4)
    np.savez(tmp_path / "val.npz", x=x, label=np.arange(4))
    wide = fit_data(tmp_path / "val.npz", {"x": [1, 3, 2, 6]}, tmp_path / "v1")
    with np.load(wide) as z:
        assert z["x"].shape == (4, 3, 2, 6) and np.array_equal(z["x"][..., 4:], x[..., :2])  # wrapped
        assert np.array_equal(z["label"], np.arange(4))  # other arrays as they were
    np.save(tmp_path / "one.npy", x)
    with np.load(fit_data(tmp_path / "one.npy", {"x": [1, 3, 2, 3]}, tmp_path / "v2")) as z:
        assert np.array_equal(z["x"], x[..., :3])  # cropped
    assert fit_data(tmp_path, {"x": [1, 3, 2, 3]}, tmp_path / "v3") == tmp_path  # a folder is read as given
    assert fit_data(None, {"x": [1]}, tmp_path / "v4") is None
