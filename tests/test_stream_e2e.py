"""Streams end to end: build with --stream (ONNX Runtime, OpenVINO), deploy to a local agent, stream over HTTP with
sessions, and compare with the sequence run by hand in ONNX Runtime and in numpy."""

import json

import numpy as np
import onnxruntime as ort
import pytest
from harness import streams

from edgekit.cli import main
from edgekit_sdk import AgentHTTPError

pytestmark = pytest.mark.e2e


def _by_ort(model, xs):
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    state, outs = np.zeros((1, streams.WIDTH), np.float32), []
    for x in xs:
        out, state = sess.run(["out", "stateN"], {"x": x, "state": state})
        outs.append(out)
    return outs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream")
    model = streams.stateful(d / "stateful.onnx")
    seqs = streams.sequences(d / "seqs", n=3, steps=20)
    out = {}
    for backend, precision in (("ort", "int8"), ("openvino", "fp32")):
        bundle = d / f"{backend}-{precision}"
        argv = [
            "build", str(model), "--profile", "host", "--backend", backend, "--precision", precision,
            "--calib", str(seqs), "--stream", "state=stateN", "--task", "vad", "--name", f"vad_{backend}",
            "-o", str(bundle), "--no-cache", "--json",
        ]  # fmt: skip
        assert main(argv) == 0
        out[backend] = bundle
    return model, out


def test_the_report_and_manifest_describe_the_stream(built):
    _, bundles = built
    for bundle in bundles.values():
        report = json.loads((bundle / "report.json").read_text())
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["stream"] == {"state": {"state": "stateN"}}
        assert report["stream"]["sequences"] == 3 and report["stream"]["steps"] == 60
        last = report["fidelity"]["steps"][-1]
        drift = last["stream"]["state_drift"]["state"]
        assert drift["output"] == "stateN" and drift["max_abs_error_at_end"] < 0.1 * drift["reference_max_abs"]
        assert last["task"]["family"] == "vad" and last["task"]["metrics"]["frame_agreement"] >= 0.95
        assert "state state: max|err|" in (bundle / "report.txt").read_text()


def test_streaming_with_sessions_matches_the_sequence_run_by_hand(built, agent_roots):
    from edgekit.deployer import deploy, open_device

    model, bundles = built
    dev = open_device("local", device_root=str(agent_roots("dev")))
    try:
        for bundle in bundles.values():
            deploy(bundle, dev, bench=False)
        client = dev.client
        xs = streams.sequence(12, 7)
        expected = _by_ort(model, xs)
        hand = streams.by_hand(xs)
        assert all(np.allclose(e, h["out"], atol=1e-5) for e, h in zip(expected, hand))
        name = "vad_openvino"
        with client.stream(name) as a, client.stream(name) as b:
            got_a = [a.step({"x": x})["out"] for x in xs[:6]]
            got_b = [b.step({"x": x})["out"] for x in xs]  # interleaved: b's state is its own
            got_a += [a.step({"x": x})["out"] for x in xs[6:]]
            assert a.last_meta["session"] == {"id": a.session, "step": 12}
            assert sorted(s["id"] for s in client.sessions(name)["sessions"]) == sorted([a.session, b.session])
        for got in (got_a, got_b):
            assert np.allclose(np.concatenate(got), np.concatenate(expected), atol=1e-5)
        assert client.sessions(name)["sessions"] == []  # leaving the block ended both

        with client.stream("vad_ort", session="mic-1") as s:  # int8: close to the reference over the whole stream
            steps = s.run({"x": x} for x in xs)
            assert set(steps[0]) == {"out"}  # the state stays on the agent
            got = [o["out"] for o in steps]
            assert max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected)) < 0.05
            assert np.mean([(g > 0.5) == (e > 0.5) for g, e in zip(got, expected)]) >= 0.9
            s.reset()
            again = s.step({"x": xs[0]})["out"]
            assert np.allclose(again, got[0]) and s.last_meta["session"]["step"] == 1

        # JSON with "session" in the body works the same; the state is not sent back
        first = client.request(
            "POST", f"/v1/models/{name}/infer", {"inputs": {"x": xs[0].tolist()}, "session": "json-1"}
        )
        assert set(first["outputs"]) == {"out"} and first["session"]["step"] == 1
        # an app may still send the whole state itself, without a session
        plain = client.infer(name, {"x": xs[0], "state": np.zeros((1, 4), np.float32)})
        assert set(plain) == {"out", "stateN"}
        with pytest.raises(AgentHTTPError) as e:
            client.infer(name, {"x": xs[0]}, session="bad id")
        assert e.value.status == 400
    finally:
        dev.close()


def test_a_model_without_a_stream_refuses_a_session(tiny_bundle, agent_roots):
    from edgekit.deployer import deploy, open_device

    dev = open_device("local", device_root=str(agent_roots("dev")))
    try:
        deploy(tiny_bundle, dev, bench=False)
        x = np.zeros((1, 3, 16, 16), np.float32)
        with pytest.raises(AgentHTTPError) as e:
            dev.client.infer("tiny", {"input": x}, session="s1")
        assert e.value.status == 400 and "--stream" in e.value.message
    finally:
        dev.close()


def test_a_bad_stream_mapping_is_refused_before_any_work(tmp_path, capsys):
    model = streams.stateful(tmp_path / "m.onnx")
    out = tmp_path / "b"
    code = main(["build", str(model), "--profile", "host", "--stream", "state=out", "-o", str(out)])
    assert code == 1 and not out.exists()
    assert "output 'out' has shape [1, 1] but input 'state' takes [1, 4]" in capsys.readouterr().err


def test_a_new_version_starts_its_sessions_again(built, agent_roots, tmp_path):
    from edgekit.deployer import deploy, open_device

    model, bundles = built
    seqs = streams.sequences(tmp_path / "seqs", n=1, steps=8)
    update = tmp_path / "update"  # the same model name, another build: another version
    argv = ["build", str(model), "--profile", "host", "--backend", "ort", "--precision", "fp32",
            "--calib", str(seqs), "--stream", "state=stateN", "--name", "vad_openvino", "-o", str(update),
            "--no-cache", "--json"]  # fmt: skip
    assert main(argv) == 0
    xs = streams.sequence(6, 3)
    expected = np.concatenate(_by_ort(model, xs))
    dev = open_device("local", device_root=str(agent_roots("dev")))
    try:
        deploy(bundles["openvino"], dev, bench=False)
        s = dev.client.stream("vad_openvino", session="s")
        first = [s.step({"x": x})["out"] for x in xs[:3]]
        deploy(update, dev, bench=False)  # (the deploy opens a new client; the session is the agent's, by its id)
        s = dev.client.stream("vad_openvino", session="s")
        after = s.step({"x": xs[0]})["out"]  # served by the new version: from the initial state again
        assert s.last_meta["session"]["step"] == 1 and "was dropped" in s.last_meta["session"]["reset"]
        assert np.allclose(after, first[0], atol=1e-5) and np.allclose(np.concatenate(first), expected[:3], atol=1e-5)
        dev.client.remove("vad_openvino")  # removing the model drops its sessions
        deploy(update, dev, bench=False)
        assert dev.client.sessions("vad_openvino")["sessions"] == []
    finally:
        dev.close()
