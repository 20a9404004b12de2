"""The circuit breaker: a version that fails gets no traffic until a trial request after the cool-down succeeds."""

import json
import time

import numpy as np
import pytest

from edgekit_agent.breaker import Breaker, Breakers, check_limits, parse_spec
from edgekit_agent.errors import AgentError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_breaker_opens_on_p99_and_half_opens_after_the_cooldown():
    clock = Clock()
    b = Breaker(check_limits({"p99_ms": 10, "min_requests": 5, "cooldown_s": 2, "window_s": 5}), clock)
    for _ in range(4):
        assert b.observe(False, 50.0) is None  # fewer than min_requests: not judged yet
    assert b.observe(False, 50.0)[0] == "open"
    assert not b.allow()
    clock.t += 2.5
    assert b.allow() and not b.allow()  # half-open: one trial at a time
    assert b.observe(False, 60.0)[0] == "open"  # the trial was slow: open again
    clock.t += 2.5
    assert b.allow()
    assert b.observe(False, 1.0) == ("closed", "trial request succeeded")
    assert b.allow()


def test_old_outcomes_leave_the_window():
    clock = Clock()
    b = Breaker(check_limits({"min_requests": 4, "window_s": 1}), clock)
    for _ in range(3):
        b.observe(True, None)
    clock.t += 2
    for _ in range(3):
        assert b.observe(False, 1.0) is None  # the three errors are out of the window
    assert b.stats()["error_rate"] == 0.0


def test_fallback_order_other_side_of_the_split_then_earlier_installs():
    clock = Clock()
    br = Breakers({"min_requests": 1, "cooldown_s": 60}, clock)
    br.observe("m", "v3", True, None)
    assert br.choose("m", "v3", "v3", None, lambda: ["v1", "v2", "v3"]) == "v2"
    assert br.choose("m", "v3", "v3", {"v3": 90, "v1": 10}, lambda: ["v1", "v2", "v3"]) == "v1"
    br.observe("m", "v2", True, None)
    assert br.choose("m", "v3", "v3", None, lambda: ["v1", "v2", "v3"]) == "v1"
    assert 'edgekit_breaker_open{model="m",version="v3"} 1' in br.render()


@pytest.mark.parametrize("bad", [{"error_rate": 2}, {"p99_ms": "x"}, {"nope": 1}, {"min_requests": 1.5}, [1]])
def test_bad_limits_are_400(bad):
    with pytest.raises(AgentError) as e:
        check_limits(bad)
    assert e.value.status == 400


def test_agent_option_spec():
    assert parse_spec("error_rate=0.2, p99_ms=50")["p99_ms"] == 50.0
    with pytest.raises(ValueError, match="KEY=NUMBER"):
        parse_spec("error_rate")


@pytest.mark.e2e
def test_a_failing_canary_loses_its_traffic_and_gets_it_back(
    local_device, agent_roots, tiny_bundle, tiny_model, tiny_calib, tmp_path
):
    """90/10 split; the 10 % version's model file is damaged on the device: after min_requests failures its
    breaker opens and every request goes to the other version; repaired, a trial after the cool-down closes it."""
    import edgekit
    from edgekit.deployer import deploy
    from edgekit_sdk.client import AgentHTTPError

    out = tmp_path / "tiny-int8"
    edgekit.build(tiny_model, "host", out, precision="int8", calib=tiny_calib, name="tiny")
    canary = deploy(out, local_device, bench=False)["installed"]["version"]
    stable = deploy(tiny_bundle, local_device, bench=False)["installed"]["version"]
    c = local_device.client
    limits = c.breaker("tiny", {"min_requests": 3, "cooldown_s": 1.0, "error_rate": 0.5})["limits"]
    assert limits["min_requests"] == 3 and limits["window_s"] == 30.0
    with pytest.raises(AgentHTTPError) as e:
        c.breaker("tiny", {"error_rate": 5})
    assert e.value.status == 400
    with pytest.raises(AgentHTTPError) as e:
        c.request("PUT", "/v1/models/tiny/split", {"versions": {stable: 50, canary: 50}, "breaker": {"nope": 1}})
    assert e.value.status == 400 and c.models()[0]["split"] is None  # refused whole, not half applied
    c.split("tiny", {stable: 50, canary: 50})
    versions = agent_roots.base / "device" / "models" / "tiny" / "versions" / canary
    damaged = max(
        (p for p in versions.iterdir() if p.is_file() and p.name != "manifest.json"), key=lambda p: p.stat().st_size
    )
    original = damaged.read_bytes()
    damaged.write_bytes(original[:-64] + bytes(64))
    x = {"input": np.zeros((1, 3, 16, 16), np.float32)}
    failures, served = 0, []
    for _ in range(60):
        try:
            served.append(c.infer("tiny", x, with_meta=True)[1]["version"])
        except AgentHTTPError as err:
            assert err.status == 409, err
            failures += 1
    assert failures == 3 and served.count(stable) == 57, (failures, served)
    state = c.models()[0]["breakers"][canary]
    assert state["state"] == "open" and "error rate" in state["reason"], state
    assert 'edgekit_breaker_open{model="tiny",version="%s"} 1' % canary in c.metrics()
    damaged.write_bytes(original)
    time.sleep(1.2)
    served = [c.infer("tiny", x, with_meta=True)[1]["version"] for _ in range(60)]
    assert served.count(canary) > 5, served  # the trial succeeded: the canary has its share again
    assert c.models()[0]["breakers"][canary]["state"] == "closed"
    assert 'edgekit_breaker_open{model="tiny",version="%s"} 0' % canary in c.metrics()
    time.sleep(0.5)
    events = c.request("GET", "/v1/telemetry?limit=5000")["events"]
    states = [e for e in events if e[2] == "breaker" and e[4] == canary]
    assert ["open", "closed"] == [json.loads(e[5])["state"] for e in states], states
