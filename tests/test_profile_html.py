"""The per-layer profile as a self-contained HTML page, rendered in Debian's headless chromium; `deploy
--profile-layers` keeping the profile's summary with the lab benchmark, shown by `edgekit field report`."""

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest
from harness import PPOCR, one_json, run_cli, stop_agent

import edgekit
from edgekit.field_html import render as field_html
from edgekit.field_text import report_text
from edgekit.layer_profile import SCHEMA, join, summary
from edgekit.layer_profile_html import render
from edgekit.layer_profile_text import lab_profile_lines

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _report(nodes, available=True):
    return {
        "schema": SCHEMA,
        "name": "m<b>",
        "bundle_id": "b1",
        "backend": "ort",
        "runtime": "onnxruntime",
        "runtime_version": "1.2.3",
        "precision": "fp32",
        "accelerator": "NNAPI",
        "threads": 2,
        "runs": 3,
        "warmup": 1,
        "end_to_end_ms": {"p50": 10.0, "p90": 11.0},
        "profiler": {"available": True, "source": "test"}
        if available
        else {"available": False, "reason": "not available from LiteRT 2.3.0: its Python Interpreter has none"},
        "node_sum_ms": sum(n["time_ms"] for n in nodes),
        "node_sum_ratio": sum(n["time_ms"] for n in nodes) / 10.0 if available else None,
        "memory": {"rss_before_load_mb": 20.0, "peak_rss_load_mb": 50.0, "peak_rss_inference_mb": 61.5,
                   "weights_bytes": 2_000_000},
        "nodes": nodes,
    }  # fmt: skip


def _node(name, ms, accelerator="CPU"):
    return {"name": name, "op": "Conv<3>", "accelerator": accelerator, "time_ms": ms, "share": ms / 10.0}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page):
    p = _Tags()
    p.feed(page)
    return p


def _no_external(page):
    assert "<script" not in page.lower()
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    tags = _parse(page).tags
    assert not [t for t, _ in tags if t in ("script", "img", "link", "iframe", "object", "embed")]
    assert not [k for _, a in tags for k in a if k in ("src", "href") or k.startswith("on")]


def test_names_from_the_model_are_escaped_everywhere():
    nodes = [_node(EVIL, 4.0, "NNAPI"), _node("b", 3.0, 'CPU & "co"'), _node("c", 3.0, "NNAPI")]
    r = join(_report(nodes), None)
    r["warnings"] = ["<script>w</script>"]
    page = render(r)
    _no_external(page)
    text = "".join(_parse(page).text)
    assert EVIL in text and "m<b>" in text and 'CPU & "co"' in text  # shown as text, not markup
    assert page.count('class="layer"') == 3
    assert "3 partition(s) in execution order, 2 boundary(ies)" in page
    assert "61.5 MB" in page and "2.00 MB" in page and "onnxruntime 1.2.3" in page and "= 1.00 × end to end" in page


def test_a_runtime_without_a_profiler_says_so_on_the_page(tmp_path):
    page = edgekit.profile_html(join(_report([], available=False), None), tmp_path / "p.html")
    assert (tmp_path / "p.html").read_text() == page and not (tmp_path / "p.html.tmp").exists()
    _no_external(page)
    assert 'id="unavailable"' in page and "not available from LiteRT 2.3.0" in page
    assert 'class="layer"' not in page and "peak RSS after inference" in page


def test_lab_profile_summary_in_the_field_report_text_and_html():
    nodes = [_node(f"n{i}", float(i), "NNAPI" if i % 2 else "CPU") for i in range(1, 9)]
    nodes.append(_node(EVIL, 0.5))
    s = summary(join(_report(nodes), None), top=3)
    assert [n["name"] for n in s["top"]] == ["n8", "n7", "n6"] and s["nodes"] == 9 and s["partitions"] == 8
    lines = "\n".join(lab_profile_lines(s))
    assert "where the time goes (lab profile, onnxruntime 1.2.3, 3 runs)" in lines and "n8" in lines
    assert lab_profile_lines(None) == []
    entry = {
        "device": "pi",
        "store_id": "s",
        "model": "m",
        "version": "v1",
        "backend": "ort",
        "accelerator": "CPU",
        "requests": 1,
        "error_rate": 0.0,
        "latency_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0},
        "lab": {"p50_ms": 1.0},
        "drift": 0.0,
        "throughput_rps": None,
        "lab_profile": dict(s, top=[*s["top"], {**s["top"][0], "name": EVIL}]),
    }
    r = {"records": 1, "model": None, "since": None, "generated": 0, "entries": [entry], "events": [],
         "regressions": []}  # fmt: skip
    assert "where the time goes (lab profile" in report_text(r)
    page = field_html(r)
    assert "Where the time goes (lab profile)" in page and "<script" not in page


# -- a real profile, a real browser --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ppocr_ort(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile-html")
    bundle = d / "ort"
    edgekit.build(PPOCR, "host", bundle, precision="fp32", backend="ort", input_shapes=["x=1,3,48,192"])
    root = d / "device"
    try:
        yield bundle, root
    finally:
        stop_agent(sys.executable, root)


