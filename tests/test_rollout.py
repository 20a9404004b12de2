"""Staged rollouts: the plan, the gate and the state on synthetic field numbers, a controller driven through a
scripted delivery, the command's bad input (fast). Real agents under real traffic: tests/test_rollout_e2e.py."""

import itertools
import os

import pytest

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
    c._hold()  # one process drives a rollout at a time
    try:
        with pytest.raises(EdgekitError, match=f"rollout {r.id} is being run by process {os.getpid()}"):
            controller(fleet3, d).run(interval=0)
    finally:
        c._release()
    r = c.abort()
    assert r.status == "aborted" and r.finished
    assert d.calls[-1] == ("rollback", r.waves[0][0], None)  # it served nothing before: the model is removed
    with pytest.raises(EdgekitError, match="already aborted"):
        c.abort()


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


def test_a_wave_installs_in_parallel_retries_lost_connections_and_stops_on_a_refused_install(tmp_path, tiny_bundle):
    from edgekit.errors import AgentError, TransportError

    inv = tmp_path / "devices.toml"
    inv.write_text("".join(f'[[device]]\nname = "d{i}"\nurl = "local://"\n' for i in range(6)))
    state = RolloutState(tmp_path / "rollouts.db")
    r, _ = start(state, tiny_bundle, inv, None, "1,100%", Thresholds(min_soak_s=0, min_samples=20))
    d = Scripted({"v0": 1.0, r.bundle_id: 1.0}, {f"d{i}": "v0" for i in range(6)})
    d.new = r.bundle_id
    flaky, refusing = r.waves[1][0], r.waves[1][1]
    lost = [True]
    install = d.install

    def install_or_fail(fd, bundle_dir):
        if fd.name == flaky and lost[0]:
            lost[0] = False
            raise TransportError("connection lost while committing")
        if fd.name == refusing:
            raise AgentError("the bundle's runtime is not installed")
        install(fd, bundle_dir)

    d.install = install_or_fail
    with FieldStore(tmp_path / "field.db") as store:
        for n in d.serving:
            d.collect(type("FD", (), {"name": n})(), store)
    c = Controller(state, r.id, delivery=d, field_store=tmp_path / "field.db", jobs=4)
    r = c.step()  # wave 1 installed and judged at once (no soak)
    assert r.wave == 1 and r.decisions[0]["decision"] == "proceed"
    r = c.step()  # wave 2 installed by 4 workers: one connection lost, one install refused: stop, roll back
    assert r.devices[refusing]["state"] == "failed"
    assert r.status == "stopped"
    assert r.reason == f"wave 2: install failed on {refusing}: the bundle's runtime is not installed"
    assert r.finished and all(d.serving[n] == "v0" for n in d.serving)
    rolled = {n for n, dev in r.devices.items() if dev["state"] == "rolled-back"}
    assert rolled == set(r.devices) - {refusing}
    assert ("rollback", flaky, "v0") in d.calls  # its install may have switched it before the connection was lost
    state.close()
