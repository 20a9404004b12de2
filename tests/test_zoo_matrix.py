"""A representative subset of the model-zoo matrix (benchmarks/zoo.py), one cell per input kind, run as a user runs
the benchmark: public models fetched from PyPI, realistic data, each cell built in its own process, host cells
deployed to a local agent and timed there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CELLS = [
    "magika:host:ort:int8",  # int32 bytes; ORT's int32-bias scale adjustment fails on it, quantized without it
    "oww_melspectrogram:host:openvino:fp32",  # raw audio samples
    "mtcnn_pnet:host:mnn:fp32",  # NHWC image with its H and W swapped
    "romanizer_decoder:host:ort:fp32",  # int64 prefix + float memory + bool mask + recurrent state
    "ppocr_v4_rec:raspberrypi5:ort:int8",  # a text line for an aarch64 target: ORT format, checked here, not timed
]


def test_zoo_matrix_cells(tmp_path):
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "zoo.py"), "--cells", *CELLS, "--runs", "5", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "zoo.json").read_text())
    cells = {f"{c['model']}:{c['profile']}:{c['backend']}:{c['precision']}": c for c in result["cells"]}
    assert sorted(cells) == sorted(CELLS)
    for name, c in cells.items():
        assert c["status"] == "ok", (name, c)
        assert c["size"] > 0 and c["build_s"] > 0
        if c["profile"] == "host":  # timed on the agent, with what really ran beside it
            assert 0 < c["agent_p10_ms"] <= c["agent_p50_ms"] <= c["agent_p90_ms"], (name, c)
            assert c["runtime"].startswith(c["backend"]) and c["threads"] == 1 and c["accelerator"]
        else:
            assert "agent_p50_ms" not in c
    assert cells["magika:host:ort:int8"]["metric"] == "top1_agreement"
    assert cells["magika:host:ort:int8"]["value"] == 1.0
    assert cells["romanizer_decoder:host:ort:fp32"]["metric"] == "top1_agreement"  # next-token agreement
    assert cells["ppocr_v4_rec:raspberrypi5:ort:int8"]["metric"] == "char_accuracy"
    table = (tmp_path / "zoo.md").read_text()
    assert "5 cells over 5 models: 5 ok" in table
    assert table.count("\n| ") == 14  # two tables (one row per model, one per cell): header, rule, 5 rows each
    assert "| model | ort int8 | ov fp32 | mnn fp32 | ort fp32 | rpi5 ort int8 |" in table
