"""The MNN backend and runner with the real MNN (no mocks): builds, fidelity, the agent, and MNN's traps."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from harness import PPOCR, one_json, run_cli

import edgekit
from edgekit import bundle, profiles
from edgekit.errors import DataError

pytest.importorskip("MNN")

OUT = "save_infer_model/scale_0.tmp_1"
SHAPE = ["x=1,3,48,192"]
X86 = profiles.detect_host().arch == "x86_64"
INT4_THRESHOLDS = dict(min_cosine=0.95, min_top1=0.9, max_accuracy_drop=2.0)


def _last(report):
    return report["fidelity"]["steps"][-1]["outputs"][OUT]


@pytest.fixture(scope="module")
def ppocr(tmp_path_factory, textlines):
    """PP-OCR cls built for the host in every precision MNN offers, calibrated/checked on rendered text lines."""
    base = tmp_path_factory.mktemp("mnn-ppocr")
    builds = {}
    for precision in ("fp32", "fp16", "int8-weights", "int4-weights", "int8"):
        out = base / precision
        extra = INT4_THRESHOLDS if precision == "int4-weights" else {}
        report = edgekit.build(
            PPOCR,
            "host",
            out,
            backend="mnn",
            precision=precision,
            calib=textlines,
            input_shapes=SHAPE,
            name="ppocr-" + precision,
            **extra,
        )
        builds[precision] = (report, out)
    return builds


def test_fp32_bundle(ppocr):
    r, out = ppocr["fp32"]
    m = bundle.load(out)
    assert m["backend"] == "mnn" and m["format"] == "mnn" and m["model"] == "model.mnn"
    assert m["runtime"]["name"] == "MNN" and m["runtime"]["version"]
    assert m["runner"] == {
        "backend": "CPU",
        "precision_mode": "normal",
        "power_mode": "normal",
        "memory_mode": "normal",
    }
    assert [s["step"] for s in r["fidelity"]["steps"]] == ["fp32 (ONNX -> MNN)"]
    s = _last(r)
    assert s["cosine_mean"] > 0.99999 and s["top1_agreement"] == 1.0
    assert s["accuracy_reference"] > 85.0 and s["accuracy"] == s["accuracy_reference"]
    assert {"Conv", "Softmax"} <= {o["op"] for o in r["ops"]}  # the ONNX model's operators
    assert r["mnn"]["model_ops"]["Convolution"] > 10  # and MNN's, from its own dump
    assert r["mnn"]["reference_runtime"].startswith("onnxruntime")
    assert r["host_latency"] is None  # fp32 is the reference converted: nothing to time it against


def test_shrunk_precisions_are_smaller_and_checked(ppocr):
    size = {p: ppocr[p][0]["model_size_bytes"] for p in ppocr}
    assert size["fp16"] < 0.6 * size["fp32"]
    assert size["int8-weights"] < 0.45 * size["fp32"] and size["int8"] < 0.45 * size["fp32"]
    assert size["int4-weights"] < size["int8-weights"]
    for p in ("fp16", "int8-weights", "int4-weights", "int8"):
        r = ppocr[p][0]
        steps = r["fidelity"]["steps"]
        assert steps[0]["step"] == "fp32 (ONNX -> MNN)" and len(steps) == 2 and r["fidelity"]["passed"]
        assert r["host_latency"]["built_p50_ms"] > 0
    assert _last(ppocr["fp16"][0])["cosine_mean"] > 0.999
    assert _last(ppocr["int8-weights"][0])["top1_agreement"] >= 0.98
    w4 = _last(ppocr["int4-weights"][0])
    assert w4["accuracy"] >= w4["accuracy_reference"] - 2.0
    assert ppocr["int4-weights"][0]["quantization"]["weights"] == "int4"
    # on this host the profile lists fp32 only: every other precision says so
    for p in ("fp16", "int8-weights", "int4-weights"):
        if ppocr[p][0]["mnn"]["target"]["runs_fast"] == ["fp32"]:
            assert any("does not list " + p in w for w in ppocr[p][0]["warnings"])


def test_int8_calibrated_with_real_text_lines(ppocr):
    r, out = ppocr["int8"]
    s = _last(r)
    assert s["accuracy_reference"] > 85.0
    assert s["accuracy"] >= s["accuracy_reference"] - 1.0  # within 1 point of FP32
    assert s["top1_agreement"] >= 0.9 and s["cosine_mean"] >= 0.98
    q = r["quantization"]
    assert q["calibration_samples"] == 200 and q["calibration_input"].startswith("raw tensors")
    assert len(q["candidates"]) == 4 and q["chosen"] in q["candidates"]
    assert q["chosen"]["cosine_mean"] == max(c["cosine_mean"] for c in q["candidates"] if "cosine_mean" in c)
    if X86:
        assert any("int8 runs slower than fp32" in w for w in r["warnings"])
        assert "Arm" in r["mnn"]["target"]["note"]


def test_int8_needs_real_calibration_data(tmp_path):
    with pytest.raises(DataError, match="--calib"):
        edgekit.build(PPOCR, "host", tmp_path / "x", backend="mnn", precision="int8", input_shapes=SHAPE)
    assert not (tmp_path / "x").exists()


def test_default_precision_follows_the_profile_not_the_file_size():
    from edgekit.converters import get

    be = get("mnn")
    pi5 = profiles.load("raspberrypi5")
    assert be.default_precision(pi5, have_calib=True) == "int8"
    assert be.default_precision(pi5, have_calib=False) == "fp16"
    host = profiles.load("host")
    if X86:  # MNN's int8 kernels target Arm: the host profile lists fp32 only, calibration data or not
        assert host.backend("mnn")["precisions"] == ["fp32"]
        assert be.default_precision(host, have_calib=True) == "fp32"


def test_raspberrypi5_bundle(tmp_path):
    r = edgekit.build(PPOCR, "raspberrypi5", tmp_path / "pi", backend="mnn", input_shapes=SHAPE)
    assert r["precision"] == "fp16"  # auto: the profile's int8 needs calibration data, fp16 is next
    m = bundle.load(tmp_path / "pi")
    assert m["runner"]["precision_mode"] == "low" and m["runner"]["backend"] == "CPU"
    assert r["mnn"]["target"]["runs_fast"] == ["int8", "fp16", "fp32"] and r["mnn"]["target"]["arch"] == "aarch64"
    assert not any("does not list" in w for w in r["warnings"])


def test_outputs_are_copies_not_views_of_mnn_memory(ppocr, textlines):
    """MNN's getNumpyData()/Var.read() hand out views that die with their tensor: results must not change later."""
    from edgekit_agent.runners.mnn import MNNModel

    x = np.load(textlines)["x"]
    m = MNNModel(str(ppocr["fp32"][1] / "model.mnn"), threads=1, input_shapes={"x": [1, 3, 48, 192]}).load()
    first = m.run({"x": x[:1]})[OUT]
    kept = first.copy()
    for i in range(1, 20):
        m.run({"x": x[i : i + 1]})
    np.testing.assert_array_equal(first, kept)
    assert np.all(np.abs(first) <= 1.0)  # softmax probabilities, not 1e24-sized garbage


