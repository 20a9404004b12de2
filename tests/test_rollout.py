"""Staged rollouts: the plan, the gate and the state on synthetic field numbers (fast), a controller driven through
a scripted delivery, and real agents on local:// devices with real traffic (e2e)."""

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest
from harness import one_json, run_cli
from onnx import TensorProto, helper, numpy_helper

from edgekit.errors import EdgekitError
from edgekit.field import FieldStore
from edgekit.rollout import (
    Controller,
    RolloutState,
    Thresholds,
    assign,
    effective_waves,
    judge,
    parse_duration,
    parse_fraction,
    parse_waves,
    start,
    wave_numbers,
)
from edgekit.rollout import state as st


# -- plan ---------------------------------------------------------------------------------
def test_waves_parse_and_bad_ones_say_what_to_write():
    assert [str(w) for w in parse_waves("1%,10%,50%,100%")] == ["1%", "10%", "50%", "100%"]
    assert [str(w) for w in parse_waves(" 2, 5 ,100% ")] == ["2", "5", "100%"]
    for bad, says in (
        ("", "--waves is empty"),
        ("10%,x", "bad wave size 'x'"),
        ("150%", "at most 100%"),
        ("0", "above 0"),
        ("2.5", "whole number"),
    ):
        with pytest.raises(EdgekitError, match=says):
            parse_waves(bad)
    assert parse_duration("30m") == 1800 and parse_duration("1s") == 1 and parse_duration("250ms") == 0.25
    assert parse_duration("2") == 2
    with pytest.raises(EdgekitError, match="bad --min-soak '3 weeks'"):
        parse_duration("3 weeks")
    assert parse_fraction("10%", "f") == pytest.approx(0.1) and parse_fraction("0.5%", "f") == pytest.approx(0.005)
    with pytest.raises(EdgekitError, match="bad --max-error-rate 'lots'"):
        parse_fraction("lots", "--max-error-rate")


def test_waves_pick_stable_cumulative_device_sets():
    names = [f"d{i:03d}" for i in range(200)]
    waves = assign(names, "r1", parse_waves("1%,10%,50%,100%"))
    assert [len(w) for w in waves] == [2, 18, 80, 100]
    assert sorted(itertools.chain(*waves)) == sorted(names)  # every device once
    assert assign(list(reversed(names)), "r1", parse_waves("1%,10%,50%,100%")) == waves  # order-independent
    assert assign(names, "r2", parse_waves("1%,10%,50%,100%"))[0] != waves[0]  # another rollout, other devices
    # three devices, the usual waves: 1 % and 10 % both round up to the same first device; empty waves drop
    three = effective_waves(["a", "b", "c"], "r1", parse_waves("1%,10%,50%,100%"))
    assert [len(w) for w in three] == [1, 1, 1]
    assert assign(["a", "b", "c"], "r1", parse_waves("1"))[-1] != []  # the last wave takes everyone
    assert sum(map(len, assign(["a", "b", "c"], "r1", parse_waves("1")))) == 3


# -- gate ---------------------------------------------------------------------------------
def entry(device, version, p50, p99, ok=50, errors=0, model="m"):
    return {
        "device": device,
        "model": model,
        "version": version,
        "ok": ok,
        "errors": errors,
        "requests": ok + errors,
        "error_rate": errors / (ok + errors),
        "latency_ms": {"p50": p50, "p99": p99},
    }


T = Thresholds(min_soak_s=10, min_samples=20, max_p99_regression=0.10, max_error_rate=0.01)


def test_gate_waits_for_soak_and_samples_then_proceeds_with_numbers():
    rep = {"entries": [entry("a", "old", 1.0, 2.0), entry("a", "new", 1.02, 2.1, ok=10)]}
    per = wave_numbers(rep, "m", "new", {"a": "old"})
    v = judge(per, 5, T)
    assert v.decision == "wait" and v.reason == "soaking: 5 s of 10 s"
    v = judge(per, 11, T)
    assert v.decision == "wait" and "a has 10/20 samples of the new version" in v.reason
    rep["entries"][1]["ok"] = rep["entries"][1]["requests"] = 40
    v = judge(wave_numbers(rep, "m", "new", {"a": "old"}), 11, T)
    assert v.decision == "proceed", v
    assert "p99 2.000 ms -> 2.100 ms (+5.0%) on a (old -> new)" in v.reason
    assert v.numbers["p99_change"] == pytest.approx(0.05) and v.numbers["error_rate"] == 0


