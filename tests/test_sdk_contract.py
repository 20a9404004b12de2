"""One contract for every SDK (Python, C, Java, TypeScript): the same scenario against a real agent.

Each language's runner (``tests/harness/sdk_<lang>.py``) plays the scenario with its SDK: list, load, infer with
float32/int64/uint8 inputs on a multi-input model, a 4 MiB tensor each way, a wrong shape (the agent's 400 as the
SDK's error), auth without, with a wrong and with the right token, annotate, and a rollback during traffic.
Every output is compared bit for bit with the Python client's.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from harness.agents import AgentRoots
from harness.sdk_contract import BIG, array, big_model, mix_inputs, mix_model, play, runners, samples, tensors

import edgekit
from edgekit.deployer import deploy, open_device
from edgekit_sdk import AgentClient

pytestmark = pytest.mark.e2e
RUNNERS = runners()
LANGS = sorted(RUNNERS, key=lambda k: (k != "python", k))  # the reference first


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """A local agent serving ``mix`` (v1 with K = 2, then v2 with K = 3) and ``big``."""
    base = tmp_path_factory.mktemp("sdk")
    bundles = {}
    for name, model, data in (
        ("mix-v1", mix_model(base / "mix1.onnx", 2.0), mix_inputs(0)),
        ("mix-v2", mix_model(base / "mix2.onnx", 3.0), mix_inputs(0)),
        ("big", big_model(base / "big.onnx"), {"x": np.ones(BIG, np.float32)}),
    ):
        out = base / name
        edgekit.build(model, "host", out, backend="ort", precision="fp32", name=name.split("-")[0],
                      val=samples(base / f"{name}.npz", data, n=2 if name == "big" else 8))  # fmt: skip
        bundles[name] = out
    roots = AgentRoots(base)
    dev = open_device("local", device_root=str(roots("device")))
    try:
        for b in ("mix-v1", "mix-v2", "big"):
            deploy(bundles[b], dev, bench=False)
        versions = [json.loads((bundles[b] / "manifest.json").read_text())["id"] for b in ("mix-v1", "mix-v2")]
        client = AgentClient.local(root=str(dev.root))
        yield {"client": client, "port": client.port, "token": client.token, "v1": versions[0], "v2": versions[1]}
        client.close()
    finally:
        dev.close()
        roots.stop_all()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each language's runner, built once: ``{lang: argv}`` (a missing compiler fails the test that needs it)."""
    cache: dict = {}

    def get(lang):
        if lang not in cache:
            cache[lang] = RUNNERS[lang](tmp_path_factory.mktemp(f"sdk-{lang}"))
        return cache[lang]

    return get


def _scenario(agent, steps):
    return {"host": "127.0.0.1", "port": agent["port"], "token": agent["token"], "steps": steps}


def _main_steps(agent):
    rng = np.random.default_rng(7)
    big = rng.standard_normal(BIG).astype(np.float32)
    wrong = dict(mix_inputs(1), a=np.zeros((1, 5), np.float32))
    return [
        {"op": "health"},
        {"op": "models"},
        {"op": "load", "model": "mix"},
        {"op": "infer", "model": "mix", "inputs": tensors(mix_inputs(1))},
        {"op": "infer", "model": "mix", "inputs": tensors(mix_inputs(2)), "token": None},  # open on loopback
        {"op": "infer", "model": "big", "inputs": tensors({"x": big})},
        {"op": "infer", "model": "mix", "inputs": tensors(wrong)},
        {"op": "infer", "model": "nosuch", "inputs": tensors(mix_inputs(1))},
        {"op": "unload", "model": "mix", "token": None},  # mutating: the token is needed, on loopback too
        {"op": "unload", "model": "mix", "token": "not-the-token"},
        {"op": "unload", "model": "mix"},
        {"op": "load", "model": "mix"},
    ]


_runs: dict = {}


def _run_main(lang, agent, built, tmp_path):
    agent["client"].rollback("mix", agent["v2"])
    if lang not in _runs:
        _runs[lang] = play(built(lang), _scenario(agent, _main_steps(agent)), tmp_path)
    return _runs[lang]