def test_absent_backend_reports_what_really_ran(ppocr):
    """The PyPI wheel has no Vulkan: MNN falls back to the CPU silently; the runner must say so."""
    from edgekit_agent.runners.mnn import MNNRunner

    out = ppocr["fp32"][1]
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["runner"] = dict(manifest["runner"], backend="VULKAN")  # what a profile asking for VULKAN writes
    runner = MNNRunner(str(out), manifest, threads=1)
    runner.load()
    info = runner.describe()
    assert set(info) == {
        "runtime",
        "runtime_version",
        "accelerators_requested",
        "accelerators_active",
        "accelerator",
        "threads",
        "warnings",
    }
    assert info["runtime"] == "mnn" and info["accelerators_requested"] == ["VULKAN"]
    assert info["accelerator"] == "CPU" and info["accelerators_active"] == ["CPU"]
    assert any("VULKAN was requested" in w and "ran on CPU" in w for w in info["warnings"])
    feeds = {"x": np.zeros((1, 3, 48, 192), np.float32)}
    assert runner.run(feeds)[OUT].shape == (1, 2)
    assert runner.placement(feeds)["CPU"] > 10
    runner.close()


def test_deploy_locally_through_the_agent(ppocr, local_device):
    from edgekit.deployer import bench, deploy

    out = ppocr["fp32"][1]
    r = deploy(out, local_device, runs=20, warmup=2)
    assert (
        r["runtime"] == "mnn"
        and r["backend"] == "mnn"
        and r["runtime_version"] == bundle.load(out)["runtime"]["version"]
    )
    assert r["accelerator"] == "CPU" and r["accelerators_requested"] == ["CPU"] and r["placement"]["CPU"] > 10
    assert r["latency_ms"]["p50"] > 0 and r["device_fidelity"]["passed"]
    assert local_device.client.health()["runtimes"]["mnn"]
    x = np.zeros((1, 3, 48, 192), np.float32)
    y = local_device.client.infer("ppocr-fp32", {"x": x})[OUT]
    assert y.shape == (1, 2) and abs(float(y.sum()) - 1.0) < 1e-4
    # asking the agent for a backend this MNN lacks: it runs on the CPU and the report says so
    r = bench(out, local_device, runs=5, warmup=0, providers=["VULKAN"])
    assert r["accelerators_requested"] == ["VULKAN"] and r["accelerator"] == "CPU"
    assert any("VULKAN was requested" in w for w in r["warnings"])