def test_gate_stops_on_p99_and_on_errors_naming_the_numbers():
    rep = {
        "entries": [
            entry("a", "old", 1.0, 2.0),
            entry("a", "new", 1.1, 3.0),
            entry("b", "old", 1.0, 2.0),
            entry("b", "new", 1.0, 2.05),
        ]
    }
    v = judge(wave_numbers(rep, "m", "new", {"a": "old", "b": "old"}), 60, T)
    assert v.decision == "stop"
    assert v.reason == (
        "p99 2.000 ms -> 3.000 ms (+50.0%) on a (old -> new), above the 10% allowed; "
        "p50 1.000 ms -> 1.100 ms (+10.0%) on a (old -> new)"
    )
    t = Thresholds(min_soak_s=10, min_samples=20, max_p99_regression=1.0, max_p50_regression=0.05)
    v = judge(wave_numbers(rep, "m", "new", {"a": "old", "b": "old"}), 60, t)  # p50 fails; p99 said beside it
    assert v.decision == "stop" and v.reason == (
        "p50 1.000 ms -> 1.100 ms (+10.0%) on a (old -> new), above the 5% allowed; "
        "p99 2.000 ms -> 3.000 ms (+50.0%) on a (old -> new)"
    )
    assert v.numbers["p99_worst_device"] == "a"
    rep = {"entries": [entry("a", "old", 1.0, 2.0), entry("a", "new", 1.0, 2.0, ok=95, errors=5)]}
    v = judge(wave_numbers(rep, "m", "new", {"a": "old"}), 60, T)
    assert v.decision == "stop" and v.reason.startswith("error rate 5.00% (5/100) is above 1%; p99 2.000 ms")


def test_gate_without_an_old_version_judges_errors_only():
    rep = {"entries": [entry("a", "new", 9.0, 99.0), entry("b", "old", 1.0, 1.0, ok=3), entry("b", "new", 9.0, 9.0)]}
    v = judge(wave_numbers(rep, "m", "new", {"a": None, "b": "old"}), 60, T)
    assert v.decision == "proceed" and "latency not compared" in v.reason  # b's old version has 3 samples only


# -- state ----------------------------------------------------------------------------------
def test_state_writes_transitions_and_start_is_idempotent(tmp_path, tiny_bundle):
    inv = tmp_path / "devices.toml"
    inv.write_text("".join(f'[[device]]\nname = "d{i}"\nurl = "local://"\ntags = ["lab"]\n' for i in range(3)))
    with RolloutState(tmp_path / "r.db") as state:
        r, created = start(state, tiny_bundle, inv, "lab", "1%,10%,50%,100%", T)
        assert created and r.status == "running" and r.wave == 0 and len(r.waves) == 3
        assert {d["state"] for d in r.devices.values()} == {"pending"}
        again, created = start(state, tiny_bundle, inv, "lab", "100%")
        assert not created and again.id == r.id and again.waves == r.waves
        other, created = start(state, tiny_bundle, inv, None)
        assert created and other.id != r.id
        name = r.waves[0][0]
        state.set_device(r.id, name, st.INSTALLING, old_version="v0")
        state.set_device(r.id, name, st.INSTALLED, installed_at=5.0)
        state.start_wave(r.id, 0, 5.0)
        state.start_wave(r.id, 0, 9.0)  # the soak start is the first install's
        state.decide(r.id, 0, "proceed", "fine", {"p99_change": 0.01})
        assert state.set_status(r.id, st.PAUSED, "paused by the user", expect=st.RUNNING)
        assert not state.set_status(r.id, st.DONE, "all passed", expect=st.RUNNING)  # the pause given meanwhile wins
        assert not state.set_wave(r.id, 1, expect=st.RUNNING)
    with RolloutState(tmp_path / "r.db") as state:  # read back by a new process's object
        r = state.get(r.id)
        assert (r.status, r.wave, r.reason) == ("paused", 0, "paused by the user")
        assert r.devices[name] == {**r.devices[name], "state": "installed", "old_version": "v0", "installed_at": 5.0}
        assert r.decisions == [{**r.decisions[0], "wave": 0, "started": 5.0, "decision": "proceed", "reason": "fine"}]
        assert any("wave 1: proceed: fine" in m for _, m in state.log(r.id))
        with pytest.raises(EdgekitError, match="no rollout 'nope'"):
            state.get("nope")


