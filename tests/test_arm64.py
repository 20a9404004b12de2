"""The agent on an arm64 Debian userland (qemu user-mode emulation): deploy, verify, benchmark."""

import json

import pytest
from harness import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def arm64_python(tmp_path_factory):
    from harness import arm64

    try:
        root, info = arm64.ensure_rootfs()
    except arm64.RootfsUnavailable as e:
        pytest.skip(f"no arm64 userland: {e}")
    wrapper = arm64.python_wrapper(tmp_path_factory.mktemp("arm64") / "python3-aarch64", root)
    return wrapper, info


def test_deploy_to_an_arm64_userland(agent_roots, arm64_python, tiny_bundle, tmp_path):
    wrapper, info = arm64_python
    root = agent_roots("arm64-device", python=str(wrapper))
    p = run_cli(
        "deploy",
        tiny_bundle,
        "--local",
        "--device-python",
        wrapper,
        "--device-root",
        root,
        "--runs",
        10,
        "--warmup",
        2,
        "--json",
        check=0,
    )
    r = json.loads(p.stdout)
    assert r["device"]["machine"] == "aarch64"
    assert r["device"]["python"].startswith(info["python"] + ".")
    assert r["runtime_version"] == info["onnxruntime"]
    assert r["accelerator"] == "CPUExecutionProvider" and r["latency_ms"]["p50"] > 0
    # The device ran the sample input and its outputs matched the build machine's (x86_64) outputs.
    assert r["device_fidelity"]["passed"] is True, r["device_fidelity"]
    assert r["installed"]["version"] == r["bundle_id"]
    state = json.loads((root / "agent" / "state.json").read_text())
    with open(f"/proc/{state['pid']}/cmdline", "rb") as f:
        assert b"qemu-aarch64" in f.read(), "the agent's server runs emulated"
