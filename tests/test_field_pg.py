"""The field store in PostgreSQL: a real server (the distribution's initdb/pg_ctl), real pulls from a real agent."""

import json
import math
import sys

import numpy as np
import pytest
from harness import run_cli
from harness.postgres import ThrowawayPostgres

from edgekit.deployer import deploy
from edgekit.errors import EdgekitError
from edgekit.field import FieldStore, open_store, pull, report
from edgekit.field_pg import COARSE_RESOLUTION, RESOLUTION, PgFieldStore, ingest
from edgekit_sdk import AgentHTTPError

pytestmark = pytest.mark.e2e
X = np.zeros((1, 3, 16, 16), np.float32)
DAY = 86400.0


@pytest.fixture(scope="module")
def pg():
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture
def pg_url(pg, request):
    return pg.database(request.node.name[:60].lower())


def close(a, b, rel=RESOLUTION):
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel + 1e-9, abs_tol=2e-3)  # 1 µs floor: values under it count as 1 µs


def assert_same_report(lite, pgr, timelines=True):
    assert pgr["records"] == lite["records"]
    assert [(e["store_id"], e["model"], e["version"]) for e in pgr["entries"]] == [
        (e["store_id"], e["model"], e["version"]) for e in lite["entries"]
    ]
    for a, b in zip(lite["entries"], pgr["entries"]):
        exact = ("device", "backend", "accelerator", "requests", "ok", "errors", "lab", "lab_profile")
        assert {k: a[k] for k in exact} == {k: b[k] for k in exact}
        for k in ("error_rate", "first_ts", "last_ts", "throughput_rps", "share"):
            assert b[k] == pytest.approx(a[k]), k
        for part in ("latency_ms", "queue_ms"):
            rel = RESOLUTION if part == "latency_ms" else COARSE_RESOLUTION
            for q in ("p50", "p90", "p99"):
                assert close(a[part][q], b[part][q], rel), (part, q, a[part], b[part])
            assert b[part]["mean"] == pytest.approx(a[part]["mean"])
        assert (a["drift"] is None) == (b["drift"] is None)
        if timelines:  # hourly: equal where a cutoff falls on an hour
            assert sum(p["count"] for p in b["timeline"]) == sum(p["count"] for p in a["timeline"])
            assert len(b["timeline"]) <= 60
        assert sum(b["histogram"]["counts"]) == sum(a["histogram"]["counts"]) and len(b["histogram"]["counts"]) <= 40
    assert [(r["device"], r["from"], r["to"]) for r in pgr["regressions"]] == [
        (r["device"], r["from"], r["to"]) for r in lite["regressions"]
    ]
    assert pgr["events"] == lite["events"]
    assert [(t["store_id"], t["model"]) for t in pgr["timelines"]] == [
        (t["store_id"], t["model"]) for t in lite["timelines"]
    ]
    assert pgr["device_context"].keys() == lite["device_context"].keys()


