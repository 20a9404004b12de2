"""edgekit.execution.on_device: the one way a built model is run on a device (unit tests of host logic: the agent's
client is a fake recording its calls; end to end, tests/test_auto.py measures candidates through it)."""

import pytest

from edgekit import execution
from edgekit.device import Device
from edgekit.errors import AgentError


class FakeClient:
    def __init__(self):
        self.calls = []

    def load(self, name, threads=None):
        self.calls.append(("load", name, threads))
        return {"runner": {"runtime": "onnxruntime"}}

    def infer(self, name, feed):
        self.calls.append(("infer", name))
        return {"y": feed["x"]}

    def bench(self, name, **kwargs):
        self.calls.append(("bench", name, kwargs))
        return {"latency_ms": {"p50": 1.0}}


class StubTransport:
    description = "stub device"

    def close(self):
        pass


def test_on_device_loads_on_first_use_and_benchmarks_without_loading():
    client = FakeClient()
    model = execution.on_device(client, "m", threads=2)
    assert client.calls == []
    assert model.bench(runs=7, warmup=1)["latency_ms"]["p50"] == 1.0
    assert client.calls == [("bench", "m", {"runs": 7, "warmup": 1, "threads": 2, "providers": None, "timeout": 900})]
    assert model.run({"x": 3}) == {"y": 3} and model.run({"x": 4}) == {"y": 4}
    assert client.calls[1:] == [("load", "m", 2), ("infer", "m"), ("infer", "m")]
    assert model.runtime == "onnxruntime" and model.describe["runner"]["runtime"] == "onnxruntime"


def test_on_device_through_a_device_reports_steps_and_edgekit_errors():
    from edgekit_sdk import AgentHTTPError

    steps = []
    dev = Device(StubTransport(), hooks={"step": [steps.append]})
    dev.client = FakeClient()
    model = execution.on_device(dev, "m")
    assert model.device is dev and model.client is dev.client
    model.bench(runs=3, warmup=0)
    assert dev.client.calls == [
        ("bench", "m", {"runs": 3, "warmup": 0, "threads": None, "providers": None, "timeout": 900})
    ]
    model.run({"x": 1})
    assert steps == ["benchmarking m", "loading m", "running m"]

    def refuse(name, **kwargs):
        raise AgentHTTPError(404, "unknown model 'm'")

    dev.client.bench = refuse
    with pytest.raises(AgentError, match="stub device: benchmarking m: unknown model"):
        model.bench()
