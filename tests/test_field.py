"""Field latency: real traffic through the real agent, pulled over local and SSH, reported."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from harness import run_cli, stop_agent

from edgekit import agent_package
from edgekit.deployer import deploy, open_device
from edgekit.errors import EdgekitError
from edgekit.field import FieldStore, pull, report
from edgekit_sdk import AgentClient, AgentHTTPError

X = np.zeros((1, 3, 16, 16), np.float32)


def traffic(client, ok=100, bad=0):
    for _ in range(ok):
        client.infer("tiny", {"input": X})
    for _ in range(bad):
        with pytest.raises(AgentHTTPError):
            client.infer("tiny", {"input": X[:, :, :8]})


@pytest.fixture
def deployed(local_device, tiny_bundle):
    deploy(tiny_bundle, local_device, runs=10, warmup=1)
    return local_device


@pytest.fixture
def store(tmp_path):
    with FieldStore(tmp_path / "field.db") as s:
        yield s


def test_traffic_is_recorded_pulled_and_reported(deployed, store):
    traffic(deployed.client, ok=200, bad=5)
    first = pull(deployed, store)
    assert first["added"] == 205
    assert pull(deployed, store)["added"] == 0  # idempotent
    r = report(store)
    [e] = r["entries"]
    assert e["requests"] == 205 and e["ok"] == 200 and e["errors"] == 5
    assert 0 < e["latency_ms"]["p50"] <= e["latency_ms"]["p90"] <= e["latency_ms"]["p99"]
    assert e["accelerator"] == "CPUExecutionProvider" and e["backend"] == "ort"
    assert e["throughput_rps"] > 0 and e["queue_ms"]["p50"] >= 0
    outcomes = {row[0]: row[1] for row in store.db.execute("SELECT outcome, COUNT(*) FROM records GROUP BY outcome")}
    assert outcomes == {"ok": 200, "bad_request": 5}
    kinds = {row[0] for row in store.db.execute("SELECT kind FROM events")}
    assert {"install", "load"} <= kinds
    assert store.db.execute("SELECT COUNT(*) FROM context").fetchone()[0] >= 1


def test_lab_figures_sit_beside_the_field(deployed, tmp_path, monkeypatch):
    """`edgekit deploy` stores its lab benchmark; the report compares (the default store, here isolated)."""
    traffic(deployed.client, ok=50)
    with FieldStore() as s:
        pull(deployed, s)
        [e] = [e for e in report(s)["entries"] if e["store_id"] == deployed.state["health"]["telemetry"]["store_id"]]
    assert e["lab"]["p50_ms"] > 0 and e["drift"] is not None


def test_metrics_are_prometheus(deployed):
    from prometheus_client.parser import text_string_to_metric_families

    traffic(deployed.client, ok=30, bad=2)
    text = deployed.client.metrics()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    hist = families["edgekit_inference_duration_seconds"]
    count = [s for s in hist.samples if s.name.endswith("_count") and s.labels["model"] == "tiny"]
    assert count and count[0].value >= 30
    reqs = {
        s.labels["outcome"]: s.value for s in families["edgekit_requests"].samples if s.labels.get("model") == "tiny"
    }
    assert reqs["ok"] >= 30 and reqs["bad_request"] == 2
    assert any(s.value >= 1 for s in families["edgekit_model_loads"].samples)
    assert families["edgekit_telemetry_ok"].samples[0].value == 1


def test_interrupted_pull_loses_and_duplicates_nothing(deployed, store):
    traffic(deployed.client, ok=300)
    batches = []

    def stop_after_two(kind, value):
        batches.append(value)
        if len(batches) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pull(deployed, store, batch_size=50, on_batch=stop_after_two)
    assert store.count() == 100
    pull(deployed, store, batch_size=50)
    assert store.count() == 300
    ids = [r[0] for r in store.db.execute("SELECT id FROM records ORDER BY id")]
    assert ids == sorted(set(ids)) and len(ids) == 300


def test_annotations_and_warm_load(deployed, store):
    c = deployed.client
    loaded = c.load("tiny", warmup=5)
    assert loaded["warmup_ms"] > 0
    _, meta = c.infer("tiny", {"input": X}, with_meta=True)
    c.annotate(meta["request_id"], pre_ms=1.5, post_ms=0.25)
    pull(deployed, store)
    row = store.db.execute("SELECT pre_ms, post_ms FROM records WHERE id=?", (meta["request_id"],)).fetchone()
    assert row == (1.5, 0.25)


def test_records_survive_kill_9(agent_roots, tmp_path, tiny_bundle, store):
    root = agent_roots("dev")
    pyz, _ = agent_package.build(tmp_path)
    flush = 0.05
    subprocess.run(
        [sys.executable, str(pyz), "start", "--root", str(root), "--flush-interval", str(flush)],
        check=True,
        capture_output=True,
    )
    dev = open_device("local", device_root=str(root))
    try:
        deploy(tiny_bundle, dev, bench=False)
        client = AgentClient("127.0.0.1", dev.state["port"])
        acked = []
        done = threading.Event()

        def send():
            while not done.is_set():
                try:
                    client.infer("tiny", {"input": X})
                except (OSError, AgentHTTPError):
                    return
                acked.append(time.time())

        t = threading.Thread(target=send)
        t.start()
        time.sleep(1.0)
        t_kill = time.time()
        os.kill(dev.state["pid"], signal.SIGKILL)
        t.join(10)
        done.set()
        client.close()
        db = root / "telemetry" / "records.db"
        assert sqlite3.connect(str(db)).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        dev.ensure_agent()  # a fresh agent on the same store
        pull(dev, store)
        stored = store.db.execute("SELECT COUNT(*) FROM records WHERE outcome='ok'").fetchone()[0]
        settled = sum(1 for a in acked if a < t_kill - 3 * flush)
        assert len(acked) > 50
        assert settled <= stored <= len(acked) + 1, (settled, stored, len(acked))
    finally:
        dev.close()


def test_corrupt_device_store_is_reported_not_emptied(agent_roots, tmp_path, tiny_bundle, store):
    root = agent_roots("dev")
    dev = open_device("local", device_root=str(root))
    try:
        deploy(tiny_bundle, dev, bench=False)
        stop_agent(sys.executable, root)
        db = root / "telemetry" / "records.db"
        for extra in ("-wal", "-shm"):
            if os.path.exists(str(db) + extra):
                os.unlink(str(db) + extra)
        garbage = b"\x00garbage, not sqlite" * 200
        db.write_bytes(garbage)
        dev.ensure_agent()
        health = dev.client.health()
        assert health["telemetry"]["ok"] is False and "unreadable" in health["telemetry"]["error"]
        dev.client.infer("tiny", {"input": X})  # still serving
        with pytest.raises(EdgekitError, match="not usable"):
            pull(dev, store)
        assert db.read_bytes() == garbage
    finally:
        dev.close()


def test_host_store_corruption_is_reported(tmp_path):
    bad = tmp_path / "field.db"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(EdgekitError, match="left untouched"):
        FieldStore(bad)
    assert bad.read_bytes() == b"not a database at all" * 100


def test_pull_over_ssh(agent_roots, sshd, tiny_bundle, tmp_path, store):
    root = agent_roots("remote")
    dev = open_device(
        "ssh",
        f"root@127.0.0.1:{sshd.port}",
        device_python=sys.executable,
        device_root=str(root),
        key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    )
    try:
        deploy(tiny_bundle, dev, bench=False)
        traffic(dev.client, ok=120)
        assert pull(dev, store, name="pi-in-the-lab")["added"] == 120
        [e] = report(store)["entries"]
        assert e["device"] == "pi-in-the-lab" and e["requests"] == 120
    finally:
        dev.close()


def test_regression_after_a_deploy_is_flagged(store):
    """Host logic on synthetic rows: version b is 50 % slower than a on the same device."""
    now = time.time()
    sid = "s1"
    rows = [
        (sid, i, now - 600 + i, "m", "a", "ort", "CPU", "", 0.1, 1.0 + 0.01 * (i % 5), None, None, "ok", None)
        for i in range(1, 101)
    ]
    rows += [
        (sid, i, now - 300 + i, "m", "b", "ort", "CPU", "", 0.1, 1.5 + 0.01 * (i % 5), None, None, "ok", None)
        for i in range(101, 201)
    ]
    store.db.executemany("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    store.db.executemany(
        "INSERT INTO events VALUES (?,?,?,?,?,?,?)",
        [(sid, 1, now - 601, "install", "m", "a", None), (sid, 2, now - 301, "install", "m", "b", None)],
    )
    r = report(store, since="1h")
    [g] = r["regressions"]
    assert (g["from"], g["to"]) == ("a", "b") and g["change"] == pytest.approx(0.5, abs=0.05)
    assert report(store, since="1s")["records"] == 0


def test_field_cli_and_html_report_in_chromium(
    local_device, tiny_bundle, tiny_model, tiny_calib, tmp_path, monkeypatch
):
    import edgekit

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))  # this test's own host-side field store
    deploy(tiny_bundle, local_device, runs=20, warmup=2)  # lab figures of version 1
    traffic(local_device.client, ok=150, bad=3)
    v2 = tmp_path / "v2"
    edgekit.build(tiny_model, "host", v2, precision="fp16", calib=tiny_calib, name="tiny")
    deploy(v2, local_device, runs=20, warmup=2)
    traffic(local_device.client, ok=150)
    root = local_device.root
    p = run_cli("field", "pull", "--device-root", root, "--json", check=0)
    assert json.loads(p.stdout)["added"] == 303
    html = tmp_path / "report.html"
    p = run_cli("field", "report", "--html", html, "--json", check=0)
    r = json.loads(p.stdout)
    assert len(r["entries"]) == 2 and r["records"] == 303
    assert all(e["lab"] and e["lab"]["p50_ms"] > 0 for e in r["entries"])
    text = html.read_text()
    assert "<script" not in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed for this test: bash scripts/bootstrap.sh --test installs it"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chrome'}",
    ]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    for marker in (
        'class="chart histogram"',
        'class="chart timeline"',
        'class="chart labfield"',
        'id="summary"',
        'class="deploy"',
        'class="cdf"',
    ):
        assert marker in dom, marker
    png = tmp_path / "shot.png"
    subprocess.run(
        [chromium, *flags, f"--screenshot={png}", "--window-size=1200,1600", html.as_uri()],
        capture_output=True,
        timeout=120,
    )
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert img.shape[:2] == (1600, 1200)
    blue = ((img[:, :, 2] > 200) & (img[:, :, 0] < 120)).sum()  # histogram bars, p50 line
    green = ((img[:, :, 1] > 100) & (img[:, :, 0] < 60) & (img[:, :, 2] < 80)).sum()  # field bars
    assert blue > 2000 and green > 500, (blue, green)


def test_late_annotations_reach_the_host_and_bad_ids_are_refused(deployed, store):
    c = deployed.client
    _, meta = c.infer("tiny", {"input": X}, with_meta=True)
    pull(deployed, store)  # the row is on the host before the app reports
    c.annotate(meta["request_id"], pre_ms=2.0, post_ms=3.0)
    pull(deployed, store)
    assert store.db.execute("SELECT pre_ms, post_ms FROM records WHERE id=?", (meta["request_id"],)).fetchone() == (
        2.0,
        3.0,
    )
    for bad in (10**20, -1, "7", True):
        with pytest.raises(AgentHTTPError) as e:
            c.request("POST", "/v1/telemetry/annotate", {"request_id": bad, "pre_ms": 1})
        assert e.value.status == 400
    traffic(c, ok=5)  # recording still works
    assert pull(deployed, store)["added"] == 5


def test_concurrent_first_requests_load_the_model_once(deployed):
    """After a restart, parallel first requests must neither fail nor close each other's runner."""
    stop_agent(sys.executable, deployed.root)
    deployed.ensure_agent()
    port = deployed.state["port"]
    errors, done = [], []

    def one():
        cl = AgentClient("127.0.0.1", port)
        try:
            for _ in range(5):
                cl.infer("tiny", {"input": X})
            done.append(1)
        except Exception as e:  # collect, the assertion below reports them
            errors.append(repr(e))
        finally:
            cl.close()

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(done) == 8
    text = deployed.client.metrics()
    assert 'edgekit_model_loads_total{model="tiny"' in text


