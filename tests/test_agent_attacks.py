"""Hostile and heavy traffic against a real agent process on loopback: each attack, and the bound that holds.

One agent (started from its zipapp with a small connection cap and a short header timeout, so the
bounds show in seconds) serves every test of this module.
"""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from harness import stop_agent
from harness.agents import options_it_takes

from edgekit import agent_package
from edgekit_sdk import AgentClient, AgentHTTPError

pytestmark = pytest.mark.e2e

CAP, HEADER_TIMEOUT = 128, 2.0
X = np.zeros((1, 3, 16, 16), np.float32)


@pytest.fixture(scope="module")
def agent(tmp_path_factory, tiny_bundle):
    from edgekit.deployer import deploy, open_device

    root = tmp_path_factory.mktemp("attacked") / "device"
    built, _ = agent_package.build(root / "agent")
    pyz = root / "agent" / "edgekit-agent.pyz"
    shutil.copy(built, pyz)  # where a deploy puts it: the deploy below keeps this agent and its options
    extra = ["--max-connections", str(CAP), "--header-timeout", str(HEADER_TIMEOUT), "--flush-interval", "0.05"]
    extra = options_it_takes(sys.executable, pyz, extra)  # all of them, but for an older agent under attack
    p = subprocess.run(
        [sys.executable, str(pyz), "start", "--root", str(root), *extra], capture_output=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    dev = open_device("local", device_root=str(root))
    try:
        deploy(tiny_bundle, dev, bench=False)
        yield dev
    finally:
        dev.close()
        stop_agent(sys.executable, root)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS")


def peak_mb(pid):
    """The process's peak resident set (VmHWM): what an attack made it hold at once, even if freed since."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM:")).split()[1]) / 1024.0


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def request(agent, method, path, body=b"", headers=None, token=True, timeout=10):
    """Raw HTTP/1.1 over a socket: status and parsed JSON (or raw bytes)."""
    h = {"Host": "127.0.0.1", "Content-Length": str(len(body)), "Connection": "close"}
    if token:
        h["Authorization"] = "Bearer " + agent.client.token
    if body.startswith(b"{"):
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", agent.state["port"]), timeout=timeout) as s:
        s.sendall(head.encode("latin-1") + body)
        data = b""
        while True:
            block = s.recv(65536)
            if not block:
                break
            data += block
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    try:
        return status, json.loads(payload, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    except ValueError:
        return status, payload


def test_half_open_connections_are_capped_and_timed_out(agent):
    pid = agent.state["pid"]
    socks = []
    try:
        for _ in range(CAP * 4):  # 4x the cap, each sending half a request line and then nothing
            s = socket.create_connection(("127.0.0.1", agent.state["port"]), timeout=5)
            s.sendall(b"GET /v1/hea")
            socks.append(s)
        time.sleep(1.0)  # the attackers hold their lines; a real client still gets through, at once
        t0 = time.monotonic()
        assert agent.client.health()["status"] == "ok"
        assert time.monotonic() - t0 < 3
        assert threads(pid) <= CAP + 16 + (os.cpu_count() or 1)
        time.sleep(HEADER_TIMEOUT + 1.5)
        closed = 0
        for s in socks:  # each was answered 503 and closed, closed for a newer one, or closed at its deadline
            s.settimeout(0.5)
            try:
                while s.recv(4096):
                    pass
                closed += 1
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        assert closed == len(socks), f"{len(socks) - closed} idle connections still open after the header timeout"
    finally:
        for s in socks:
            s.close()
    assert agent.client.health()["status"] == "ok"


def test_header_flood_is_bounded_before_authentication(agent):
    pid = agent.state["pid"]
    before, peak_before = rss_mb(pid), peak_mb(pid)

    def flood():
        with socket.create_connection(("127.0.0.1", agent.state["port"]), timeout=10) as s:
            s.sendall(b"GET /v1/health HTTP/1.1\r\n")
            try:
                for i in range(100):
                    s.sendall(b"X-Pad-%d: " % i + b"a" * 65000 + b"\r\n")
            except OSError:
                pass  # the agent answered 431 and hung up
            try:
                return s.recv(200)
            except OSError:
                return b""

    out = []
    workers = [threading.Thread(target=lambda: out.append(flood())) for _ in range(40)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert peak_mb(pid) - peak_before < 40, f"peak RSS grew {peak_mb(pid) - peak_before:.0f} MB during the flood"
    assert all(o == b"" or b" 431 " in o.split(b"\r\n")[0] for o in out), out[:3]
    assert rss_mb(pid) - before < 40, f"RSS grew {rss_mb(pid) - before:.0f} MB"


def test_tensor_entries_cannot_multiply_one_payload(agent):
    pid = agent.state["pid"]
    before, peak_before = rss_mb(pid), peak_mb(pid)
    payload = b"\0" * (1 << 20)
    entries = [
        {"name": f"t{i}", "dtype": "float32", "shape": [1 << 18], "offset": 0, "nbytes": 1 << 20} for i in range(1000)
    ]
    header = json.dumps({"tensors": entries}).encode()
    body = b"EKT1" + struct.pack("<I", len(header)) + header + payload
    status, answer = request(
        agent, "POST", "/v1/models/tiny/infer", body, {"Content-Type": "application/x-edgekit-tensors"}
    )
    assert peak_mb(pid) - peak_before < 50, f"peak RSS grew {peak_mb(pid) - peak_before:.0f} MB for a 1 MB request"
    assert status == 400 and "more than" in answer["error"]
    assert rss_mb(pid) - before < 50


def test_invalid_names_reach_neither_telemetry_nor_locks(agent):
    pid = agent.state["pid"]
    before_rss = rss_mb(pid)
    db = os.path.join(agent.root, "telemetry", "records.db")
    before_db = os.path.getsize(db)
    for i in range(2000):
        bad = f"bad%20name-{i}-" + "x" * 150
        assert request(agent, "DELETE", f"/v1/models/{bad}")[0] == 400
        assert request(agent, "POST", f"/v1/models/{bad}/infer", b'{"inputs": {}}', token=False)[0] == 400
    for i in range(500):  # valid names of models that do not exist
        assert request(agent, "POST", f"/v1/models/ghost{i}/infer", b'{"inputs": {}}', token=False)[0] == 404
    time.sleep(0.5)
    rows = agent.client.request("GET", "/v1/telemetry?limit=5000")["records"]
    assert {r[2] for r in rows if r[11] in ("bad_request", "unknown_model")} <= {"(unknown)", "tiny"}
    assert os.path.getsize(db) - before_db < 4 << 20
    assert rss_mb(pid) - before_rss < 30
    long_name = "n" * 60000
    assert request(agent, "POST", f"/v1/models/{long_name}/infer", b'{"inputs": {}}')[0] == 414


def test_browser_requests_are_refused(agent):
    # A page's "simple" cross-origin POST: text/plain, a foreign Origin; then DNS rebinding (a foreign Host).
    status, body = request(
        agent, "POST", "/v1/models/tiny/rollback", b"{}", {"Content-Type": "text/plain", "Origin": "http://evil.test"}
    )
    assert status == 403 and "cross-origin" in body["error"]
    status, body = request(agent, "POST", "/v1/models/tiny/rollback", b"{}", {"Content-Type": "text/plain"})
    assert status == 415
    status, body = request(agent, "GET", "/v1/telemetry", headers={"Host": "evil.test:80"}, token=False)
    assert status == 403 and "Host" in body["error"]
    status, body = request(agent, "POST", "/v1/models/tiny/rollback", b"{}", token=False)
    assert status == 401 and "token" in body["error"]
    assert request(agent, "GET", "/v1/models", token=False)[0] == 200  # reads stay open on loopback
    assert request(agent, "GET", "/v1/health", headers={"Host": "localhost:1"}, token=False)[0] == 200
    assert agent.client.models()[0]["name"] == "tiny"


def test_token_file_is_private(agent):
    path = os.path.join(agent.root, "agent", "token")
    assert os.stat(path).st_mode & 0o077 == 0
    with open(os.path.join(agent.root, "agent", "state.json")) as f:
        assert "token" not in json.load(f)
    with AgentClient("127.0.0.1", agent.state["port"], root=agent.root) as c:  # the SDK finds it by itself
        assert c.load("tiny", warmup=1)["name"] == "tiny"


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/models/tiny/load", {"warmup": 10000000}),
        ("/v1/models/tiny/load", {"threads": "abc"}),
        ("/v1/models/tiny/load", {"threads": 100000}),
        ("/v1/models/tiny/bench", {"threads": 100000}),
        ("/v1/models/tiny/bench", {"timeout_s": "nan"}),
        ("/v1/models/tiny/bench", {"runs": 10**9}),
        ("/v1/models/tiny/bench", {"providers": "CPU"}),
        ("/v1/models/tiny/infer", {"inputs": 5}),
    ],
)
def test_request_knobs_are_bounded(agent, path, body):
    status, answer = request(agent, "POST", path, json.dumps(body).encode())
    assert status == 400, answer
    assert agent.client.infer("tiny", {"input": X})["probs"].shape == (1, 10)


def test_malformed_bodies_are_400(agent):
    header = json.dumps({"tensors": 5}).encode()
    body = b"EKT1" + struct.pack("<I", len(header)) + header
    assert (
        request(agent, "POST", "/v1/models/tiny/infer", body, {"Content-Type": "application/x-edgekit-tensors"})[0]
        == 400
    )
    deep = b'{"inputs": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    assert request(agent, "POST", "/v1/models/tiny/infer", deep)[0] == 400
    assert request(agent, "POST", "/v1/models/tiny/load", b'{"warmup": NaN}')[0] == 400
    assert agent.client.health()["status"] == "ok"


def test_non_finite_outputs_are_standard_json(agent):
    data = [None] * (3 * 16 * 16)  # null -> NaN inputs -> NaN outputs
    body = json.dumps({"inputs": {"input": {"dtype": "float32", "shape": [1, 3, 16, 16], "data": data}}}).encode()
    status, answer = request(agent, "POST", "/v1/models/tiny/infer", body, token=False)
    assert status == 200 and answer["outputs"]["probs"]["data"][0][0] is None  # request() refuses NaN tokens


def test_a_real_listen_backlog(agent):
    port = agent.state["port"]
    failures = []

    def one():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if not s.recv(20).startswith(b"HTTP/1.1 200"):
                    failures.append("status")
        except OSError as e:
            failures.append(repr(e))

    for _ in range(3):
        workers = [threading.Thread(target=one) for _ in range(100)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
    assert not failures, failures[:5]


def _bench_children(root):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"bench" in argv and any(str(root).encode() in a for a in argv):
                found.append(int(pid))
    return found


def test_bench_is_bounded_in_time(agent):
    t0 = time.monotonic()
    with pytest.raises(AgentHTTPError) as e:
        agent.client.request("POST", "/v1/models/tiny/bench", {"runs": 100000, "warmup": 1000, "timeout_s": 1})
    assert e.value.status == 504 and time.monotonic() - t0 < 10
    time.sleep(0.5)
    assert not _bench_children(agent.root)


def test_bench_children_end_with_the_agent(agent, tiny_bundle):
    """Runs last in this module: it stops the agent while a long benchmark runs."""
    result = []

    def bench():
        try:  # the agent stops mid-benchmark: an error answer or none at all
            result.append(
                request(agent, "POST", "/v1/models/tiny/bench", b'{"runs": 100000, "warmup": 1000}', timeout=120)
            )
        except (OSError, IndexError, ValueError) as e:
            result.append(e)

    t = threading.Thread(target=bench)
    t.start()
    deadline = time.monotonic() + 20
    while not _bench_children(agent.root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _bench_children(agent.root), "the benchmark never started"
    stop_agent(sys.executable, agent.root)
    deadline = time.monotonic() + 10
    while _bench_children(agent.root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _bench_children(agent.root), "a benchmark outlived the agent"
    t.join(30)


def test_child_processes_are_bounded_in_memory_and_time(monkeypatch, tmp_path):
    """The mechanism the agent runs its benchmark and verification children under, on real processes."""
    from edgekit_agent import childproc

    monkeypatch.setenv("EDGEKIT_AGENT_CHILD_MEMORY_MB", "400")
    code, _, err = childproc.run_bounded([sys.executable, "-c", "x = bytearray(2 << 30)"], timeout=60)
    assert code != 0 and b"MemoryError" in err  # refused at the bound, not grown into the OOM killer
    marker = tmp_path / "grandchild-ran"
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w')\n")
    spawn = f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(grandchild)!r}]); time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        childproc.run_bounded([sys.executable, "-c", spawn], timeout=1)
    assert time.monotonic() - t0 < 10
    time.sleep(4)
    assert not marker.exists()  # the child's own children went with it (its process group was killed)


def test_telemetry_is_bounded_by_bytes(tmp_path):
    """Rows of the largest size the recorder keeps, far past the byte bound: the store stays near it."""
    from edgekit_agent.telemetry import Recorder

    rec = Recorder(str(tmp_path), flush_interval=3600, max_bytes=1 << 20)
    try:
        for _round in range(40):
            for _ in range(1000):
                rec.record("m" * 500, "v" * 500, "ort", "CPU", "1x3" * 200, 0.1, 0.2, "error", "e" * 5000)
            rec.flush()
        assert rec.used_bytes() <= 1.5 * (1 << 20)
        assert rec.pull(limit=10)["records"][0][2] == "m" * 128  # texts cut to their bound
    finally:
        rec.close()
