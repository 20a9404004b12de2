"""A rollout's gates reading a PostgreSQL field store (the fleet's shared store): the same decisions as on SQLite.
The devices are a scripted delivery (tests/test_rollout.py); the store is a real server."""

import pytest
from test_field_pg import pg  # noqa: F401  (a fixture)
from test_rollout import Scripted

from edgekit.field import open_store
from edgekit.rollout import Controller, RolloutState, Thresholds, start

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("new_ms,decision", [(3.0, "stop"), (1.0, "proceed")])
def test_the_gates_read_postgresql(tmp_path, tiny_bundle, pg, new_ms, decision):  # noqa: F811
    pg_url = pg.database(f"rollout_{decision}")
    inv = tmp_path / "devices.toml"
    inv.write_text("".join(f'[[device]]\nname = "d{i}"\nurl = "local://"\n' for i in range(3)))
    clock = [100.0]
    devices = ("d0", "d1", "d2")
    with RolloutState(tmp_path / "rollouts.db") as state:
        r, _ = start(state, tiny_bundle, inv, None, "1,2,3", Thresholds(min_soak_s=1, min_samples=20))
        d = Scripted({"v0": 1.0, r.bundle_id: new_ms}, {n: "v0" for n in devices})
        d.new = r.bundle_id
        with open_store(pg_url) as store:  # the old version's numbers, as the devices sent them before
            for n in devices:
                d.collect(type("FD", (), {"name": n})(), store)
        c = Controller(RolloutState(state.path), r.id, delivery=d, field_store=pg_url, now=lambda: clock[0])
        c.step()  # wave 1 installs
        clock[0] += 2
        r = c.step()  # judged on the field numbers in PostgreSQL
        assert r.decisions[0]["decision"] == decision, r.decisions
        if decision == "stop":
            assert "p99" in r.reason and "+200" in r.reason and "above the 10% allowed" in r.reason
            assert d.serving[r.waves[0][0]] == "v0" and r.devices[r.waves[0][0]]["state"] == "rolled-back"
        else:
            assert r.wave == 1 and r.status == "running"