def test_deploy_int8_over_ssh(agent_roots, ppocr, sshd, tmp_path):
    from edgekit.deployer import deploy, open_device

    root = agent_roots("remote-device")
    with open_device(
        "ssh",
        f"{sshd.user}@{sshd.host}:{sshd.port}",
        device_python=sys.executable,
        device_root=str(root),
        key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    ) as dev:
        r = deploy(ppocr["int8"][1], dev, runs=10, warmup=2)
    assert r["transport"].startswith("ssh ") and r["runtime"] == "mnn" and r["precision"] == "int8"
    assert r["accelerator"] == "CPU" and r["device_fidelity"]["passed"]
    if X86:  # MNN says this CPU has no sdot/i8mm; the report passes that on
        assert any("int8 runs slower than fp32" in w for w in r["warnings"])


def test_mobilenetv2_fp32_through_the_agent(tmp_path, local_device):
    from make_mobilenetv2 import make_mobilenetv2

    from edgekit.deployer import deploy

    src = tmp_path / "mobilenetv2.onnx"
    make_mobilenetv2(src)
    r = edgekit.build(
        src, "host", tmp_path / "mnv2", backend="mnn", precision="fp32", input_shapes=["input=1,3,224,224"]
    )
    s = r["fidelity"]["steps"][0]["outputs"]["logits"]
    assert s["cosine_mean"] > 0.99999 and s["top1_agreement"] == 1.0
    assert r["mnn"]["model_ops"]["ConvolutionDepthwise"] == 17
    assert r["model_size_bytes"] > 13_000_000
    b = deploy(tmp_path / "mnv2", local_device, runs=5, warmup=1)
    assert b["runtime"] == "mnn" and b["latency_ms"]["p50"] > 0 and b["device_fidelity"]["passed"]


