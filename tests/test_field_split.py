"""A 90/10 traffic split seen in the field report: one row per version, each with its share of the requests."""

import json

import numpy as np
import pytest
from harness import run_cli

from edgekit.deployer import deploy

pytestmark = pytest.mark.e2e


def test_field_report_shows_both_sides_of_a_90_10_split(
    local_device, tiny_bundle, tiny_model, tiny_calib, tmp_path, monkeypatch
):
    import edgekit

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))  # this test's own host-side field store
    stable = deploy(tiny_bundle, local_device, bench=False)["installed"]["version"]
    out = tmp_path / "tiny-int8"
    edgekit.build(tiny_model, "host", out, precision="int8", calib=tiny_calib, name="tiny")
    canary = deploy(out, local_device, bench=False)["installed"]["version"]
    c = local_device.client
    c.split("tiny", {stable: 90, canary: 10})
    x = {"input": np.zeros((1, 3, 16, 16), np.float32)}
    served = [c.infer("tiny", x, with_meta=True)[1]["version"] for _ in range(500)]
    p = run_cli("field", "pull", "--device-root", local_device.root, "--json", check=0)
    assert json.loads(p.stdout)["added"] >= 500
    r = json.loads(run_cli("field", "report", "--model", "tiny", "--json", check=0).stdout)
    rows = {e["version"]: e for e in r["entries"]}
    assert set(rows) == {stable, canary}, rows.keys()
    for version in (stable, canary):
        assert rows[version]["ok"] == served.count(version)
        assert rows[version]["latency_ms"]["p50"] > 0
    assert rows[canary]["share"] == pytest.approx(served.count(canary) / 500)
    assert 0.04 < rows[canary]["share"] < 0.2 and rows[stable]["share"] > 0.8
    split_events = [e for e in r["events"] if e["kind"] == "split"]
    assert split_events and split_events[-1]["detail"] == {"versions": {stable: 90, canary: 10}}
    text = run_cli("field", "report", "--model", "tiny", check=0).stdout
    assert stable in text and canary in text, text
    assert "split" in text and "90" in text, text
