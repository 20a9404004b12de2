"""Dynamic batching: concurrent requests to a batch-capable model run as one batch and get exactly their rows."""

import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from harness import stop_agent
from harness.batchbundle import dynamic_batch_bundle

from edgekit import agent_package
from edgekit_agent.batcher import batch_capable

pytestmark = pytest.mark.e2e


def test_batch_capable_models():
    spec = {"inputs": [{"shape": ["N", 3]}], "outputs": [{"shape": ["N", 10]}]}
    assert batch_capable(spec)
    assert not batch_capable({"inputs": [{"shape": [1, 3]}], "outputs": [{"shape": ["N", 10]}]})
    assert batch_capable({"batch": True, "inputs": [{"shape": [1, 3]}]})


def test_batches_stay_inside_the_declared_batch_sizes():
    """A bundle built for batch 1..4 never gets a batch of 5 rows: the batcher cuts the group before it."""
    from edgekit_agent.batcher import Batcher, _Item, batch_fits

    fits = batch_fits({"inputs": [{"name": "x", "shape": ["N", 3], "allowed": [{"min": 1, "max": 4}, 3]}]})
    assert fits(4) and not fits(5)
    assert batch_fits({"inputs": [{"allowed": [{"values": [1, 4]}, 3]}]})(4)
    assert not batch_fits({"inputs": [{"allowed": [{"values": [1, 4]}, 3]}]})(2)
    assert batch_fits({"inputs": [{"shape": ["N", 3]}]})(64)  # nothing declared: any size

    class Model:
        lock = threading.Lock()
        requests = 0
        seen: list = []

        class runner:  # noqa: N801 - the attribute name the batcher calls
            @staticmethod
            def run(feeds):
                Model.seen.append(feeds["x"].shape[0])
                return {"y": feeds["x"] * 2}

    items = [_Item({"x": np.full((n, 3), i, np.float32)}) for i, n in enumerate((2, 2, 1, 3, 4))]
    Batcher(30, 8, fits)._run(Model, items)
    assert Model.seen == [4, 4, 4]  # [2+2], [1+3], [4]; never 2+2+1
    for i, it in enumerate(items):
        np.testing.assert_array_equal(it.outputs["y"], np.full((it.feeds["x"].shape[0], 3), 2 * i, np.float32))


@pytest.fixture
def batching_agent(tmp_path, tiny_bundle):
    from edgekit.deployer import deploy, open_device

    root = tmp_path / "device"
    built, _ = agent_package.build(root / "agent")
    pyz = root / "agent" / "edgekit-agent.pyz"
    shutil.copy(built, pyz)
    args = ["start", "--root", str(root), "--batch-window-ms", "30", "--max-batch", "8", "--breaker", "min_requests=7"]
    p = subprocess.run([sys.executable, str(pyz), *args], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    dev = open_device("local", device_root=str(root))
    try:
        deploy(dynamic_batch_bundle(tiny_bundle, tmp_path / "tiny-n"), dev, bench=False)
        yield dev
    finally:
        dev.close()
        stop_agent(sys.executable, root)


def test_batched_answers_equal_one_by_one_answers(batching_agent):
    from edgekit_sdk import AgentClient

    c = batching_agent.client
    assert c.breaker("tiny", {})["limits"]["min_requests"] == 7  # the agent's --breaker, passed on by start
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1 + i % 2, 3, 16, 16)).astype(np.float32) for i in range(24)]
    alone = []
    for x in xs:
        out, meta = c.infer("tiny", {"input": x}, with_meta=True)
        assert meta["batch"] == 1
        alone.append(out["probs"])
    together, sizes, errors = [None] * len(xs), [], []
    start = threading.Barrier(len(xs))

    def client(i):
        own = AgentClient(c.host, c.port, token=c.token)
        start.wait()
        try:
            out, meta = own.infer("tiny", {"input": xs[i]}, with_meta=True)
            together[i] = out["probs"]
            sizes.append(meta["batch"])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            own.close()

    workers = [threading.Thread(target=client, args=(i,)) for i in range(len(xs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors, errors
    assert max(sizes) > 1, sizes  # they did run in batches
    assert max(sizes) <= 8
    for i, x in enumerate(xs):
        assert together[i].shape == (x.shape[0], 10)
        np.testing.assert_array_equal(together[i], alone[i])
    rows = c.request("GET", "/v1/telemetry?limit=5000")["records"]
    ok = [r for r in rows if r[11] == "ok"]
    assert len(ok) >= 2 * len(xs) - 2  # one row per request, batched or not (the last may not be flushed yet)


@pytest.mark.parametrize("bad", [["--breaker", "error_rate"], ["--breaker", "p99_ms=-1"], ["--batch-window-ms", "-1"]])
def test_bad_serving_options_stop_start(tmp_path, bad):
    root = tmp_path / "device"
    built, _ = agent_package.build(root / "agent")
    p = subprocess.run(
        [sys.executable, str(built), "start", "--root", str(root), *bad], capture_output=True, timeout=60
    )
    assert p.returncode == 2 and b"error:" in p.stderr, p
    assert not (root / "agent" / "state.json").exists()