@pytest.mark.parametrize("lang", LANGS)
def test_calls_answer_as_the_python_client_does(lang, agent, built, tmp_path):
    got = _run_main(lang, agent, built, tmp_path)
    ref = _run_main("python", agent, built, tmp_path)
    health, models, load, infer, open_infer, big, wrong, missing, no_token, bad_token, unload, reload = got
    assert health["ok"] and health["result"].keys() == ref[0]["result"].keys()
    assert sorted(m["name"] for m in models["result"]) == ["big", "mix"]
    assert load["ok"] and reload["ok"] and unload["ok"], (load, unload, reload)
    for step, (mine, theirs) in enumerate(zip(got[3:6], ref[3:6]), 3):
        assert mine["ok"], (step, mine)
        outs = mine["result"]["outputs"]
        assert {k: (v["dtype"], v["shape"]) for k, v in outs.items()} == {
            k: (v["dtype"], v["shape"]) for k, v in theirs["result"]["outputs"].items()
        }
        assert {k: v["b64"] for k, v in outs.items()} == {k: v["b64"] for k, v in theirs["result"]["outputs"].items()}
        meta = mine["result"]["meta"]
        assert meta["version"] == agent["v2"] or step == 5, meta
        assert isinstance(meta["inference_ms"], float) and meta["request_id"]
    # the values themselves (not only equal to Python's): y = a * 3 + sum(ids), n = ids + 1, z = pix / 2
    x = mix_inputs(1)
    outs = {k: array(v) for k, v in infer["result"]["outputs"].items()}
    assert np.array_equal(outs["n"], x["ids"] + 1) and outs["n"].dtype == np.int64
    assert np.array_equal(outs["z"], x["pix"].astype(np.float32) / 2)
    assert np.allclose(outs["y"], x["a"] * 3 + np.float32(x["ids"].sum()))
    # errors: the agent's status and message, as the SDK's error
    for mine, theirs, status in ((wrong, ref[6], 400), (missing, ref[7], 404), (bad_token, ref[9], 401)):
        assert not mine["ok"] and mine["status"] == status == theirs["status"], (mine, theirs)
        assert mine["message"] == theirs["message"] and mine["message"]
    assert "'a'" in wrong["message"] and "[1, 5]" in wrong["message"]
    assert not no_token["ok"] and no_token["status"] == 401 and no_token["message"] == ref[8]["message"]


@pytest.mark.parametrize("lang", LANGS)
def test_annotate_takes_the_request_id_of_an_infer(lang, agent, built, tmp_path):
    rid = _run_main(lang, agent, built, tmp_path)[3]["result"]["meta"]["request_id"]
    steps = [{"op": "annotate", "request_id": rid, "pre_ms": 1.5, "post_ms": 0.25}]
    (got,) = play(built(lang), _scenario(agent, steps), tmp_path)
    assert got["ok"] and got["result"]["request_id"] == rid, got


@pytest.mark.parametrize("lang", LANGS)
def test_a_rollback_during_traffic_loses_no_request(lang, agent, built, tmp_path):
    """A runner sends 600 requests on one connection; after the agent has served 50 of them, the host rolls the
    model back to v1. Every request is answered, first by v2, then by v1."""
    admin = agent["client"]
    admin.rollback("mix", agent["v2"])

    def served():
        for line in admin.metrics().splitlines():
            if line.startswith("edgekit_requests_total{") and 'model="mix"' in line and 'outcome="ok"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
        return 0

    start, stop = served(), threading.Event()

    def roll():
        while not stop.is_set():
            if served() - start >= 50:
                admin.rollback("mix", agent["v1"])
                return
            time.sleep(0.01)

    t = threading.Thread(target=roll, daemon=True)
    t.start()
    try:
        steps = [{"op": "infer_loop", "model": "mix", "inputs": tensors(mix_inputs(3)), "count": 600}]
        (got,) = play(built(lang), _scenario(agent, steps), tmp_path)
    finally:
        stop.set()
        t.join(10)
    assert got["ok"], got
    assert got["result"]["ok"] == 600 and not got["result"]["errors"], got["result"]["errors"][:3]
    assert got["result"]["versions"] == [agent["v2"], agent["v1"]], got["result"]["versions"]
