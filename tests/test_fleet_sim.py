"""The short version of benchmarks/fleet_sim.py: 50 simulated devices against a real Mosquitto, nginx and
PostgreSQL, so the load generator keeps working."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "fleet_sim.py"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (os.path.exists("/usr/sbin/nginx") and os.path.exists("/usr/sbin/mosquitto")),
        reason="scripts/bootstrap.sh --test installs nginx-light and mosquitto",
    ),
]


def test_fifty_simulated_devices_connect_receive_fetch_and_report(tmp_path):
    out = tmp_path / "fleet_sim.json"
    args = ["--devices", "50", "--idle", "0.5", "--per-pull", "20", "--group", "10", "--records", "20"]
    r = subprocess.run(
        [sys.executable, str(BENCH), *args, "--results", str(out)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (size,) = json.loads(out.read_text())["sizes"]
    assert size["devices"] == 50
    assert size["connect"]["per_s"] > 0 and size["connect"]["broker_kb_per_device"] > 0
    assert 0 < size["fanout"]["all_received_s"] < 30
    fetch = size["fetch"]
    assert fetch["failed"] == 0
    assert fetch["install_events_seen"] == 50 and fetch["states_reporting_install"] == 50
    ingest = size["ingest"]
    assert ingest["rows"] == 50 * 20 and ingest["per_pull"]["devices"] == 20 and ingest["grouped"]["devices"] == 30
    assert "| 50 |" in r.stdout
