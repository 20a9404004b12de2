"""Serving under pressure: a model's bounded queue answers 503 with Retry-After instead of growing memory."""

import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from harness import stop_agent

from edgekit import agent_package
from edgekit_sdk import encode_tensors

pytestmark = pytest.mark.e2e


@pytest.fixture
def queued_agent(tmp_path, tiny_bundle):
    from edgekit.deployer import deploy, open_device

    root = tmp_path / "device"
    built, _ = agent_package.build(root / "agent")
    pyz = root / "agent" / "edgekit-agent.pyz"
    shutil.copy(built, pyz)
    p = subprocess.run(
        [sys.executable, str(pyz), "start", "--root", str(root), "--max-queue", "1"], capture_output=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    dev = open_device("local", device_root=str(root))
    try:
        deploy(tiny_bundle, dev, bench=False)
        yield dev
    finally:
        dev.close()
        stop_agent(sys.executable, root)


def test_a_full_queue_answers_503_with_retry_after(queued_agent):
    port = queued_agent.state["port"]
    body = encode_tensors({"input": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)})
    head = (
        f"POST /v1/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-edgekit-tensors\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    seen, lock, stop = {}, threading.Lock(), time.monotonic() + 4

    def client():
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            f = s.makefile("rb")
            while time.monotonic() < stop:
                s.sendall(head + body)
                status = int(f.readline().split()[1])
                headers = {}
                while True:
                    line = f.readline()
                    if line in (b"\r\n", b""):
                        break
                    k, _, v = line.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                f.read(int(headers["content-length"]))
                with lock:
                    key = (status, headers.get("retry-after"))
                    seen[key] = seen.get(key, 0) + 1
                if headers.get("connection") == "close":
                    return

    workers = [threading.Thread(target=client) for _ in range(32)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert set(seen) <= {(200, None), (503, "1")}, seen
    assert seen.get((200, None), 0) > 0 and seen.get((503, "1"), 0) > 0, seen
    metrics = queued_agent.client.metrics()
    assert 'outcome="overloaded"' in metrics


def test_two_versions_served_90_10(local_device, tiny_bundle, tiny_model, tiny_calib, tmp_path):
    """A canary: 10 % of requests to the new version, each version's requests recorded under its own name."""
    import edgekit
    from edgekit.deployer import deploy

    first = deploy(tiny_bundle, local_device, bench=False)["installed"]["version"]
    out = tmp_path / "tiny-int8"
    edgekit.build(tiny_model, "host", out, precision="int8", calib=tiny_calib, name="tiny")
    second = deploy(out, local_device, bench=False)["installed"]["version"]
    c = local_device.client
    assert c.split("tiny", {first: 90, second: 10})["split"] == {first: 90, second: 10}
    assert c.models()[0]["split"] == {first: 90, second: 10}
    x = {"input": np.zeros((1, 3, 16, 16), np.float32)}
    counts = {first: 0, second: 0}
    for _ in range(600):
        counts[c.infer("tiny", x, with_meta=True)[1]["version"]] += 1
    assert 25 <= counts[second] <= 110, counts  # 10 % of 600 = 60, with room for chance
    time.sleep(0.5)
    rows = c.request("GET", "/v1/telemetry?limit=5000")["records"]
    assert {r[3] for r in rows if r[11] == "ok"} >= {first, second}
    metrics = c.metrics()
    assert f'version="{first}"' in metrics and f'version="{second}"' in metrics
    assert c.split("tiny", {})["split"] is None
    assert all(c.infer("tiny", x, with_meta=True)[1]["version"] == second for _ in range(20))
