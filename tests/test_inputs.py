"""Inputs of every kind: int64/bool/0-d inputs, a batch axis that is not 0, and the sample formats that feed them.

The model (``harness.mixed``) has int64 token ids, a bool mask, a 0-d int64 ``sr``, a float ``state`` whose batch
axis is 1 and a float input named ``y`` (a label key). Every feed must be an ndarray of the model's dtype and rank.
"""

import json

import numpy as np
import pytest
from harness.mixed import LENGTH, VOCAB, mixed_inputs_model, mixed_samples

from edgekit.data import load_dataset, synthetic_dataset
from edgekit.data_formats import parse_input_values, parse_sample_axes
from edgekit.errors import DataError
from edgekit.model import integer_ranges, load_model


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    path = mixed_inputs_model(tmp_path_factory.mktemp("mixed") / "mixed.onnx")
    return path, load_model(path, {"state": [2, 1, 4]})


def _check_feeds(ds, model):
    for feed in ds.samples:
        for spec in model.inputs:
            a = feed[spec.name]
            assert isinstance(a, np.ndarray), (spec.name, type(a))
            assert str(a.dtype) == spec.dtype and list(a.shape) == spec.shape, (spec.name, a.dtype, a.shape)


def _reference(path, ds):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(None, feed) for feed in ds.samples]


def test_npz_with_a_scalar_per_sample_and_a_sample_axis(tmp_path, mixed):
    path, model = mixed
    s = mixed_samples(5)
    np.savez(tmp_path / "d.npz", sr=np.full(5, 16000, np.int64), **s)
    ds = load_dataset(tmp_path / "d.npz", model.inputs, sample_axes={"state": 1})
    assert len(ds) == 5 and ds.labels is None  # 'y' is a model input: fed, not taken as labels
    _check_feeds(ds, model)
    assert ds.samples[0]["sr"].shape == () and int(ds.samples[0]["sr"]) == 16000
    np.testing.assert_array_equal(ds.samples[3]["state"][:, 0], s["state"][:, 3])
    np.testing.assert_array_equal(ds.samples[3]["y"][0], s["y"][3])
    assert len(_reference(path, ds)) == 5  # onnxruntime takes every feed as it is


def test_npz_scalar_given_once_is_fed_with_every_sample(tmp_path, mixed):
    _, model = mixed
    np.savez(tmp_path / "d.npz", sr=np.array(8000, np.int64), labels=np.arange(4), **mixed_samples(4))
    ds = load_dataset(tmp_path / "d.npz", model.inputs, sample_axes=parse_sample_axes(["state=1"]))
    assert len(ds) == 4 and list(ds.labels) == [0, 1, 2, 3]
    assert all(int(f["sr"]) == 8000 for f in ds.samples)
    _check_feeds(ds, model)


def test_npz_without_the_sample_axis_says_which_option_fixes_it(tmp_path, mixed):
    _, model = mixed
    np.savez(tmp_path / "d.npz", sr=np.array(16000), **mixed_samples(3))
    with pytest.raises(DataError, match=r"'state'.*--sample-axis"):
        load_dataset(tmp_path / "d.npz", model.inputs)


def test_missing_constant_input_is_given_with_input_value(tmp_path, mixed):
    _, model = mixed
    np.savez(tmp_path / "d.npz", **mixed_samples(3))
    with pytest.raises(DataError, match=r"missing: \['sr'\].*--input-value"):
        load_dataset(tmp_path / "d.npz", model.inputs, sample_axes={"state": 1})
    ds = load_dataset(
        tmp_path / "d.npz", model.inputs, sample_axes={"state": 1}, input_values=parse_input_values(["sr=16000"])
    )
    assert ds.samples[2]["sr"].dtype == np.int64 and ds.samples[2]["sr"].shape == ()


def test_input_value_and_data_may_not_both_give_an_input(tmp_path, mixed):
    _, model = mixed
    np.savez(tmp_path / "d.npz", sr=np.array(16000), **mixed_samples(3))
    with pytest.raises(DataError, match=r"\['sr'\] and --input-value gives them too"):
        load_dataset(tmp_path / "d.npz", model.inputs, sample_axes={"state": 1}, input_values={"sr": 8000})


def test_wrong_sample_axis_shape_names_the_expected_one(tmp_path, mixed):
    _, model = mixed
    s = mixed_samples(3)
    s["state"] = s["state"].transpose(1, 0, 2)  # (3, 2, 4): samples on axis 0, but --sample-axis says 1
    np.savez(tmp_path / "d.npz", sr=np.array(16000), **s)
    with pytest.raises(DataError, match=r"shape \[3, 2, 4\]; expected \[2, N, 4\]"):
        load_dataset(tmp_path / "d.npz", model.inputs, sample_axes={"state": 1})


def test_folder_of_npz_one_sample_each(tmp_path, mixed):
    path, model = mixed
    s = mixed_samples(3)
    folder = tmp_path / "samples"
    folder.mkdir()
    for i in range(3):
        np.savez(
            folder / f"{i:03d}.npz",
            ids=s["ids"][i],
            mask=s["mask"][i],
            sr=np.array(16000),  # int64 by default
            state=s["state"][:, i : i + 1],
            y=s["y"][i],  # [4] for [1, 4]: the batch axis of 1 may be left out
            label=np.array(i),
        )
    ds = load_dataset(folder, model.inputs)
    assert len(ds) == 3 and list(ds.labels) == [0, 1, 2]
    _check_feeds(ds, model)
    np.testing.assert_array_equal(ds.samples[1]["ids"], s["ids"][1])
    assert len(_reference(path, ds)) == 3