def synthetic(store_id, n, t0, seed=0, versions=("v1", "v2"), start_id=1, model="m"):
    """A batch in the agent's /v1/telemetry shape: two versions (the second slower), 1 % errors."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(t0, t0 + 3 * DAY, n))
    recs = []
    for i in range(n):
        v = versions[0] if i < n // 2 else versions[1]
        ms = float(rng.lognormal(0.0 if v == versions[0] else 0.4, 0.3))
        ok = i % 100 != 7
        recs.append(
            (start_id + i, float(ts[i]), model, v, "ort", "CPUExecutionProvider", "1x3x16x16",
             float(rng.uniform(0, 0.2)), ms if ok else None, None, None, "ok" if ok else "bad_request",
             None if ok else "bad shape")
        )  # fmt: skip
    events = [
        (1, t0 + seed, "install", model, versions[0], None),
        (2, float(ts[n // 2]), "install", model, versions[1], None),
    ]
    return {"store_id": store_id, "records": recs, "events": events, "context": [(t0, 0.5, 900.0, 41.0)],
            "device": {"hostname": store_id}, "more": False}  # fmt: skip


def test_pull_from_a_real_agent_into_postgresql_equals_sqlite(local_device, tiny_bundle, tmp_path, pg_url):
    deploy(tiny_bundle, local_device, runs=10, warmup=1)
    for _ in range(200):
        local_device.client.infer("tiny", {"input": X})
    for _ in range(5):
        with pytest.raises(AgentHTTPError):
            local_device.client.infer("tiny", {"input": X[:, :, :8]})
    with open_store(pg_url) as pgs, FieldStore(tmp_path / "f.db") as lite:
        assert isinstance(pgs, PgFieldStore) and pgs.created
        assert pull(local_device, pgs, batch_size=64)["added"] == 205
        assert pull(local_device, pgs)["added"] == 0  # idempotent
        pull(local_device, lite)
        assert pgs.count() == lite.count() == 205
        assert_same_report(report(lite), report(pgs))
        r = report(pgs)
        assert r["resolution"]["latency_relative"] == RESOLUTION and "***" not in r["store"]
        [e] = r["entries"]
        assert e["ok"] == 200 and e["errors"] == 5 and e["backend"] == "ort"


def test_reports_agree_on_many_devices_with_filters(tmp_path, pg_url):
    t0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600
    now = t0 + 3 * DAY
    with open_store(pg_url) as pgs, FieldStore(tmp_path / "f.db") as lite:
        for d in range(4):
            batch = synthetic(f"store{d}", 3000, t0, seed=d)
            for s in (pgs, lite):
                s.store_batch(batch, f"dev{d}", "local", None)
        other = synthetic("other", 500, t0, seed=9, versions=("a", "b"), model="n")
        for s in (pgs, lite):
            s.store_batch(other, "o", None, None)
        full_lite, full_pg = report(lite, now=now), report(pgs, now=now)
        assert_same_report(full_lite, full_pg)
        assert len(full_pg["regressions"]) == 5 and len(full_pg["entries"]) == 10
        assert_same_report(report(lite, model="m", now=now), report(pgs, model="m", now=now))
        assert_same_report(report(lite, since="36h", now=now), report(pgs, since="36h", now=now))
        # a cutoff inside an hour: the entries exact, the timelines start at the hour it falls into
        assert_same_report(report(lite, since="1000m", now=now), report(pgs, since="1000m", now=now), False)
        assert_same_report(report(lite, "m", "1000m", now), report(pgs, "m", "1000m", now), False)
        assert report(pgs, since="36h", now=now)["records"] < full_pg["records"]


def test_a_resent_batch_adds_nothing_and_days_are_partitions(pg_url):
    t0 = 1_700_000_000.0
    batch = synthetic("dev-a", 2000, t0)
    assert ingest(pg_url, batch, name="a") == 2000
    with open_store(pg_url, create=False) as pgs:
        before = report(pgs, now=t0 + 4 * DAY)
        assert pgs.store_batch(batch, "a", None, None) == 0
        part = dict(batch, records=batch["records"][500:1500])
        assert pgs.store_batch(part, "a", None, None) == 0
        assert pgs.count() == 2000
        assert pgs.db.execute("SELECT count(*) FROM field_records").fetchone()[0] == 2000
        after = report(pgs, now=t0 + 4 * DAY)
        assert after["entries"] == before["entries"]
        days = {int(r[1] // DAY) for r in batch["records"]}
        assert len(days) >= 3
        assert pgs.partitions() == [
            "field_records_" + __import__("time").strftime("%Y%m%d", __import__("time").gmtime(d * DAY))
            for d in sorted(days)
        ]
        per_part = pgs.db.execute("SELECT tableoid::regclass::text, count(*) FROM field_records GROUP BY 1").fetchall()
        assert len(per_part) == len(days) and sum(n for _, n in per_part) == 2000
        # a record pulled later into an existing day adds to the same rollups
        more = dict(batch, records=[(99999, t0 + 10.0, *batch["records"][0][2:])], events=[], context=[])
        assert pgs.store_batch(more, "a", None, None) == 1 and pgs.count() == 2001


def test_cli_pull_and_report_with_a_postgresql_store(local_device, tiny_bundle, pg_url, monkeypatch):
    deploy(tiny_bundle, local_device, bench=False)
    for _ in range(30):
        local_device.client.infer("tiny", {"input": X})
    p = run_cli("field", "pull", "--device-root", local_device.root, "--store", pg_url, "--json", check=0)
    assert json.loads(p.stdout)["added"] == 30
    r = json.loads(run_cli("field", "report", "--store", pg_url, "--json", check=0).stdout)
    assert r["entries"][0]["ok"] == 30 and r["store"] == pg_url
    monkeypatch.setenv("EDGEKIT_FIELD_STORE", pg_url)
    text = run_cli("field", "report", check=0).stdout
    assert "tiny" in text


def test_bad_url_unreachable_server_and_missing_store(pg, pg_url, monkeypatch):
    with pytest.raises(EdgekitError, match="cannot connect to the field store"):
        open_store("postgresql://edgekit:secret@127.0.0.1:1/field")
    try:
        open_store("postgresql://edgekit:secret@127.0.0.1:1/field")
    except EdgekitError as e:
        assert "secret" not in str(e) and "***" in str(e)
    with pytest.raises(EdgekitError, match="cannot connect"):
        open_store(pg.url("no_such_database"))
    with pytest.raises(EdgekitError, match="cannot connect"):
        open_store("postgresql://edgekit@/field?host=/nonexistent/dir")
    with pytest.raises(EdgekitError, match="no field store in"):
        open_store(pg_url, create=False)
    p = run_cli("field", "report", "--store", "postgresql://u@127.0.0.1:1/x", check=1)
    assert "cannot connect to the field store" in p.stderr
    p = run_cli("field", "report", "--store", pg_url, check=1)
    assert "no field store in" in p.stderr
    with open_store(pg_url) as empty:  # a new store reports nothing, in the same shape
        r = report(empty)
        assert (r["entries"], r["timelines"], r["records"], r["events"]) == ([], [], 0, [])
        empty.db.execute("UPDATE field_schema SET version = version + 1")  # as a newer edgekit would leave it
    with pytest.raises(EdgekitError, match="written by a newer edgekit .*upgrade edgekit"):
        open_store(pg_url)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(EdgekitError, match=r"edgekit\[postgres\]"):
        open_store(pg_url)


def test_a_postgresql_url_in_the_config_or_environment_is_kept_as_written(tmp_path):
    from edgekit.config import load_config

    url = "postgresql://edgekit@db.example:5432/field?sslmode=require"
    conf = tmp_path / "config.toml"
    conf.write_text(f'[paths]\nfield_store = "{url}"\n')
    env = {"EDGEKIT_CONFIG": str(conf), "HOME": str(tmp_path)}
    assert load_config(env).field_store == url
    load_config(env).export(env)
    assert env["EDGEKIT_FIELD_STORE"] == url
    assert load_config({"EDGEKIT_FIELD_STORE": url, "HOME": str(tmp_path)}).field_store == url


V1 = f"""
CREATE TABLE field_dist AS SELECT gid, (x >> 40)::smallint AS bucket, (x & {(1 << 40) - 1})::int AS n
    FROM field_totals, unnest(dist) x;
