"""Stateful streams, host logic and the agent's session table (no process started; e2e: test_stream_e2e.py)."""

import time

import numpy as np
import pytest
from harness import streams

from edgekit.errors import DataError, ModelError
from edgekit.model import load_model
from edgekit.stream import StreamSpec, load_sequences, parse_stream, plan
from edgekit.stream_run import StreamBackend, stream_metrics
from edgekit.tasks import parse_task
from edgekit.tasks.evaluate import evaluate
from edgekit_agent.errors import AgentError
from edgekit_agent.sessions import SessionTable

MANIFEST = {
    "inputs": [
        {"name": "x", "shape": [1, 4], "dtype": "float32"},
        {"name": "state", "shape": [1, 4], "dtype": "float32"},
    ],
    "outputs": [{"name": "out", "shape": [1, 1], "dtype": "float32"}, {"name": "stateN", "shape": [1, 4]}],
    "stream": {"state": {"state": "stateN"}},
}


@pytest.fixture
def model(tmp_path):
    return load_model(streams.stateful(tmp_path / "stateful.onnx"))


def test_parse_stream_forms():
    assert parse_stream({"state": "stateN"}) == StreamSpec({"state": "stateN"})
    assert parse_stream(["state=stateN", "h=hN"]).pairs == {"state": "stateN", "h": "hN"}
    assert parse_stream("state=stateN,h=hN").pairs == {"state": "stateN", "h": "hN"}
    assert parse_stream(None) is None
    for bad in ("state", "=stateN", "state=", []):
        with pytest.raises(DataError, match="INPUT=OUTPUT|empty"):
            parse_stream(bad)
    with pytest.raises(DataError, match="twice"):
        parse_stream(["state=stateN", "state=out"])


def test_the_mapping_is_checked_against_the_model(model):
    with pytest.raises(ModelError, match="no input 'hidden'.*inputs are \\['x', 'state'\\]"):
        plan({"hidden": "stateN"}, model)
    with pytest.raises(ModelError, match="no output 'stateM'"):
        plan({"state": "stateM"}, model)
    with pytest.raises(ModelError, match="output 'out' has shape \\[1, 1\\] but input 'state' takes \\[1, 4\\]"):
        plan({"state": "out"}, model)
    with pytest.raises(ModelError, match="every input is a state"):
        plan({"state": "stateN", "x": "stateN"}, model)
    assert plan({"state": "stateN"}, model).to_dict() == {"state": {"state": "stateN"}}


def test_sequences_from_a_folder_or_one_file(tmp_path, model):
    folder = streams.sequences(tmp_path / "seqs", n=3, steps=5)
    spec = StreamSpec({"state": "stateN"})
    seqs = load_sequences(folder, model.inputs, spec)
    assert [len(s.steps) for s in seqs] == [5, 5, 5]
    assert seqs[0].steps[0]["x"].shape == (1, 4)
    assert np.all(seqs[0].initial["state"] == 0)
    init = np.full((1, 4), 0.25, np.float32)
    np.savez(tmp_path / "one.npz", x=streams.sequence(7, 0), state=init)
    (one,) = load_sequences(tmp_path / "one.npz", model.inputs, spec)
    assert len(one.steps) == 7 and np.array_equal(one.initial["state"], init)


def test_bad_sequence_data_is_refused_with_what_to_do(tmp_path, model):
    spec = StreamSpec({"state": "stateN"})
    np.savez(tmp_path / "wrong.npz", x=np.zeros((5, 4), np.float32))
    with pytest.raises(DataError, match=r"shape \[5, 4\]; expected \[T, 1, 4\]"):
        load_sequences(tmp_path / "wrong.npz", model.inputs, spec)
    np.savez(tmp_path / "missing.npz", y=np.zeros((5, 1, 4), np.float32))
    with pytest.raises(DataError, match="missing: \\['x'\\]"):
        load_sequences(tmp_path / "missing.npz", model.inputs, spec)
    np.savez(tmp_path / "state.npz", x=np.zeros((5, 1, 4), np.float32), state=np.zeros((2, 4), np.float32))
    with pytest.raises(DataError, match="initial state 'state' has shape \\[2, 4\\]"):
        load_sequences(tmp_path / "state.npz", model.inputs, spec)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds none"):
        load_sequences(tmp_path / "empty", model.inputs, spec)
    np.save(tmp_path / "x.npy", np.zeros((5, 1, 4), np.float32))
    with pytest.raises(DataError, match="use an .npz"):
        load_sequences(tmp_path / "x.npy", model.inputs, spec)