# -- controller through a scripted delivery -----------------------------------------------------------
class Scripted:
    """Devices that serve versions and answer with the latency their version is given; some are offline."""

    def __init__(self, latency, serving, store_ids=None):
        self.latency, self.serving, self.offline, self.calls = latency, dict(serving), set(), []
        self.next_id = itertools.count(1)

    def reachable(self, fd):
        return fd.name not in self.offline

    def why(self, fd):
        return "offline"

    def current(self, fd, model):
        return self.serving.get(fd.name)

    def install(self, fd, bundle_dir):
        self.calls.append(("install", fd.name))
        self.serving[fd.name] = self.new

    def rollback(self, fd, model, to):
        self.calls.append(("rollback", fd.name, to))
        self.serving[fd.name] = to

    def collect(self, fd, store):
        version = self.serving[fd.name]
        ms = self.latency[version]
        rows = [
            (
                next(self.next_id),
                1000.0 + i,
                "tiny",
                version,
                "ort",
                "CPU",
                "",
                0.0,
                ms * (1 + (i % 10) / 100),
                None,
                None,
                "ok",
                None,
            )
            for i in range(30)
        ]
        store.store_batch(
            {"store_id": f"sid-{fd.name}", "records": rows, "events": [], "context": []}, fd.name, "scripted", None
        )

    def close(self):
        pass


@pytest.fixture
def fleet3(tmp_path, tiny_bundle):
    inv = tmp_path / "devices.toml"
    inv.write_text("".join(f'[[device]]\nname = "d{i}"\nurl = "local://"\n' for i in range(3)))
    state = RolloutState(tmp_path / "rollouts.db")
    r, _ = start(state, tiny_bundle, inv, None, "1,2,3", Thresholds(min_soak_s=1, min_samples=20))
    clock = [100.0]
    yield state, r, clock, tmp_path / "field.db"
    state.close()


def controller(fleet, delivery):
    state, r, clock, field = fleet
    return Controller(RolloutState(state.path), r.id, delivery=delivery, field_store=field, now=lambda: clock[0])


def test_controller_proceeds_through_waves_and_a_late_device_catches_up(fleet3):
    state, r, clock, field = fleet3
    d = Scripted({"v0": 1.0, r.bundle_id: 1.0}, {n: "v0" for n in ("d0", "d1", "d2")})
    d.new = r.bundle_id
    with FieldStore(field) as store:  # the old version's numbers, pulled before the rollout
        for n in ("d0", "d1", "d2"):
            d.collect(type("FD", (), {"name": n})(), store)
    late = r.waves[1][0]
    d.offline.add(late)
    c = controller(fleet3, d)
    assert c.step().decisions[0]["decision"] == "wait"  # installed; soak not over
    clock[0] += 2
    r1 = c.step()
    assert r1.decisions[0]["decision"] == "proceed" and r1.wave == 1
    r2 = controller(fleet3, d).step()  # a restarted host: a new controller from the state file
    assert r2.devices[late]["state"] == "pending" and "unreachable: offline" in r2.devices[late]["error"]
    assert r2.decisions[1]["reason"] == "no device of this wave has the bundle yet"
    d.offline.clear()
    c = controller(fleet3, d)
    for _ in range(4):  # install, then judge after the soak, per wave
        r = c.step()
        clock[0] += 2
    assert r.status == "done" and r.finished, r
    assert all(d.serving[n] == r.bundle_id for n in ("d0", "d1", "d2"))
    assert [x for x in d.calls if x[0] == "install"] == [("install", n) for w in r.waves for n in w]