def test_recorder_never_reuses_ids_and_keeps_rows_when_a_write_fails(tmp_path, monkeypatch):
    from edgekit_agent import telemetry

    rec = telemetry.Recorder(str(tmp_path), flush_interval=3600)
    for _ in range(10):
        rec.record("m", "v", "ort", "CPU", "1", 0.1, 1.0, "ok")
    calls = []
    real = telemetry.Recorder._aggregate

    def fail_once(db, rows):
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        return real(db, rows)

    monkeypatch.setattr(telemetry.Recorder, "_aggregate", staticmethod(fail_once))
    with pytest.raises(sqlite3.OperationalError):
        rec.flush()
    assert len(rec.queue) == 10  # nothing lost
    rec.flush()
    assert rec.persisted == 10 and not rec.queue
    rec.max_age_s = 0
    rec.prune_now()  # everything aged out
    rec.close()
    again = telemetry.Recorder(str(tmp_path), flush_interval=3600)
    assert again.record("m", "v", "ort", "CPU", "1", 0.1, 1.0, "ok") == 11
    again.close()


def test_report_survives_failed_lookups_and_still_sees_regressions(store):
    from edgekit.field import report_text

    test_regression_after_a_deploy_is_flagged(store)
    store.db.execute(
        "INSERT INTO records VALUES ('s1', 500, ?, 'm', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
        " 'unknown_model', 'unknown model')",
        (time.time() - 100,),
    )
    r = report(store)
    assert len(r["regressions"]) == 1
    assert "REGRESSION" in report_text(r)