def test_fidelity_samples_carry_the_reference_state_and_candidates_their_own(tmp_path, model):
    p = plan({"state": "stateN"}, model)
    ds = p.load(streams.sequences(tmp_path / "seqs", n=2, steps=6), model.inputs)
    assert ds.meta["stream"]["lengths"] == [6, 6] and len(ds) == 12
    expected = streams.by_hand(streams.sequence(6, 1))
    assert np.allclose(ds.samples[6 + 3]["state"], expected[2]["stateN"], atol=1e-6)

    class Biased:  # a candidate whose state drifts a little at every step
        name = "fake"

        def execution(self, model_path, threads=None, session=None):
            class Run:
                def run(self, feed):
                    out = streams.by_hand([feed["x"]], state=feed["state"])[0]
                    return {"out": out["out"], "stateN": out["stateN"] + 0.01}

                def close(self):
                    pass

            return Run()

    outputs = StreamBackend(Biased(), p.spec, [6, 6]).predict("model.bin", ds.samples)
    reference = [streams.by_hand(streams.sequence(6, k)) for k in (0, 1)]
    flat = reference[0] + reference[1]
    m = stream_metrics(p.spec, [6, 6], flat, outputs)
    drift = m["state_drift"]["state"]
    # fed back, the error grows towards 0.01 / (1 - 0.5) = 0.02; independent feeds would stay at 0.01
    assert 0.019 < drift["max_abs_error_at_end"] < 0.0201
    assert m["sequences"] == 2 and m["steps"] == 12


def test_synthetic_sequences_when_no_data(model):
    ds = plan({"state": "stateN"}, model).synthetic()
    assert ds.synthetic and sum(ds.meta["stream"]["lengths"]) == len(ds) > 0


def test_vad_task_agreement_per_frame():
    spec = parse_task("vad")
    ref = [{"output": np.array([[p]], np.float32)} for p in (0.1, 0.6, 0.9, 0.4)]
    cand = [{"output": np.array([[p]], np.float32)} for p in (0.2, 0.55, 0.45, 0.4)]
    section = evaluate(spec, ref, cand)
    assert section["primary"] == "frame_agreement" and section["score"] == pytest.approx(0.75)
    assert section["metrics"]["speech_frames_reference"] == pytest.approx(0.5)
    assert evaluate(parse_task("vad,thresh=0.3"), ref, cand)["score"] == pytest.approx(1.0)


def _step(table, sid, x, version="v1", manifest=MANIFEST):
    slot = table.open("m", sid, version, manifest)
    try:
        feeds = slot.feeds({"x": x})
        out = streams.by_hand([feeds["x"]], state=feeds["state"])[0]
        kept = slot.keep(out)
        return feeds, kept, slot.meta()
    finally:
        slot.release()


def test_sessions_keep_state_per_session_and_version():
    table = SessionTable(max_sessions=8, ttl_s=60)
    x = np.ones((1, 4), np.float32)
    feeds, kept, meta = _step(table, "a", x)
    assert np.all(feeds["state"] == 0) and list(kept) == ["out"] and meta == {"id": "a", "step": 1}
    feeds, _, meta = _step(table, "a", x)
    assert np.allclose(feeds["state"], streams.by_hand([x])[0]["stateN"]) and meta["step"] == 2
    feeds, _, _ = _step(table, "b", x)
    assert np.all(feeds["state"] == 0)  # another session starts fresh
    feeds, _, meta = _step(table, "a", x, version="v2")
    assert np.all(feeds["state"] == 0) and "v1 was dropped" in meta["reset"] and meta["step"] == 1
    assert table.delete("m", "a")["deleted"]
    with pytest.raises(AgentError) as e:
        table.delete("m", "a")
    assert e.value.status == 404
    assert table.forget("m") == 1


def test_sessions_are_bounded_by_count_and_idle_time():
    table = SessionTable(max_sessions=2, ttl_s=0.2)
    x = np.ones((1, 4), np.float32)
    for sid in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" arrives
        _step(table, sid, x)
    assert [s["id"] for s in table.list("m")] == ["a", "c"] and table.evicted == 1
    time.sleep(0.3)
    assert table.list("m") == [] and table.expired == 2