def test_controller_stops_on_a_slow_version_and_rolls_back_offline_devices_later(fleet3):
    state, r, clock, field = fleet3
    d = Scripted({"v0": 1.0, r.bundle_id: 3.0}, {n: "v0" for n in ("d0", "d1", "d2")})
    d.new = r.bundle_id
    with FieldStore(field) as store:
        for n in ("d0", "d1", "d2"):
            d.collect(type("FD", (), {"name": n})(), store)
    first = r.waves[0][0]
    c = controller(fleet3, d)
    c.step()
    clock[0] += 2
    orig = d.collect

    def collect_and_drop(fd, store):  # the device reports its data, then goes offline before the rollback
        orig(fd, store)
        d.offline.add(fd.name)

    d.collect = collect_and_drop
    r = c.step()
    assert r.status == "stopped" and r.decisions[0]["decision"] == "stop"
    assert "p99" in r.reason and "+200" in r.reason and "above the 10% allowed" in r.reason
    assert r.devices[first]["state"] == "rollback-pending" and not r.finished
    d.offline.clear()
    r = controller(fleet3, d).step()
    assert r.devices[first]["state"] == "rolled-back" and r.finished
    assert d.serving[first] == "v0" and ("rollback", first, "v0") in d.calls
    assert not any(x == ("install", n) for x in d.calls for n in r.waves[1] + r.waves[2])


def test_pause_resume_abort(fleet3):
    state, r, clock, field = fleet3
    d = Scripted({None: 1.0, r.bundle_id: 1.0}, {})
    d.new = r.bundle_id
    c = controller(fleet3, d)
    c.step()
    assert c.pause().status == "paused"
    assert c.run(interval=0).status == "paused" and d.calls == [("install", r.waves[0][0])]
    with pytest.raises(EdgekitError, match="is paused, not running"):
        c.pause()
    assert c.resume().status == "running"
    r = c.abort()
    assert r.status == "aborted" and r.finished
    assert d.calls[-1] == ("rollback", r.waves[0][0], None)  # it served nothing before: the model is removed
    with pytest.raises(EdgekitError, match="already aborted"):
        c.abort()


# -- real agents, real traffic ---------------------------------------------------------------------------
X = np.zeros((1, 3, 16, 16), np.float32)


def heavy_cnn(path, convs=16, width=48):
    """The tiny model's interface (``input`` 3x16x16 -> ``probs`` 10) with ``convs`` 3x3 convolutions of ``width``
    channels: the same model name served much slower."""
    rng = np.random.default_rng(2)
    inits, nodes, prev, cin = [], [], "input", 3
    for i in range(convs):
        w = (rng.standard_normal((width, cin, 3, 3)) * np.sqrt(1 / (cin * 9))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        prev, cin = f"r{i}", width
    wf = (rng.standard_normal((10, width)) * 0.1).astype(np.float32)
    inits += [numpy_helper.from_array(wf, "wf"), numpy_helper.from_array(np.zeros(10, np.float32), "bf")]
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "heavy_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, tiny_calib):
    """``good``: the tiny model retrained (other weights, same cost); ``slow``: the heavy one, same name."""
    from harness.models import tiny_cnn

    import edgekit

    d = tmp_path_factory.mktemp("rollout-bundles")
    out = {}
    for name, model in (("good", tiny_cnn(d / "good.onnx", seed=1)), ("slow", heavy_cnn(d / "slow.onnx"))):
        edgekit.build(model, "host", d / name, precision="fp32", calib=tiny_calib, name="tiny")
        out[name] = d / name
    return out


class Traffic:
    """An app on each device: requests to its agent in a loop, through the Python SDK, until stopped."""

    def __init__(self, roots):
        self.stop_event = threading.Event()
        self.sent = {str(r): 0 for r in roots}
        self.threads = [threading.Thread(target=self._loop, args=(str(r),), daemon=True) for r in roots]
        for t in self.threads:
            t.start()

    def _loop(self, root):
        from edgekit_sdk import AgentClient

        client = None
        while not self.stop_event.is_set():
            try:
                client = client or AgentClient.local(root, timeout=10)
                client.infer("tiny", {"input": X})
                self.sent[root] += 1
            except Exception:  # an install or a restart under the app: it tries again
                if client is not None:
                    client.close()
                client = None
                time.sleep(0.05)
            time.sleep(0.01)
        if client is not None:
            client.close()

    def wait_for(self, n, timeout=60):
        end = time.monotonic() + timeout
        while min(self.sent.values()) < n and time.monotonic() < end:
            time.sleep(0.1)
        assert min(self.sent.values()) >= n, self.sent

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=15)