def test_json_lines_take_the_dtype_from_the_model(tmp_path, mixed):
    path, model = mixed
    s = mixed_samples(2)
    lines = [
        {
            "ids": s["ids"][i].tolist(),
            "mask": s["mask"][i].astype(int).tolist(),  # 0/1 for a bool mask
            "sr": 16000,
            "state": s["state"][:, i : i + 1].tolist(),
            "y": s["y"][i].tolist(),
        }
        for i in range(2)
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    ds = load_dataset(tmp_path / "d.jsonl", model.inputs)
    _check_feeds(ds, model)
    np.testing.assert_array_equal(ds.samples[1]["mask"], s["mask"][1])
    np.testing.assert_allclose(ds.samples[1]["state"][:, 0], s["state"][:, 1])
    assert ds.samples[0]["sr"].shape == ()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"ids": [[1.5] * LENGTH]}, r"'ids'.*int64.*whole numbers"),
        ({"mask": [[2] * LENGTH]}, r"'mask'.*bool.*masks 0/1"),
        ({"ids": [[1, 2]]}, r"'ids' has shape \[1, 2\]; the model takes \[1, 6\]"),
        ({"ids": [[1, 2], [3]]}, r"'ids'"),
        ({"extra": 1}, r"unknown \['extra'\]"),
    ],
)
def test_json_lines_refuse_what_does_not_fit(tmp_path, mixed, change, message):
    _, model = mixed
    line = {"ids": [[1] * LENGTH], "mask": [[1] * LENGTH], "sr": 16000, "state": [[[0.0] * 4]] * 2, "y": [[0.0] * 4]}
    line.update(change)
    (tmp_path / "d.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(DataError, match=message):
        load_dataset(tmp_path / "d.jsonl", model.inputs)


def test_jsonl_with_a_bad_line_names_it(tmp_path, mixed):
    _, model = mixed
    (tmp_path / "d.jsonl").write_text("{not json}\n")
    with pytest.raises(DataError, match=r"d.jsonl:1 is not valid JSON"):
        load_dataset(tmp_path / "d.jsonl", model.inputs)


def test_synthetic_integer_inputs_are_drawn_in_range(mixed):
    _, model = mixed
    ranges = integer_ranges(model.proto, model.inputs)
    assert ranges == {"ids": (0, VOCAB), "sr": [16000]}
    ds = synthetic_dataset(model.inputs, n=16, proto=model.proto)
    _check_feeds(ds, model)
    ids = np.stack([f["ids"] for f in ds.samples])
    assert ids.min() >= 0 and ids.max() < VOCAB and ids.max() > 10  # the whole table, not only 0..9
    assert all(int(f["sr"]) == 16000 for f in ds.samples)
    assert ds.describe()["non_float_inputs"] == {
        "ids": f"0..{VOCAB - 1} (ids into a table of {VOCAB} rows)",
        "mask": "bool mask: a run of True, then False",
        "sr": "one of [16000] (the values the graph compares it with)",
    }
    masks = np.stack([f["mask"] for f in ds.samples])
    assert masks[..., 0].all() and (~masks).any()  # a run of True first, never an all-False mask


def test_bad_sample_axis_and_input_value_options():
    with pytest.raises(DataError, match="bad --sample-axis"):
        parse_sample_axes(["state"])
    with pytest.raises(DataError, match="bad --input-value"):
        parse_input_values(["sr=abc"])
    assert parse_input_values(["sr=16000", "t=0.5", "m=true", "v=[1,2]"]) == {
        "sr": 16000,
        "t": 0.5,
        "m": True,
        "v": [1, 2],
    }


def test_optional_input_keeps_its_default(tmp_path):
    """A graph input with an initializer default is not fed: the build, its manifest and its data leave it out."""
    import edgekit

    path = mixed_inputs_model(tmp_path / "optional.onnx", batch=1, optional=True)
    model = load_model(path, {"state": [2, 1, 4]})
    assert [s.name for s in model.inputs] == ["ids", "mask", "sr", "state", "y"]
    np.savez(tmp_path / "d.npz", sr=np.array(16000), **mixed_samples(4))
    report = edgekit.build(
        path, "host", tmp_path / "out", backend="ort", precision="fp32", val=tmp_path / "d.npz", sample_axes=["state=1"]
    )
    assert report["fidelity"]["passed"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "gain" not in [i["name"] for i in manifest["inputs"]]


@pytest.mark.parametrize(
    "dtype, value, ok",
    [
        ("int32", [[1, 2, 3]], True),
        ("int32", [[1, 2, 2**40]], False),  # does not fit int32
        ("uint8", [[0, 255, 7]], True),
        ("uint8", [[0, 256, 7]], False),
        ("uint8", [[-1, 2, 3]], False),
        ("bool", [[1, 0, 1]], True),
        ("float16", [[0.5, 1, 2]], True),
    ],
)
def test_feeds_of_every_integer_width(dtype, value, ok):
    from edgekit.data_formats import as_feed
    from edgekit.model import TensorSpec

    spec = TensorSpec("t", [1, 3], dtype)
    if ok:
        a = as_feed(spec, value, "line 1", lenient=True)
        assert str(a.dtype) == dtype and a.shape == (1, 3)
        np.testing.assert_array_equal(a, np.asarray(value))
    else:
        with pytest.raises(DataError, match=f"'t'.*{dtype}"):
            as_feed(spec, value, "line 1", lenient=True)
