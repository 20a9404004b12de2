"""Field data over MQTT: a real agent in pull mode, under SDK traffic, sends its new records to a real Mosquitto; the
host's ingest (a persistent session) writes them into the field store: every record arrives once, a batch sent
again adds nothing, and batches published while the ingest was down arrive when it comes back."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from harness.servers import Mosquitto, Nginx
from test_pull_mqtt import runs, start_agent, version_of, wait_state

from edgekit.cli import main as edgekit_main
from edgekit.fleet_pull import publish
from edgekit.fleet_pull.broker import Broker
from edgekit.fleet_pull.ingest import Ingest, check_batch

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/nginx") and os.path.exists("/usr/sbin/mosquitto")),
    reason="scripts/bootstrap.sh --test installs nginx-light and mosquitto",
)


class Running:
    """An :class:`Ingest` running in a thread of its own (the store is opened and written there)."""

    def __init__(self, url: str, store: Path | str) -> None:
        self.events: list[dict] = []
        self.stop_event = threading.Event()
        self.ingest = Ingest(url, store=str(store), fleet="lab", on_batch=self.events.append)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.ingest:
            self.ingest.run(until=self.stop_event)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def device_ids(root: Path) -> list[int]:
    with sqlite3.connect(root / "telemetry" / "records.db") as db:
        return [r[0] for r in db.execute("SELECT id FROM requests ORDER BY id")]


def stored_ids(store: Path) -> list[int]:
    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        return [r[0] for r in db.execute("SELECT id FROM records ORDER BY id")]


def wait_for(check, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def traffic(root: Path, n: int) -> None:
    from edgekit_sdk import AgentClient

    with AgentClient.local(str(root), timeout=10) as client:
        for _ in range(n):
            client.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})


def test_pull_agent_sends_field_records_and_ingest_stores_each_once(tiny_bundle, tmp_path, agent_roots):
    store_dir, field = tmp_path / "store", tmp_path / "field.db"
    digest = publish(tiny_bundle, store_dir)["digest"]
    root = agent_roots("device")
    with Nginx(store_dir) as nginx, Mosquitto() as mq, Broker(mq.url, fleet="lab") as broker:
        broker.desire("tiny", digest, nginx.url, device="dev1")
        start_agent(root, mq.url, "--device-id", "dev1", "--fleet", "lab", "--field-interval", "0.5")
        wait_state(broker, "dev1", runs(version_of(tiny_bundle)))

        ingest = Running(mq.url, field)
        traffic(root, 40)
        wait_for(lambda: len(device_ids(root)) >= 40 and stored_ids(field) == device_ids(root), "the first records")
        assert {e["device"] for e in ingest.events} == {"dev1"}

        # a batch sent again (the device's whole history): nothing is added
        with sqlite3.connect(field) as db:
            before = db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        again = json.loads(json.dumps(_whole_batch(root)))
        assert check_batch(again) is None
        n_events = len(ingest.events)
        broker._publish("edgekit/lab/devices/dev1/field", json.dumps(again).encode(), retain=False)
        wait_for(lambda: len(ingest.events) > n_events, "the batch sent again")
        assert ingest.events[-1]["added"] == 0 and ingest.events[-1]["records"] == before
        assert len(stored_ids(field)) == before

        # the ingest is down while the device keeps sending: the broker keeps the batches for its session
        ingest.stop()
        traffic(root, 30)
        # the agent's recorder writes its records in the background: wait for them before judging what was sent
        wait_for(lambda: len(device_ids(root)) >= 70, "the device to record the new requests")
        cursor = root / "telemetry" / "field-cursor.json"
        wait_for(lambda: json.loads(cursor.read_text())["after_id"] == device_ids(root)[-1], "the device to send")
        assert len(stored_ids(field)) == before
        ingest = Running(mq.url, field)
        wait_for(lambda: stored_ids(field) == device_ids(root), "the batches kept while the ingest was down")
        assert len(device_ids(root)) >= 70
        ingest.stop()

        # bad messages are reported and ignored
        ingest = Running(mq.url, field)
        time.sleep(1.0)
        broker._publish("edgekit/lab/devices/dev1/field", b"{not json", retain=False)
        wait_for(lambda: any("error" in e for e in ingest.events), "the bad message")
        ingest.stop()
        assert stored_ids(field) == device_ids(root)


def _whole_batch(root: Path) -> dict:
    from edgekit_sdk import AgentClient

    with AgentClient.local(str(root), timeout=10) as client:
        return client.request("GET", "/v1/telemetry?after_id=0&limit=50000")


def test_ingest_cli_and_bad_options(tmp_path, capsys):
    assert edgekit_main(["fleet", "ingest", "--broker", "http://x", "--store", str(tmp_path / "f.db")]) != 0
    assert "mqtt://HOST" in capsys.readouterr().err
    with Mosquitto() as mq:
        args = ["fleet", "ingest", "--broker", mq.url, "--store", str(tmp_path / "f.db"), "--seconds", "1", "--json"]
        assert edgekit_main(args) == 0
        assert json.loads(capsys.readouterr().out) == {"batches": 0, "added": 0, "rejected": 0}


@pytest.mark.e2e
def test_ingest_into_postgresql(tiny_bundle, tmp_path, agent_roots):
    from harness.postgres import ThrowawayPostgres

    from edgekit.field_pg import PgFieldStore

    store_dir = tmp_path / "store"
    digest = publish(tiny_bundle, store_dir)["digest"]
    root = agent_roots("device")
    with ThrowawayPostgres() as pg, Nginx(store_dir) as nginx, Mosquitto() as mq, Broker(mq.url, fleet="lab") as broker:
        url = pg.database("ingest")
        broker.desire("tiny", digest, nginx.url, device="dev1")
        start_agent(root, mq.url, "--device-id", "dev1", "--fleet", "lab", "--field-interval", "0.5")
        wait_state(broker, "dev1", runs(version_of(tiny_bundle)))
        ingest = Running(mq.url, url)
        try:
            traffic(root, 30)

            def arrived() -> bool:
                with PgFieldStore(url) as store:
                    return store.count() == len(device_ids(root)) >= 30

            wait_for(arrived, "the records in PostgreSQL")
        finally:
            ingest.stop()
        assert {e["device"] for e in ingest.events} == {"dev1"} and sum(e["added"] for e in ingest.events) >= 30