def test_sessions_refuse_bad_ids_and_models_without_a_stream():
    table = SessionTable()
    for bad in ("", "a b", "x" * 129, 5, "a/b"):
        with pytest.raises(AgentError) as e:
            table.open("m", bad, "v1", MANIFEST)
        assert e.value.status == 400
    with pytest.raises(AgentError, match="declares no stream.*--stream") as e:
        table.open("m", "a", "v1", {k: v for k, v in MANIFEST.items() if k != "stream"})
    assert e.value.status == 400
    dynamic = dict(MANIFEST, inputs=[MANIFEST["inputs"][0], {"name": "state", "shape": ["b", 4], "dtype": "float32"}])
    slot = table.open("m", "d", "v1", dynamic)
    try:  # a dynamic dimension of the initial state is 1, as in the build's sequences
        assert slot.feeds({"x": np.ones((1, 4), np.float32)})["state"].shape == (1, 4)
    finally:
        slot.release()


def test_a_stateful_probability_output_is_inferred_as_vad(tmp_path):
    import onnxruntime as ort

    from edgekit.tasks import infer_task

    path = streams.stateful(tmp_path / "m.onnx")
    feed = {"x": np.ones((1, 4), np.float32), "state": np.zeros((1, 4), np.float32)}
    out = dict(zip(["out", "stateN"], ort.InferenceSession(str(path)).run(["out", "stateN"], feed)))
    inferred = infer_task(path, out, feed)
    assert inferred.spec.family == "vad" and "stateN the shape of an input" in inferred.reason
    # without the state evidence (no sample inputs), or with a second output that is not a state: not a guess
    assert infer_task(path, out, None).spec.family != "vad"
    assert infer_task(path, {"out": out["out"], "stateN": np.ones((1, 5), np.float32)}, feed).spec.family != "vad"


def test_silero_vad_is_inferred_as_vad():
    import sys

    import onnxruntime as ort

    sys.path.insert(0, str(streams.ZOO))
    import fetch  # noqa: PLC0415

    from edgekit.tasks import infer_task

    model = fetch.fetch_all(fetch.zoo_dir(), ["silero_vad"])["silero_vad"]
    rng = np.random.default_rng(0)
    feed = {
        "input": (0.1 * rng.standard_normal((1, 576))).astype(np.float32),
        "state": np.zeros((2, 1, 128), np.float32),
        "sr": np.array(16000, np.int64),
    }
    out = dict(zip(["output", "stateN"], ort.InferenceSession(str(model)).run(["output", "stateN"], feed)))
    assert infer_task(model, out, feed).spec.family == "vad"


def test_inputs_every_sequence_holds_once_are_named(tmp_path, model):
    """A data input given once per sequence (Silero's ``sr``) is listed in ``meta["stream"]["held_once"]``: a backend
    may then fix it in the graph (edgekit.build_specialise); one given per step in any sequence is not."""
    p = plan({"state": "stateN"}, model)
    (tmp_path / "once").mkdir()
    for k in range(2):
        np.savez(tmp_path / "once" / f"s{k}.npz", x=np.full((1, 4), 0.5, np.float32))
    ds = p.load(tmp_path / "once", model.inputs)
    assert ds.meta["stream"] == {"lengths": [1, 1], "held_once": ["x"]}
    np.savez(tmp_path / "once" / "s2.npz", x=streams.sequence(3, 0))
    assert p.load(tmp_path / "once", model.inputs).meta["stream"]["held_once"] == []


def test_a_growing_state_on_a_static_shape_backend_is_refused_before_any_work(tmp_path):
    """A KV cache declared [1:9] long cannot become a static TFLite model: the build says so and names the way out."""
    import edgekit
    from edgekit.errors import ConversionError

    with pytest.raises(ConversionError, match=r"stream state 'past\.k'.*tflite runs static shapes only.*ort, openvino"):
        edgekit.build(
            tmp_path / "not-read.onnx", "host", tmp_path / "out", backend="tflite", precision="fp32",
            stream={"past.k": "present.k"}, input_shapes=["ids=1,1", "past.k=1,8,[1:9],36"],
        )  # fmt: skip
    assert not (tmp_path / "out").exists()
