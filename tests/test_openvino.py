"""The OpenVINO backend and runner, for real: PP-OCR cls in every precision, a MobileNetV2 in int8,
the agent locally and over SSH, and no usage data leaving the process."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from harness import PPOCR

import edgekit
from edgekit import bundle
from edgekit.errors import DataError

# find_spec, not importorskip: a plain `import openvino` would send usage data before edgekit can stop it
if importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None:
    pytest.skip("needs openvino and nncf: pip install 'edgekit[openvino]'", allow_module_level=True)

OUT = "save_infer_model/scale_0.tmp_1"
SHAPE = ["x=1,3,48,192"]


@pytest.fixture(scope="module")
def ppocr(tmp_path_factory, textlines):
    """PP-OCR cls built for this machine in every OpenVINO precision, calibrated on rendered text lines."""
    base = tmp_path_factory.mktemp("ov-ppocr")
    built = {}
    for precision in ("fp32", "fp16", "int8", "int8-weights"):
        out = base / precision
        r = edgekit.build(
            PPOCR,
            "host",
            out,
            backend="openvino",
            precision=precision,
            calib=textlines,
            input_shapes=SHAPE,
            name=f"ppocr-ov-{precision}",
        )
        built[precision] = (out, r)
    return built


def _final(r):
    return r["fidelity"]["steps"][-1]["outputs"][OUT]


def _bin_size(out):
    return (out / "model.bin").stat().st_size


def test_fp32_ir_bundle_executes_at_f32(ppocr, textlines):
    import jsonschema

    from edgekit.converters import get
    from edgekit.report import schema

    out, r = ppocr["fp32"]
    m = bundle.load(out)  # every file's sha256
    assert m["backend"] == "openvino" and m["format"] == "openvino-ir" and m["model"] == "model.xml"
    assert {f["name"]: f["role"] for f in m["files"]}["model.bin"] == "weights"
    assert m["runner"] == {"device": "CPU", "hint": "LATENCY", "inference_precision": "f32", "model_cache": True}
    assert m["runtime"]["name"] == "openvino"
    assert r["model_size_bytes"] == (out / "model.xml").stat().st_size + _bin_size(out)
    assert [s["step"] for s in r["fidelity"]["steps"]] == ["ONNX -> OpenVINO IR (fp32)"]
    fid = _final(r)
    # against ONNX Runtime's FP32 reference: f32 execution; bf16 (the default on bf16 CPUs) is ~1e-2 off
    assert r["openvino"]["fidelity_reference"].startswith("onnxruntime")
    assert fid["max_abs"] < 1e-4 and fid["top1_agreement"] == 1.0
    assert fid["accuracy"] == fid["accuracy_reference"] > 85.0
    assert r["openvino"]["inference_precision"] == "f32"
    assert {"Convolution", "Parameter", "Result"} <= {o["op"] for o in r["ops"]}
    assert r["operator_support"]["CPU"]["checked"] and r["operator_support"]["CPU"]["unsupported_ops"] == []
    for _, report in ppocr.values():
        jsonschema.validate(report, schema())

    # The trap the f32 hint avoids: on a CPU whose default is bf16, the same IR run by default drifts.
    be = get("openvino")
    if be._host_default_precision() == "bf16":
        runs = {}
        for config in ({}, {"INFERENCE_PRECISION_HINT": "f32"}):
            compiled = be.core().compile_model(str(out / "model.xml"), "CPU", config)
            request = compiled.create_infer_request()
            runs[compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()] = np.concatenate(
                [request.infer({"x": x[None]})[compiled.outputs[0]] for x in np.load(textlines)["x"][:64]]
            )
        assert set(runs) == {"bf16", "f32"}
        assert np.abs(runs["bf16"] - runs["f32"]).max() > 10 * max(fid["max_abs"], 1e-6)


def test_fp16_compresses_the_weights(ppocr):
    out, r = ppocr["fp16"]
    assert [s["step"] for s in r["fidelity"]["steps"]] == ["ONNX -> OpenVINO IR (fp32)", "fp16-compressed weights"]
    assert _bin_size(out) < 0.55 * _bin_size(ppocr["fp32"][0])
    fid = _final(r)
    assert fid["accuracy"] >= fid["accuracy_reference"] - 0.5 and fid["top1_agreement"] >= 0.98
    assert bundle.load(out)["runner"]["inference_precision"] is None  # the device's own precision
    from edgekit import profiles

    listed = "fp16" in profiles.load("host").backend("openvino")["precisions"]  # bf16-capable CPUs list it
    assert any("does not list fp16" in w for w in r["warnings"]) != listed


def test_int8_nncf_stays_within_a_point_of_fp32(ppocr):
    out, r = ppocr["int8"]
    fid = _final(r)
    q = r["quantization"]
    assert fid["accuracy_reference"] > 85.0
    # 7-bit weights where this CPU's u8 x s8 products saturate (x86 without VNNI) cost more than full 8-bit ones
    assert fid["accuracy"] >= fid["accuracy_reference"] - (2.0 if q["overflow_fix"] == "enable" else 1.0)
    assert fid["top1_agreement"] >= 0.95
    assert q["tool"].startswith("nncf ") and q["calibration_samples"] == 200
    assert q["preset"] == "mixed" and "HardSigmoid" in q["preset_reason"]  # NNCF's advice for non-ReLU models
    assert "FakeQuantize" in {o["op"] for o in r["ops"]}
    assert _bin_size(out) < 0.4 * _bin_size(ppocr["fp32"][0])
    assert r["host_latency"]["reference_p50_ms"] > 0


def test_int8_weights_needs_no_calibration_data(ppocr):
    out, r = ppocr["int8-weights"]
    assert r["fidelity"]["steps"][-1]["step"] == "int8 weight compression (NNCF, weights only)"
    assert r["quantization"]["method"] == "weights-only" and r["quantization"]["calibration_samples"] == 0
    assert _bin_size(out) < 0.35 * _bin_size(ppocr["fp32"][0])
    fid = _final(r)
    assert fid["accuracy"] >= fid["accuracy_reference"] - 1.0


def test_auto_precision_follows_the_profiles_openvino_section():
    from edgekit import profiles
    from edgekit.converters import get

    be = get("openvino")
    laptop, pi = profiles.load("intel-core-ultra"), profiles.load("raspberrypi5")
    assert be.default_precision(laptop, True) == "int8" and be.default_precision(laptop, False) == "fp16"
    assert be.default_precision(pi, True) == "fp16"


def test_int8_without_real_calibration_data_is_refused(tmp_path, tiny_model):
    with pytest.raises(DataError, match="--calib"):
        edgekit.build(tiny_model, "host", tmp_path / "x", backend="openvino", precision="int8")
    assert not (tmp_path / "x").exists()


def test_raspberrypi5_gets_fp16_and_an_honest_operator_check(tmp_path, textlines):
    r = edgekit.build(
        PPOCR,
        "raspberrypi5",
        tmp_path / "pi",
        backend="openvino",
        calib=textlines,
        input_shapes=SHAPE,
        name="ppocr-ov-pi",
    )
    assert r["precision"] == "fp16"  # the profile's first OpenVINO precision
    cpu = r["operator_support"]["CPU"]
    if cpu["checked"]:
        assert "aarch64" in cpu["note"]  # this machine's CPU plugin is not the Pi's
    assert r["host_latency"] is None and r["fidelity"]["passed"]


@pytest.mark.e2e
def test_local_agent_runs_f32_and_falls_back_from_the_npu(ppocr, local_device, tmp_path):
    """PP-OCR fp32 at f32, then a MobileNetV2 int8 built for an NPU/GPU/CPU laptop, through the real agent."""
    from make_mobilenetv2 import make_mobilenetv2

    from edgekit.deployer import deploy

    r = deploy(ppocr["fp32"][0], local_device, runs=20, warmup=3)
    assert r["backend"] == "openvino" and r["accelerator"] == "CPU" and r["accelerators_active"] == ["CPU"]
    assert r["inference_precision"] == "f32" and r["inference_precision_requested"] == "f32"
    assert r["placement"]["CPU"] > 0 and r["device_fidelity"]["passed"] and r["device_fidelity"]["max_abs"] < 1e-5
    assert r["model_cache"]["dir"].endswith(os.path.join("device", "cache", "openvino"))  # under the agent's root
    assert r["latency_ms"]["p50"] > 0 and not r["warnings"]

    model = tmp_path / "mobilenetv2.onnx"
    make_mobilenetv2(model)  # returns the ModelProto; the file is what edgekit takes
    calib = tmp_path / "calib.npz"
    np.savez(calib, input=np.random.default_rng(0).standard_normal((16, 3, 224, 224)).astype(np.float32))
    b = edgekit.build(
        model,
        "intel-core-ultra",
        tmp_path / "mnv2",
        backend="openvino",
        precision="int8",
        calib=calib,
        input_shapes=["input=1,3,224,224"],
        name="mnv2",
    )
    assert b["fidelity"]["passed"] and b["model_size_bytes"] < 0.4 * b["source_size_bytes"]
    from edgekit.converters import get

    here = get("openvino").core().available_devices
    for dev in ("NPU", "GPU"):
        if not any(d.split(".")[0] == dev for d in here):
            assert b["operator_support"][dev] == {
                "checked": False,
                "status": f"not checked: no {dev} plugin here",
                "detail": b["operator_support"][dev]["detail"],
            }
    assert b["operator_support"]["CPU"]["checked"]

    r = deploy(tmp_path / "mnv2", local_device, runs=5, warmup=1)
    assert r["accelerators_requested"] == ["NPU", "GPU", "CPU"]
    assert r["accelerator"] == r["accelerators_active"][0]
    if "NPU" not in here:
        assert r["accelerator"] != "NPU"
        assert any(w.startswith("NPU was requested but") and "it ran on" in w for w in r["warnings"])
    assert r["inference_precision"] and r["device_fidelity"]["passed"]


@pytest.mark.e2e
def test_deploy_int8_over_ssh_reports_device_and_precision(agent_roots, ppocr, sshd, tmp_path):
    from edgekit.deployer import deploy, open_device

    root = agent_roots("remote")
    out, built = ppocr["int8"]
    with open_device(
        "ssh",
        f"{sshd.user}@{sshd.host}:{sshd.port}",
        device_python=sys.executable,
        device_root=str(root),
        key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    ) as dev:
        r = deploy(out, dev, runs=20, warmup=3)
    assert r["transport"].startswith("ssh ") and r["accelerator"] == "CPU"
    assert r["inference_precision_requested"] == "device default"
    # what ran: this CPU's default execution precision (bf16 where it has bf16)
    assert r["inference_precision"] == built["openvino"]["this_cpu_default_precision"]
    assert r["device_fidelity"]["passed"] and r["latency_ms"]["p50"] > 0
    assert (root / "models" / "ppocr-ov-int8" / "current").is_symlink()


NETWORK_WATCH = r"""
import json, os, sys
log = sys.argv[1]

def hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "urllib.Request", "http.client.connect"):
        with open(log, "a") as f:
            f.write("%d %s %r\n" % (os.getpid(), event, args))

sys.addaudithook(hook)
if sys.argv[2] == "build":
    import edgekit
    for precision in ("fp32", "int8-weights", "int8"):  # int8 runs nncf.quantize
        edgekit.build(sys.argv[3], "host", os.path.join(sys.argv[4], precision), backend="openvino",
                      precision=precision, use_cache=False, calib=sys.argv[5], min_top1=0.5)
    import nncf.telemetry.wrapper as nncf_telemetry
    import openvino.tools.ovc.telemetry_utils as ovc_telemetry
    print(json.dumps({"blocked": "openvino_telemetry" in sys.modules and sys.modules["openvino_telemetry"] is None,
                      "ovc": ovc_telemetry.tm.__name__, "nncf": type(nncf_telemetry.telemetry).__name__}))
else:
    import runpy
    sys.argv = ["edgekit-agent", "bench", "--bundle", sys.argv[3], "--runs", "3", "--json"]
    runpy.run_module("edgekit_agent", run_name="__main__")
"""


def test_openvino_and_nncf_send_no_usage_data(tmp_path, tiny_model, tiny_calib):
    """OpenVINO's conversion API and NNCF would report usage to Google Analytics (and write ~/intel):
    a build and an agent bench, each in a fresh process without pytest, make no network call."""
    home = tmp_path / "home"
    home.mkdir()
    events = tmp_path / "network.log"
    script = tmp_path / "watch.py"
    script.write_text(textwrap.dedent(NETWORK_WATCH))
    env = dict(os.environ, HOME=str(home))
    env.pop("CI", None)
    p = subprocess.run(
        [sys.executable, str(script), str(events), "build", str(tiny_model), str(tmp_path / "b"), str(tiny_calib)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    state = json.loads(p.stdout.strip().splitlines()[-1])
    assert state == {"blocked": True, "ovc": "openvino.tools.ovc.telemetry_stub", "nncf": "MagicMock"}
    p = subprocess.run(
        [sys.executable, str(script), str(events), "bench", str(tmp_path / "b" / "int8-weights")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["backend"] == "openvino"
    assert not events.exists(), events.read_text()
    assert not (home / "intel").exists()
