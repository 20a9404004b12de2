"""`edgekit build --auto`: the candidate grid built, gated, measured on the device, and the front."""

import json

import numpy as np
import pytest
from harness import PPOCR, one_json, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def split_lines(textlines, tmp_path_factory):
    d = np.load(textlines)
    x, labels = d["x"], d["labels"]
    base = tmp_path_factory.mktemp("auto-data")
    np.savez(base / "calib.npz", x=x[:100])
    np.savez(base / "val.npz", x=x[100:], labels=labels[100:])
    return base / "calib.npz", base / "val.npz"


def test_auto_on_two_backends_end_to_end(agent_roots, tmp_path, split_lines):
    calib, val = split_lines
    out, root = tmp_path / "cls", agent_roots("device")
    args = [
        "build",
        PPOCR,
        "--profile",
        "host",
        "--auto",
        "--backends",
        "ort,openvino",
        "--input-shape",
        "x=1,3,48,192",
        "--calib",
        calib,
        "--val",
        val,
        "--prune-levels",
        "0,0.5",
        "--auto-runs",
        "15",
        "--auto-rounds",
        "2",
        "--device-root",
        root,
        "-o",
        out,
    ]
    p = run_cli(*args, "--json", check=0)
    report = one_json(p.stdout)
    auto = report["auto"]
    cands = {c["label"]: c for c in auto["candidates"]}
    from edgekit import profiles

    host = profiles.load("host")  # the grid: each backend's precisions as the profile lists them, x pruning
    grid = {
        f"{b}-{p}{suffix}"
        for b in ("ort", "openvino")
        for p in set(host.backend(b)["precisions"]) | {"fp32"}
        for suffix in ("", "-p50")
    }
    assert {"ort-fp32", "ort-int8", "ort-int8-p50", "openvino-int8", "openvino-fp32-p50"} <= grid
    assert set(cands) == grid
    # Every candidate has an outcome with a reason; nothing is silently missing.
    for c in cands.values():
        assert c["status"] in ("measured", "rejected", "dropped", "failed"), c
        if c["status"] != "measured":
            assert c["reason"], c
        if c["status"] in ("measured", "rejected"):
            assert c["p50_ms"] > 0 and c["size_bytes"] > 0 and c["quality_metric"] == "accuracy"
    for c in cands.values():  # a rejection is a measurement, never a rule
        if c["status"] == "rejected":
            assert "measured slower" in c["reason"] and c["speedup_vs_parent"] < 0.95
    winner = cands[auto["winner"]]
    assert winner["status"] == "measured" and winner.get("pareto")
    assert winner["label"] in auto["reason"]
    # The winner is written under the model's own name and deploys like any bundle.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["name"] == "ppocr_mobile_v2_cls" and manifest["backend"] == winner["backend"]
    assert (tmp_path / "cls-candidates" / winner["label"] / "manifest.json").is_file()
    # The candidates were measured, then taken off the device again.
    left = one_json(run_cli("models", "--local", "--device-root", root, "--json", check=0).stdout)["models"]
    assert left == []
    # A second run rebuilds nothing.
    again = one_json(run_cli(*args, "--json", check=0).stdout)["auto"]
    assert all(c["cache_hit"] for c in again["candidates"] if c["status"] in ("measured", "rejected"))
    text = run_cli(*args, check=0).stdout
    assert "winner:" in text and auto["winner"] in text


def test_auto_refuses_build_only_profiles_and_unknown_backends(tmp_path, tiny_model):
    p = run_cli("build", tiny_model, "--profile", "iphone-15-pro", "--auto", "-o", tmp_path / "x", check=1)
    assert "build-only" in p.stderr
    p = run_cli(
        "build", tiny_model, "--profile", "host", "--auto", "--backends", "nosuch", "-o", tmp_path / "x", check=1
    )
    assert "does not run nosuch" in p.stderr
    assert not (tmp_path / "x").exists()