def python_link(tmp_path, name):
    """The device's way to its Python (a script running this test's interpreter); removed, the device is offline."""
    link = tmp_path / f"python-{name}"
    link.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    link.chmod(0o755)
    return link


@pytest.fixture
def emulated_fleet(tmp_path, agent_roots, tiny_bundle):
    """Three local:// devices serving the tiny model (the old version), each under traffic; each device reaches
    Python through its own script, so removing it takes the device offline for the host."""
    from edgekit import fleet

    roots = [agent_roots(f"d{i}") for i in range(3)]
    text = ""
    for i, root in enumerate(roots):
        link = python_link(tmp_path, f"d{i}")
        text += f'[[device]]\nname = "d{i}"\nurl = "local://"\nroot = "{root}"\npython = "{link}"\ntags = ["lab"]\n'
    inv = tmp_path / "devices.toml"
    inv.write_text(text)
    rows = fleet.deploy_fleet(tiny_bundle, fleet.load_inventory(inv), runs=5, warmup=1)  # the direct path
    assert [r["status"] for r in rows] == ["ok"] * 3, rows
    traffic = Traffic(roots)
    traffic.wait_for(40)
    yield inv, roots, traffic
    traffic.stop()


def serving(root):
    from edgekit_sdk import AgentClient

    with AgentClient.local(str(root)) as c:
        return {m["name"]: m["version"] for m in c.models()}["tiny"]


# A tiny model's p99 on a busy machine is a scheduling hiccup or two: loose p99, a p50 check, against a bundle
# that is a hundred times slower.
FAST = Thresholds(min_soak_s=1, min_samples=30, max_p99_regression=20.0, max_p50_regression=3.0, max_error_rate=0.05)


def test_good_bundle_proceeds_through_three_waves_across_a_restart_and_an_offline_device(
    emulated_fleet, bundles, tmp_path
):
    inv, roots, traffic = emulated_fleet
    old = serving(roots[0])
    with RolloutState(tmp_path / "rollouts.db") as state:
        r, _ = start(state, bundles["good"], inv, "lab", "1%,10%,50%,100%", FAST)
        assert len(r.waves) == 3
        late = r.waves[1][0]
        os.unlink(tmp_path / f"python-{late}")  # the second wave's device is offline
        c = Controller(state, r.id, field_store=tmp_path / "field.db")
        end = time.monotonic() + 60
        while c.step().wave == 0 and time.monotonic() < end:
            time.sleep(0.3)
        r = c.step()
        assert r.wave == 1 and r.decisions[0]["decision"] == "proceed", (r.reason, r.decisions)
        assert r.devices[late]["state"] == "pending" and "unreachable" in r.devices[late]["error"]
        assert r.decisions[1]["reason"] == "no device of this wave has the bundle yet"
        assert serving(roots[int(late[1:])]) == old
    python_link(tmp_path, late)  # back online
    with RolloutState(tmp_path / "rollouts.db") as state:  # the host restarted: a new controller from the file
        r = Controller(state, r.id, field_store=tmp_path / "field.db").run(interval=0.3, timeout=120)
    assert r.status == "done" and r.finished, (r.reason, r.decisions)
    assert [d["decision"] for d in r.decisions] == ["proceed"] * 3
    for d in r.decisions:
        [(name, row)] = d["numbers"]["devices"].items()
        assert row["old"]["version"] == old and row["new"]["version"] == r.bundle_id
        assert row["new"]["samples"] >= 30 and row["p99_change"] is not None
    assert all(serving(root) == r.bundle_id for root in roots)
    assert all(d["state"] == "installed" and d["old_version"] == old for d in r.devices.values())


