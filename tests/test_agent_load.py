"""The short version of benchmarks/agent_load.py: concurrent clients and schema-driven fuzzing, in seconds."""

import importlib.util
import sys
from pathlib import Path

import pytest
from harness import stop_agent

pytestmark = pytest.mark.e2e

_spec = importlib.util.spec_from_file_location(
    "agent_load", Path(__file__).resolve().parent.parent / "benchmarks" / "agent_load.py"
)
agent_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agent_load)


@pytest.fixture(scope="module")
def dev(tmp_path_factory, tiny_bundle):
    work = tmp_path_factory.mktemp("load")
    d = agent_load.start_agent(work, tiny_bundle)
    yield d
    d.close()
    stop_agent(sys.executable, d.root)


def test_concurrent_clients_see_no_errors(dev):
    r = agent_load.load(dev.state["port"], clients=10, seconds=3)
    assert r["errors"] == 0, r["error_samples"]
    assert r["requests"] > 100


def test_fuzzed_requests_crash_nothing(dev):
    token = (Path(dev.root) / "agent" / "token").read_text().strip()
    r = agent_load.fuzz(dev.state["port"], dev.state["pid"], token, agent_load.spec_of(), 1000, seed=1)
    assert r["alive"] and not r["crashes"], r["crashes"][:3]
    assert r["rss"]["end_mb"] - r["rss"]["after_10pct_mb"] < 20, r["rss"]


def test_kill_9_mid_install_loses_nothing(dev, tiny_bundle):
    from edgekit.deployer import deploy

    deploy(tiny_bundle, dev, bench=False)  # the fuzzer may have removed the model
    r = agent_load.kill_mid_install(dev, str(tiny_bundle), rounds=1, size=4 << 20)
    assert r["previous_kept"] == 1 and r["resumed_and_installed"] == 1, r
