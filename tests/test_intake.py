import numpy as np
import pytest
from harness.models import dynamic_model

import edgekit
from edgekit.data import load_dataset
from edgekit.errors import DataError, ModelError
from edgekit.model import load_model, parse_input_shapes


def test_corrupt_model_is_refused(tmp_path, tiny_model):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(tiny_model.read_bytes()[:200])
    with pytest.raises(ModelError, match="not a valid ONNX"):
        load_model(bad)


def test_random_bytes_are_refused(tmp_path):
    bad = tmp_path / "noise.onnx"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ModelError):
        load_model(bad)


def test_non_onnx_file_is_refused(tmp_path):
    p = tmp_path / "model.tflite"
    p.write_bytes(b"TFL3")
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_model(p)


def test_dynamic_batch_becomes_one(tiny_model):
    m = load_model(tiny_model)
    assert m.inputs[0].shape == [1, 3, 16, 16]
    assert m.inputs[0].layout == "NCHW"
    assert m.outputs[0].shape == [1, 10]


def test_dynamic_spatial_dims_need_input_shape():
    from harness import PPOCR

    with pytest.raises(ModelError, match=r"--input-shape x=1,3,"):
        load_model(PPOCR)
    m = load_model(PPOCR, {"x": [1, 3, 48, 192]})
    assert m.inputs[0].shape == [1, 3, 48, 192]


@pytest.mark.parametrize("bad", ["x", "x=", "x=1,a", "=1,2", "x=0,3"])
def test_bad_input_shape_syntax(bad):
    with pytest.raises(ModelError, match="bad --input-shape"):
        parse_input_shapes([bad])


def test_input_shape_for_unknown_input(tiny_model):
    with pytest.raises(ModelError, match="model's inputs are"):
        load_model(tiny_model, {"nope": [1, 3, 16, 16]})


def test_data_with_wrong_shape_is_refused(tmp_path, tiny_model):
    m = load_model(tiny_model)
    p = tmp_path / "d.npz"
    np.savez(p, input=np.zeros((4, 3, 8, 8), np.float32))
    with pytest.raises(DataError, match=r"shape \[4, 3, 8, 8\]"):
        load_dataset(p, m.inputs)


def test_data_names_must_match(tmp_path, tiny_model):
    m = load_model(tiny_model)
    p = tmp_path / "d.npz"
    np.savez(p, a=np.zeros((4, 3, 16, 16), np.float32), b=np.zeros((4, 3, 16, 16), np.float32))
    with pytest.raises(DataError, match="missing"):
        load_dataset(p, m.inputs)


def test_image_folder_with_labels(tmp_path, tiny_model):
    from PIL import Image

    for label in (0, 1):
        (tmp_path / "imgs" / str(label)).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (20, 20), (label * 200, 50, 100)).save(tmp_path / "imgs" / str(label) / f"{i}.png")
    m = load_model(tiny_model)
    ds = load_dataset(tmp_path / "imgs", m.inputs, "resize=16x16 scale=1/255 mean=0.5 std=0.5")
    assert len(ds) == 6 and list(ds.labels) == [0, 0, 0, 1, 1, 1]
    assert ds.samples[0]["input"].shape == (1, 3, 16, 16)
    assert ds.samples[0]["input"].dtype == np.float32
    np.testing.assert_allclose(ds.samples[0]["input"][0, 0, 0, 0], (0 / 255 - 0.5) / 0.5, atol=1e-6)


def test_public_api_all_is_sorted_and_resolves():
    assert edgekit.__all__ == sorted(edgekit.__all__)
    for name in edgekit.__all__:
        assert getattr(edgekit, name) is not None


def test_dynamic_dims_error_names_only_the_dynamic_ones_and_guesses_the_batch(tmp_path):
    """A size-1 dimension is not called dynamic; a symbolic or unset one is, by name; no ``<...>`` placeholders."""
    m = dynamic_model(tmp_path / "m.onnx", {"x": [1, "height", None, 3]})
    with pytest.raises(ModelError) as e:
        load_model(m)
    text = str(e.value)
    assert "height (position 1), W (position 2)" in text and "position 0" not in text and "<" not in text, text
    assert "--input-shape x=1,height,W,3" in text and "replaced by the sizes of your data" in text, text
    m = dynamic_model(tmp_path / "n.onnx", {"x": ["batch", 3, 8, 8]})
    assert load_model(m).inputs[0].shape == [1, 3, 8, 8]  # a dynamic batch alone is fixed to 1, as before
    m = dynamic_model(tmp_path / "b.onnx", {"x": ["batch", 3, "h", 8]})
    with pytest.raises(ModelError, match=r"--input-shape x=1,3,h,8 \(batch=1 is a guess \(batch 1\)\)"):
        load_model(m)


def test_dynamic_dims_error_suggests_the_shape_of_the_data_per_input(tmp_path):
    from edgekit.shape_hints import data_reader

    m = dynamic_model(tmp_path / "m.onnx", {"x": ["N", 3, "h", "w"], "ids": ["N", "len"]})
    data = tmp_path / "calib.npz"
    np.savez(data, x=np.zeros((5, 3, 20, 30), np.float32), ids=np.zeros((5, 1, 7), np.float32))
    with pytest.raises(ModelError) as e:
        load_model(m, None, data_reader([None, data]))
    text = str(e.value)
    assert "--input-shape x=1,3,20,30 --input-shape ids=1,7" in text, text
    assert "x: N=1 as edgekit runs the samples of calib.npz one at a time" in text and "x: h=20 from calib.npz" in text
    assert "ids: N=1 from calib.npz" in text and "replaced by" not in text, text
    m = load_model(m, {"x": [1, 3, 20, 30], "ids": [1, 7]})  # what it suggests builds
    assert [s.shape for s in m.inputs] == [[1, 3, 20, 30], [1, 7]]


def test_dynamic_dims_error_reads_the_model_metadata(tmp_path):
    m = dynamic_model(tmp_path / "m.onnx", {"x": ["N", 3, "height", "width"]}, {"height": "48", "width": "192"})
    with pytest.raises(ModelError, match=r"--input-shape x=1,3,48,192 .*height=48 from the model's metadata"):
        load_model(m)