def test_json_stdout_is_one_object(tmp_path, tiny_model):
    # the trap: MNN prints from C++ on import, on stdout
    p = subprocess.run(
        [sys.executable, "-c", "import MNN, json; print(json.dumps({'ok': 1}))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.stdout.strip() != '{"ok": 1}' and "device supports" in p.stdout
    # edgekit keeps it off stdout: exactly one JSON object, and the banner off stderr too
    p = run_cli(
        "build",
        tiny_model,
        "--profile",
        "raspberrypi5",
        "--backend",
        "mnn",
        "--precision",
        "fp16",
        "-o",
        tmp_path / "b",
        "--no-cache",
        "--json",
        check=0,
    )
    r = one_json(p.stdout)
    assert r["backend"] == "mnn" and r["precision"] == "fp16"
    assert "device supports" not in p.stderr  # the import banner is parsed (cpu_features), not echoed


SANDBOX_SITE = r"""
import os, socket, subprocess, sys

LOG = os.environ["EDGEKIT_SANDBOX_LOG"]

def note(kind, what):
    with open(LOG, "a") as f:
        f.write("%s\t%s\n" % (kind, str(what).replace("\n", "\\n")))

note("python", " ".join(getattr(sys, "orig_argv", sys.argv)))

def no_network(*args, **kwargs):
    note("network", repr(args[:2]))
    raise OSError("network is off in this sandbox")

socket.socket.connect = no_network
socket.socket.connect_ex = no_network
socket.create_connection = no_network
socket.getaddrinfo = no_network

def system(cmd):
    note("system", cmd)
    return 1
os.system = system

_popen_init = subprocess.Popen.__init__
def popen_init(self, args, *a, **kw):
    argv = [args] if isinstance(args, str) else [str(x) for x in args]
    text = " ".join(argv)
    if os.path.basename(argv[0].split()[0]) in ("pip", "pip3") or "-m pip" in text or "pip install" in text:
        note("pip", text)
        raise OSError("pip is off in this sandbox")
    return _popen_init(self, args, *a, **kw)
subprocess.Popen.__init__ = popen_init

class Watch:
    # records imports of MNN's tool wrappers; refuses the logging SDK they try to install
    def find_spec(self, name, path=None, target=None):
        if name == "MNN.tools" or name.startswith("MNN.tools."):
            note("import", name)
        if name.split(".")[0] == "aliyun":
            note("import", name)
            raise ImportError("not in this sandbox: " + name)
        return None
sys.meta_path.insert(0, Watch())
"""


def test_no_install_and_no_network(tmp_path, tiny_model, tiny_calib):
    """A full int8 build (converter and quantizer) in a sandbox that records and refuses network use,
    pip and MNN's self-installing wrappers, in edgekit and in every Python it starts."""
    import importlib.util

    site, bindir, log = tmp_path / "site", tmp_path / "bin", tmp_path / "sandbox.log"
    site.mkdir()
    bindir.mkdir()
    (site / "sitecustomize.py").write_text(SANDBOX_SITE)
    for tool in ("pip", "pip3", "curl", "wget"):
        f = bindir / tool
        f.write_text(f'#!/bin/sh\necho "pip\t{tool} $*" >> "{log}"\nexit 1\n')
        f.chmod(0o755)
    env = {
        "PYTHONPATH": os.pathsep.join([str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "EDGEKIT_SANDBOX_LOG": str(log),
    }

    # the harness catches what MNN's own wrappers do on import (recorded and refused, never done)
    subprocess.run(
        [sys.executable, "-c", "import MNN.tools"], env=dict(os.environ, **env), capture_output=True, timeout=120
    )
    caught = log.read_text()
    assert "import\tMNN.tools" in caught and "system\tpip install -U aliyun-log-python-sdk" in caught
    log.unlink()

    p = run_cli(
        "build",
        tiny_model,
        "--profile",
        "raspberrypi5",
        "--backend",
        "mnn",
        "--precision",
        "int8",
        "--calib",
        tiny_calib,
        "--min-top1",
        "0.5",
        "-o",
        tmp_path / "b",
        "--no-cache",
        "--json",
        env=env,
    )
    # (--min-top1: the random tiny model's class probabilities are near-uniform, cosine is what tells)
    assert p.returncode == 0, p.stderr[-2000:]
    r = one_json(p.stdout)
    assert r["precision"] == "int8" and r["quantization"]["chosen"]
    lines = log.read_text().splitlines()
    started = [line for line in lines if line.startswith("python\t")]
    assert len(started) >= 3  # edgekit and the converter/quantizer children all ran under the sandbox
    assert any("import _tools" in line and '["mnnconvert"' in line for line in started)
    assert any("import _tools" in line and '["mnnquant"' in line for line in started)
    assert [line for line in lines if not line.startswith("python\t")] == []  # no network, no pip, no MNN.tools
    assert importlib.util.find_spec("aliyun") is None