def _chromium(tmp_path, *args):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed for this test: bash scripts/bootstrap.sh --test installs it"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}"]  # fmt: skip
    return subprocess.run([chromium, *flags, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_profile_html_of_a_real_ort_profile_in_chromium(ppocr_ort, tmp_path):
    bundle, root = ppocr_ort
    run_cli("deploy", bundle, "--local", "--device-root", root, "--runs", 3, "--warmup", 1, "-q", check=0)
    page = tmp_path / "profile.html"
    where = ("--local", "--device-root", root, "--runs", 5, "--warmup", 1, "--threads", 1)
    p = run_cli("profile", bundle, *where, "--html", page, "--json", check=0)
    r = one_json(p.stdout)
    assert r["profiler"]["available"] and len(r["nodes"]) > 20
    text = page.read_text()
    _no_external(text)

    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert dom.count('class="layer"') == 20  # the top 20 as bars
    slowest = max(r["nodes"], key=lambda n: n["time_ms"])
    assert slowest["name"][:40] in dom and f"{slowest['time_ms']:.3f} ms" in dom
    for marker in ('class="chart layers"', 'class="chart accelerators"', 'class="chart partitions"', 'id="memory"',
                   'id="header"', "CPUExecutionProvider", "onnxruntime " + r["runtime_version"]):  # fmt: skip
        assert marker in dom, marker
    assert f"{len(r['partitions'])} partition(s) in execution order" in dom

    png = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={png}", "--window-size=1000,1400", page.as_uri())
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    blue = ((img[:, :, 2] > 200) & (img[:, :, 0] < 60) & (img[:, :, 1] < 140)).sum()  # #1f6feb bars and strips
    assert blue > 5000, blue


def test_names_from_the_model_stay_text_in_chromium(tmp_path):
    nodes = [_node(EVIL, 4.0, "NNAPI"), _node("b", 3.0, "CPU"), _node("c", 3.0, "NNAPI")]
    page = tmp_path / "evil.html"
    page.write_text(render(join(_report(nodes), None)))
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "<script" not in dom and "<img" not in dom and "&lt;script&gt;alert" in dom
    assert dom.count('class="layer"') == 3 and dom.count('class="segment"') == 2 + 3  # accelerators, partitions


def test_html_to_a_missing_folder_is_refused_before_profiling(ppocr_ort, tmp_path):
    bundle, root = ppocr_ort
    p = run_cli("profile", bundle, "--local", "--device-root", root, "--html", tmp_path / "no" / "p.html", check=1)
    assert "folder does not exist" in p.stderr and not (tmp_path / "no").exists()


def test_deploy_profile_layers_then_field_report_shows_where_the_time_goes(ppocr_ort, tmp_path, monkeypatch):
    import jsonschema

    from edgekit.deployer import open_device
    from edgekit.report import schema

    bundle, root = ppocr_ort
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))  # this test's own host-side field store
    p = run_cli("deploy", bundle, "--local", "--device-root", root, "--runs", 5, "--warmup", 1, "--threads", 1,
                "--profile-layers", 4, "--json", "-q", check=0)  # fmt: skip
    r = one_json(p.stdout)
    lp = r["layer_profile"]
    assert lp["schema"] == SCHEMA and lp["runs"] == 4 and lp["profiler"]["available"] and len(lp["top"]) == 5
    assert lp["by_accelerator"][0]["accelerator"] == "CPUExecutionProvider" and lp["nodes"] > 20
    jsonschema.validate(r, schema())  # the bench report's published schema, layer_profile included
    name = json.loads((bundle / "manifest.json").read_text())["name"]
    with open_device("local", device_root=str(root)) as dev:
        dev.ensure_agent()
        for _ in range(20):
            dev.client.infer(name, {"x": np.zeros((1, 3, 48, 192), np.float32)})
    run_cli("field", "pull", "--device-root", root, "--json", check=0)
    html = tmp_path / "field.html"
    text = run_cli("field", "report", "--html", html, check=0).stdout
    assert "where the time goes (lab profile, onnxruntime" in text, text
    assert lp["top"][0]["name"][:40] in text and "CPUExecutionProvider 100.0%" in text
    assert "Where the time goes (lab profile)" in html.read_text()

    p = run_cli("deploy", bundle, "--local", "--device-root", root, "--profile-layers", 0, check=0)  # 0: no profile
    assert "where the time goes" not in p.stdout
    p = run_cli("deploy", bundle, "--local", "--device-root", root, "--profile-layers", 500, check=1)
    assert "--profile-layers takes 1 to 200 profiled runs (got 500)" in p.stderr


def test_the_fallback_line_and_the_hand_overs_are_on_the_page():
    target = {
        "accelerator": "NNAPI",
        "summary": {"fallback": 1, "unknown": 0},
        "fallback": [{"node": EVIL, "op": "HardSigmoid", "reason": "not in NNAPI", "fix": "<Clip>"}],
        "unknown": [],
    }
    nodes = [_node("a", 4.0, "NNAPI"), _node(EVIL, 1.0, "CPU"), _node("Memcpy_token_1", 1.0, "CPU")]
    nodes[2]["op"] = "MemcpyToHost"
    page = render(join(_report(nodes), {"targets": [target]}, graph={"a", EVIL}))
    text = "".join(_parse(page).text)
    assert "1 node(s) (HardSigmoid x1) fall back from NNAPI" in text and "the fix: <Clip>" in text
    assert "hand-overs: 1 copy/re-layout kernel(s) the runtime inserted" in text
    assert "<Clip>" not in page  # escaped