CREATE TABLE field_queue_dist AS SELECT gid, (x >> 40)::smallint AS bucket, (x & {(1 << 40) - 1})::int AS n
    FROM field_totals, unnest(qdist) x;
CREATE TABLE field_hour_hist AS SELECT gid, hour, (x >> 40)::smallint AS bucket, (x & {(1 << 40) - 1})::int AS n
    FROM field_hours, unnest(hist) x;
ALTER TABLE field_hours DROP COLUMN hist;
DROP TABLE field_totals, field_schema;
DROP FUNCTION field_hist_add;
DROP INDEX field_groups_model;
"""


def totals(store):
    """field_totals by group: counters (sums rounded: their order of addition differs) and packed histograms."""
    rows = store.db.execute(
        "SELECT g.store_id, g.model, g.version, t.requests, t.ok, t.first_ts, t.last_ts, t.ok_first_ts, t.ok_last_ts, "
        "round(t.infer_sum::numeric, 6), t.infer_n, round(t.queue_sum::numeric, 6), t.queue_n, t.dist, t.qdist "
        "FROM field_totals t JOIN field_groups g USING (gid) ORDER BY 1, 2, 3"
    ).fetchall()
    return [tuple(r) for r in rows]


def test_the_all_time_rollup_is_idempotent_rebuilt_and_filled_on_upgrade(tmp_path, pg_url):
    t0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600
    now = t0 + 3 * DAY
    batches = [synthetic(f"store{d}", 1500, t0, seed=d) for d in range(3)]
    with open_store(pg_url) as pgs, FieldStore(tmp_path / "f.db") as lite:
        for b in batches:
            pgs.store_batch(dict(b, records=b["records"][:700]), "d", None, None)  # two pulls: rows merged
            pgs.store_batch(b, "d", None, None)
            lite.store_batch(b, "d", None, None)
        first = totals(pgs)
        assert len(first) == 6 and sum(r[3] for r in first) == 4500
        assert all(r[13] and r[13] == sorted(r[13]) for r in first)  # packed, buckets ascending
        for b in batches:  # re-sent batches add nothing, to the all-time rollup either
            assert pgs.store_batch(b, "d", None, None) == 0
        assert totals(pgs) == first
        full = report(pgs, now=now)
        assert_same_report(report(lite, now=now), full)
        assert pgs.rebuild_rollups() == 4500 and totals(pgs) == first
        assert pgs.db.execute("SELECT version FROM field_schema").fetchall() == [(2,)]
        hours = pgs.db.execute("SELECT gid, hour, hist FROM field_hours ORDER BY 1, 2").fetchall()
        # the store as schema version 1 wrote it: histograms one row per bucket, no all-time rows
        pgs.db.execute(V1)
    with open_store(pg_url, create=False) as old, FieldStore(tmp_path / "f.db") as lite:
        assert not old.created and totals(old) == first  # filled from the other rollups on first use
        assert old.db.execute("SELECT gid, hour, hist FROM field_hours ORDER BY 1, 2").fetchall() == hours
        assert old.db.execute("SELECT to_regclass('field_dist')").fetchone()[0] is None
        assert_same_report(full, report(old, now=now))  # the same report (sums added in another order)
        more = synthetic("store0", 300, t0 + DAY, seed=7, start_id=5000)  # later pulls add to the filled rows
        for s in (old, lite):
            s.store_batch(more, "d", None, None)
        assert_same_report(report(lite, now=now), report(old, now=now))
        assert_same_report(report(lite, model="m", now=now), report(old, model="m", now=now))
    with open_store(pg_url, create=False) as again:  # upgraded once
        assert again.db.execute("SELECT version FROM field_schema").fetchall() == [(2,)]
