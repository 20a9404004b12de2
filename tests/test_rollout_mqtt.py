"""Staged rollouts over pull delivery: Mosquitto, nginx serving the bundle store, three local agents started with
--pull under SDK traffic, sending their field records to the broker, and the host's ingest writing them into the
field store. A good bundle proceeds through three waves; a slow one is stopped at wave 1 and rolled back, with the
reason from field data."""

from __future__ import annotations

import json
import os
import time

import pytest
from harness import run_cli
from harness.servers import Mosquitto, Nginx
from test_pull_field import Running
from test_pull_mqtt import runs, start_agent, stop_agent, version_of, wait_state
from test_rollout_e2e import FAST, Traffic, bundles, serving  # noqa: F401  (bundles: a fixture)

from edgekit.fleet_pull import publish
from edgekit.fleet_pull.broker import Broker
from edgekit.rollout import Controller, MqttDelivery, RolloutState, start
from edgekit.rollout.mqtt import source_url

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/nginx") and os.path.exists("/usr/sbin/mosquitto")),
    reason="scripts/bootstrap.sh --test installs nginx-light and mosquitto",
)


@pytest.fixture
def pull_fleet(tmp_path, agent_roots, tiny_bundle):
    """Three pull-mode devices of group ``lab`` serving the tiny model (the old version) under traffic; the ingest
    runs. Yields (broker url, store dir, store url, field store, roots)."""
    store, field = tmp_path / "store", tmp_path / "field.db"
    digest = publish(tiny_bundle, store)["digest"]
    roots = [agent_roots(f"d{i}") for i in range(3)]
    with Nginx(store) as nginx, Mosquitto() as mq, Broker(mq.url, fleet="lab") as broker:
        broker.desire("tiny", digest, nginx.url, group="lab")
        for i, root in enumerate(roots):
            pull = ["--device-id", f"d{i}", "--group", "lab", "--fleet", "lab", "--field-interval", "0.5"]
            start_agent(root, mq.url, *pull)
        for i in range(3):
            wait_state(broker, f"d{i}", runs(version_of(tiny_bundle)))
        ingest = Running(mq.url, field)
        traffic = Traffic(roots)
        traffic.wait_for(40)
        try:
            yield mq.url, store, nginx.url, field, roots
        finally:
            traffic.stop()
            ingest.stop()


def test_good_bundle_proceeds_through_three_waves_over_mqtt(pull_fleet, bundles, tmp_path):  # noqa: F811
    url, store, store_url, field, roots = pull_fleet
    state = tmp_path / "rollouts.db"
    args = ["rollout", "start", bundles["good"], "--broker", url, "--fleet-name", "lab", "--store-url", store_url]
    args += ["--publish-to", store, "--group", "lab", "--waves", "1%,10%,50%,100%", "--min-soak", "1s"]
    args += ["--min-samples", "30", "--max-p99-regression", "2000%", "--max-p50-regression", "300%"]
    args += ["--interval", "0.3s", "--state", state, "--store", field, "--json"]
    p = run_cli(*args, check=0)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["status"] == "done" and [d["decision"] for d in r["decisions"]] == ["proceed"] * 3, r["decisions"]
    assert len(r["waves"]) == 3 and sorted(r["devices"]) == ["d0", "d1", "d2"]
    assert all(serving(root) == r["bundle_id"] for root in roots)
    with Broker(url, fleet="lab") as broker:
        states = broker.states()
    assert {s["models"]["tiny"]["version"] for s in states.values()} == {r["bundle_id"]}


def test_slow_bundle_is_stopped_and_rolled_back_over_mqtt(pull_fleet, bundles, tmp_path):  # noqa: F811
    url, store, store_url, field, roots = pull_fleet
    old = serving(roots[0])
    with RolloutState(tmp_path / "rollouts.db") as state, Broker(url, fleet="lab") as broker:
        r, _ = start(
            state, bundles["slow"], source_url(url, "lab", store_url, str(store)), "lab", "1,2,3", FAST, broker
        )
        delivery = MqttDelivery(url, str(store), store_url, "lab")
        t0 = time.monotonic()
        r = Controller(state, r.id, delivery, field_store=field).run(interval=0.3, timeout=120)
        assert time.monotonic() - t0 < 120
    assert r.status == "stopped", (r.reason, r.decisions)
    first = r.waves[0][0]
    assert r.reason.startswith("wave 1: ") and "p50 " in r.reason and f"on {first} ({old} -> {r.bundle_id})" in r.reason
    assert r.devices[first]["state"] == "rolled-back"
    assert all(serving(root) == old for root in roots)


def test_a_device_offline_during_its_wave_installs_when_it_returns(pull_fleet, bundles, tmp_path):  # noqa: F811
    url, store, store_url, field, roots = pull_fleet
    with RolloutState(tmp_path / "rollouts.db") as state, Broker(url, fleet="lab") as broker:
        r, _ = start(
            state, bundles["good"], source_url(url, "lab", store_url, str(store)), "lab", "1,2,3", FAST, broker
        )
        late = r.waves[2][0]
        stop_agent(roots[int(late[1:])])  # its retained state stays on the broker
        delivery = MqttDelivery(url, str(store), store_url, "lab", install_wait_s=3)
        r = Controller(state, r.id, delivery, field_store=field).run(interval=0.3, timeout=60)
        assert r.status == "running" and r.wave == 2, (r.reason, r.decisions)
        assert r.devices[late]["state"] == "installing" and "has not reported" in r.devices[late]["error"]
        pull = ["--device-id", late, "--group", "lab", "--fleet", "lab", "--field-interval", "0.5"]
        start_agent(roots[int(late[1:])], url, *pull)  # back: its desired entry was kept for it
        r = Controller(state, r.id, delivery, field_store=field).run(interval=0.3, timeout=120)
    assert r.status == "done" and [d["decision"] for d in r.decisions] == ["proceed"] * 3, (r.reason, r.decisions)
    assert all(serving(root) == r.bundle_id for root in roots)