def test_slow_bundle_is_stopped_and_rolled_back_after_the_host_is_killed(emulated_fleet, bundles, tmp_path):
    inv, roots, traffic = emulated_fleet
    old = serving(roots[0])
    state_file, field = tmp_path / "rollouts.db", tmp_path / "field.db"
    args = [
        bundles["slow"],
        "--fleet",
        inv,
        "--group",
        "lab",
        "--waves",
        "1%,10%,50%,100%",
        "--min-soak",
        "1s",
        "--min-samples",
        "30",
        "--max-p99-regression",
        "1000%",
        "--max-p50-regression",
        "300%",
        "--interval",
        "0.3s",
        "--state",
        state_file,
        "--store",
        field,
    ]
    host = subprocess.Popen(
        [sys.executable, "-m", "edgekit", "rollout", "start", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 60
        first = None
        while time.monotonic() < end and host.poll() is None:  # kill the host once wave 1 has the slow bundle
            if state_file.exists():
                with RolloutState(state_file) as state:
                    ids = state.ids()
                    r = state.get(ids[0]) if ids else None
                if r and any(d["state"] == "installed" for d in r.devices.values()):
                    first = r.waves[0][0]
                    break
            time.sleep(0.1)
        host.send_signal(signal.SIGKILL)
    finally:
        host.wait(timeout=30)
    assert first is not None, "the first wave was never installed"
    slow_root = roots[int(first[1:])]
    assert serving(slow_root) == r.bundle_id
    p = run_cli("rollout", "resume", r.id, "--state", state_file, "--store", field, "--interval", "0.3s")
    assert p.returncode == 1, p.stderr
    assert f"rollout {r.id} stopped and rolled back: wave 1: " in p.stderr and " p99 " in p.stderr, p.stderr
    # the heavy model's p50 is far beyond 300 %; its p99 is printed whether or not it is past its own limit
    assert "p50 " in p.stderr and "above the 300% allowed" in p.stderr, p.stderr
    assert f"on {first} ({old} -> {r.bundle_id})" in p.stderr
    assert "wave 1 (" in p.stdout and "stop: " in p.stdout and "rolled-back" in p.stdout
    assert serving(slow_root) == old  # rolled back; the other waves never got it
    assert all(serving(root) == old for root in roots)
    status = one_json(run_cli("rollout", "status", r.id, "--state", state_file, "--json", check=0).stdout)
    assert status["status"] == "stopped" and status["finished"]
    [decision] = [d for d in status["decisions"] if d["decision"] == "stop"]
    row = decision["numbers"]["devices"][first]
    assert row["new"]["p50_ms"] > 4 * row["old"]["p50_ms"] and row["new"]["p99_ms"] > row["old"]["p99_ms"], row
    assert {d["state"] for d in status["devices"].values()} == {"rolled-back", "pending"}
    again = run_cli("rollout", "start", *args, "--json")  # the same bundle and group: the same rollout
    assert one_json(again.stdout)["id"] == r.id and again.returncode == 1
    assert json.loads(again.stdout)["status"] == "stopped"


def test_cli_bad_input_is_one_clear_error_and_no_state(tmp_path, tiny_bundle, capsys):
    from edgekit.cli import main

    inv = tmp_path / "devices.toml"
    inv.write_text('[[device]]\nname = "d0"\nurl = "local://"\ntags = ["lab"]\n')
    state = tmp_path / "r.db"
    base = ["rollout", "start", str(tiny_bundle), "--fleet", str(inv), "--state", str(state)]
    for extra, says in (
        (["--waves", "10%,lots"], "bad wave size 'lots'"),
        (["--min-soak", "soon"], "bad --min-soak 'soon'"),
        (["--max-p99-regression", "x"], "bad --max-p99-regression 'x'"),
        (["--min-samples", "0"], "--min-samples must be at least 1"),
        (["--group", "field"], "no device is tagged 'field'; tags in use: lab"),
    ):
        assert main(base + extra) == 1
        assert says in capsys.readouterr().err
    assert main(["rollout", "start", str(tiny_bundle), "--fleet", str(tmp_path / "nope.toml")]) == 1
    assert "fleet inventory" in capsys.readouterr().err
    with RolloutState(state) as s:
        assert s.ids() == []  # nothing half-made
    assert main(["rollout", "status", "--state", str(state)]) == 0
    assert capsys.readouterr().out == "no rollouts\n"
    assert main(["rollout", "status", "abc", "--state", str(state)]) == 1
    assert "no rollout 'abc'" in capsys.readouterr().err
